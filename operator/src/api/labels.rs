//! Annotation, label and finalizer keys, and the field managers Capstan writes as.
//!
//! Resources in Git may carry Argo CD's annotations (`argocd.argoproj.io/...`) or Capstan's own
//! (`capstan.dev/...`, same names); each `*_ANNOTATIONS` pair lists both, Capstan's first.

/// Prefix of Capstan's annotations and labels.
pub const CAPSTAN_PREFIX: &str = "capstan.dev/";
/// Prefix of Argo CD's annotations, accepted for compatibility.
pub const ARGOCD_PREFIX: &str = "argocd.argoproj.io/";

/// Field manager of every write Capstan makes (server-side applies, status, metadata and finalizer
/// patches, creates), so `managedFields` tells what Capstan owns and the diff can tell drift from
/// fields other managers own.
pub const FIELD_MANAGER: &str = "capstan";
/// Field manager of the Applications an ApplicationSet generates: their own manager, so the fields the
/// template sets are owned apart from what the Application controller writes (status, `operation`).
pub const APPLICATION_SET_FIELD_MANAGER: &str = "capstan-applicationset";

/// Label on every applied object: a short stable id of the owning Application, fit for selectors.
pub const APP_INSTANCE_LABEL: &str = "capstan.dev/app-instance";
/// Annotation on every applied object:
/// `<app-namespace>/<app-name>:<group>/<kind>:<namespace>/<name>`.
pub const TRACKING_ID_ANNOTATION: &str = "capstan.dev/tracking-id";

/// Finalizer on an Application: cascade deletion of everything it manages.
pub const RESOURCES_FINALIZER: &str = "capstan.dev/resources";

/// Refresh request on an Application (`normal` or `hard`); removed once handled.
pub const REFRESH_ANNOTATION: &str = "capstan.dev/refresh";
/// Argo CD's refresh request, honoured the same way.
pub const ARGOCD_REFRESH_ANNOTATION: &str = "argocd.argoproj.io/refresh";
/// Both refresh annotations, Capstan's first.
pub const REFRESH_ANNOTATIONS: [&str; 2] = [REFRESH_ANNOTATION, ARGOCD_REFRESH_ANNOTATION];
/// Value of a refresh annotation asking for a normal refresh.
pub const REFRESH_NORMAL: &str = "normal";
/// Value of a refresh annotation asking for a hard refresh (render cache bypassed).
pub const REFRESH_HARD: &str = "hard";

/// Argo CD's list of the paths an Application's manifests depend on (`;`-separated, relative to its
/// path, `/…` from the repository root): a commit touching none of them does not re-render it.
pub const MANIFEST_GENERATE_PATHS_ANNOTATION: &str = "argocd.argoproj.io/manifest-generate-paths";

/// Refresh request on an ApplicationSet (`"true"`); removed once handled.
pub const APPLICATION_SET_REFRESH_ANNOTATION: &str = "capstan.dev/application-set-refresh";
/// Argo CD's ApplicationSet refresh request, honoured the same way.
pub const ARGOCD_APPLICATION_SET_REFRESH_ANNOTATION: &str = "argocd.argoproj.io/application-set-refresh";

/// Sync wave of a resource (an integer, default 0).
pub const SYNC_WAVE_ANNOTATION: &str = "capstan.dev/sync-wave";
/// Argo CD's sync wave annotation.
pub const ARGOCD_SYNC_WAVE_ANNOTATION: &str = "argocd.argoproj.io/sync-wave";
/// Both sync wave annotations, Capstan's first.
pub const SYNC_WAVE_ANNOTATIONS: [&str; 2] = [SYNC_WAVE_ANNOTATION, ARGOCD_SYNC_WAVE_ANNOTATION];

/// Hook types of a resource (`PreSync,Sync,PostSync,SyncFail,PreDelete,PostDelete,Skip`).
pub const HOOK_ANNOTATION: &str = "capstan.dev/hook";
/// Argo CD's hook annotation.
pub const ARGOCD_HOOK_ANNOTATION: &str = "argocd.argoproj.io/hook";
/// Both hook annotations, Capstan's first.
pub const HOOK_ANNOTATIONS: [&str; 2] = [HOOK_ANNOTATION, ARGOCD_HOOK_ANNOTATION];

/// Hook delete policies (`HookSucceeded,HookFailed,BeforeHookCreation`).
pub const HOOK_DELETE_POLICY_ANNOTATION: &str = "capstan.dev/hook-delete-policy";
/// Argo CD's hook delete policy annotation.
pub const ARGOCD_HOOK_DELETE_POLICY_ANNOTATION: &str = "argocd.argoproj.io/hook-delete-policy";
/// Both hook delete policy annotations, Capstan's first.
pub const HOOK_DELETE_POLICY_ANNOTATIONS: [&str; 2] =
    [HOOK_DELETE_POLICY_ANNOTATION, ARGOCD_HOOK_DELETE_POLICY_ANNOTATION];

/// Per-resource sync options (`Prune=false,Replace=true,...`).
pub const SYNC_OPTIONS_ANNOTATION: &str = "capstan.dev/sync-options";
/// Argo CD's per-resource sync options annotation.
pub const ARGOCD_SYNC_OPTIONS_ANNOTATION: &str = "argocd.argoproj.io/sync-options";
/// Both sync options annotations, Capstan's first.
pub const SYNC_OPTIONS_ANNOTATIONS: [&str; 2] = [SYNC_OPTIONS_ANNOTATION, ARGOCD_SYNC_OPTIONS_ANNOTATION];

/// Per-resource compare options (`IgnoreExtraneous,ServerSideDiff=true,...`).
pub const COMPARE_OPTIONS_ANNOTATION: &str = "capstan.dev/compare-options";
/// Argo CD's per-resource compare options annotation.
pub const ARGOCD_COMPARE_OPTIONS_ANNOTATION: &str = "argocd.argoproj.io/compare-options";
/// Both compare options annotations, Capstan's first.
pub const COMPARE_OPTIONS_ANNOTATIONS: [&str; 2] = [COMPARE_OPTIONS_ANNOTATION, ARGOCD_COMPARE_OPTIONS_ANNOTATION];

/// Label a Secret must carry before a Repository's `secretRef` may use it (value [`SECRET_TYPE_REPOSITORY`]):
/// whoever may create a Repository must not be able to send any Secret of the namespace to a URL of their
/// choosing. Argo CD's [`ARGOCD_SECRET_TYPE_LABEL`] (`repository` or `repo-creds`) is accepted too.
pub const SECRET_TYPE_LABEL: &str = "capstan.dev/secret-type";
/// Argo CD's label of repository Secrets.
pub const ARGOCD_SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// The value of [`SECRET_TYPE_LABEL`] on repository credentials.
pub const SECRET_TYPE_REPOSITORY: &str = "repository";
/// The labels (key, value) that mark a Secret as repository credentials, Capstan's first.
pub const REPOSITORY_SECRET_LABELS: [(&str, &str); 3] = [
    (SECRET_TYPE_LABEL, SECRET_TYPE_REPOSITORY),
    (ARGOCD_SECRET_TYPE_LABEL, "repository"),
    (ARGOCD_SECRET_TYPE_LABEL, "repo-creds"),
];
