//! How a controller that reads Git on behalf of an Application or ApplicationSet reaches a repository:
//! which Repository object serves a `repoURL`, which credentials apply, and a metered, time-bounded fetch.
//! One place, so the Application and ApplicationSet controllers apply the same sharing and credential rules
//! (a Repository in the operator namespace serves everyone, one elsewhere only its namespace).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use crate::api::labels::{REPOSITORY_SECRET_LABELS, SECRET_TYPE_LABEL, SECRET_TYPE_REPOSITORY};
use crate::api::tenancy::source_namespace_allowed;
use crate::api::Repository;
use crate::controllers::notifier::{repository_serves, url_key};
use crate::controllers::repository::{eligible_templates, pick_template};
use crate::controllers::Context;
use crate::metrics::{repo_label, GIT_FETCH};
use crate::source::{Credentials, RepoUrl, Revision, SourceError};

/// Why credentials could not be read: a stable category (`NotFound`, `Timeout`) and a message that names
/// the Secret but never its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialError {
    /// Stable reason.
    pub category: &'static str,
    /// What failed, naming the Secret.
    pub message: String,
    /// Whether reading again may work (the API server did not answer) rather than the Secret missing.
    pub transient: bool,
}

/// The non-template Repository serving `repo_url` for an object in `ns` (own namespace first).
///
/// A shared Repository (operator namespace) serves `ns` only when its `spec.sourceNamespaces` lists it
/// ([`crate::api::tenancy`]). When Repositories for the URL exist but none may serve `ns`, the answer is
/// `NotPermitted` rather than an anonymous fetch, and the error says nothing about those Repositories.
pub fn matching_repository(
    repos: &[Arc<Repository>],
    repo_url: &str,
    ns: &str,
    operator_ns: &str,
) -> Result<Option<Arc<Repository>>, CredentialError> {
    let Some(key) = url_key(repo_url) else {
        return Ok(None);
    };
    let mut candidates: Vec<&Arc<Repository>> = repos
        .iter()
        .filter(|r| !r.spec.credential_template)
        .filter(|r| repository_serves(&r.namespace().unwrap_or_default(), ns, operator_ns))
        .filter(|r| url_key(&r.spec.url).as_deref() == Some(key.as_str()))
        .collect();
    let any = !candidates.is_empty();
    candidates.retain(|r| repository_permits(r, ns, operator_ns));
    candidates.sort_by_key(|r| (r.namespace().as_deref() != Some(ns), r.name_any()));
    match candidates.first() {
        Some(r) => Ok(Some(Arc::clone(r))),
        None if any => Err(CredentialError {
            category: NOT_PERMITTED,
            message: format!("repository {repo_url:?} is not permitted for namespace {ns:?}"),
            transient: false,
        }),
        None => Ok(None),
    }
}

/// `repo_url` parsed and checked against the URL policy for an object in `ns`: what every controller that
/// reads Git for an Application or ApplicationSet does first.
pub fn repo_url(ctx: &Context, repo_url: &str, ns: &str) -> Result<RepoUrl, SourceError> {
    let url = RepoUrl::parse(repo_url)?;
    ctx.url_policy().check(&url, ns)?;
    Ok(url)
}

/// Reason of a denied use of a shared Repository or Cluster.
pub const NOT_PERMITTED: &str = "NotPermitted";

/// Whether `repo` (a Repository or credential template) may serve objects in `ns`: `sourceNamespaces`.
pub fn repository_permits(repo: &Repository, ns: &str, operator_ns: &str) -> bool {
    let repo_ns = repo.namespace().unwrap_or_default();
    source_namespace_allowed(&repo.spec.source_namespaces, &repo_ns, operator_ns, ns)
}

/// Where a connection's settings come from (decided without I/O): the Secret to read, and the
/// `insecureSkipTLSVerify` and `proxy` that apply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConnectionPlan {
    /// Namespace, name, and how to name the Secret in an error.
    secret: Option<(String, String, String)>,
    insecure: bool,
    proxy: Option<String>,
}

