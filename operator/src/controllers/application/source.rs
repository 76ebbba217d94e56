//! Source resolution: which repository and credentials an Application's `repoURL` uses, which commit
//! its `targetRevision` names now, the checkout of that commit, and the render.
//!
//! - **Credentials**: a Repository with the same URL key in the Application's namespace or the operator
//!   namespace supplies its Secret; otherwise the best credential template (longest prefix); otherwise
//!   none (public repositories need no Repository object, as in Argo CD).
//! - **Revision**: a full SHA is used as is. Otherwise the commit the Repository controller last listed
//!   for the ref (`status.lastFetchedRevision`: one `ls-remote` per repository serves everyone), unless a
//!   refresh was requested (annotation, or a new commit announced by the notifier), in which case the
//!   ref is fetched and resolved here. Without a Repository object the ref is fetched and resolved here,
//!   at most once per reconcile interval unless forced.
//! - **Tracked refs**: every Application registers its `targetRevision` with the notifier so the
//!   Repository controller lists it and triggers exactly the Applications tracking a moved ref.
//!
//! Errors become [`Problem`]s with a stable reason; messages never carry credentials.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::status::{Problem, ProblemKind};
use super::State;
use crate::api::application::{ApplicationSource, ApplicationSourceType};
use crate::api::labels::MANIFEST_GENERATE_PATHS_ANNOTATION;
use crate::api::{Application, Repository};
use crate::controllers::git_access::{credentials, fetch, matching_repository, repo_url};
use crate::controllers::notifier::{owner_key, url_key};
use crate::controllers::repository::sanitize;
use crate::controllers::Context;
use crate::render::argv;
use crate::render::reads::{self, ReadSet, Verdict};
use crate::render::{
    DirectoryOptions, HelmFileParameter, HelmOptions, HelmParameter, KustomizeOptions, KustomizePatch,
    KustomizeReplica, RenderOutput, RenderRequest, SourceOptions, Tool,
};
use crate::source::{ChangedPaths, Commit, RepoUrl, Revision, SourceError};

/// A source at a resolved commit, checked out.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The commit.
    pub commit: String,
    /// The checkout directory (read only).
    pub checkout: PathBuf,
}

/// A remembered resolution of `(repoURL, revision)` for one Application.
#[derive(Clone, Debug)]
pub struct Resolution {
    key: (String, String),
    commit: String,
    at: Instant,
}

/// Resolves `source` at `revision` (the target revision, or an operation's) for `app`: credentials,
/// commit, checkout. `force` bypasses remembered resolutions (refresh requested, new commit announced).
pub async fn resolve(
    ctx: &Context,
    state: &State,
    app: &Application,
    source: &ApplicationSource,
    revision: &str,
    force: bool,
) -> Result<Resolved, Problem> {
    let rev =
        Revision::parse(revision).map_err(|e| Problem::invalid_spec("InvalidSpec", format!("targetRevision: {e}")))?;
    check_tool_fields(app, source)?;
    let Access { url, repo, creds } = access(ctx, state, app, source).await?;
    let problem = |e: SourceError| Problem::from_source(&e, sanitize(&creds, &e.to_string()));
    let key = (url_key(&source.repo_url).unwrap_or_default(), rev.as_str().to_string());
    // After a failed network resolution, keep asking the network: a cached commit would report the
    // Application Synced while its repository is unreachable (the failure must stay visible).
    let force = force || state.is_unresolved(app);
    let commit = match known_commit(ctx, state, app, repo.as_deref(), &rev, &key, force) {
        Some(sha) => Commit::parse(&sha).map_err(problem)?,
        None => {
            let resolved = match fetch(ctx, &url, &creds, &rev).await {
                Ok(()) => ctx.git.resolve(&url, &rev).await,
                Err(e) => Err(e),
            };
            state.set_unresolved(app, resolved.is_err());
            let commit = resolved.map_err(problem)?;
            state.remember(
                app,
                Resolution {
                    key,
                    commit: commit.sha().to_string(),
                    at: Instant::now(),
                },
            );
            commit
        }
    };
    fetch(ctx, &url, &creds, &Revision::parse(commit.sha()).map_err(problem)?)
        .await
        .map_err(problem)?;
    let checkout = ctx.git.checkout(&url, &commit).await.map_err(problem)?;
    Ok(Resolved {
        commit: commit.sha().to_string(),
        checkout,
    })
}

/// The fields of `source` that reach a render tool's command line follow the tool's rules
/// (`render::argv`), checked before anything is fetched so a refused field costs nothing.
fn check_tool_fields(app: &Application, source: &ApplicationSource) -> Result<(), Problem> {
    let destination_namespace = app.spec.destination.namespace.as_deref().unwrap_or_default();
    argv::check_source(&source_options(source), &app.name_any(), destination_namespace)
        .map_err(|e| Problem::from_render(&e))
}

