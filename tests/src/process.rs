//! Worker binaries run as real processes: a free port for a side port, and a graceful stop.

use std::time::Duration;

use tokio::process::Child;

/// A port nothing listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Sends SIGTERM and asserts the process exits 0 within 10 s (the drain deadline).
pub async fn sigterm_and_wait(mut child: Child) {
    let pid = child.id().expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exit within 10 s of SIGTERM")
        .expect("wait");
    assert!(exit.success(), "exit status {exit:?} after SIGTERM");
}
