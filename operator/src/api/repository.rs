//! Repository: where manifests come from.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{is_false, schema, LocalObjectReference};

/// A Git repository Applications render manifests from. One `ls-remote` per poll serves every
/// Application that uses it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Repository",
    plural = "repositories",
    namespaced,
    status = "RepositoryStatus",
    derive = "Default",
    derive = "PartialEq",
    shortname = "crepo",
    category = "capstan",
    category = "gitops",
    doc = "A Git repository that Applications render manifests from.",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".spec.url"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RepositorySpec {
    /// Repository URL: `https://host/path`, `ssh://user@host/path`, `git@host:path`, or
    /// `file:///path` for local use. With `credentialTemplate`, a URL prefix.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,

    /// Repository type. Only `git` is supported for now.
    #[serde(default, rename = "type")]
    pub type_: RepositoryType,

    /// Secret in this namespace with the credentials: any of `username`/`password`,
    /// `bearerToken`, `sshPrivateKey`, `knownHosts`, `tlsClientCert`/`tlsClientKey`, `caCert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// Skip TLS certificate verification for https URLs. Insecure; for testing only.
    #[serde(default, rename = "insecureSkipTLSVerify", skip_serializing_if = "is_false")]
    pub insecure_skip_tls_verify: bool,

    /// HTTP(S) proxy URL for this repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,

    /// Makes `url` a prefix that supplies its credentials to every repository URL under it
    /// (longest match wins; matching respects host and path boundaries). A credential
    /// template is not polled itself.
    #[serde(default, skip_serializing_if = "is_false")]
    pub credential_template: bool,

    /// Require the commit being deployed to carry a valid OpenPGP signature by a listed key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<RepositoryVerification>,

    /// How often to check the repository's refs for new commits (a duration such as `60s`,
    /// `5m`; between 1s and 24h). Webhooks trigger a check at once.
    #[serde(default = "default_poll_interval")]
    #[schemars(schema_with = "schema::duration")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('24h')")
        .message("pollInterval must be between 1s and 24h"))]
    pub poll_interval: String,

    /// Namespaces whose Applications and ApplicationSets may use this object, as patterns (`*` any run of
    /// characters, `?` one character, no negation; `"*"` = every namespace). Empty: only this object's own
    /// namespace. Only honoured in the operator namespace: elsewhere an object serves its own namespace alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new("self.all(p, size(p) <= 253 && p.matches('^[a-z0-9*?-]+$'))")
        .message("sourceNamespaces entries are patterns of a-z, 0-9, '-', '*' and '?' (no '!' negation)"))]
    pub source_namespaces: Vec<String>,
}

fn default_poll_interval() -> String {
    "60s".to_owned()
}

/// The kind of repository.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RepositoryType {
    /// A Git repository.
    #[default]
    Git,
}

/// Signature verification of deployed commits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.mode != 'Head' || has(self.keysConfigMapRef)")
    .message("verification.mode Head needs keysConfigMapRef"))]
pub struct RepositoryVerification {
    /// `None` turns verification off; `Head` requires the commit being deployed to be signed
    /// by a key in `keysConfigMapRef`.
    #[serde(default)]
    pub mode: VerificationMode,

    /// ConfigMap in this namespace whose values are ASCII-armoured OpenPGP public keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_config_map_ref: Option<LocalObjectReference>,
}

/// Which commits must carry a valid signature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum VerificationMode {
    /// No verification.
    #[default]
    None,
    /// The commit being deployed must be signed by a listed key.
    Head,
}

/// Observed state of a Repository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    /// `Ready` (connection and credentials verified), `Reconciling`, `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The commit each tracked ref pointed to at the last fetch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_fetched_revision: Vec<FetchedRevision>,

    /// The last error talking to the repository (never contains credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,

    /// When the refs were last listed successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetched_at: Option<Time>,
}

/// The commit a tracked ref resolved to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchedRevision {
    /// The ref as Applications name it (`main`, `refs/tags/v1.2.0`, `HEAD`).
    #[serde(rename = "ref")]
    pub ref_: String,
    /// The full commit SHA it resolved to.
    pub revision: String,
}