/// How `app` reaches `source`'s repository: the URL, the Repository that serves it (if any) and the
/// credentials that apply (the Repository rules of docs/user-guide.md).
struct Access {
    url: RepoUrl,
    repo: Option<Arc<Repository>>,
    creds: crate::source::Credentials,
}

async fn access(
    ctx: &Context,
    state: &State,
    app: &Application,
    source: &ApplicationSource,
) -> Result<Access, Problem> {
    let ns = app.namespace().unwrap_or_default();
    let url = repo_url(ctx, &source.repo_url, &ns).map_err(|e| match e {
        SourceError::TransportNotAllowed(_) => Problem::invalid_spec(e.category(), format!("repoURL: {e}")),
        e => Problem::invalid_spec("InvalidSpec", format!("repoURL: {e}")),
    })?;
    let repos = state.repositories();
    let repo = matching_repository(&repos, &source.repo_url, &ns, ctx.namespace())
        .map_err(|e| Problem::new(e.category, e.message))?;
    let creds = credentials(ctx, &repos, repo.as_deref(), &ns, &url)
        .await
        .map_err(|e| {
            let kind = if e.transient {
                ProblemKind::Transient
            } else {
                ProblemKind::Permanent
            };
            Problem::of_kind(kind, e.category, e.message)
        })?;
    Ok(Access { url, repo, creds })
}

/// Fetches `commit` of `source`'s repository into the Git cache, as `app` may (no checkout): what a
/// consumer needs before it reads the commit's changed paths.
pub(super) async fn fetch_commit(
    ctx: &Context,
    state: &State,
    app: &Application,
    source: &ApplicationSource,
    commit: &str,
) -> Result<(), Problem> {
    let Access { url, creds, .. } = access(ctx, state, app, source).await?;
    let rev = Revision::parse(commit).map_err(|e| Problem::invalid_spec("InvalidSpec", format!("revision: {e}")))?;
    fetch(ctx, &url, &creds, &rev)
        .await
        .map_err(|e| Problem::from_source(&e, sanitize(&creds, &e.to_string())))
}

/// Registers the refs `app` tracks with the notifier (its target revision, unless a full SHA).
pub fn track(ctx: &Context, app: &Application) {
    let source = &app.spec.source;
    let revision = source
        .target_revision
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "HEAD".into());
    let refs = match Revision::parse(&revision) {
        Ok(r) if !r.is_full_sha() => vec![revision],
        _ => Vec::new(),
    };
    ctx.notifier.track(
        &owner_key(app),
        &app.namespace().unwrap_or_default(),
        &source.repo_url,
        refs,
    );
}

/// A commit for `rev` that needs no network round trip: a full SHA, the Repository's last listing
/// (unless forced), or this Application's remembered resolution younger than the reconcile interval.
fn known_commit(
    ctx: &Context,
    state: &State,
    app: &Application,
    repo: Option<&Repository>,
    rev: &Revision,
    key: &(String, String),
    force: bool,
) -> Option<String> {
    if rev.is_full_sha() {
        return Some(rev.as_str().to_ascii_lowercase());
    }
    if force {
        return None;
    }
    let listed = repo
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.last_fetched_revision.iter().find(|f| f.ref_ == rev.as_str()))
        .map(|f| f.revision.clone());
    if listed.is_some() {
        return listed;
    }
    let fresh_for = ctx.settings.reconcile_interval.max(Duration::from_secs(1));
    state
        .remembered(app)
        .filter(|r| &r.key == key && r.at.elapsed() < fresh_for)
        .map(|r| r.commit)
}

/// Renders `source` from `checkout` for `app` (`hard`: bypass the render cache).
pub async fn render(
    ctx: &Context,
    app: &Application,
    source: &ApplicationSource,
    resolved: &Resolved,
    hard: bool,
) -> Result<Arc<RenderOutput>, Problem> {
    let req = RenderRequest {
        checkout_root: resolved.checkout.clone(),
        app_path: source.path.clone().unwrap_or_default(),
        repo_url: source.repo_url.clone(),
        revision: resolved.commit.clone(),
        source: source_options(source),
        app_name: app.name_any(),
        app_namespace: app.namespace().unwrap_or_default(),
        destination_namespace: app.spec.destination.namespace.clone().unwrap_or_default(),
        limits: Default::default(),
        binaries: ctx.render_binaries(),
    };
    let previous = app
        .status
        .as_ref()
        .and_then(|s| s.sync.as_ref())
        .and_then(|s| s.revision.clone());
    let reusable = |earlier: Arc<RenderOutput>| reusable(ctx, app, source, previous.clone(), resolved, earlier);
    let rendered = ctx
        .renderer()
        .render_since(&req, hard, previous.as_deref(), reusable)
        .await;
    let result = rendered.as_ref().map_or("failed", |(_, served)| served.as_str());
    ctx.metrics.renders.with_label_values(&[result]).inc();
    rendered.map(|(output, _)| output).map_err(|e| Problem::from_render(&e))
}

