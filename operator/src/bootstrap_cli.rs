//! `capstan bootstrap` and `capstan uninstall`: flags and wiring (the logic is `capstan::bootstrap`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use capstan::bootstrap::components::{self, Values};
use capstan::bootstrap::run::{self, Options, Outcome};
use capstan::cluster::{ClusterHandle, ClusterTimeouts};
use capstan::controllers::parse_duration;
use capstan::source::credentials::Credentials;

/// Flags of `capstan bootstrap`.
#[derive(Debug, clap::Args)]
pub struct BootstrapArgs {
    /// The Git repository (`ssh://`, `git://`, `file://` or a local path).
    #[arg(long)]
    url: Option<String>,
    /// The branch (created when missing).
    #[arg(long, default_value = "main")]
    branch: String,
    /// The folder of this cluster in the repository.
    #[arg(long, default_value = "clusters/default")]
    path: String,
    /// The operator namespace.
    #[arg(long, default_value = "capstan-system")]
    namespace: String,
    /// Git user name (HTTPS basic auth or SSH user).
    #[arg(long)]
    username: Option<String>,
    /// The environment variable holding the Git password (never the password itself).
    #[arg(long, conflicts_with = "password_file")]
    password_env: Option<String>,
    /// A file holding the Git password.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// An SSH private key file.
    #[arg(long)]
    private_key_file: Option<PathBuf>,
    /// An SSH known_hosts file.
    #[arg(long)]
    known_hosts: Option<PathBuf>,
    /// A CA bundle for HTTPS.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Allow plain `git://` and `http://` URLs (loopback daemons in tests).
    #[arg(long)]
    allow_insecure_http: bool,
    /// The operator image `REPO[:TAG]` (default: this binary's version).
    #[arg(long)]
    image: Option<String>,
    /// Chart-like overrides: image, replicaCount, extraArgs, resources.
    #[arg(long)]
    values: Option<PathBuf>,
    /// The Repository's poll interval.
    #[arg(long, default_value = "1m")]
    interval: String,
    /// Commit author name.
    #[arg(long, default_value = "capstan")]
    author_name: String,
    /// Commit author email.
    #[arg(long, default_value = "capstan@localhost")]
    author_email: String,
    /// The kubeconfig file (default: KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// How long to wait for the self Application.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,
    /// Print both plans (Git diff, per-object cluster changes) and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Apply the components even though the self Application already synced.
    #[arg(long)]
    force_apply: bool,
    /// Move a live self Application to another URL, branch or path.
    #[arg(long)]
    force: bool,
    /// Take over an installation bootstrap did not make (a Helm release).
    #[arg(long)]
    adopt: bool,
    /// Print the components YAML and exit (no Git, no cluster).
    #[arg(long)]
    export: bool,
}

fn read(path: &PathBuf, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{what} {}", path.display()))
}

fn credentials(a: &BootstrapArgs) -> anyhow::Result<Option<Credentials>> {
    let password = match (&a.password_env, &a.password_file) {
        (Some(var), _) => Some(std::env::var(var).with_context(|| format!("--password-env {var}"))?),
        (_, Some(f)) => Some(read(f, "--password-file")?.trim_end_matches(['\r', '\n']).to_string()),
        _ => None,
    };
    let c = Credentials {
        username: a.username.clone(),
        password,
        ssh_private_key: a
            .private_key_file
            .as_ref()
            .map(|f| read(f, "--private-key-file"))
            .transpose()?,
        known_hosts: a.known_hosts.as_ref().map(|f| read(f, "--known-hosts")).transpose()?,
        ca_cert: a.ca_file.as_ref().map(|f| read(f, "--ca-file")).transpose()?,
        ..Credentials::default()
    };
    let any = c.username.is_some() || c.password.is_some() || c.ssh_private_key.is_some() || c.ca_cert.is_some();
    Ok(any.then_some(c))
}

async fn connect(kubeconfig: Option<&PathBuf>, context: Option<&String>) -> anyhow::Result<Arc<ClusterHandle>> {
    let options = kube::config::KubeConfigOptions {
        context: context.cloned(),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(f) => {
            let kc = kube::config::Kubeconfig::read_from(f).with_context(|| format!("--kubeconfig {}", f.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None => kube::Config::from_kubeconfig(&options)
            .await
            .context("no kubeconfig (KUBECONFIG or ~/.kube/config)")?,
    };
    let server = config.cluster_url.to_string();
    ClusterHandle::from_config("bootstrap", &server, config, ClusterTimeouts::default(), None)
        .map_err(|e| anyhow::anyhow!("cluster: {e}"))
}

/// `capstan bootstrap`.
pub async fn bootstrap(a: BootstrapArgs) -> anyhow::Result<ExitCode> {
    let values_text = a
        .values
        .as_ref()
        .map(|f| read(f, "--values"))
        .transpose()?
        .unwrap_or_default();
    let values = Values::parse(&values_text)?;
    if a.export {
        print!(
            "{}",
            components::to_yaml(&components::render(a.image.as_deref(), &values)?)?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let url = a.url.clone().context("--url is required")?;
    if (url.starts_with("git://") || url.starts_with("http://")) && !a.allow_insecure_http {
        anyhow::bail!("{url} is not encrypted; pass --allow-insecure-http to use it anyway");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = connect(a.kubeconfig.as_ref(), a.context.as_ref()).await?;
    let opts = Options {
        url,
        branch: a.branch.clone(),
        path: a.path.trim_matches('/').to_string(),
        namespace: a.namespace.clone(),
        credentials: credentials(&a)?,
        image: a.image.clone(),
        values: (values, values_text),
        interval: a.interval.clone(),
        author: (a.author_name.clone(), a.author_email.clone()),
        timeout: a.timeout,
        dry_run: a.dry_run,
        force_apply: a.force_apply,
        force: a.force,
        adopt: a.adopt,
    };
    let mut say = |line: &str| println!("{line}");
    match run::run(&cluster, &opts, &mut say).await? {
        Outcome::UpToDate(sha) => println!("up to date, Synced at {}", &sha[..sha.len().min(7)]),
        Outcome::Done(sha) => println!("bootstrapped: Synced and Healthy at {}", &sha[..sha.len().min(7)]),
        Outcome::Planned => println!("dry run: nothing was written"),
    }
    Ok(ExitCode::SUCCESS)
}
