//! One `capstan bootstrap` run (see the module doc of `bootstrap`): refusals, Git, cluster, wait.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::{self, Change};
use super::components::{self, Values};
use super::tree::{self, TreeInput, GIT_SECRET, SELF_APP, SYSTEM_DIR};
use super::BootstrapError;
use crate::api::labels::{SECRET_TYPE_LABEL, SECRET_TYPE_REPOSITORY};
use crate::cluster::ClusterHandle;
use crate::engine::object::{self, ObjectKey};
use crate::source::credentials::Credentials;
use crate::source::git::GitConfig;
use crate::source::url::RepoUrl;
use crate::source::write::{Pushed, Writer};

/// Everything a run needs (the CLI's flags, files already read; the password never comes from a flag).
#[derive(Clone, Debug)]
pub struct Options {
    /// `--url`.
    pub url: String,
    /// `--branch`.
    pub branch: String,
    /// `--path`.
    pub path: String,
    /// `--namespace`.
    pub namespace: String,
    /// Credentials from the flags; `None` when no credential flag was given.
    pub credentials: Option<Credentials>,
    /// `--image`.
    pub image: Option<String>,
    /// `--values`, parsed, and the file's text (its digest is recorded).
    pub values: (Values, String),
    /// `--interval`.
    pub interval: String,
    /// `--author-name`, `--author-email`.
    pub author: (String, String),
    /// `--timeout`.
    pub timeout: Duration,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `--force-apply`.
    pub force_apply: bool,
    /// `--force`.
    pub force: bool,
    /// `--adopt`.
    pub adopt: bool,
}

/// What a run did, for the exit line.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Nothing to change: "up to date, Synced at <sha>".
    UpToDate(String),
    /// Something changed; the self Application is Synced and Healthy at the commit.
    Done(String),
    /// `--dry-run`: the plans were printed.
    Planned,
}

/// Runs bootstrap against `cluster`, printing progress with `say`.
pub async fn run(
    cluster: &Arc<ClusterHandle>,
    opts: &Options,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome, BootstrapError> {
    let deadline = Instant::now() + opts.timeout;
    let components = components::render(opts.image.as_deref(), &opts.values.0)?;
    refuse_foreign(cluster, opts).await?;
    let work = tempfile::tempdir().map_err(|e| BootstrapError::Invalid(format!("temporary directory: {e}")))?;
    let mut writer = open_writer(work.path().join("repo"), opts).await?;
    let files = tree_files(&writer, opts, &components)?;
    let sync = tree::sync_objects(&tree_input(opts, &components));
    let secret = secret(opts);
    if opts.dry_run {
        print_git_plan(&writer, &files, say);
        print_cluster_plan(cluster, &components, secret.as_ref(), &sync, say).await?;
        return Ok(Outcome::Planned);
    }
    let (sha, committed) = commit_and_push(&mut writer, opts, &files, &components, say).await?;
    let state = cluster::self_state(cluster, &opts.namespace, SELF_APP, &opts.branch).await?;
    let never_synced = state.sync.1.is_empty();
    // The Secret lives in the namespace the installation creates: on a first install it is applied
    // after the Namespace, with the rest of the components.
    let changed = if never_synced || opts.force_apply {
        apply_installation(cluster, &components, secret.as_ref(), &sync, deadline, say).await?
    } else if let Some(s) = &secret {
        cluster::apply_changed(cluster, std::slice::from_ref(s)).await?
    } else {
        Vec::new()
    };
    if !committed && changed.is_empty() && state.done_at(&sha) {
        return Ok(Outcome::UpToDate(sha));
    }
    wait_synced(cluster, opts, &sha, deadline, say).await?;
    Ok(Outcome::Done(sha))
}

/// G6 and G7: another self Application's source, or an installation bootstrap did not make.
async fn refuse_foreign(cluster: &ClusterHandle, opts: &Options) -> Result<(), BootstrapError> {
    let app = cluster::get(
        cluster,
        ("capstan.dev/v1alpha1", "Application"),
        &opts.namespace,
        SELF_APP,
    )
    .await?;
    if let Some(app) = app.filter(|_| !opts.force) {
        let src = |p: &str| app.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let want = tree::under(&opts.path, SYSTEM_DIR);
        let live = (
            src("/spec/source/repoURL"),
            src("/spec/source/targetRevision"),
            src("/spec/source/path"),
        );
        if live != (opts.url.clone(), opts.branch.clone(), want.clone()) {
            return Err(BootstrapError::Refused(format!(
                "the live self Application syncs {} at {} path {}, not {} at {} path {}; rerun with --force to move it",
                live.0, live.1, live.2, opts.url, opts.branch, want
            )));
        }
    }
    let deploy = cluster::get(
        cluster,
        ("apps/v1", "Deployment"),
        &opts.namespace,
        components::DEPLOYMENT,
    )
    .await?;
    if let Some(d) = deploy.filter(|_| !opts.adopt) {
        let helm = object::annotation(&d, "meta.helm.sh/release-name");
        let ours = d
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|m| {
                m.iter()
                    .any(|f| matches!(f["manager"].as_str(), Some("capstan-bootstrap" | "capstan")))
            });
        if helm.is_some() || !ours {
            let by = helm.map_or("another tool".to_string(), |r| format!("the Helm release {r}"));
            return Err(BootstrapError::Refused(format!(
                "Deployment {}/{} was installed by {by}, not by capstan bootstrap; rerun with --adopt to take it over",
                opts.namespace,
                components::DEPLOYMENT
            )));
        }
    }
    Ok(())
}

