//! Logging set-up shared by every binary.

use tracing_subscriber::EnvFilter;

/// Installs the global `tracing` subscriber. `RUST_LOG` wins over `default_filter`. Calling it
/// twice is harmless (the second call keeps the first subscriber), so tests may call it too.
pub fn init(service: &str, default_filter: &str, format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let result = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    if result.is_ok() {
        tracing::info!(service, version = env!("CARGO_PKG_VERSION"), "starting");
    }
}
