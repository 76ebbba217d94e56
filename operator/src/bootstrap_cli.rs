//! `capstan bootstrap` and `capstan uninstall`: flags and wiring (the logic is `capstan::bootstrap`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use capstan::bootstrap::components::{self, Values};
use capstan::bootstrap::run::{self, Options, Outcome};
use capstan::bootstrap::uninstall::{self as remove, UninstallOptions};
use capstan::cluster::{ClusterHandle, ClusterTimeouts};
use capstan::controllers::parse_duration;
use capstan::source::credentials::Credentials;

/// Flags of `capstan bootstrap`.
#[derive(Debug, clap::Args)]
pub struct BootstrapArgs {
    /// The Git repository (`https://`, `ssh://`, `git@host:path`, `git://`, `http://`, or `file://` with
    /// `--allow-local-repositories`).
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
    /// Git user name (HTTP(S) basic auth or SSH user).
    #[arg(long)]
    username: Option<String>,
    /// The environment variable holding the Git password (never the password itself).
    #[arg(long, conflicts_with = "password_file")]
    password_env: Option<String>,
    /// A file holding the Git password.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// The environment variable holding an HTTP(S) bearer token (sent instead of basic auth).
    #[arg(long, conflicts_with = "bearer_token_file")]
    bearer_token_env: Option<String>,
    /// A file holding an HTTP(S) bearer token.
    #[arg(long)]
    bearer_token_file: Option<PathBuf>,
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
    /// Allow a `file://` URL: the operator is then installed with `--allow-local-repositories`, which lets
    /// Repositories (and Applications) in the operator namespace, and only there, use `file://`.
    #[arg(long)]
    allow_local_repositories: bool,
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
    #[command(flatten)]
    kube: KubeFlags,
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

/// Which cluster to talk to (both commands).
#[derive(Debug, clap::Args)]
pub struct KubeFlags {
    /// The kubeconfig file (default: KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context.
    #[arg(long)]
    context: Option<String>,
}

fn read(path: &PathBuf, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{what} {}", path.display()))
}

/// A secret from `--X-env VAR` or `--X-file F` (never from a flag's value: it would be in `ps`).
fn secret_from(env: Option<&String>, file: Option<&PathBuf>, flag: &str) -> anyhow::Result<Option<String>> {
    Ok(match (env, file) {
        (Some(var), _) => Some(std::env::var(var).with_context(|| format!("--{flag}-env {var}"))?),
        (_, Some(f)) => Some(
            read(f, &format!("--{flag}-file"))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
        _ => None,
    })
}

fn credentials(a: &BootstrapArgs) -> anyhow::Result<Option<Credentials>> {
    let c = Credentials {
        username: a.username.clone(),
        password: secret_from(a.password_env.as_ref(), a.password_file.as_ref(), "password")?,
        bearer_token: secret_from(
            a.bearer_token_env.as_ref(),
            a.bearer_token_file.as_ref(),
            "bearer-token",
        )?,
        ssh_private_key: a
            .private_key_file
            .as_ref()
            .map(|f| read(f, "--private-key-file"))
            .transpose()?,
        known_hosts: a.known_hosts.as_ref().map(|f| read(f, "--known-hosts")).transpose()?,
        ca_cert: a.ca_file.as_ref().map(|f| read(f, "--ca-file")).transpose()?,
        ..Credentials::default()
    };
    let any = c.username.is_some()
        || c.password.is_some()
        || c.bearer_token.is_some()
        || c.ssh_private_key.is_some()
        || c.ca_cert.is_some();
    Ok(any.then_some(c))
}

async fn connect(flags: &KubeFlags) -> anyhow::Result<Arc<ClusterHandle>> {
    let options = kube::config::KubeConfigOptions {
        context: flags.context.clone(),
        ..Default::default()
    };
    let config = match &flags.kubeconfig {
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
    let mut values = Values::parse(&values_text)?;
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
    local_repositories(&url, a.allow_local_repositories, &mut values)?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = connect(&a.kube).await?;
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

/// A `file://` URL needs `--allow-local-repositories`, which the operator then runs with (the self Repository
/// lives in the operator namespace, the only place the operator lets `file://` be used).
fn local_repositories(url: &str, allowed: bool, values: &mut Values) -> anyhow::Result<()> {
    const FLAG: &str = "--allow-local-repositories";
    if !allowed {
        if url.to_ascii_lowercase().starts_with("file://") {
            anyhow::bail!("{url} is a local repository; pass {FLAG} to install the operator with {FLAG}");
        }
        return Ok(());
    }
    if !values.extra_args.iter().any(|a| a == FLAG) {
        values.extra_args.push(FLAG.to_string());
    }
    Ok(())
}

/// Flags of `capstan uninstall`.
#[derive(Debug, clap::Args)]
pub struct UninstallArgs {
    /// The operator namespace.
    #[arg(long, default_value = "capstan-system")]
    namespace: String,
    /// Leave the namespace (and what else lives in it).
    #[arg(long)]
    keep_namespace: bool,
    /// Leave the CRDs (the custom resources are deleted all the same).
    #[arg(long)]
    keep_crds: bool,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do it without asking (required when stdin is not a terminal).
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    kube: KubeFlags,
    /// How long to wait, all phases together, for deleted objects to be gone.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,
}

/// Asks on the terminal; refuses when there is none (a script must say `--yes`).
fn confirmed(question: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead as _, IsTerminal as _, Write as _};
    if !std::io::stdin().is_terminal() {
        anyhow::bail!("{question}: pass --yes to go ahead without a terminal (or --dry-run to see the plan)");
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// `capstan uninstall`.
pub async fn uninstall(a: UninstallArgs) -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = connect(&a.kube).await?;
    let components = components::render(None, &Values::default())?;
    let resources = remove::list_resources(&cluster, &remove::custom_kinds(&components)).await?;
    let opts = UninstallOptions {
        namespace: a.namespace.clone(),
        keep_namespace: a.keep_namespace,
        keep_crds: a.keep_crds,
        timeout: a.timeout,
    };
    let phases = remove::plan(&components, &resources, &opts);
    if a.dry_run {
        for (i, phase) in phases.iter().enumerate() {
            println!("{}. {}", i + 1, phase.title);
            for step in &phase.steps {
                println!("   {step}");
            }
        }
        println!("dry run: nothing was changed");
        return Ok(ExitCode::SUCCESS);
    }
    if !a.yes && !confirmed(&format!("uninstall Capstan from {}", cluster.server()))? {
        println!("nothing was changed");
        return Ok(ExitCode::FAILURE);
    }
    let mut say = |line: &str| println!("{line}");
    remove::execute(&cluster, &phases, a.timeout, &mut say).await?;
    println!("uninstalled; Git is untouched: remove the cluster's folder from the repository to forget it");
    Ok(ExitCode::SUCCESS)
}
