//! Prometheus metrics, registered on a caller-owned (non-global) [`Registry`].
//!
//! Names follow Argo CD's where Argo CD has the family (`*_git_request_total{repo,request_type}`,
//! `*_git_request_duration_seconds`) and controller-runtime's for reconcile counters, with the
//! `capstan_` prefix, so dashboards and alerts written for Argo CD carry over.
//!
//! Labels never carry credentials: the `repo` label is [`repo_label`], the sanitized URL without
//! userinfo or query; error labels are `Error::category()` values, never messages.

use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::source::url::strip_userinfo_and_query;
use crate::source::RepoUrl;

/// `request_type` of a `git ls-remote`.
pub const GIT_LS_REMOTE: &str = "ls-remote";
/// `request_type` of a `git fetch`.
pub const GIT_FETCH: &str = "fetch";

/// Every metric Capstan exports. Cheap to clone (the vectors are reference-counted).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// `capstan_git_request_total{repo,request_type}`: git network operations.
    pub git_requests: IntCounterVec,
    /// `capstan_git_request_duration_seconds{repo,request_type}`.
    pub git_request_duration: HistogramVec,
    /// `capstan_git_request_failures_total{repo,request_type,category}`.
    pub git_request_failures: IntCounterVec,
    /// `capstan_kube_requests_total{verb,code}`: requests to the Kubernetes API.
    pub kube_requests: IntCounterVec,
    /// `capstan_reconcile_total{controller,result}` (`success`, `waiting`, `stalled`, `error`).
    pub reconciles: IntCounterVec,
    /// `capstan_reconcile_errors_total{controller,category}`.
    pub reconcile_errors: IntCounterVec,
    /// `capstan_webhook_requests_total{provider,code}`.
    pub webhook_requests: IntCounterVec,
    /// `capstan_app_info{namespace,name,project,repo,dest_server,dest_namespace,sync_status,health_status,
    /// autosync_enabled}` = 1; a changed label set replaces the old one, a deleted Application's goes.
    pub app_info: IntGaugeVec,
    /// `capstan_app_sync_total{namespace,name,phase}`: completed sync operations.
    pub app_sync_total: IntCounterVec,
    /// `capstan_app_reconcile_duration_seconds`: one Application reconcile.
    pub app_reconcile_duration: Histogram,
    /// `capstan_appset_info{namespace,name,resource_update_status}` = 1 (Argo CD's `argocd_appset_info`);
    /// `resource_update_status` is the `ResourcesUpToDate` condition's status.
    pub appset_info: IntGaugeVec,
    /// `capstan_appset_owned_applications{namespace,name}`: Applications the set owns.
    pub appset_owned_applications: IntGaugeVec,
    /// `capstan_appset_reconcile_duration_seconds{namespace,name}`: one ApplicationSet reconcile.
    pub appset_reconcile_duration: HistogramVec,
    /// `capstan_leader`: 1 while this replica holds the controllers' Lease (always 1 without leader
    /// election), 0 in a standby.
    pub leader: IntGauge,
    /// `capstan_shards_held`: shard Leases this replica holds (`--shard-count`; 0 without sharding).
    pub shards_held: IntGauge,
    /// `capstan_shard_clusters`: destination clusters whose Applications this replica reconciles now
    /// (`--shard-count`).
    pub shard_clusters: IntGauge,
    /// `capstan_repository_ready{namespace,name}`: 1 while the Repository's `Ready` condition is True.
    pub repository_ready: IntGaugeVec,
    /// `capstan_reconcile_in_flight{controller}`: reconciles running now (the work queue's busy part;
    /// at `--app-concurrency` the rest waits).
    pub reconciles_in_flight: IntGaugeVec,
    /// `capstan_reconcile_queue_depth{controller}`: objects triggered and not started yet
    /// (`controllers::queue`).
    pub reconcile_queue_depth: IntGaugeVec,
    /// `capstan_reconcile_duration_seconds{controller}`: one reconcile of any controller.
    pub reconcile_duration: HistogramVec,
    /// `capstan_render_total{result}`: Application manifest renders by how they were served —
    /// `rendered` (the tool ran), `failed`, `cached` (same inputs as before), `unchanged` (a new
    /// commit touched nothing the Application reads: the previous render reused).
    pub renders: IntCounterVec,
}

/// Labels of `capstan_app_info`, in order.
pub const APP_INFO_LABELS: [&str; 9] = [
    "namespace",
    "name",
    "project",
    "repo",
    "dest_server",
    "dest_namespace",
    "sync_status",
    "health_status",
    "autosync_enabled",
];

