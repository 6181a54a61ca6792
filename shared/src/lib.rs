//! The core of sediment: domain types, the ports (traits) to every external system, both
//! backends of each port, and the algorithms that run on top of them.
//!
//! # Layering
//! - `domain` is pure: validated types and text rules, no I/O.
//! - `store`, `bus`, `index` are the ports. Each has a cluster backend (Postgres, RabbitMQ,
//!   Qdrant server) and an embedded backend (SQLite, in-process channels, Qdrant Edge); the
//!   algorithms see only `Arc<dyn Port>`.
//! - `files` is the file store port (L2 scenes, L3 persona, skills): S3 in the cluster, a local
//!   directory embedded; keys are `/`-separated paths checked before any I/O.
//! - `indexer` and `search` are algorithms over the ports; `runtime` wires them into
//!   long-running loops; `backends` builds the right set of ports from `config::Settings`;
//!   `ops` reads the ports for operators (queue gauges, the ops page's snapshot).
//! - This crate has no HTTP framework in it: `api` adapts HTTP to these calls.
//!
//! # Which error type where
//! - Each port has one `thiserror` enum (`StoreError`, `BusError`, `IndexError`, `FileError`)
//!   with an `XxxResult<T>` alias and an `is_retryable()` classification that drives ack/retry.
//! - Domain validation returns `domain::ValidationError`, which the API maps to a 4xx.
//! - Binaries and glue code use `anyhow::Result` with `.context("verb object")`.

pub mod auth;
pub mod backends;
pub mod background;
pub mod bus;
pub mod config;
pub mod context;
pub mod domain;
pub mod embed;
pub mod erase;
pub mod files;
mod http_retry;
pub mod index;
pub mod indexer;
pub mod lease;
pub mod llm;
pub mod memory;
pub mod metrics;
pub mod ops;
pub mod persona;
pub mod portable;
pub mod recall;
pub mod retrieval;
pub mod runtime;
pub mod scene;
pub mod search;
pub mod shutdown;
pub mod store;
mod sync;
pub mod telemetry;

/// The global allocator of every sediment binary (`#[global_allocator] static ALLOCATOR:
/// shared::Allocator = shared::Allocator;` in each `main`), jemalloc as in the Qdrant server.
/// Qdrant Edge's writes and optimizer runs allocate and free many short-lived buffers from
/// several threads: under glibc's malloc a fifth of the index threads' CPU went to the
/// allocator itself (`_int_malloc`, `malloc_consolidate`). Built with background threads on
/// (`opt.background_thread`), so that returning freed pages to the kernel happens on jemalloc's
/// own threads rather than inside whichever request or index thread frees.
/// `tests/BENCHMARKS.md`, "Allocator", has the measurements, and why not mimalloc.
pub use tikv_jemallocator::Jemalloc as Allocator;
