//! The `capstan` binary: CLI and wiring only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Capstan: a Kubernetes GitOps operator that delivers what Git declares.
#[derive(Debug, Parser)]
#[command(name = "capstan", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator.
    Run(RunArgs),
    /// Print every CRD as a YAML stream, or write one file per CRD with --out-dir.
    Crd {
        /// Write `<plural>.capstan.dev.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Print the version.
    Version,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The operator namespace: shared Repositories and Clusters, settings, reporter config.
    #[arg(long, env = "CAPSTAN_NAMESPACE", default_value = "capstan-system")]
    namespace: String,
    /// Controllers to run (comma-separated); default all but `reporter`.
    #[arg(long, value_delimiter = ',')]
    controllers: Vec<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: String,
    /// Address of the Git push webhook receiver; off when unset.
    #[arg(long)]
    webhook_addr: Option<String>,
    /// Periodic reconcile interval (a jitter is added).
    #[arg(long, default_value = "120s")]
    reconcile_interval: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(_args) => {
            eprintln!("the controllers are not built yet");
            Ok(ExitCode::FAILURE)
        }
        Command::Crd { out_dir: Some(dir) } => {
            for path in capstan::crdgen::write_dir(&dir, &capstan::crds())? {
                eprintln!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Crd { out_dir: None } => {
            print!("{}", capstan::crdgen::stream(&capstan::crds())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Version => {
            println!("capstan {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
    }
}