async fn open_writer(dir: PathBuf, opts: &Options) -> Result<Writer, BootstrapError> {
    let url = RepoUrl::parse(&opts.url)?;
    let creds = opts.credentials.clone().unwrap_or_default();
    let branch = opts.branch.clone();
    let writer = tokio::task::spawn_blocking(move || Writer::open(&dir, url, creds, GitConfig::default(), &branch))
        .await
        .map_err(|e| BootstrapError::Invalid(format!("git task: {e}")))??;
    Ok(writer)
}

fn tree_input<'a>(opts: &'a Options, components: &'a [Value]) -> TreeInput<'a> {
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(opts.values.1.as_bytes()));
    TreeInput {
        url: &opts.url,
        branch: &opts.branch,
        path: &opts.path,
        namespace: &opts.namespace,
        interval: &opts.interval,
        has_credentials: opts.credentials.is_some(),
        components,
        recorded: json!({"image": opts.image, "valuesSha256": digest, "version": env!("CARGO_PKG_VERSION")}),
    }
}

fn tree_files(
    writer: &Writer,
    opts: &Options,
    components: &[Value],
) -> Result<BTreeMap<String, String>, BootstrapError> {
    let kustomization = writer.read(&tree::under(&opts.path, &format!("{SYSTEM_DIR}/kustomization.yaml")));
    tree::files(&tree_input(opts, components), kustomization.as_deref())
}

/// The credentials Secret (cluster only), when credential flags were given.
fn secret(opts: &Options) -> Option<Value> {
    let c = opts.credentials.as_ref()?;
    let mut data = serde_json::Map::new();
    for (k, v) in [
        ("username", &c.username),
        ("password", &c.password),
        ("bearerToken", &c.bearer_token),
        ("sshPrivateKey", &c.ssh_private_key),
        ("knownHosts", &c.known_hosts),
        ("caCert", &c.ca_cert),
    ] {
        if let Some(v) = v {
            data.insert(k.into(), json!(v));
        }
    }
    Some(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": GIT_SECRET, "namespace": opts.namespace,
                             "labels": {SECRET_TYPE_LABEL: SECRET_TYPE_REPOSITORY}},
                "stringData": data}))
}

