//! One integration test binary for the whole workspace (compiles once, runs in parallel).

mod bus_conformance;
mod e2e_errors;
mod e2e_ingest;
mod e2e_process;
mod e2e_recall;
mod embed_local;
mod embed_openai;
mod index_conformance;
mod runtime;
mod store_conformance;
