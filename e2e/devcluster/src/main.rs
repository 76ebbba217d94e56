//! `devcluster` binary: serve the control plane until SIGTERM/SIGINT. HTTPS with a generated
//! CA by default; the kubeconfig written by `--kubeconfig-out` carries the CA and the admin token.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "devcluster",
    about = "A Kubernetes-API-compatible control plane for development and tests"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig for the server here.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Minor version reported by /version.
    #[arg(long, default_value = "32")]
    minor: String,
    /// Interval between watch bookmarks (e.g. 60s, 500ms, 1m).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    bookmark_interval: Duration,
    /// Number of watch events kept for resuming watches.
    #[arg(long, default_value_t = 10_000)]
    history_limit: usize,
    /// Keep every object in this etcd (e.g. http://127.0.0.1:2379) instead of in memory; a devcluster
    /// restarted on the same etcd serves the same objects and resumes watches.
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Serve plain HTTP instead of HTTPS; requests without credentials are then the superuser
    /// system:unsecured (client-go sends no token over plain HTTP); tokens still authenticate.
    #[arg(long)]
    insecure_http: bool,
    /// Keep the CA, serving certificate, ServiceAccount token signing key and admin token in this directory
    /// (created on first use, reused after), so kubeconfigs and tokens survive a restart.
    #[arg(long)]
    tls_cert_dir: Option<PathBuf>,
    /// Serve requests without credentials as system:anonymous (as kube-apiserver does); false: 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid duration: {s}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = devcluster::Config {
        listen: args.listen,
        minor_version: args.minor,
        bookmark_interval: args.bookmark_interval,
        history_limit: args.history_limit,
        etcd: args.etcd,
        insecure_http: args.insecure_http,
        tls_cert_dir: args.tls_cert_dir,
        anonymous_auth: args.anonymous_auth,
    };
    let cluster = devcluster::start(config)?;
    if let Some(path) = &args.kubeconfig_out {
        cluster
            .write_kubeconfig(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let mut out = std::io::stdout();
    writeln!(out, "devcluster ready: {}", cluster.url())?;
    out.flush()?;
    wait_for_signal()?;
    cluster.shutdown();
    Ok(())
}

fn wait_for_signal() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("x").is_err());
    }
}
