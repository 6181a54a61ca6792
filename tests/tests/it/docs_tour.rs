//! The README's five-minute tour runs as written. Every `sh` block of "A five-minute tour" is
//! run by bash, in order and as one script (a variable set in one block is used in the next, as
//! in one terminal), against an embedded server whose address replaces `localhost:8080`; after
//! each block the script waits until indexing and extraction have caught up. Each
//! `curl` answers the status the comment after it documents (`# 201 …`), or a 2xx where none is
//! written; a documented non-empty list (`"items":[{`) must come back non-empty.

use std::path::Path;
use std::time::Duration;

use integration_tests::app::{Mode, TestApp};

const TOUR: &str = "## A five-minute tour";
/// Longest wait for the index and extraction to catch up after a block.
const WAIT: Duration = Duration::from_secs(30);

/// The `sh` blocks of the section that starts with `heading`, up to the next `## `.
fn sh_blocks(markdown: &str, heading: &str) -> Vec<String> {
    let start = markdown
        .find(heading)
        .unwrap_or_else(|| panic!("the README has no {heading:?} section"));
    let section = &markdown[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// What each `curl` of a block must answer, in order: the status of the `# NNN …` comment that
/// follows it (`None`: any 2xx), and whether that comment shows a non-empty list.
fn expectations(block: &str) -> Vec<(Option<u16>, bool)> {
    let mut expected: Vec<(Option<u16>, bool)> = Vec::new();
    for line in block.lines().map(str::trim_start) {
        if line.starts_with("curl ") {
            expected.push((None, false));
        } else if let Some(comment) = line.strip_prefix("# ") {
            let status = comment.get(..3).and_then(|s| s.parse::<u16>().ok());
            if let (Some(status), Some(last)) = (status, expected.last_mut()) {
                if last.0.is_none() {
                    *last = (Some(status), comment.contains("\"items\":[{"));
                }
            }
        }
    }
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_runs_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("read README.md");
    let blocks = sh_blocks(&readme, TOUR);
    assert!(blocks.len() >= 3, "the tour has too few sh blocks: {blocks:?}");
    let expected: Vec<(Option<u16>, bool)> = blocks.iter().flat_map(|b| expectations(b)).collect();
    assert!(expected.len() >= 5, "the tour has too few curl calls: {expected:?}");

    let mut app = TestApp::start(Mode::Embedded).await;
    let host = app.base.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().expect("temp dir");
    // Every curl writes its body to a file of its own and its status to a list, so the
    // script's output is what the reader would see minus the bodies.
    let mut script = format!(
        "set -u\nout='{}'\nn=0\ncurl() {{ n=$((n+1)); command curl -o \"$out/body.$n\" -w '%{{http_code}}\\n' \"$@\" >> \"$out/statuses\"; }}\n",
        dir.path().display()
    );
    // Between blocks the script waits on a pipe until the test has seen the background work
    // catch up: the pause a reader takes between pasting two blocks, which the tour's reads
    // (search right after the append) rely on, without a guess at how long it takes.
    for (i, block) in blocks.iter().enumerate() {
        script.push_str(&block.replace("localhost:8080", &host));
        script.push_str(&format!(
            "mkfifo \"$out/go.{i}\"; touch \"$out/done.{i}\"; read -r _ < \"$out/go.{i}\"\n"
        ));
    }
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .kill_on_drop(true)
        .output();
    let caught_up = async {
        for i in 0..blocks.len() {
            let done = dir.path().join(format!("done.{i}"));
            while !done.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            app.wait_indexed(WAIT).await;
            app.wait_extracted(WAIT).await;
            let go = dir.path().join(format!("go.{i}"));
            tokio::task::spawn_blocking(move || std::fs::write(go, "\n"))
                .await
                .expect("join")
                .expect("release the script");
        }
    };
    let (run, ()) = tokio::time::timeout(WAIT * 3, async { tokio::join!(run, caught_up) })
        .await
        .expect("the tour finished");
    let run = run.expect("run bash");
    assert!(
        run.status.success(),
        "the tour failed: {}\n{}",
        String::from_utf8_lossy(&run.stderr),
        script
    );
    let statuses = std::fs::read_to_string(dir.path().join("statuses")).expect("statuses");
    let statuses: Vec<u16> = statuses.lines().map(|s| s.parse().expect("a status")).collect();
    assert_eq!(statuses.len(), expected.len(), "every curl ran: {statuses:?}");
    for (i, (status, (documented, listed))) in statuses.iter().zip(&expected).enumerate() {
        let body = std::fs::read_to_string(dir.path().join(format!("body.{}", i + 1))).unwrap_or_default();
        match documented {
            Some(documented) => assert_eq!(status, documented, "curl #{} answered {body}", i + 1),
            None => assert!((200..300).contains(status), "curl #{} answered {status}: {body}", i + 1),
        }
        if *listed {
            assert!(body.contains("\"items\":[{"), "curl #{} listed nothing: {body}", i + 1);
        }
    }
    app.stop().await;
}
