//! Test harness for sediment's integration tests: per-test Postgres databases, unique queue
//! and index names, and an in-process API. Every resource a test makes is its own, so tests
//! run in parallel without seeing each other's data.

pub mod amqp;
pub mod app;
pub mod browser;
pub mod chaos;
pub mod cpu;
pub mod fake_openai;
pub mod faulty_index;
pub mod mixed_session;
pub mod otel_collector;
pub mod pg;
pub mod process;
pub mod quality;
pub mod rng;
pub mod routes;
pub mod s3;
pub mod secrets;
pub mod soak;
pub mod stats;
pub mod stores;
pub mod synthetic;

/// A benchmark setting from the environment: `name` parsed, or `default` when it is unset or
/// does not parse.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
