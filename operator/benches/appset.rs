//! ApplicationSet benchmark (`cargo bench -p capstan --bench appset`, part of `make bench`).
//!
//! 1. Pure generation: 1,000 Applications from a Git files generator (`clusters/*/config.json`),
//!    read from an in-memory tree, so only parameter flattening, templating and validation count.
//! 2. Apply: the ApplicationSet controller's reconcile against an in-process devcluster, the same
//!    1,000 files served from a local bare repository over `file://` (so the set lives in the operator
//!    namespace, with `--allow-local-repositories` set as a test would): the first reconcile creates the
//!    1,000 Applications (server-side apply), the second finds nothing to do. Wall time and the
//!    Kubernetes API requests made (by verb) are reported for each.
//!
//! Figures go between the `appset-bench` markers of docs/benchmarks.md; the rest is kept.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan::api::application_set::{ApplicationSet, ApplicationSetSpec};
use capstan::appset::{generate, Inputs, Limits, MemoryRepos, MemoryTree};
use capstan::controllers::application_set::{reconcile, State};
use capstan::controllers::context::counting_client;
use capstan::controllers::{Context, Settings};
use capstan::metrics::Metrics;
use capstan::source::git::{Git2Source, GitConfig};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;

#[path = "support/report.rs"]
mod report;

const START: &str = "<!-- appset-bench:start -->";
const END: &str = "<!-- appset-bench:end -->";
const APPS: usize = 1000;
const RUNS: usize = 5;
/// The operator namespace: the only one where a `file://` repository may be used.
const NS: &str = "capstan-system";

fn files() -> Vec<(String, String)> {
    (0..APPS)
        .map(|i| {
            (
                format!("clusters/c{i:04}/config.json"),
                json!({"cluster": {"name": format!("c{i:04}"), "server": format!("https://c{i:04}.example:6443"),
                       "labels": {"region": if i % 2 == 0 { "eu" } else { "us" }}}})
                .to_string(),
            )
        })
        .collect()
}

fn spec(url: &str) -> ApplicationSetSpec {
    serde_json::from_value(json!({
        "generators": [{"git": {"repoURL": url, "revision": "HEAD", "files": [{"path": "clusters/*/config.json"}]}}],
        "template": {
            "metadata": {"name": "guestbook-{{cluster.name}}", "labels": {"region": "{{cluster.labels.region}}"}},
            "spec": {
                "project": "default",
                "source": {"repoURL": "https://git.example/guestbook", "targetRevision": "HEAD", "path": "guestbook"},
                "destination": {"server": "{{cluster.server}}", "namespace": "guestbook"}
            }
        }
    }))
    .expect("spec")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn generation_figures() -> (Duration, Duration) {
    let tree = MemoryTree::new(files());
    let repos = MemoryRepos::default().with("https://git.example/fleet", "HEAD", tree);
    let spec = spec("https://git.example/fleet");
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let apps = generate(
            &spec,
            &Inputs {
                clusters: &[],
                git: &repos,
                limits: Limits::default(),
            },
        )
        .expect("generate");
        times.push(started.elapsed());
        assert_eq!(apps.len(), APPS);
    }
    let min = *times.iter().min().expect("runs");
    (median(times), min)
}

fn commit_files(repo: &git2::Repository) {
    let mut clusters = repo.treebuilder(None).expect("tb");
    for (path, content) in files() {
        let dir = path.split('/').nth(1).expect("dir").to_owned();
        let blob = repo.blob(content.as_bytes()).expect("blob");
        let mut sub = repo.treebuilder(None).expect("tb");
        sub.insert("config.json", blob, 0o100644).expect("insert");
        clusters.insert(&dir, sub.write().expect("sub"), 0o040000).expect("dir");
    }
    let mut root = repo.treebuilder(None).expect("tb");
    root.insert("clusters", clusters.write().expect("clusters"), 0o040000)
        .expect("root");
    let tree = repo.find_tree(root.write().expect("root")).expect("tree");
    let sig = git2::Signature::now("b", "b@example.com").expect("sig");
    repo.commit(Some("refs/heads/main"), &sig, &sig, "fleet", &tree, &[])
        .expect("commit");
}

