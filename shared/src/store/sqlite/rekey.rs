//! The upgrade of a file from before schema version 8, whose sessions were keyed by their id
//! alone, to sessions keyed by their owner as well (see `schema.sql`).
//!
//! SQLite cannot change a table's key in place. So, in the transaction that opens the file,
//! each table that names a session is set aside (renamed), created anew by the schema, filled
//! from the old one, and the old one dropped. The old tables are the ones renamed, not the new
//! ones, because a rename rewrites the references to the renamed table: the old children then
//! name the old `sessions`, and the new ones the new. Parents are filled first and children
//! dropped first, so that every foreign key holds at every step: `PRAGMA foreign_keys` cannot
//! be switched off inside a transaction.

use rusqlite::{params, Connection};

use super::{apply_schema, Outcome};

/// The first schema version whose sessions are keyed by (team, agent, user, session).
pub(super) const OWNER_KEYED_SESSIONS: i64 = 8;

/// A table that named a session by its id alone, and the statements that move it to the new
/// key.
struct Rekeyed {
    table: &'static str,
    set_aside: &'static str,
    /// Fills the new table from the set-aside one. Cursors and schedules had no owner
    /// columns: they take their session's, and a cursor whose session has no row (its owner
    /// was erased) named nothing and is not copied, as on Postgres (V012).
    copy: &'static str,
    drop: &'static str,
}

/// Parents first.
const TABLES: &[Rekeyed] = &[
    Rekeyed {
        table: "sessions",
        set_aside: "ALTER TABLE sessions RENAME TO sessions_old",
        copy: "INSERT INTO sessions \
             (session_id, team_id, agent_id, user_id, last_seq, reset_at, created_at, updated_at) \
             SELECT session_id, team_id, agent_id, user_id, last_seq, reset_at, created_at, updated_at \
             FROM sessions_old",
        drop: "DROP TABLE sessions_old",
    },
    Rekeyed {
        table: "messages",
        set_aside: "ALTER TABLE messages RENAME TO messages_old",
        copy: "INSERT INTO messages \
             (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at, task) \
             SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, \
             created_at, task FROM messages_old",
        drop: "DROP TABLE messages_old",
    },
    Rekeyed {
        table: "cursors",
        set_aside: "ALTER TABLE cursors RENAME TO cursors_old",
        copy: "INSERT INTO cursors (consumer, team_id, agent_id, user_id, session_id, seq, updated_at) \
             SELECT c.consumer, s.team_id, s.agent_id, s.user_id, c.session_id, c.seq, c.updated_at \
             FROM cursors_old c JOIN sessions_old s ON s.session_id = c.session_id",
        drop: "DROP TABLE cursors_old",
    },
    Rekeyed {
        table: "extract_schedule",
        set_aside: "ALTER TABLE extract_schedule RENAME TO extract_schedule_old",
        copy: "INSERT INTO extract_schedule \
             (team_id, agent_id, user_id, session_id, runs, idle_due_at, lease_owner, lease_until, updated_at) \
             SELECT s.team_id, s.agent_id, s.user_id, e.session_id, e.runs, e.idle_due_at, e.lease_owner, \
             e.lease_until, e.updated_at \
             FROM extract_schedule_old e JOIN sessions_old s ON s.session_id = e.session_id",
        drop: "DROP TABLE extract_schedule_old",
    },
    Rekeyed {
        table: "session_compactions",
        set_aside: "ALTER TABLE session_compactions RENAME TO session_compactions_old",
        copy: "INSERT INTO session_compactions \
             (session_id, team_id, agent_id, user_id, status, attempts, requested_at, claim_token, claimed_at, \
             lease_until, retry_at, error, summary, summary_text, token_count, source_tokens, message_count, \
             first_seq, last_seq, summary_reset_at, summarizer, prompt_version, input_hash, started_at, \
             duration_ms, compressed_at, updated_at) \
             SELECT session_id, team_id, agent_id, user_id, status, attempts, requested_at, claim_token, \
             claimed_at, lease_until, retry_at, error, summary, summary_text, token_count, source_tokens, \
             message_count, first_seq, last_seq, summary_reset_at, summarizer, prompt_version, input_hash, \
             started_at, duration_ms, compressed_at, updated_at \
             FROM session_compactions_old",
        drop: "DROP TABLE session_compactions_old",
    },
];

/// The set-aside tables' indexes whose names the schema creates again. An index keeps its name
/// when its table is renamed, and `CREATE INDEX IF NOT EXISTS` would then find it and leave the
/// new table without. (The tables' other indexes go when they are dropped.)
const DROP_OLD_INDEXES: &str = "DROP INDEX IF EXISTS messages_session_client_id_key;
    DROP INDEX IF EXISTS extract_schedule_due_idx;
    DROP INDEX IF EXISTS session_compactions_open_idx;";

/// The turns of a file from before tasks have no `task` column (see `ADDED_COLUMNS`), which
/// the copy names: the old table gets it first.
const ADD_OLD_TASK: &str = "ALTER TABLE messages_old ADD COLUMN task TEXT NULL";

/// Whether the file's `sessions` is keyed by the session id alone, as before
/// [`OWNER_KEYED_SESSIONS`]. A new file has no `sessions` yet: no.
pub(super) fn sessions_keyed_by_id(conn: &Connection) -> rusqlite::Result<bool> {
    let key_columns: i64 = conn.query_row(
        "SELECT count(*) FROM pragma_table_info('sessions') WHERE pk > 0",
        [],
        |row| row.get(0),
    )?;
    Ok(key_columns == 1)
}

/// Brings a file from before [`OWNER_KEYED_SESSIONS`] to this build's schema (see the module
/// docs), inside the caller's transaction; the whole schema is applied on the way.
pub(super) fn rekey_sessions(conn: &Connection) -> Outcome<()> {
    let mut set_aside = Vec::new();
    for rekeyed in TABLES {
        // A file from before the memory or compaction tables lacks them: the schema creates
        // them empty.
        let exists = conn
            .prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?
            .exists(params![rekeyed.table])?;
        if exists {
            conn.execute_batch(rekeyed.set_aside)?;
            set_aside.push(rekeyed);
        }
    }
    let has_task = conn
        .prepare_cached("SELECT 1 FROM pragma_table_info('messages_old') WHERE name = 'task'")?
        .exists([])?;
    if !has_task {
        conn.execute_batch(ADD_OLD_TASK)?;
    }
    conn.execute_batch(DROP_OLD_INDEXES)?;
    apply_schema(conn)?;
    for rekeyed in &set_aside {
        conn.execute_batch(rekeyed.copy)?;
    }
    for rekeyed in set_aside.iter().rev() {
        conn.execute_batch(rekeyed.drop)?;
    }
    Ok(())
}