/// Bound on the paths one commit range may change before every Application re-renders: a larger
/// diff costs more to match than the renders it would save.
pub(super) const MAX_CHANGED_PATHS: usize = 10_000;

/// Whether the render `earlier` (at `previous`) stays valid at the resolved commit: the changed
/// paths between the two commits, read from the Git cache, matched against what the render read
/// (or the `manifest-generate-paths` annotation). Anything unknown answers "render again".
async fn reusable(
    ctx: &Context,
    app: &Application,
    source: &ApplicationSource,
    previous: Option<String>,
    resolved: &Resolved,
    earlier: Arc<RenderOutput>,
) -> bool {
    let (Some(previous), Ok(url)) = (previous, RepoUrl::parse(&source.repo_url)) else {
        return false;
    };
    let (Ok(from), Ok(to)) = (Commit::parse(&previous), Commit::parse(&resolved.commit)) else {
        return false;
    };
    let changed = match ctx.git.changed_paths(&url, &from, &to, MAX_CHANGED_PATHS).await {
        Ok(ChangedPaths::Paths(paths)) => Some(paths),
        Ok(ChangedPaths::TooMany) => None,
        Err(e) => {
            tracing::debug!(error = %e, "changed paths unknown; rendering again");
            None
        }
    };
    let verdict = render_verdict(app, source, &earlier.reads, changed.as_deref());
    tracing::debug!(from = %from, to = %to, ?verdict, "render reuse decided");
    verdict == Verdict::Unchanged
}

/// Whether a commit that changed `changed` (`None`: unknown) touched what `app` reads from `source`:
/// its `manifest-generate-paths` annotation when set, else `reads`, what its last render read.
pub(super) fn render_verdict(
    app: &Application,
    source: &ApplicationSource,
    reads: &ReadSet,
    changed: Option<&[String]>,
) -> Verdict {
    let annotation = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MANIFEST_GENERATE_PATHS_ANNOTATION));
    let app_path = source.path.as_deref().unwrap_or_default();
    reads::decide(reads, annotation.map(String::as_str), app_path, changed)
}

/// The status `sourceType` of a render tool.
pub fn source_type(tool: Tool) -> ApplicationSourceType {
    match tool {
        Tool::Directory => ApplicationSourceType::Directory,
        Tool::Kustomize => ApplicationSourceType::Kustomize,
        Tool::Helm => ApplicationSourceType::Helm,
    }
}

/// The renderer's options from the CRD's (same names as Argo CD's).
pub fn source_options(source: &ApplicationSource) -> SourceOptions {
    SourceOptions {
        directory: source.directory.as_ref().map(|d| DirectoryOptions {
            recurse: d.recurse,
            include: d.include.clone().unwrap_or_default(),
            exclude: d.exclude.clone().unwrap_or_default(),
        }),
        kustomize: source.kustomize.as_ref().map(|k| KustomizeOptions {
            name_prefix: k.name_prefix.clone().unwrap_or_default(),
            name_suffix: k.name_suffix.clone().unwrap_or_default(),
            images: k.images.clone(),
            common_labels: k.common_labels.clone(),
            common_annotations: k.common_annotations.clone(),
            force_common_labels: k.force_common_labels,
            force_common_annotations: k.force_common_annotations,
            namespace: k.namespace.clone().unwrap_or_default(),
            replicas: k
                .replicas
                .iter()
                .map(|r| KustomizeReplica {
                    name: r.name.clone(),
                    count: match &r.count {
                        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i64::from(*i),
                        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => {
                            s.trim().parse().unwrap_or(0)
                        }
                    },
                })
                .collect(),
            components: k.components.clone(),
            patches: k
                .patches
                .iter()
                .filter_map(|p| serde_json::from_value::<KustomizePatch>(p.clone()).ok())
                .collect(),
            ..KustomizeOptions::default()
        }),
        helm: source.helm.as_ref().map(|h| HelmOptions {
            release_name: h.release_name.clone().unwrap_or_default(),
            value_files: h.value_files.clone(),
            values: h.values.clone().unwrap_or_default(),
            values_object: h.values_object.clone(),
            parameters: h
                .parameters
                .iter()
                .map(|p| HelmParameter {
                    name: p.name.clone(),
                    value: p.value.clone(),
                    force_string: p.force_string,
                })
                .collect(),
            file_parameters: h
                .file_parameters
                .iter()
                .map(|p| HelmFileParameter {
                    name: p.name.clone(),
                    path: p.path.clone(),
                })
                .collect(),
            skip_crds: h.skip_crds,
            ignore_missing_value_files: h.ignore_missing_value_files,
            namespace: h.namespace.clone().unwrap_or_default(),
            kube_version: h.kube_version.clone().unwrap_or_default(),
            api_versions: h.api_versions.clone(),
        }),
    }
}
