//! `index` worker: consumes `turn.appended` and indexes L0 turns for conversation search.

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    workers::main("index").await
}
