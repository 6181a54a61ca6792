//! Rules-extractor quality: precision and recall of `RulesExtractor` on the labelled set
//! `tests/data/rules_extractor/labelled.jsonl`, overall, per split, per language and per
//! category, plus the category accuracy of true positives. See `tests/QUALITY.md`.
//!
//! ```sh
//! cargo run -p integration-tests --bin rules_quality -- [--misses] [--file FILE]
//! ```

// Shared with the `it::rules_extractor` test, which includes it by path too.
#[path = "rules_quality/eval.rs"]
mod eval;

use anyhow::bail;

fn main() -> anyhow::Result<()> {
    let mut path = eval::labelled_path();
    let mut show_misses = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--misses" => show_misses = true,
            "--file" => match args.next() {
                Some(file) => path = file.into(),
                None => bail!("--file needs a value"),
            },
            other => bail!("unknown flag {other} (flags: --misses, --file FILE)"),
        }
    }
    let items = eval::load(&path)?;
    let predictions = eval::predict(&items);
    println!(
        "## rules_quality: {} labelled turns from {}\n",
        items.len(),
        path.display()
    );
    print!("{}", eval::report(&items, &predictions));
    if show_misses {
        println!("\n### Misses\n\n```\n{}```", eval::misses(&items, &predictions));
    }
    Ok(())
}
