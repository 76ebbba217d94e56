//! The `capstan` binary: CLI and wiring only (the composition root; logic lives in the library).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use capstan::cluster::requests::{KubeRequestLayer, WriteFence, WriteGate, WriteScope};
use capstan::cluster::{ClusterClients, WatchScope};
use capstan::controllers::leader::{self, LeaseSettings};
use capstan::controllers::shard::{self as sharding, Shards};
use capstan::controllers::{self, parse_duration, Context, ControllerName, ControllerSet, Settings, Shutdown};
use capstan::source::git::{CheckoutLimits, Git2Source, GitConfig};
use capstan::telemetry::LogFormat;
use capstan::{http, metrics::Metrics, webhook};
use clap::{Parser, Subcommand};

mod allocator;
mod bootstrap_cli;

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
    Run(Box<RunArgs>),
    /// Print every CRD as a YAML stream, or write one file per CRD with --out-dir.
    Crd {
        /// Write `<plural>.capstan.dev.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Install Capstan and hand its installation to itself from Git (GitOps of GitOps).
    Bootstrap(Box<bootstrap_cli::BootstrapArgs>),
    /// Remove Capstan from the cluster; what its Applications deployed stays.
    Uninstall(bootstrap_cli::UninstallArgs),
    /// Print the version.
    Version,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The operator namespace: shared Repositories and Clusters, settings, webhook Secret.
    #[arg(long, env = "CAPSTAN_NAMESPACE", default_value = "capstan-system")]
    namespace: String,
    /// Watch and deploy only in these namespaces (comma-separated) and the operator namespace: a
    /// namespaced install, whose RBAC is Roles in those namespaces. Empty: the whole cluster.
    #[arg(long, value_delimiter = ',')]
    watch_namespaces: Vec<String>,
    /// Controllers to run (comma-separated: repository, cluster, policyset, application,
    /// applicationset, reporter); default all but `reporter`.
    #[arg(long, value_delimiter = ',')]
    controllers: Vec<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Address of the Git push webhook receiver (`POST /api/webhook`); off when unset.
    #[arg(long)]
    webhook_addr: Option<SocketAddr>,
    /// Largest accepted webhook body in bytes (larger ones are answered 413).
    #[arg(long, default_value_t = webhook::DEFAULT_MAX_BODY)]
    webhook_max_body: usize,
    /// Periodic reconcile interval (a jitter is added).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    reconcile_interval: Duration,
    /// Delay between two sync waves (Argo CD's `controller.sync.wave.delay.seconds`).
    #[arg(long, default_value = "2s")]
    sync_wave_delay: String,
    /// Applications reconciled at once (Argo CD's status and operation processors); bounds memory
    /// when many Applications change together.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    app_concurrency: u16,
    /// A sync operation still running this long after it started is terminated: running hooks are
    /// deleted and it ends Failed (Argo CD's `controller.sync.timeout.seconds`). `0` = never.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    sync_timeout: Duration,
    /// Bound on one git network operation (ls-remote, fetch).
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    git_timeout: Duration,
    /// ServiceAccount, in the Application's namespace, whose rights every write of an Application outside
    /// the operator namespace uses (impersonated) unless it names one in `spec.destination.serviceAccountName`.
    #[arg(long, default_value = capstan::controllers::context::DEFAULT_SERVICE_ACCOUNT)]
    default_service_account: String,
    /// Directory of the shared git cache.
    #[arg(long, env = "CAPSTAN_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Largest checkout (the bytes of every file of a commit's tree); a larger commit is refused before
    /// anything is written.
    #[arg(long, default_value_t = CheckoutLimits::default().max_bytes)]
    max_checkout_bytes: u64,
    /// Most files (and symlinks) in a checkout; a commit with more is refused before anything is written.
    #[arg(long, default_value_t = CheckoutLimits::default().max_files)]
    max_checkout_files: u64,
    /// Allow `file://` repository URLs for Repositories, Applications and ApplicationSets in the operator
    /// namespace (tests, demos, a bootstrap from a local repository). Never for other namespaces.
    #[arg(long)]
    allow_local_repositories: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Run the controllers only while holding Lease `capstan-controller` in the operator namespace
    /// (one active replica; the others are warm standbys).
    #[arg(long)]
    leader_elect: bool,
    /// How long the Lease holds without renewal; a standby takes over after this.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: Duration,
    /// A leader that could not renew for this long stops writing (shorter than the lease duration).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: Duration,
    /// How often the leader renews and a standby retries.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: Duration,
    /// Split Applications over N shards by destination cluster (bounded-load consistent hashing):
    /// each replica holds at most one shard Lease `capstan-controller-shard-<i>` and reconciles
    /// only its shard's Applications. Implies --leader-elect (Repositories, Clusters, PolicySets and
    /// ApplicationSets stay with the holder of `capstan-controller`). 1 = no sharding.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(capstan::engine::shard::MAX_SHARDS)))]
    shard_count: u32,
}