/// The Repository's Secret, else the best credential template's, else none. `insecureSkipTLSVerify` holds
/// if either says so; the Repository's own `proxy` wins over the template's.
fn connection_plan(
    repos: &[Arc<Repository>],
    repo: Option<&Repository>,
    ns: &str,
    operator_ns: &str,
    url: &RepoUrl,
) -> ConnectionPlan {
    let insecure = repo.is_some_and(|r| r.spec.insecure_skip_tls_verify);
    let proxy = repo.and_then(|r| r.spec.proxy.clone());
    if let Some(secret_ref) = repo.and_then(|r| r.spec.secret_ref.as_ref()) {
        let repo_ns = repo.and_then(|r| r.namespace()).unwrap_or_default();
        return ConnectionPlan {
            secret: Some((repo_ns, secret_ref.name.clone(), "Secret".into())),
            insecure,
            proxy,
        };
    }
    let candidates = eligible_templates(repos, ns, operator_ns);
    let Some(template) = pick_template(&candidates, url) else {
        return ConnectionPlan {
            secret: None,
            insecure,
            proxy,
        };
    };
    let template_ns = template.namespace().unwrap_or_default();
    let what = format!("Secret of credential template {template_ns}/{}:", template.name_any());
    ConnectionPlan {
        secret: template
            .spec
            .secret_ref
            .as_ref()
            .map(|s| (template_ns, s.name.clone(), what)),
        insecure: insecure || template.spec.insecure_skip_tls_verify,
        proxy: proxy.or_else(|| template.spec.proxy.clone()),
    }
}

/// Credentials and connection settings for `url`, as [`connection_plan`] decides.
pub async fn credentials(
    ctx: &Context,
    repos: &[Arc<Repository>],
    repo: Option<&Repository>,
    ns: &str,
    url: &RepoUrl,
) -> Result<Credentials, CredentialError> {
    let plan = connection_plan(repos, repo, ns, ctx.namespace(), url);
    let mut creds = match &plan.secret {
        Some((secret_ns, name, what)) => read_secret(ctx, secret_ns, name, what).await?,
        None => Credentials::default(),
    };
    creds.insecure_skip_tls_verify = plan.insecure;
    creds.proxy = plan.proxy;
    Ok(creds)
}

/// Reason of a Secret used as repository credentials without the label that allows it.
pub const SECRET_NOT_LABELLED: &str = "SecretNotLabelled";

/// Whether a Secret with `labels` is marked as repository credentials (`REPOSITORY_SECRET_LABELS`); else the
/// error says exactly which label to add. Pure.
pub fn check_repository_secret(
    labels: Option<&BTreeMap<String, String>>,
    (ns, name, what): (&str, &str, &str),
) -> Result<(), CredentialError> {
    let labelled = labels.is_some_and(|l| {
        REPOSITORY_SECRET_LABELS
            .iter()
            .any(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
    });
    if labelled {
        return Ok(());
    }
    Err(CredentialError {
        category: SECRET_NOT_LABELLED,
        message: format!(
            "{what} {name} in namespace {ns} is not marked as repository credentials; label it \
             {SECRET_TYPE_LABEL}={SECRET_TYPE_REPOSITORY} (kubectl label secret {name} -n {ns} \
             {SECRET_TYPE_LABEL}={SECRET_TYPE_REPOSITORY}) so its values may be sent to the repository"
        ),
        transient: false,
    })
}

async fn read_secret(ctx: &Context, ns: &str, name: &str, what: &str) -> Result<Credentials, CredentialError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(secret)) => {
            // Before a value is read: an unlabelled Secret's values go nowhere.
            check_repository_secret(secret.metadata.labels.as_ref(), (ns, name, what))?;
            let data: BTreeMap<String, Vec<u8>> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            Ok(Credentials::from_secret_data(&data, false))
        }
        Ok(None) => Err(CredentialError {
            category: "NotFound",
            message: format!("{what} {name} not found in namespace {ns}"),
            transient: false,
        }),
        Err(_) => Err(CredentialError {
            category: "Timeout",
            message: format!("{what} {name} in namespace {ns} could not be read"),
            transient: true,
        }),
    }
}

