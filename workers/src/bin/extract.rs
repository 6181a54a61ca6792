//! `extract` worker: consumes `turn.appended` and `extract.due` and distils L0 turns into L1
//! memories (rules engine, or the configured LLM).

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    workers::main("extract").await
}