/// Commits when the tree changed and pushes; on a refused non-fast-forward push, fetches, redoes
/// the commit and retries once. Returns the branch's commit and whether a commit was made.
async fn commit_and_push(
    writer: &mut Writer,
    opts: &Options,
    files: &BTreeMap<String, String>,
    components: &[Value],
    say: &mut dyn FnMut(&str),
) -> Result<(String, bool), BootstrapError> {
    for attempt in 0..2 {
        let files = if attempt == 0 {
            files.clone()
        } else {
            tree_files(writer, opts, components)?
        };
        let author = (opts.author.0.as_str(), opts.author.1.as_str());
        let message = format!("capstan bootstrap: {} {}", env!("CARGO_PKG_VERSION"), opts.path);
        let Some(commit) = writer.commit(&files, &message, author)? else {
            say(&format!("git: {} is up to date", opts.path));
            return Ok((writer.tip().unwrap_or_default(), false));
        };
        match writer.push(commit)? {
            Pushed::Done => {
                say(&format!("git: pushed {} to {}", &commit.to_string()[..7], opts.branch));
                return Ok((commit.to_string(), true));
            }
            Pushed::NotFastForward if attempt == 0 => {
                say("git: the branch moved meanwhile; fetching and trying again");
                writer.fetch()?;
            }
            Pushed::NotFastForward => {}
        }
    }
    Err(BootstrapError::Refused(format!(
        "{} moved twice while pushing; run again",
        opts.branch
    )))
}

/// CRDs and the Namespace, wait Established; then the rest of the components and the credentials
/// Secret; then the sync objects.
async fn apply_installation(
    cluster: &ClusterHandle,
    components: &[Value],
    secret: Option<&Value>,
    sync: &[Value],
    deadline: Instant,
    say: &mut dyn FnMut(&str),
) -> Result<Vec<String>, BootstrapError> {
    let (first, rest): (Vec<Value>, Vec<Value>) = components.iter().cloned().partition(cluster::is_foundation);
    let mut changed = cluster::apply_changed(cluster, &first).await?;
    cluster::wait_established(cluster, &first, deadline).await?;
    say("cluster: CRDs established");
    changed.extend(cluster::apply_changed(cluster, &rest).await?);
    changed.extend(cluster::apply_changed(cluster, secret.map(std::slice::from_ref).unwrap_or_default()).await?);
    changed.extend(cluster::apply_changed(cluster, sync).await?);
    for key in &changed {
        say(&format!("cluster: applied {key}"));
    }
    Ok(changed)
}

async fn wait_synced(
    cluster: &Arc<ClusterHandle>,
    opts: &Options,
    sha: &str,
    deadline: Instant,
    say: &mut dyn FnMut(&str),
) -> Result<(), BootstrapError> {
    let mut last = String::new();
    loop {
        let state = cluster::self_state(cluster, &opts.namespace, SELF_APP, &opts.branch).await?;
        if state.done_at(sha) {
            say(&format!(
                "synced: {SELF_APP} is Synced and Healthy at {}",
                &sha[..sha.len().min(7)]
            ));
            return Ok(());
        }
        let waiting = state.waiting_for(sha);
        if Instant::now() >= deadline {
            return Err(BootstrapError::Timeout(format!("still waiting for {waiting}")));
        }
        if waiting != last {
            say(&format!("waiting for {waiting}"));
            last = waiting;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The Git side of `--dry-run`: every file added or changed, with a unified diff.
fn print_git_plan(writer: &Writer, files: &BTreeMap<String, String>, say: &mut dyn FnMut(&str)) {
    let mut any = false;
    for (path, new) in files {
        let old = writer.read(path).unwrap_or_default();
        if old == *new {
            continue;
        }
        any = true;
        let diff = similar::TextDiff::from_lines(&old, new);
        say(&format!(
            "git: {} {path}",
            if old.is_empty() { "add" } else { "change" }
        ));
        say(diff
            .unified_diff()
            .context_radius(2)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string()
            .trim_end());
    }
    if !any {
        say("git: no change");
    }
}

/// The cluster side of `--dry-run`: create/update/unchanged per object from a server-side dry run;
/// the Secret's values are never shown.
async fn print_cluster_plan(
    cluster: &ClusterHandle,
    components: &[Value],
    secret: Option<&Value>,
    sync: &[Value],
    say: &mut dyn FnMut(&str),
) -> Result<(), BootstrapError> {
    for obj in components.iter().chain(secret).chain(sync) {
        let change = cluster::plan_one(cluster, obj).await?;
        let word = match change {
            Change::Create => "create",
            Change::Update => "update",
            Change::Unchanged => "unchanged",
        };
        let redacted = if object::kind(obj) == "Secret" {
            " (data <redacted>)"
        } else {
            ""
        };
        say(&format!("cluster: {word} {}{redacted}", ObjectKey::of(obj)));
    }
    Ok(())
}
