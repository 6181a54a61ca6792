//! The router's routes as its sources declare them, for the tests that must cover every route
//! (the OpenAPI document, the isolation matrix): a route added to `api/src/routes/*.rs`
//! without a test case fails those tests instead of going unnoticed.
//!
//! It reads the source text rather than asking axum, because a built `Router` does not list
//! its routes.

use std::collections::BTreeSet;
use std::path::Path;

/// The HTTP methods the router uses, lowercase as in `axum::routing` and OpenAPI.
pub const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Every `(method, path)` the router's sources declare: each `.route("…", get(h).post(h)…)`
/// in `api/src/routes/*.rs`, chains over several lines included.
pub fn routes_in_source() -> BTreeSet<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src/routes");
    let mut routes = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("read api/src/routes") {
        let path = entry.expect("list api/src/routes").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path).expect("read a route file");
            routes.extend(routes_of(&source));
        }
    }
    assert!(routes.len() > 20, "the parser found too few routes: {routes:?}");
    routes
}

fn routes_of(source: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(".route(") {
        let call = &rest[at + ".route(".len()..];
        // The arguments up to the matching parenthesis.
        let mut depth = 1;
        let mut in_string = false;
        let mut end = call.len();
        for (i, c) in call.char_indices() {
            match c {
                '"' => in_string = !in_string,
                '(' if !in_string => depth += 1,
                ')' if !in_string => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let args = &call[..end];
        let path = args
            .split('"')
            .nth(1)
            .unwrap_or_else(|| panic!("a route without a path literal: {args}"));
        let methods = method_calls(&args[args.find(',').expect("route handler") + 1..]);
        assert!(!methods.is_empty(), "no method in route {path}: {args}");
        found.extend(methods.into_iter().map(|m| (m, path.to_owned())));
        rest = &call[end..];
    }
    found
}

/// `get(`, `post(`, ... called as functions or methods (not `module::get`).
fn method_calls(chain: &str) -> Vec<String> {
    let bytes = chain.as_bytes();
    let mut methods = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &chain[start..i];
            let before = chain[..start].trim_end();
            let after = chain[i..].trim_start();
            if METHODS.contains(&word) && after.starts_with('(') && !before.ends_with(':') {
                methods.push(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    methods
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_over_lines_and_module_paths_are_read() {
        let source = r#"
            .route("/a/{id}", get(a::get).patch(a::patch)
                .delete(a::delete))
            .route("/b", post(b::post))
            .route_layer(x)
        "#;
        assert_eq!(
            routes_of(source),
            [
                ("get", "/a/{id}"),
                ("patch", "/a/{id}"),
                ("delete", "/a/{id}"),
                ("post", "/b")
            ]
            .map(|(m, p)| (m.to_owned(), p.to_owned()))
        );
    }
}