impl Metrics {
    /// Creates every metric and registers it on `registry`. Fails only if a name is registered twice.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let git_request_duration = HistogramVec::new(
            HistogramOpts::new(
                "capstan_git_request_duration_seconds",
                "Duration of git network operations.",
            )
            .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 20.0, 60.0]),
            &["repo", "request_type"],
        )?;
        registry.register(Box::new(git_request_duration.clone()))?;
        let app_info = IntGaugeVec::new(
            Opts::new("capstan_app_info", "Information about Applications (value 1)."),
            &APP_INFO_LABELS,
        )?;
        registry.register(Box::new(app_info.clone()))?;
        let app_reconcile_duration = Histogram::with_opts(
            HistogramOpts::new(
                "capstan_app_reconcile_duration_seconds",
                "Duration of one Application reconcile.",
            )
            .buckets(vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]),
        )?;
        registry.register(Box::new(app_reconcile_duration.clone()))?;
        let appset_info = IntGaugeVec::new(
            Opts::new("capstan_appset_info", "Information about ApplicationSets (value 1)."),
            &["namespace", "name", "resource_update_status"],
        )?;
        registry.register(Box::new(appset_info.clone()))?;
        let appset_owned_applications = IntGaugeVec::new(
            Opts::new(
                "capstan_appset_owned_applications",
                "Applications owned by an ApplicationSet.",
            ),
            &["namespace", "name"],
        )?;
        registry.register(Box::new(appset_owned_applications.clone()))?;
        let appset_reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "capstan_appset_reconcile_duration_seconds",
                "Duration of one ApplicationSet reconcile.",
            )
            .buckets(vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]),
            &["namespace", "name"],
        )?;
        registry.register(Box::new(appset_reconcile_duration.clone()))?;
        let leader = IntGauge::new(
            "capstan_leader",
            "1 while this replica holds the controllers' leader Lease (or runs without leader election).",
        )?;
        registry.register(Box::new(leader.clone()))?;
        let shards_held = IntGauge::new(
            "capstan_shards_held",
            "Shard Leases this replica holds (with --shard-count; 0 without sharding).",
        )?;
        registry.register(Box::new(shards_held.clone()))?;
        let shard_clusters = IntGauge::new(
            "capstan_shard_clusters",
            "Destination clusters whose Applications this replica reconciles now (with --shard-count).",
        )?;
        registry.register(Box::new(shard_clusters.clone()))?;
        let build_info = IntGaugeVec::new(
            Opts::new(
                "capstan_build_info",
                "Build information of the running capstan (value 1).",
            ),
            &["version", "revision"],
        )?;
        registry.register(Box::new(build_info.clone()))?;
        build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                option_env!("CAPSTAN_REVISION").unwrap_or("unknown"),
            ])
            .set(1);
        let gauge = |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, prometheus::Error> {
            let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "capstan_reconcile_duration_seconds",
                "Duration of one reconcile by controller.",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["controller"],
        )?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        Ok(Metrics {
            leader,
            shards_held,
            shard_clusters,
            repository_ready: gauge(
                "capstan_repository_ready",
                "1 while the Repository's Ready condition is True, else 0.",
                &["namespace", "name"],
            )?,
            reconciles_in_flight: gauge(
                "capstan_reconcile_in_flight",
                "Reconciles running now by controller.",
                &["controller"],
            )?,
            reconcile_queue_depth: gauge(
                "capstan_reconcile_queue_depth",
                "Objects a controller was asked to reconcile (a watch event of the object or of a related \
                 object, a refresh) and has not started yet, each counted once; timed requeues and error \
                 backoffs are not counted.",
                &["controller"],
            )?,
            reconcile_duration,
            app_info,
            app_reconcile_duration,
            appset_info,
            appset_owned_applications,
            appset_reconcile_duration,
            app_sync_total: counter(
                "capstan_app_sync_total",
                "Completed Application sync operations by phase.",
                &["namespace", "name", "phase"],
            )?,
            git_requests: counter(
                "capstan_git_request_total",
                "Git network operations (ls-remote, fetch).",
                &["repo", "request_type"],
            )?,
            git_request_duration,
            git_request_failures: counter(
                "capstan_git_request_failures_total",
                "Failed git network operations by error category.",
                &["repo", "request_type", "category"],
            )?,
            kube_requests: counter(
                "capstan_kube_requests_total",
                "Requests to the Kubernetes API by verb and HTTP status code.",
                &["verb", "code"],
            )?,
            reconciles: counter(
                "capstan_reconcile_total",
                "Reconciles by controller and result.",
                &["controller", "result"],
            )?,
            reconcile_errors: counter(
                "capstan_reconcile_errors_total",
                "Failed reconciles by controller and error category.",
                &["controller", "category"],
            )?,
            webhook_requests: counter(
                "capstan_webhook_requests_total",
                "Git push webhook requests by provider and HTTP status code.",
                &["provider", "code"],
            )?,
            renders: counter(
                "capstan_render_total",
                "Application manifest renders by result (rendered, failed, cached, unchanged).",
                &["result"],
            )?,
        })
    }

    /// Records one git operation on `repo` (a [`repo_label`]) that took `elapsed`.
    pub fn observe_git(&self, repo: &str, request_type: &str, elapsed: Duration, failure: Option<&str>) {
        self.git_requests.with_label_values(&[repo, request_type]).inc();
        self.git_request_duration
            .with_label_values(&[repo, request_type])
            .observe(elapsed.as_secs_f64());
        if let Some(category) = failure {
            self.git_request_failures
                .with_label_values(&[repo, request_type, category])
                .inc();
        }
    }

    /// Records the outcome of one reconcile.
    pub fn observe_reconcile(&self, controller: &str, result: &str, error_category: Option<&str>) {
        self.reconciles.with_label_values(&[controller, result]).inc();
        if let Some(category) = error_category {
            self.reconcile_errors.with_label_values(&[controller, category]).inc();
        }
    }
}

