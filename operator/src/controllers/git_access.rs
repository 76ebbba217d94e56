//! How a controller that reads Git on behalf of an Application or ApplicationSet reaches a repository:
//! which Repository object serves a `repoURL`, which credentials apply, and a metered, time-bounded fetch.
//! One place, so the Application and ApplicationSet controllers apply the same sharing and credential rules
//! (DESIGN §2: a Repository in the operator namespace serves everyone, one elsewhere only its namespace).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

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
    pub category: &'static str,
    pub message: String,
}

/// The non-template Repository serving `repo_url` for an object in `ns` (own namespace first).
pub fn matching_repository(
    repos: &[Arc<Repository>],
    repo_url: &str,
    ns: &str,
    operator_ns: &str,
) -> Option<Arc<Repository>> {
    let key = url_key(repo_url)?;
    let mut candidates: Vec<&Arc<Repository>> = repos
        .iter()
        .filter(|r| !r.spec.credential_template)
        .filter(|r| repository_serves(&r.namespace().unwrap_or_default(), ns, operator_ns))
        .filter(|r| url_key(&r.spec.url).as_deref() == Some(key.as_str()))
        .collect();
    candidates.sort_by_key(|r| (r.namespace().as_deref() != Some(ns), r.name_any()));
    candidates.first().map(|r| Arc::clone(r))
}

/// Credentials: the Repository's Secret, else the best credential template's, else none.
pub async fn credentials(
    ctx: &Context,
    repos: &[Arc<Repository>],
    repo: Option<&Repository>,
    ns: &str,
    url: &RepoUrl,
) -> Result<Credentials, CredentialError> {
    let insecure = repo.is_some_and(|r| r.spec.insecure_skip_tls_verify);
    if let Some(secret_ref) = repo.and_then(|r| r.spec.secret_ref.as_ref()) {
        let repo_ns = repo.and_then(|r| r.namespace()).unwrap_or_default();
        return read_secret(ctx, &repo_ns, &secret_ref.name, insecure).await;
    }
    let candidates = eligible_templates(repos, ns, ctx.namespace());
    let Some(template) = pick_template(&candidates, url) else {
        return Ok(Credentials {
            insecure_skip_tls_verify: insecure,
            ..Credentials::default()
        });
    };
    let insecure = insecure || template.spec.insecure_skip_tls_verify;
    match &template.spec.secret_ref {
        Some(s) => read_secret(ctx, &template.namespace().unwrap_or_default(), &s.name, insecure).await,
        None => Ok(Credentials {
            insecure_skip_tls_verify: insecure,
            ..Credentials::default()
        }),
    }
}

async fn read_secret(ctx: &Context, ns: &str, name: &str, insecure: bool) -> Result<Credentials, CredentialError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(secret)) => {
            let data: BTreeMap<String, Vec<u8>> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            Ok(Credentials::from_secret_data(&data, insecure))
        }
        Ok(None) => Err(CredentialError {
            category: "NotFound",
            message: format!("Secret {ns}/{name} not found"),
        }),
        Err(_) => Err(CredentialError {
            category: "Timeout",
            message: format!("Secret {ns}/{name} could not be read"),
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
