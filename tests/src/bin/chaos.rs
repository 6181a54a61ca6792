//! Runs fault scenarios alone (`integration_tests::chaos`): `chaos [SCENARIO...] [--long]`;
//! no scenario or `all` runs every one. Prints each one's report (requests sent and answered,
//! recovery time per fault, the invariants) and exits 1 if any failed. It starts the
//! `sediment-api` binary beside it: `cargo build -p integration-tests --bin sediment-api`.

use futures::FutureExt as _;
use integration_tests::chaos::{Form, Scenario};
use integration_tests::process::sibling_binary;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let form = if args.iter().any(|a| a == "--long") {
        Form::Long
    } else {
        Form::Short
    };
    let mut scenarios = Vec::new();
    for name in args.iter().filter(|a| *a != "--long") {
        match (name.as_str(), Scenario::named(name)) {
            ("all", _) => scenarios.extend(Scenario::ALL),
            (_, Some(scenario)) => scenarios.push(scenario),
            (_, None) => {
                let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                anyhow::bail!("unknown scenario {name:?}; known: all, {}", known.join(", "));
            }
        }
    }
    if scenarios.is_empty() {
        scenarios.extend(Scenario::ALL);
    }
    let server = sibling_binary();
    anyhow::ensure!(
        server.exists(),
        "{} is missing: cargo build -p integration-tests --bin sediment-api",
        server.display()
    );
    let mut failed = Vec::new();
    for scenario in scenarios {
        // A panicking scenario (it could not set up) fails alone; its drop guards have run.
        let run = std::panic::AssertUnwindSafe(scenario.run(&server, form));
        match run.catch_unwind().await {
            Ok(report) => {
                println!("{report}\n");
                if !report.passed() {
                    failed.push(scenario.name());
                }
            }
            Err(_) => {
                println!("== {} == PANICKED (above)\n", scenario.name());
                failed.push(scenario.name());
            }
        }
    }
    if !failed.is_empty() {
        eprintln!("failed: {}", failed.join(", "));
        std::process::exit(1);
    }
    Ok(())
}
