//! End-to-end retrieval quality: a dev set ingested through the real API (embedded
//! deployment, local embedder, rules extractor), every question asked through
//! `/v1/conversations/search` (hybrid, keyword, semantic) and `/v1/recall`; R@5/10/20 per
//! channel and question kind. See `tests/QUALITY.md`.
//!
//! ```sh
//! bash api/fetch-model.sh && bash tests/fetch-dev-data.sh   # once
//! cargo run -p integration-tests --bin recall_e2e -- --dataset chitchat [--quick] [--json out.json]
//! ```
//!
//! Flags: `--dataset chitchat|synthetic` (chitchat), `--seed N` (42), `--quick` (3 chitchat
//! conversations, 4 synthetic owners), `--json FILE`, `--data FILE` (the chitchat corpus, else
//! `$SEDIMENT_DEV_DATA_DIR/chitchat/dataset.json` or `~/.cache/sediment/data/chitchat/…`),
//! `--model-dir DIR`, `--env KEY=VALUE` (an extra `SEDIMENT_KEY` setting, repeatable),
//! `--dump FILE` (the set as JSON), `--dry-run` (describe the set; start nothing).

use std::path::PathBuf;

use anyhow::{bail, Context};
use integration_tests::quality::chitchat::{ChatDataset, Corpus};
use integration_tests::quality::e2e::{self, E2eSet, RunOptions};
use integration_tests::quality::{Dataset, GenConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut dataset, mut seed, mut quick) = ("chitchat".to_owned(), 42u64, false);
    let (mut json, mut data, mut dump) = (None::<PathBuf>, None::<PathBuf>, None::<PathBuf>);
    let mut dry_run = false;
    let mut options = RunOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dataset" => dataset = value()?,
            "--seed" => seed = value()?.parse()?,
            "--quick" => quick = true,
            "--json" => json = Some(value()?.into()),
            "--data" => data = Some(value()?.into()),
            "--dump" => dump = Some(value()?.into()),
            "--dry-run" => dry_run = true,
            "--model-dir" => options.model_dir = Some(value()?.into()),
            "--env" => {
                let pair = value()?;
                let (key, val) = pair.split_once('=').context("--env takes KEY=VALUE")?;
                options
                    .env
                    .push((Box::leak(key.to_owned().into_boxed_str()), val.to_owned()));
            }
            "-h" | "--help" => {
                println!(
                    "{}",
                    include_str!("recall_e2e.rs")
                        .lines()
                        .take(15)
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                return Ok(());
            }
            other => bail!("unknown flag {other} (try --help)"),
        }
    }
    let set = match dataset.as_str() {
        "chitchat" => {
            let corpus = Corpus::load(&data.unwrap_or_else(Corpus::default_path))?;
            let d = ChatDataset::generate(seed, &corpus);
            E2eSet::from_chitchat(&if quick { d.truncated(3) } else { d })
        }
        "synthetic" => {
            let owners = if quick { 4 } else { GenConfig::default().owners };
            E2eSet::from_synthetic(&Dataset::generate_with(
                seed,
                &GenConfig {
                    owners,
                    ..GenConfig::default()
                },
            ))
        }
        other => bail!("unknown dataset {other}: chitchat or synthetic"),
    };
    eprintln!("{}", set.describe());
    if let Some(path) = dump {
        std::fs::write(&path, serde_json::to_string_pretty(&set.to_json())?)?;
    }
    if dry_run {
        return Ok(());
    }
    let report = e2e::run(&set, &options).await?;
    report.print();
    if let Some(path) = json {
        let mut out = report.to_json();
        out["seed"] = seed.into();
        out["quick"] = quick.into();
        std::fs::write(&path, serde_json::to_string_pretty(&out)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
