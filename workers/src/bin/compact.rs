//! `compact` worker: consumes `compaction.requested` and compacts long sessions into a summary
//! (session context, L3).

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    workers::main("compact").await
}
