//! `persona` worker: consumes `persona.due` and builds an owner's L3 persona when a trigger fires.

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    workers::main("persona").await
}
