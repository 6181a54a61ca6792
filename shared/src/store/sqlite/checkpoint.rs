//! WAL checkpoints off the append path.
//!
//! SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages:
//! that commit copies the WAL into the database file and syncs both, and every append queued
//! behind the store's one connection waits for it. At 5,000 turns/s that came every few
//! seconds, and it doubled the embedded deployment's append p99 (`bench embedded mixed`: 25.6
//! against 12.3 ms, medians of 5 rounds). So the store's connection never checkpoints, and a
//! thread with a connection of its own runs a `PASSIVE` checkpoint every [`INTERVAL`]. A
//! passive checkpoint takes no lock that a commit waits for: it copies the frames committed
//! before it started, and the next commit after it has copied them all starts the WAL again
//! from its beginning, so the file stays about one interval's worth of writes long.
//!
//! Nothing is less durable for it: a commit is durable once its WAL frames are synced, and
//! opening the file replays whatever the WAL still holds.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::{Outcome, BUSY_TIMEOUT};
use crate::metrics as m;

/// How often the WAL is copied into the database file.
pub(super) const INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the checkpoint thread running; the thread ends once every clone is dropped.
#[derive(Clone)]
pub(super) struct Checkpointer {
    _running: mpsc::Sender<()>,
}

/// Turns off the automatic checkpoint of `conn` (the store's connection).
pub(super) fn disable_automatic(conn: &Connection) -> Outcome<()> {
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(())
}

impl Checkpointer {
    /// Opens a connection of its own to the database at `path` (in WAL mode already) and
    /// starts checkpointing it every `interval`.
    pub(super) fn start(path: &Path, interval: Duration) -> Outcome<Self> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let (running, stopped) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("sediment-sqlite-checkpoint".into())
            .spawn(move || {
                let mut last = None;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    last = checkpoint(&conn, last);
                }
            });
        spawned.map_err(|e| super::Failure::Corrupt(Box::new(e)))?;
        Ok(Self { _running: running })
    }
}

/// One passive checkpoint. `last` is what the previous one reported (frames in the WAL,
/// frames copied): a checkpoint that finds them unchanged had nothing to do, and only the
/// others are timed, so that an idle store does not fill the histogram with no-ops.
fn checkpoint(conn: &Connection, last: Option<(i64, i64)>) -> Option<(i64, i64)> {
    let started = Instant::now();
    let frames = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    });
    match frames {
        Ok(frames) => {
            if Some(frames) != last {
                metrics::histogram!(m::STORE_CHECKPOINT_SECONDS).record(started.elapsed().as_secs_f64());
            }
            tracing::trace!(wal_frames = frames.0, copied = frames.1, "sqlite checkpoint");
            Some(frames)
        }
        Err(error) => {
            // The WAL keeps growing until a checkpoint succeeds, and commits stay durable
            // meanwhile: worth a warning, not a stop.
            tracing::warn!(error = %error, "sqlite checkpoint failed; retrying at the next interval");
            last
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL-mode writer that never checkpoints, as the store's connection.
    fn writer(path: &Path) -> Connection {
        let conn = Connection::open(path).expect("open");
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .expect("wal");
        assert_eq!(mode, "wal");
        disable_automatic(&conn).expect("no automatic checkpoint");
        conn.execute_batch("CREATE TABLE t (body TEXT)").expect("table");
        conn
    }

    /// Commits about `kb` KB of rows, 64 KB per transaction.
    fn write(conn: &Connection, kb: usize) {
        let body = "x".repeat(1024);
        for _ in 0..kb / 64 {
            conn.execute_batch("BEGIN").expect("begin");
            for _ in 0..64 {
                conn.execute("INSERT INTO t (body) VALUES (?1)", [&body])
                    .expect("insert");
            }
            conn.execute_batch("COMMIT").expect("commit");
        }
    }

    fn len(path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    /// The database's size with everything in the WAL copied into it.
    fn database_size(conn: &Connection) -> u64 {
        let pragma = |name| {
            conn.pragma_query_value(None, name, |row| row.get::<_, u64>(0))
                .expect("pragma")
        };
        pragma("page_count") * pragma("page_size")
    }

    /// Waits until a checkpoint has grown the database file to `bytes`.
    fn wait_for_file(path: &Path, bytes: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while len(path) < bytes {
            assert!(
                Instant::now() < deadline,
                "no checkpoint: database file {} bytes",
                len(path)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_writer_leaves_the_wal_to_the_checkpointer() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("db.sqlite");
        let conn = writer(&path);
        let automatic: i64 = conn
            .pragma_query_value(None, "wal_autocheckpoint", |row| row.get(0))
            .expect("pragma");
        assert_eq!(automatic, 0);
        // Past SQLite's automatic threshold (1,000 pages of 4 KB): nothing reaches the file.
        write(&conn, 8 * 1024);
        assert!(len(&path) < 64 * 1024, "database file {} bytes", len(&path));

        let _checkpointer = Checkpointer::start(&path, Duration::from_millis(20)).expect("start");
        wait_for_file(&path, database_size(&conn));
        let wal_after_first = len(&path.with_extension("sqlite-wal"));
        // Once a checkpoint has copied everything, the next commit starts the WAL over instead
        // of growing it. The file reaches its size a moment before the checkpoint records that
        // it is done, so one batch may still land at the WAL's end; five would grow it by 7 MB.
        for _ in 0..5 {
            write(&conn, 1024);
            wait_for_file(&path, database_size(&conn));
            std::thread::sleep(Duration::from_millis(50));
        }
        let wal = len(&path.with_extension("sqlite-wal"));
        assert!(
            wal <= wal_after_first + 2 * 1024 * 1024,
            "WAL grew from {wal_after_first} to {wal}"
        );
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
            .expect("count");
        assert_eq!(rows, 13 * 1024);
    }

    #[test]
    fn the_thread_ends_with_the_last_handle() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("db.sqlite");
        let conn = writer(&path);
        let checkpointer = Checkpointer::start(&path, Duration::from_millis(10)).expect("start");
        let clone = checkpointer.clone();
        drop(checkpointer);
        write(&conn, 64);
        // Still running: the clone holds it.
        wait_for_file(&path, database_size(&conn));
        let copied = len(&path);
        drop(clone);
        std::thread::sleep(Duration::from_millis(100));
        write(&conn, 1024);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(len(&path), copied, "a checkpoint ran after the last handle was dropped");
    }
}
