//! Headless Chromium (Debian's `chromium` package) for end-to-end page tests: loads a URL, lets
//! the page's scripts run and fetch, and returns the DOM they left.
//!
//! A missing browser skips the test with a loud message, unless `SEDIMENT_REQUIRE_CHROMIUM` is
//! set (CI sets it once it has installed the package), which turns the skip into a failure.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// Set to make a missing browser fail the test instead of skipping it.
pub const REQUIRE_ENV: &str = "SEDIMENT_REQUIRE_CHROMIUM";
/// Overrides where the browser binary is.
pub const BINARY_ENV: &str = "SEDIMENT_CHROMIUM";
/// Page time (virtual: it does not pass while a request is in flight) before the DOM is dumped.
const VIRTUAL_TIME_BUDGET_MS: u32 = 3_000;
/// Wall-clock limit of one browser run.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The browser binary, or `None` (with a loud message) when it is not installed and not
/// required.
pub fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var_os(BINARY_ENV)
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(PathBuf::from));
    for candidate in candidates {
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    assert!(
        std::env::var_os(REQUIRE_ENV).is_none(),
        "{REQUIRE_ENV} is set but no Chromium was found (install Debian's `chromium` package, or set {BINARY_ENV})"
    );
    eprintln!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: no headless Chromium (apt-get install chromium); the browser\n\
         !!! test of the ops page did not run. CI sets {REQUIRE_ENV} and fails instead.\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    );
    None
}

/// Loads `url` in a fresh headless Chromium profile and returns the serialized DOM after the
/// page's scripts ran; panics if the browser fails.
pub async fn dump_dom(browser: &std::path::Path, url: &str) -> String {
    let profile = tempfile::tempdir().expect("create a browser profile dir");
    let mut command = tokio::process::Command::new(browser);
    command
        // Root in a container has no user namespace sandbox; the page is our own.
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        // This machine's network is closed: no update, sync or safe-browsing connections.
        .args([
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}"))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish loading {url} within {RUN_TIMEOUT:?}"))
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && !dom.is_empty(),
        "chromium failed on {url} ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    dom
}

/// The text content of the element with `id` in serialized HTML (its first text node), if any.
pub fn text_of(dom: &str, id: &str) -> Option<String> {
    let start = dom.find(&format!("id=\"{id}\""))?;
    let open_end = start + dom[start..].find('>')? + 1;
    let text_end = open_end + dom[open_end..].find('<')?;
    Some(dom[open_end..text_end].trim().to_owned())
}
