//! `scene` worker: consumes `scene.due` and edits an owner's L2 scene documents when their timer is due.

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    workers::main("scene").await
}
