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
//!
//! `sediment mcp` serves MCP on stdio for a host that launches it (`api::mcp`); `sediment
//! search|recall|ingest|memories|scenes|persona|erase|status` call a running sediment
//! (`api::cli`).

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use shared::config::{Deployment, Settings};
use shared::store::PostgresStore;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

/// Long-term memory for AI agents. Settings come from SEDIMENT_* environment variables
/// (README.md, helm/README.md).
#[derive(Debug, Parser)]
#[command(name = "sediment", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// What this process was asked to run, from its name and arguments.
#[derive(Debug, PartialEq, Eq, Subcommand)]
enum Command {
    /// Serve the API (the default): embedded, or the cluster API when SEDIMENT_DATABASE_URL and
    /// SEDIMENT_AMQP_URL are set.
    Serve,
    /// Apply the Postgres migrations and exit (the Helm chart's pre-install hook).
    Migrate,
    /// Run one cluster worker: index, extract, compact, scene or persona.
    Worker {
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(workers::WORKERS.iter().copied()))]
        kind: String,
    },
    /// Serve MCP on stdin/stdout, for an MCP host that launches sediment (Claude Desktop,
    /// Cursor, ...). Without --url it runs the embedded deployment on SEDIMENT_DATA_DIR itself.
    Mcp(McpArgs),
    #[command(flatten)]
    Client(api::cli::ClientCommand),
}

#[derive(Debug, PartialEq, Eq, clap::Args)]
struct McpArgs {
    /// A running sediment to call (http://host:port); default: run one in this process.
    #[arg(long, env = "SEDIMENT_URL")]
    url: Option<String>,
    /// The team's API key (or an identity provider's token), when auth is on.
    #[arg(long = "api-key", env = "SEDIMENT_API_KEY", hide_env_values = true)]
    key: Option<String>,
    /// The team (optional with a key: the key decides it).
    #[arg(long, env = "SEDIMENT_TEAM")]
    team: Option<String>,
    /// The agent the tools act as.
    #[arg(long, env = "SEDIMENT_AGENT")]
    agent: Option<String>,
    /// The user whose memory the tools read and write.
    #[arg(long, env = "SEDIMENT_USER")]
    user: Option<String>,
    /// Narrows every call to this task.
    #[arg(long, env = "SEDIMENT_TASK")]
    task: Option<String>,
    /// The session `remember` appends to by default (default: a new one per process).
    #[arg(long, env = "SEDIMENT_SESSION")]
    session: Option<String>,
}

fn command(args: &[String]) -> Result<Command, clap::Error> {
    let called_as = args
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .and_then(|name| name.to_str())
        .unwrap_or("sediment");
    if let Some(kind) = called_as.strip_prefix("sediment-") {
        if workers::WORKERS.contains(&kind) {
            return Ok(Command::Worker { kind: kind.to_owned() });
        }
    }
    Ok(Cli::try_parse_from(args)?.command.unwrap_or(Command::Serve))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = match command(&std::env::args().collect::<Vec<_>>()) {
        Ok(command) => command,
        Err(e) => e.exit(),
    };
    match command {
        Command::Worker { kind } => workers::main(&kind).await,
        // The client commands call a running sediment: no settings, no telemetry.
        Command::Client(command) => api::cli::run(command).await,
        Command::Serve | Command::Migrate | Command::Mcp(_) => serve(command).await,
    }
}

/// The commands that run a deployment's parts in this process, under its settings.
async fn serve(command: Command) -> anyhow::Result<()> {
    let settings = Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-api",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let result = match command {
        Command::Migrate => migrate(&settings).await,
        Command::Mcp(args) => {
            let identity = api::mcp::Identity {
                key: args.key,
                team: args.team,
                agent: args.agent,
                user: args.user,
                task: args.task,
                session: args.session,
            };
            api::mcp::run_stdio(settings, args.url, identity, shared::shutdown::signal()).await
        }
        Command::Serve | Command::Worker { .. } | Command::Client(_) => {
            api::run(settings, shared::shutdown::signal()).await
        }
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
        assert_eq!(command(&args(&["sediment", "serve"])).unwrap(), Command::Serve);
        assert_eq!(
            command(&args(&["/usr/local/bin/sediment", "migrate"])).unwrap(),
            Command::Migrate
        );
        assert_eq!(
            command(&args(&["sediment", "worker", "extract"])).unwrap(),
            Command::Worker { kind: "extract".into() }
        );
        assert_eq!(
            command(&args(&["/usr/local/bin/sediment-persona"])).unwrap(),
            Command::Worker { kind: "persona".into() }
        );
        // The tests' copy of this binary is named sediment-api: it serves.
        assert_eq!(command(&args(&["target/debug/sediment-api"])).unwrap(), Command::Serve);
        let Command::Mcp(mcp) = command(&args(&[
            "sediment",
            "mcp",
            "--url",
            "http://127.0.0.1:8080",
            "--user",
            "ana",
        ]))
        .unwrap() else {
            panic!("mcp");
        };
        assert_eq!(mcp.url.as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(mcp.user.as_deref(), Some("ana"));
        let Command::Client(api::cli::ClientCommand::Search { query, .. }) =
            command(&args(&["sediment", "search", "where is the offsite?", "--limit", "3"])).unwrap()
        else {
            panic!("search");
        };
        assert_eq!(query, "where is the offsite?");
        assert!(matches!(
            command(&args(&["sediment", "memories", "delete", "m-1", "--json"])).unwrap(),
            Command::Client(api::cli::ClientCommand::Memories { .. })
        ));
        assert!(matches!(
            command(&args(&["sediment", "parked", "replay", "scene", "--limit", "5"])).unwrap(),
            Command::Client(api::cli::ClientCommand::Parked {
                action: api::cli::ParkedCommand::Replay { ref kind, limit: Some(5), .. }
            }) if kind == "scene"
        ));
        for bad in [
            &["sediment", "worker"][..],
            &["sediment", "parked", "replay"],
            &["sediment", "worker", "api"],
            &["sediment", "serve", "now"],
            &["sediment", "migrate", "now"],
            &["sediment", "mcp", "--bogus"],
        ] {
            let err = command(&args(bad)).unwrap_err().to_string();
            assert!(err.starts_with("error: "), "{bad:?}: {err}");
        }
    }
}
