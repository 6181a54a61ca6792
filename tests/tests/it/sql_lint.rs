//! Every SQL statement is a constant with parameters: no statement text is built at run time
//! from values (seed 004's layered-memory skill built SQL by interpolation). This test reads
//! the product's sources and fails on a `format!` that builds SQL from anything but constants
//! (a column list spelled once), so interpolation cannot slip in.

use std::path::{Path, PathBuf};

/// Statement keywords a formatted SQL string would start with.
const KEYWORDS: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "WITH", "EXPLAIN", "TRUNCATE", "GRANT",
];
/// Known and harmless: a test that asks SQLite to explain one of the store's constant queries.
const ALLOWED: &[&str] = &["format!(\"EXPLAIN QUERY PLAN {query}\")"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `format!`-family calls in `source` whose string literal starts with a SQL keyword.
fn formatted_sql(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for mac in ["format!(", "format_args!(", "write!(", "writeln!("] {
        for (at, _) in source.match_indices(mac) {
            let rest = &source[at + mac.len()..];
            // The literal is the first argument (`format!`) or follows the writer (`write!`).
            let Some(open) = rest.find('"') else { continue };
            if rest[..open].contains(')') {
                continue;
            }
            let mut literal = &rest[open + 1..];
            // Skip leading blanks and `\n` escapes: a statement may start on the next line.
            loop {
                let trimmed = literal.trim_start().trim_start_matches("\\n");
                if trimmed.len() == literal.len() {
                    break;
                }
                literal = trimmed;
            }
            let head: String = literal.chars().take_while(char::is_ascii_alphabetic).collect();
            if KEYWORDS.contains(&head.as_str()) && !only_constants(&rest[open..]) {
                let call: String = source[at..].chars().take_while(|&c| c != '\n').collect();
                if !ALLOWED.iter().any(|a| call.contains(a)) {
                    found.push(call);
                }
            }
        }
    }
    found
}

/// Whether a format call (from its literal's opening quote) fills its placeholders only with
/// constants (`sql::MEMORY_COLUMNS`): a column list spelled once is SQL text, never data. Inline
/// captures (`{user}`) and any other argument count as interpolation.
fn only_constants(call: &str) -> bool {
    let bytes = call.as_bytes();
    // The literal ends at the next quote that no backslash escapes.
    let mut end = 1;
    while end < bytes.len() && !(bytes[end] == b'"' && bytes[end - 1] != b'\\') {
        end += 1;
    }
    let literal = &call[1..end.min(call.len())];
    if literal.replace("{{", "").replace("{}", "").contains('{') {
        return false;
    }
    let mut depth = 0;
    let mut args = String::new();
    for c in call[(end + 1).min(call.len())..].chars() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            _ => {}
        }
        args.push(c);
    }
    args.split(',').map(str::trim).filter(|a| !a.is_empty()).all(|arg| {
        let last = arg.rsplit("::").next().unwrap_or(arg);
        arg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && last
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

#[test]
fn no_sql_is_built_by_formatting() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["shared/src", "api/src", "workers/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut offenders = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).expect("read source");
        for call in formatted_sql(&source) {
            offenders.push(format!("{}: {call}", file.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "SQL built with format!; use a constant statement with $n/?n parameters:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_lint_catches_interpolation() {
    let bad = r#"let sql = format!("SELECT * FROM memories WHERE user_id = '{user}'");"#;
    assert_eq!(formatted_sql(bad).len(), 1);
    let bad = "let sql = format!(\n    \"DELETE FROM turns WHERE id = {id}\"\n);";
    assert_eq!(formatted_sql(bad).len(), 1);
    let bad = r#"write!(sql, "\n  UPDATE api_keys SET name = '{name}'")"#;
    assert_eq!(formatted_sql(bad).len(), 1);
    let bad = r#"format!("SELECT {} FROM t WHERE id = {}", sql::COLUMNS, id)"#;
    assert_eq!(formatted_sql(bad).len(), 1, "a value among the arguments");
    let fine = r#"format!("SELECT {} FROM scenes WHERE id = ?1", sql::SCENE_COLUMNS)"#;
    assert!(formatted_sql(fine).is_empty(), "a constant column list");
    let fine = r#"let message = format!("select a category: {name}"); let n = format!("{x} rows");"#;
    assert!(formatted_sql(fine).is_empty());
}