impl RunArgs {
    /// The controllers' election, when `--leader-elect` is set and a controller other than the
    /// reporter (which elects on its own Lease) is selected.
    fn election(&self, selected: &ControllerSet, identity: &str) -> anyhow::Result<Option<LeaseSettings>> {
        if !self.leader_elect && !self.sharded() {
            return Ok(None);
        }
        if selected.iter().all(|c| c == ControllerName::Reporter) {
            tracing::info!("--leader-elect: the reporter elects on its own Lease; nothing else to elect");
            return Ok(None);
        }
        let mut lease = LeaseSettings::new(leader::CONTROLLER_LEASE, &self.namespace, identity.to_string());
        lease.duration = self.leader_elect_lease_duration;
        lease.renew_deadline = self.leader_elect_renew_deadline;
        lease.retry = self.leader_elect_retry_period;
        lease.validate().map_err(|e| anyhow::anyhow!("--leader-elect: {e}"))?;
        Ok(Some(lease))
    }

    /// Whether `--shard-count` splits the Applications.
    fn sharded(&self) -> bool {
        self.shard_count > 1
    }
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
        Command::Run(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(operate(*args))?;
            Ok(ExitCode::SUCCESS)
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
        Command::Bootstrap(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(bootstrap_cli::bootstrap(*args))
        }
        Command::Uninstall(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            runtime.block_on(bootstrap_cli::uninstall(args))
        }
        Command::Version => {
            println!("capstan {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `capstan run`: builds the context once, starts the HTTP endpoints, the webhook receiver and the
/// selected controllers, and returns after SIGTERM/SIGINT once they have stopped.
async fn operate(args: RunArgs) -> anyhow::Result<()> {
    capstan::telemetry::init(args.log_format);
    // kube and axum share rustls; exactly one provider (ring) must be the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let selected = ControllerSet::parse(&args.controllers)?;
    let identity = leader::identity("capstan");
    let election = args.election(&selected, &identity)?;
    let settings = run_settings(&args)?;
    let registry = prometheus::Registry::new();
    let metrics = Metrics::register(&registry)?;
    let reporter_metrics = selected
        .contains(ControllerName::Reporter)
        .then(|| capstan::reporter::ReporterMetrics::register(&registry))
        .transpose()?;
    let config = kube_config(&identity).await?;
    // Under election every write waits for the Lease; without it the fence stays open.
    let fence = election
        .as_ref()
        .map_or_else(WriteFence::open, |_| WriteFence::closed());
    let shards = (args.sharded() && selected.contains(ControllerName::Application)).then(|| {
        let duration = election
            .as_ref()
            .map_or(args.leader_elect_lease_duration, |l| l.duration);
        Arc::new(Shards::new(args.shard_count, &settings.namespace, duration))
    });
    let (ctx, client) = build_context(&args, settings, config, (&metrics, &fence, shards.as_ref()))?;
    let shutdown = Shutdown::on_signals()?;
    let shard_loop = match (&shards, &election) {
        (Some(shards), Some(lease)) => {
            let scope = ctx.settings.watch.clone();
            Some(start_shards(&client, shards, lease, scope, &metrics, &shutdown).await?)
        }
        _ => None,
    };
    let election = match election {
        Some(lease) => Some(start_election(&client, lease, fence, &metrics, &shutdown).await?),
        None => {
            metrics.leader.set(1);
            None
        }
    };

    let mut servers = tokio::task::JoinSet::new();
    serve_endpoints(args.metrics_addr, registry, &ctx, (&mut servers, &shutdown)).await?;

    let secret_watch = match args.webhook_addr {
        Some(addr) => {
            let webhook = (addr, args.webhook_max_body);
            Some(serve_webhook(&ctx, client, metrics, webhook, (&mut servers, &shutdown)).await?)
        }
        None => None,
    };

    let reporter =
        reporter_metrics.map(|m| tokio::spawn(capstan::reporter::run(Arc::clone(&ctx), m, shutdown.clone())));
    let result = controllers::run(ctx, &selected, shutdown.clone()).await;
    let result = join_reporter(result, reporter).await;
    shutdown.trigger();
    for election in election.into_iter().chain(shard_loop) {
        // Hand the Leases over at once rather than after they expire.
        if tokio::time::timeout(Duration::from_secs(5), election).await.is_err() {
            tracing::warn!("a Lease was not released within 5s");
        }
    }
    // Servers stop on the shutdown signal (bounded); the Secret watch does not, so it is aborted.
    if let Some(watch) = secret_watch {
        watch.abort();
    }
    drain(servers).await;
    tracing::info!("stopped");
    result
}

/// The shared context and the operator's own client: every client behind one request layer (the
/// leader's write fence, and with sharding the shards' write gate), the cluster clients, Git.
fn build_context(
    args: &RunArgs,
    settings: Settings,
    config: kube::Config,
    (metrics, fence, shards): (&Metrics, &WriteFence, Option<&Arc<Shards>>),
) -> anyhow::Result<(Arc<Context>, kube::Client)> {
    let mut requests = KubeRequestLayer::new(metrics.kube_requests.clone()).with_fence(fence.clone());
    if let Some(shards) = shards {
        requests = requests.with_gate(Arc::clone(shards) as Arc<dyn WriteGate>);
    }
    let clusters = ClusterClients::counted_in(
        config.clone(),
        &settings.namespace,
        requests.clone(),
        settings.watch.clone(),
    )
    .map_err(|e| anyhow::anyhow!("cluster clients: {e}"))?;
    let client = controllers::context::fenced_client(config.clone(), requests.clone())?;
    let git = git_source(args);
    let mut ctx = Context::new(client.clone(), settings, Arc::new(git), metrics.clone())
        .with_clusters(Arc::new(clusters))
        .with_fence(fence.clone());
    if let Some(shards) = shards {
        let apps_client = controllers::context::fenced_client(config, requests.scoped(WriteScope::Applications))?;
        ctx = ctx.with_shards(Arc::clone(shards), apps_client);
    }
    Ok((Arc::new(ctx), client))
}

/// `/metrics`, `/healthz` and `/readyz` on `addr`, served until the shutdown.
async fn serve_endpoints(
    addr: SocketAddr,
    registry: prometheus::Registry,
    ctx: &Context,
    (servers, shutdown): (&mut tokio::task::JoinSet<std::io::Result<()>>, &Shutdown),
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}"))?;
    tracing::info!("serving /metrics, /healthz, /readyz on {}", listener.local_addr()?);
    let http_state = http::HttpState {
        registry,
        readiness: Arc::clone(&ctx.readiness),
    };
    servers.spawn(http::serve(listener, http_state, shutdown.clone()));
    Ok(())
}

/// The controllers' settings from `capstan run`'s flags (names the flag a bad value came from).
fn run_settings(args: &RunArgs) -> anyhow::Result<Settings> {
    let settings = settings_from(args)?;
    if let Some(namespaces) = settings.watch.namespaces() {
        tracing::info!(
            namespaces = settings.watch.describe(),
            "namespaced: watching {} namespaces only",
            namespaces.len()
        );
    }
    Ok(settings)
}

/// [`run_settings`] without the log line.
fn settings_from(args: &RunArgs) -> anyhow::Result<Settings> {
    Ok(Settings {
        namespace: args.namespace.clone(),
        reconcile_interval: args.reconcile_interval,
        git_timeout: args.git_timeout,
        app_concurrency: args.app_concurrency,
        sync_timeout: Some(args.sync_timeout).filter(|t| !t.is_zero()),
        default_service_account: valid_service_account(&args.default_service_account)?,
        wave_delay: parse_duration(&args.sync_wave_delay).map_err(|e| anyhow::anyhow!("--sync-wave-delay: {e}"))?,
        watch: WatchScope::parse(&args.watch_namespaces, &args.namespace)
            .map_err(|e| anyhow::anyhow!("--watch-namespaces: {e}"))?,
        allow_local_repositories: args.allow_local_repositories,
        ..Settings::default()
    })
}

/// The inferred Kubernetes configuration, with a User-Agent naming this replica in API server
/// audit and request logs (which holder wrote what).
async fn kube_config(identity: &str) -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration (KUBECONFIG or in-cluster)")?;
    let agent = format!("capstan/{} ({identity})", env!("CARGO_PKG_VERSION"));
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_str(&agent).context("user agent")?,
    ));
    Ok(config)
}

