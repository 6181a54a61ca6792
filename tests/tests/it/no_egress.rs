//! No egress: the embedded default (rules engine, local embedding model) opens no connection to
//! anything but loopback. The real `sediment` binary runs in a network namespace of its own that
//! has only a loopback interface, under `strace -f`, while a client appends a turn, searches and
//! recalls; every `connect` of every process is then read back. A connection attempt anywhere
//! else (an address, a DNS server) fails the test, even though the namespace could not have
//! let it out.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sediment-api");
/// Set by CI, where the tools are installed: then a missing tool fails instead of skipping.
const REQUIRE: &str = "SEDIMENT_REQUIRE_NO_EGRESS";

/// The script run inside the namespace: loopback up, then the server and its client under one
/// `strace -f`, so the client's own loopback connects prove that tracing works.
const SCRIPT: &str = r#"
set -eu
ip link set lo up
exec strace -f -qq -e trace=connect -e signal=none -o "$OUT/strace.txt" sh -c '
  set -u
  "$BIN" >"$OUT/server.log" 2>&1 &
  pid=$!
  up=""
  for i in $(seq 1 600); do
    if curl -fsS -o /dev/null http://127.0.0.1:8080/healthz 2>/dev/null; then up=1; break; fi
    sleep 0.1
  done
  [ -n "$up" ] || { kill $pid; exit 3; }
  H="-H content-type:application/json -H x-sediment-team:egress -H x-sediment-agent:a -H x-sediment-user:u"
  curl -fsS $H http://127.0.0.1:8080/v1/sessions/s1/messages \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"I moved to Lisbon and I run the orders database on Postgres 16.\"}]}" \
    >"$OUT/append.json"
  for i in $(seq 1 600); do
    curl -fsS $H http://127.0.0.1:8080/v1/conversations/search -d "{\"query\":\"Lisbon\"}" >"$OUT/search.json"
    grep -q Lisbon "$OUT/search.json" && break
    sleep 0.1
  done
  curl -fsS $H http://127.0.0.1:8080/v1/recall -d "{\"query\":\"where does the user live?\"}" >"$OUT/recall.json"
  kill -TERM $pid
  wait $pid || true
'
"#;

fn tool_missing() -> Option<&'static str> {
    ["unshare", "strace", "ip", "curl"].into_iter().find(|tool| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The `connect` calls in strace output that reach beyond loopback (or that strace could not
/// decode, which count as beyond).
fn outside_loopback(trace: &str) -> Vec<&str> {
    trace
        .lines()
        .filter(|line| line.contains("connect("))
        .filter(|line| {
            let local = line.contains("sa_family=AF_UNIX")
                || line.contains("sa_family=AF_UNSPEC")
                || line.contains("inet_addr(\"127.")
                || line.contains("inet_pton(AF_INET6, \"::1\"");
            !local
        })
        .collect()
}

#[test]
fn the_trace_reader_flags_every_address_but_loopback() {
    let trace = r#"
101 connect(3, {sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("127.0.0.1")}, 16) = 0
102 connect(7, {sa_family=AF_UNIX, sun_path="/run/x.sock"}, 110) = 0
103 connect(9, {sa_family=AF_INET6, sin6_port=htons(8080), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0
104 connect(4, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("192.0.2.53")}, 16) = -1 ENETUNREACH (Network is unreachable)
105 connect(5, {sa_family=AF_INET6, sin6_port=htons(443), inet_pton(AF_INET6, "2001:db8::1", &sin6_addr)}, 28) = -1 ENETUNREACH
"#;
    let flagged = outside_loopback(trace);
    assert_eq!(flagged.len(), 2, "{flagged:?}");
    assert!(flagged[0].contains("192.0.2.53") && flagged[1].contains("2001:db8::1"));
}

#[test]
fn the_embedded_default_connects_to_nothing_but_loopback() {
    if let Some(tool) = tool_missing() {
        assert!(
            std::env::var_os(REQUIRE).is_none(),
            "{tool} is missing and {REQUIRE} is set"
        );
        eprintln!("SKIPPED: {tool} is not installed, so the no-egress test cannot run");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path();
    let status = Command::new("unshare")
        .args(["--net", "sh", "-c", SCRIPT])
        .env("OUT", out)
        .env("BIN", BIN)
        .env("SEDIMENT_DATA_DIR", out.join("data"))
        .env("SEDIMENT_LISTEN", "127.0.0.1:8080")
        .env("SEDIMENT_LOG", "warn")
        .status()
        .expect("run unshare");
    let read = |name: &str| std::fs::read_to_string(Path::new(out).join(name)).unwrap_or_default();
    assert!(
        status.success(),
        "the run failed ({status}); server log:\n{}",
        read("server.log")
    );

    let append = read("append.json");
    assert!(append.contains("\"seq\":1"), "append: {append}");
    assert!(
        read("search.json").contains("Lisbon"),
        "search: {}",
        read("search.json")
    );
    assert!(
        read("recall.json").contains("\"dynamic\""),
        "recall: {}",
        read("recall.json")
    );

    let trace = read("strace.txt");
    assert!(
        trace.contains("inet_addr(\"127.0.0.1\")") && trace.contains("htons(8080)"),
        "the trace shows no loopback connect, so it traced nothing:\n{trace}"
    );
    let outside = outside_loopback(&trace);
    assert!(
        outside.is_empty(),
        "connections beyond loopback:\n{}\nserver log:\n{}",
        outside.join("\n"),
        read("server.log")
    );
}