fn requests(metrics: &Metrics) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for family in prometheus::core::Collector::collect(&metrics.kube_requests) {
        for m in family.get_metric() {
            let verb = m
                .get_label()
                .iter()
                .find(|l| l.name() == "verb")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            *out.entry(verb).or_insert(0) += m.get_counter().get_value() as u64;
        }
    }
    out
}

fn diff(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn show(r: &BTreeMap<String, u64>) -> String {
    let total: u64 = r.values().sum();
    let parts: Vec<String> = r.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!("{total} ({})", parts.join(", "))
}

struct Apply {
    first: Duration,
    first_requests: BTreeMap<String, u64>,
    second: Duration,
    second_requests: BTreeMap<String, u64>,
}

async fn apply_figures() -> anyhow::Result<Apply> {
    let dev = devcluster::start(devcluster::Config::default()).map_err(|e| anyhow::anyhow!("devcluster: {e}"))?;
    let kubeconfig = Kubeconfig::from_yaml(&dev.kubeconfig_yaml())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let metrics = Metrics::register(&prometheus::Registry::new())?;
    let client: Client = counting_client(config, &metrics)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in capstan::crds() {
        crds.create(&PostParams::default(), &crd).await?;
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), NS);
    while sets.list(&Default::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tmp = tempfile::tempdir()?;
    let repo_path = tmp.path().join("fleet.git");
    let repo = git2::Repository::init_bare(&repo_path)?;
    repo.set_head("refs/heads/main")?;
    commit_files(&repo);
    let url = format!("file://{}", repo_path.display());
    let git = Git2Source::new(tmp.path().join("cache"), GitConfig::default());
    let ctx = Arc::new(Context::new(
        client.clone(),
        Settings {
            allow_local_repositories: true,
            ..Settings::default()
        },
        Arc::new(git),
        metrics.clone(),
    ));
    let (state, _rx) = State::new();
    let mut set = ApplicationSet::new("fleet", spec(&url));
    set.metadata.namespace = Some(NS.into());
    sets.create(&PostParams::default(), &set).await?;

    let run = || {
        let (sets, ctx, state) = (sets.clone(), Arc::clone(&ctx), Arc::clone(&state));
        async move {
            let set = sets.get("fleet").await?;
            let before = requests(&ctx.metrics);
            let started = Instant::now();
            reconcile(Arc::new(set), Arc::clone(&ctx), state)
                .await
                .map_err(|e| anyhow::anyhow!("reconcile: {e}"))?;
            let took = started.elapsed();
            Ok::<_, anyhow::Error>((took, diff(&requests(&ctx.metrics), &before)))
        }
    };
    let (first, first_requests) = run().await?;
    let (second, second_requests) = run().await?;
    let created = Api::<capstan::api::Application>::namespaced(client, NS)
        .list(&Default::default())
        .await?
        .items
        .len();
    anyhow::ensure!(created == APPS, "expected {APPS} Applications, found {created}");
    drop(dev);
    Ok(Apply {
        first,
        first_requests,
        second,
        second_requests,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let (gen_median, gen_min) = generation_figures();
    let apply = apply_figures().await?;
    let load = report::loadavg();
    let section = format!(
        "{START}
## ApplicationSet (`cargo bench -p capstan --bench appset`)

1,000 Applications from a Git files generator (`clusters/*/config.json`, one JSON file per cluster,
name/labels/destination templated with fasttemplate). Machine: 2 shared cores; load average before:
`{load}`.

| Scenario | Time | Kubernetes API requests |
|---|---|---|
| Pure generation (in-memory tree, median of {RUNS}; min {gen_min:.1?}) | {gen_median:.1?} | 0 |
| First reconcile on devcluster: fetch + scan + generate + create 1,000 Applications (server-side apply, 16 in flight) + status | {first:.2?} | {first_req} |
| Second reconcile, nothing changed (no writes, no status patch) | {second:.2?} | {second_req} |

The benchmark calls `reconcile` directly (no watch cache), so each reconcile lists Applications,
Clusters and Repositories once; under `capstan run` those lists come from the watch caches and a
no-change reconcile makes no request at all.
{END}
",
        first = apply.first,
        second = apply.second,
        first_req = show(&apply.first_requests),
        second_req = show(&apply.second_requests),
        load = load.trim(),
    );
    print!("{section}");
    let path = report::write_section(START, END, &section)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