/// Waits for the reporter task when one runs (it stops on the shutdown signal); the controllers'
/// error wins over the reporter's.
async fn join_reporter(
    result: anyhow::Result<()>,
    reporter: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    let Some(reporter) = reporter else {
        return result;
    };
    let stopped = reporter
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("reporter task panicked: {e}")));
    result.and(stopped)
}

/// The Git source: clones cached under `--cache-dir` (default: the temporary directory's `capstan-git`);
/// every operation bounded by `--git-timeout`, and connecting and each read by at most 10 s and 15 s of it;
/// checkouts bounded by `--max-checkout-bytes` and `--max-checkout-files`.
fn git_source(args: &RunArgs) -> Git2Source {
    let cache_dir = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("capstan-git"));
    let git_timeout = args.git_timeout;
    Git2Source::new(
        cache_dir,
        GitConfig {
            total_timeout: git_timeout,
            io_timeout: git_timeout.min(Duration::from_secs(15)),
            connect_timeout: git_timeout.min(Duration::from_secs(10)),
            checkout: CheckoutLimits {
                max_bytes: args.max_checkout_bytes,
                max_files: args.max_checkout_files,
            },
            ..GitConfig::default()
        },
    )
}

/// Starts the webhook receiver on `addr` (bodies up to `max_body` bytes) in `servers`; returns the
/// task that watches its Secret (stopped by the caller: it does not follow the shutdown signal).
async fn serve_webhook(
    ctx: &Context,
    client: kube::Client,
    metrics: Metrics,
    (addr, max_body): (SocketAddr, usize),
    (servers, shutdown): (&mut tokio::task::JoinSet<std::io::Result<()>>, &Shutdown),
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let (secrets, watch) = webhook::watch_secret(client, ctx.namespace());
    let secret_watch = tokio::spawn(watch);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--webhook-addr {addr}"))?;
    tracing::info!("serving {} on {}", webhook::PATH, listener.local_addr()?);
    let state = webhook::WebhookState {
        secrets: Arc::new(secrets),
        target: ctx.notifier.clone(),
        metrics: Some(metrics),
        max_body,
    };
    servers.spawn(webhook::serve(listener, state, shutdown.clone()));
    Ok(secret_watch)
}

