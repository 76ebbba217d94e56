//! `capstan-hub` binary: serve the reporter protocol until SIGTERM/SIGINT.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "capstan-hub",
    about = "The reference receiver of the Capstan reporter protocol (tests and demo)"
)]
struct Args {
    /// Address to listen on (port 0: any free port; the ready line says which).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The SQLite database file (created if missing; a restarted hub on the same file has everything).
    #[arg(long)]
    db: PathBuf,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// An accepted bearer token (repeatable; more can be added at run time with POST /_hub/tokens).
    #[arg(long = "token")]
    tokens: Vec<String>,
    /// Check X-Capstan-Signature (HMAC-SHA256 of the body as sent) with this key; 401 when wrong.
    #[arg(long)]
    hmac_key: Option<String>,
    /// Seconds after which a delivered task without a result is delivered again.
    #[arg(long, default_value_t = 300)]
    task_redelivery: u64,
    /// How many requests the request log keeps.
    #[arg(long, default_value_t = 100_000)]
    request_log_limit: u64,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if args.tokens.is_empty() {
        tracing::warn!("no --token given: every agent request is refused until POST /_hub/tokens adds one");
    }
    let config = capstan_hub::Config {
        listen: args.listen,
        db: args.db,
        tls: args.tls_cert.zip(args.tls_key),
        tokens: args.tokens,
        hmac_key: args.hmac_key.map(String::into_bytes),
        task_redelivery: Duration::from_secs(args.task_redelivery),
        request_log_limit: args.request_log_limit.max(1),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(capstan_hub::serve(config, shutdown_signal(), |url| {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "capstan-hub ready: {url}");
        let _ = out.flush();
    }))
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::error!("cannot listen for SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
