//! Runs the soak (`integration_tests::soak`) alone: `soak [embedded|cluster|all] [--minutes N]`
//! (default: both deployments, 30 minutes each, one after the other). Prints each report and
//! exits 1 if a check failed. It starts the `sediment-api` binary beside it: `cargo build
//! --release -p integration-tests --bin sediment-api --bin soak`.

use integration_tests::process::sibling_binary;
use integration_tests::soak::{self, Deployment, Plan};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut minutes = 30.0;
    let mut deployments = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--minutes" => {
                let value = args.next().unwrap_or_default();
                minutes = value
                    .parse()
                    .ok()
                    .filter(|m: &f64| *m >= 1.0)
                    .ok_or_else(|| anyhow::anyhow!("--minutes takes a number of at least 1, not {value:?}"))?;
            }
            "all" => deployments.extend([Deployment::Embedded, Deployment::Cluster]),
            name => deployments.push(
                Deployment::named(name)
                    .ok_or_else(|| anyhow::anyhow!("unknown deployment {name:?}; known: embedded, cluster, all"))?,
            ),
        }
    }
    if deployments.is_empty() {
        deployments.extend([Deployment::Embedded, Deployment::Cluster]);
    }
    let server = sibling_binary();
    anyhow::ensure!(
        server.exists(),
        "{} is missing: cargo build -p integration-tests --bin sediment-api",
        server.display()
    );
    let seed = integration_tests::env_or("SOAK_SEED", 39);
    let mut failed = Vec::new();
    for deployment in deployments {
        let report = soak::run(&server, deployment, Plan::minutes(minutes, seed)).await;
        println!("{report}\n");
        if !report.passed() {
            failed.push(deployment.name());
        }
    }
    if !failed.is_empty() {
        eprintln!("failed: {}", failed.join(", "));
        std::process::exit(1);
    }
    Ok(())
}