/// Waits (bounded) for the servers to stop after the shutdown signal; aborts those that did not.
async fn drain(mut servers: tokio::task::JoinSet<std::io::Result<()>>) {
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(joined) = servers.join_next().await {
            if let Ok(Err(e)) = joined {
                tracing::warn!("server stopped with an error: {e}");
            }
        }
    })
    .await;
    if drained.is_err() {
        servers.abort_all();
    }
}

/// `--default-service-account`, checked like `spec.destination.serviceAccountName`.
fn valid_service_account(name: &str) -> anyhow::Result<String> {
    capstan::api::tenancy::validate_service_account_name(name)
        .map_err(|e| anyhow::anyhow!("--default-service-account: {e}"))?;
    Ok(name.to_string())
}

/// Checks that this identity may use the Lease, then runs the election in the background: the
/// fence opens while this replica leads, and `capstan_leader` follows it.
async fn start_election(
    client: &kube::Client,
    lease: LeaseSettings,
    fence: WriteFence,
    metrics: &Metrics,
    shutdown: &Shutdown,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    leader::check_access(client, &lease).await?;
    tracing::info!(
        lease = lease.name,
        identity = lease.identity,
        "leader election on; standing by until the Lease is held"
    );
    let (leading_tx, mut leading_rx) = tokio::sync::watch::channel(false);
    let gauge = metrics.leader.clone();
    gauge.set(0);
    tokio::spawn(async move {
        while leading_rx.changed().await.is_ok() {
            gauge.set(i64::from(*leading_rx.borrow_and_update()));
        }
    });
    Ok(tokio::spawn(leader::run(
        client.clone(),
        lease,
        leading_tx,
        Some(fence),
        None,
        shutdown.clone(),
    )))
}

/// Checks that this identity may use the shard Leases, then runs the shard loop in the background
/// (timing and identity of the leader election's `lease`).
async fn start_shards(
    client: &kube::Client,
    shards: &Arc<Shards>,
    lease: &LeaseSettings,
    scope: WatchScope,
    metrics: &Metrics,
    shutdown: &Shutdown,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let leases = sharding::leases(lease, shards.count());
    for shard_lease in &leases {
        leader::check_access(client, shard_lease).await?;
    }
    tracing::info!(
        shards = leases.len(),
        identity = lease.identity,
        "sharding on: competing for one shard Lease"
    );
    Ok(tokio::spawn(sharding::run(
        client.clone(),
        Arc::clone(shards),
        lease.clone(),
        scope,
        metrics.clone(),
        shutdown.clone(),
    )))
}
