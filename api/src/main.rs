//! `sediment` API binary: the embedded deployment by default, the cluster API when
//! `SEDIMENT_DATABASE_URL` and `SEDIMENT_AMQP_URL` are set.
//!
//! `sediment migrate` applies the Postgres migrations and exits, serving nothing: the Helm
//! chart's pre-install/pre-upgrade hook Job. It reads and validates the same settings as the
//! server, so a release whose configuration would not boot fails before any pod rolls.
//!
//! `sediment worker <kind>`, or this binary called through a link named `sediment-<kind>`,
//! runs that cluster worker (`workers::WORKERS`): the container image ships this one binary
//! and links, rather than a copy of the same code per worker.

use anyhow::Context as _;
use shared::config::{Deployment, Settings};
use shared::store::PostgresStore;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

/// What this process was asked to run, from its name and arguments.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Serve,
    Migrate,
    Worker(String),
}

const USAGE: &str = "usage: sediment [migrate | worker <index|extract|compact|scene|persona>]";

fn command(args: &[String]) -> anyhow::Result<Command> {
    let called_as = args
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .and_then(|name| name.to_str())
        .unwrap_or("sediment");
    if let Some(kind) = called_as.strip_prefix("sediment-") {
        if workers::WORKERS.contains(&kind) {
            return Ok(Command::Worker(kind.to_owned()));
        }
    }
    match args.get(1..).unwrap_or_default() {
        [] => Ok(Command::Serve),
        [cmd] if cmd == "migrate" => Ok(Command::Migrate),
        [cmd, kind] if cmd == "worker" && workers::WORKERS.contains(&kind.as_str()) => {
            Ok(Command::Worker(kind.clone()))
        }
        other => anyhow::bail!("unknown command {other:?} ({USAGE})"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = command(&std::env::args().collect::<Vec<_>>())?;
    if let Command::Worker(kind) = &command {
        return workers::main(kind).await;
    }
    let settings = Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-api",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let result = match command {
        Command::Migrate => migrate(&settings).await,
        Command::Serve | Command::Worker(_) => api::run(settings, shared::shutdown::signal()).await,
    };
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}

/// Applies the migrations that are not applied yet (under the store's advisory lock).
async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    let Deployment::Cluster { database_url, .. } = &settings.deployment else {
        anyhow::bail!("sediment migrate needs the cluster deployment: set SEDIMENT_DATABASE_URL and SEDIMENT_AMQP_URL");
    };
    let store = PostgresStore::connect(database_url, 1)
        .await
        .context("connect to Postgres")?;
    store.migrate().await.context("apply Postgres migrations")?;
    tracing::info!("migrations are up to date");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{command, Command};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn the_name_or_the_arguments_choose_what_runs() {
        assert_eq!(command(&args(&["sediment"])).unwrap(), Command::Serve);
        assert_eq!(
            command(&args(&["/usr/local/bin/sediment", "migrate"])).unwrap(),
            Command::Migrate
        );
        assert_eq!(
            command(&args(&["sediment", "worker", "extract"])).unwrap(),
            Command::Worker("extract".into())
        );
        assert_eq!(
            command(&args(&["/usr/local/bin/sediment-persona"])).unwrap(),
            Command::Worker("persona".into())
        );
        // The tests' copy of this binary is named sediment-api: it serves.
        assert_eq!(command(&args(&["target/debug/sediment-api"])).unwrap(), Command::Serve);
        for bad in [
            &["sediment", "worker"][..],
            &["sediment", "worker", "api"],
            &["sediment", "serve"],
            &["sediment", "migrate", "now"],
        ] {
            let err = command(&args(bad)).unwrap_err().to_string();
            assert!(err.contains("usage: sediment"), "{bad:?}: {err}");
        }
    }
}