/// The label set each object last exported on an `*_info` gauge (value 1), so that a change replaces the
/// old series instead of leaving a stale one behind, and a deleted object's series goes with it.
#[derive(Debug, Default)]
pub struct InfoSeries(std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>);

impl InfoSeries {
    /// Sets `gauge{labels} = 1` for the object `key`, removing its previous label set when it changed.
    pub fn record(&self, gauge: &IntGaugeVec, key: String, labels: Vec<String>) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = map.get(&key) {
            if *old == labels {
                return;
            }
            let _ = gauge.remove_label_values(&old.iter().map(String::as_str).collect::<Vec<_>>());
        }
        gauge
            .with_label_values(&labels.iter().map(String::as_str).collect::<Vec<_>>())
            .set(1);
        map.insert(key, labels);
    }

    /// Removes the series of the object `key`.
    pub fn forget(&self, gauge: &IntGaugeVec, key: &str) {
        let removed = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        if let Some(labels) = removed {
            let _ = gauge.remove_label_values(&labels.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}

/// The `repo` label of a repository URL: [`RepoUrl::sanitized`] (no userinfo, no query), or for a
/// URL that does not parse, the text with userinfo and query stripped, so nothing secret can leak
/// through a label even for invalid input.
pub fn repo_label(url: &str) -> String {
    // scp-like text has no `://`; anything up to the last `@` is userinfo (`user:password@host:path`
    // would otherwise parse as host `user` with the password in the path).
    let url = match url.contains("://") {
        true => url,
        false => url.rsplit_once('@').map_or(url, |(_, rest)| rest),
    };
    match RepoUrl::parse(url) {
        Ok(parsed) => parsed.sanitized(),
        Err(_) => strip_userinfo_and_query(url).chars().take(256).collect(),
    }
}

/// The registry in Prometheus text exposition format.
pub fn encode(registry: &Registry) -> String {
    TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap_or_else(|e| format!("# encoding metrics failed: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_on_a_private_registry_and_encodes() {
        let registry = Registry::new();
        let metrics = Metrics::register(&registry).expect("register");
        metrics.observe_git(
            &repo_label("https://h.example/o/r.git"),
            GIT_LS_REMOTE,
            Duration::from_millis(20),
            None,
        );
        metrics.observe_reconcile("repository", "error", Some("Timeout"));
        metrics.kube_requests.with_label_values(&["get", "200"]).inc();
        let text = encode(&registry);
        assert!(
            text.contains(r#"capstan_git_request_total{repo="https://h.example/o/r.git",request_type="ls-remote"} 1"#),
            "{text}"
        );
        assert!(text.contains("capstan_git_request_duration_seconds_bucket"), "{text}");
        assert!(text.contains(r#"capstan_reconcile_errors_total{category="Timeout",controller="repository"} 1"#));
        assert!(text.contains(r#"capstan_kube_requests_total{code="200",verb="get"} 1"#));
        // A second registration on the same registry is refused, not silently shared.
        assert!(Metrics::register(&registry).is_err());
        // The global default registry is untouched.
        assert!(prometheus::gather().iter().all(|f| !f.name().starts_with("capstan_")));
    }

    #[test]
    fn repo_label_never_carries_userinfo_or_query() {
        assert_eq!(
            repo_label("https://alice@git.example.com/org/repo.git"),
            "https://git.example.com/org/repo.git"
        );
        assert_eq!(
            repo_label("git@github.com:org/repo.git"),
            "ssh://github.com/org/repo.git"
        );
        assert_eq!(repo_label("alice:CANARY@host:org/repo"), "ssh://host/org/repo");
        for raw in [
            "https://alice:CANARY-pw@git.example.com/org/repo",
            "https://git.example.com/org/repo?token=CANARY",
            "https://git.example.com/org/repo#CANARY",
            "alice:CANARY@host:org/repo",
        ] {
            let label = repo_label(raw);
            assert!(!label.contains("CANARY"), "{raw} -> {label}");
            assert!(!label.contains("alice"), "{raw} -> {label}");
        }
        assert!(repo_label(&"x".repeat(5000)).len() <= 256);
    }
}