/// Fetches `rev` of `url` into the shared cache within `--git-timeout`, counting it in the git metrics
/// (a fetch served by a concurrent one is not counted twice).
pub async fn fetch(ctx: &Context, url: &RepoUrl, creds: &Credentials, rev: &Revision) -> Result<(), SourceError> {
    let started = Instant::now();
    let fetched = tokio::time::timeout(ctx.settings.git_timeout, ctx.git.fetch(url, creds, rev))
        .await
        .unwrap_or_else(|_| Err(SourceError::Timeout(format!("{url}: fetch did not finish in time"))));
    let failure = fetched.as_ref().err().map(SourceError::category);
    if !fetched.as_ref().is_ok_and(|o| o.coalesced) {
        ctx.metrics
            .observe_git(&repo_label(&url.to_string()), GIT_FETCH, started.elapsed(), failure);
    }
    fetched.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{LocalObjectReference, RepositorySpec};
    use kube::api::ObjectMeta;

    fn repo(ns: &str, name: &str, spec: RepositorySpec) -> Arc<Repository> {
        Arc::new(Repository {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        })
    }

    #[test]
    fn only_secrets_labelled_as_repository_credentials_are_used() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let who = ("team-a", "git-creds", "Secret");
        for ok in [
            labels(&[("capstan.dev/secret-type", "repository")]),
            labels(&[("argocd.argoproj.io/secret-type", "repository")]),
            labels(&[("argocd.argoproj.io/secret-type", "repo-creds"), ("app", "x")]),
        ] {
            assert_eq!(check_repository_secret(Some(&ok), who), Ok(()), "{ok:?}");
        }
        for bad in [
            None,
            Some(labels(&[])),
            Some(labels(&[("capstan.dev/secret-type", "cluster")])),
            Some(labels(&[("argocd.argoproj.io/secret-type", "cluster")])),
            Some(labels(&[("secret-type", "repository")])),
        ] {
            let err = check_repository_secret(bad.as_ref(), who).unwrap_err();
            assert_eq!((err.category, err.transient), (SECRET_NOT_LABELLED, false));
            assert!(
                err.message
                    .contains("kubectl label secret git-creds -n team-a capstan.dev/secret-type=repository"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn connection_plan_merges_repository_and_template_settings() {
        let op = "capstan-system";
        let url = RepoUrl::parse("https://git.example.com/org/app").unwrap();
        let template = repo(
            op,
            "org",
            RepositorySpec {
                url: "https://git.example.com/org".into(),
                credential_template: true,
                secret_ref: Some(LocalObjectReference {
                    name: "org-creds".into(),
                }),
                insecure_skip_tls_verify: true,
                proxy: Some("http://proxy.example:3128".into()),
                source_namespaces: vec!["te?m".into()],
                ..RepositorySpec::default()
            },
        );
        let all = vec![template];
        // Not listed: the shared template serves nobody else.
        assert_eq!(connection_plan(&all, None, "team-b", op, &url).secret, None);
        let own = repo(
            "team",
            "app",
            RepositorySpec {
                url: url.to_string(),
                proxy: Some("http://team-proxy:8080".into()),
                ..RepositorySpec::default()
            },
        );
        // No Secret of its own: the template's Secret and insecure flag; its own proxy wins.
        let plan = connection_plan(&all, Some(&own), "team", op, &url);
        assert_eq!(
            plan.secret.as_ref().map(|s| (s.0.as_str(), s.1.as_str())),
            Some((op, "org-creds"))
        );
        assert!(plan.insecure);
        assert_eq!(plan.proxy.as_deref(), Some("http://team-proxy:8080"));
        // No Repository at all: everything from the template.
        let plan = connection_plan(&all, None, "team", op, &url);
        assert_eq!(plan.proxy.as_deref(), Some("http://proxy.example:3128"));
        // Its own Secret: the template is not consulted.
        let with_secret = repo(
            "team",
            "app",
            RepositorySpec {
                url: url.to_string(),
                secret_ref: Some(LocalObjectReference { name: "own".into() }),
                ..RepositorySpec::default()
            },
        );
        let plan = connection_plan(&all, Some(&with_secret), "team", op, &url);
        assert_eq!(
            plan,
            ConnectionPlan {
                secret: Some(("team".into(), "own".into(), "Secret".into())),
                insecure: false,
                proxy: None,
            }
        );
    }

    #[test]
    fn shared_repositories_serve_only_listed_namespaces() {
        let op = "capstan-system";
        let url = "https://git.example.com/org/app";
        let shared = |list: &[&str]| {
            repo(
                op,
                "shared",
                RepositorySpec {
                    url: url.into(),
                    source_namespaces: list.iter().map(|s| s.to_string()).collect(),
                    ..RepositorySpec::default()
                },
            )
        };
        let name = |r: Result<Option<Arc<Repository>>, CredentialError>| r.map(|o| o.map(|r| r.name_any()));
        let listed = vec![shared(&["team-*"])];
        assert_eq!(
            name(matching_repository(&listed, url, "team-a", op)),
            Ok(Some("shared".into()))
        );
        let denied = matching_repository(&listed, url, "shop", op).unwrap_err();
        assert_eq!(denied.category, NOT_PERMITTED);
        assert!(
            !denied.message.contains("shared"),
            "no hint of the Repository: {}",
            denied.message
        );
        let unlisted = vec![shared(&[])];
        assert_eq!(
            matching_repository(&unlisted, url, "team-a", op).unwrap_err().category,
            NOT_PERMITTED
        );
        assert_eq!(
            name(matching_repository(&unlisted, url, op, op)),
            Ok(Some("shared".into()))
        );
        // No Repository for the URL at all: an anonymous fetch, as before.
        assert_eq!(
            name(matching_repository(&unlisted, "https://other.example/x", "team-a", op)),
            Ok(None)
        );
    }
}
