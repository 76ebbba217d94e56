//! Condition types and reasons (metav1 `Condition`), shared by every Capstan resource.
//!
//! Every resource carries `Ready` (so `kubectl wait --for=condition=Ready` works), and
//! `Reconciling`/`Stalled` in the kstatus sense. Applications add Argo CD's condition types; in
//! Capstan they are metav1 Conditions with a `status` and a `reason`.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

// Condition statuses.

/// `status` of a condition that holds.
pub const STATUS_TRUE: &str = "True";
/// `status` of a condition that does not hold.
pub const STATUS_FALSE: &str = "False";
/// `status` of a condition whose state is not known yet.
pub const STATUS_UNKNOWN: &str = "Unknown";

// Condition types: every resource.

/// The resource is reconciled and usable.
pub const CONDITION_READY: &str = "Ready";
/// The controller is working towards the desired state.
pub const CONDITION_RECONCILING: &str = "Reconciling";
/// The controller cannot make progress without a change to the spec or the environment.
pub const CONDITION_STALLED: &str = "Stalled";

// Condition types: Application (Argo CD's, plus policy).

/// Comparing desired and live state failed (render, fetch or cluster error).
pub const CONDITION_COMPARISON_ERROR: &str = "ComparisonError";
/// The last sync failed.
pub const CONDITION_SYNC_ERROR: &str = "SyncError";
/// A managed resource is also tracked by another Application.
pub const CONDITION_SHARED_RESOURCE_WARNING: &str = "SharedResourceWarning";
/// Resources exist in the destination namespace that no Application manages.
pub const CONDITION_ORPHANED_RESOURCE_WARNING: &str = "OrphanedResourceWarning";
/// A PolicySet with `enforcement: Deny` denies the sync; the message lists each denial.
pub const CONDITION_POLICY_DENIED: &str = "PolicyDenied";
/// A PolicySet with `enforcement: Warn` (or a `warn` rule) has something to say; never blocks.
pub const CONDITION_POLICY_WARNING: &str = "PolicyWarning";

// Condition types: ApplicationSet (Argo CD's).

/// Generating parameters or Applications failed.
pub const CONDITION_ERROR_OCCURRED: &str = "ErrorOccurred";
/// The generators produced their parameters.
pub const CONDITION_PARAMETERS_GENERATED: &str = "ParametersGenerated";
/// The generated Applications match the template.
pub const CONDITION_RESOURCES_UP_TO_DATE: &str = "ResourcesUpToDate";

// Reasons: general.

/// The reconcile finished and the resource is in its desired state.
pub const REASON_SUCCEEDED: &str = "Succeeded";
/// Work towards the desired state is in progress.
pub const REASON_PROGRESSING: &str = "Progressing";
/// The reconcile failed.
pub const REASON_FAILED: &str = "Failed";
/// The spec is invalid and will not work until it changes.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// A resource this one depends on is not ready yet.
pub const REASON_DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
/// `spec.suspend` is set.
pub const REASON_SUSPENDED: &str = "Suspended";

// Reasons: Application.

/// The live state matches Git and every resource is healthy.
pub const REASON_SYNCED_AND_HEALTHY: &str = "SyncedAndHealthy";
/// The live state differs from Git.
pub const REASON_OUT_OF_SYNC: &str = "OutOfSync";
/// A sync operation is running.
pub const REASON_SYNC_RUNNING: &str = "SyncRunning";
/// The sync failed.
pub const REASON_SYNC_FAILED: &str = "SyncFailed";
/// At least one resource is degraded.
pub const REASON_DEGRADED: &str = "Degraded";
/// A PolicySet denied the sync.
pub const REASON_POLICY_DENIED: &str = "PolicyDenied";
/// Rendering the manifests failed.
pub const REASON_RENDER_FAILED: &str = "RenderFailed";
/// `spec.dependsOn` forms a cycle.
pub const REASON_DEPENDENCY_CYCLE: &str = "DependencyCycle";

// Reasons: Repository.

/// The repository rejected the credentials.
pub const REASON_AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
/// The SSH host key is not in `knownHosts`.
pub const REASON_HOST_KEY_UNKNOWN: &str = "HostKeyUnknown";
/// The repository, ref or referenced Secret does not exist.
pub const REASON_NOT_FOUND: &str = "NotFound";
/// The remote did not answer in time.
pub const REASON_TIMEOUT: &str = "Timeout";
/// The TLS handshake failed (unknown CA, bad client certificate, ...).
pub const REASON_TLS_ERROR: &str = "TLSError";
/// A commit's OpenPGP signature is missing or not made by a listed key.
pub const REASON_VERIFICATION_FAILED: &str = "VerificationFailed";

// Reasons: ApplicationSet (Argo CD's).

/// Every generated Application is up to date.
pub const REASON_APPLICATION_SET_UP_TO_DATE: &str = "ApplicationSetUpToDate";
/// The generators produced their parameters.
pub const REASON_PARAMETERS_GENERATED: &str = "ParametersGenerated";
/// Rendering the template with the parameters failed.
pub const REASON_RENDER_TEMPLATE_PARAMS_ERROR: &str = "RenderTemplateParamsError";
/// Creating or updating a generated Application failed.
pub const REASON_CREATE_APPLICATION_ERROR: &str = "CreateApplicationError";
/// A generator failed.
pub const REASON_GENERATOR_ERROR: &str = "GeneratorError";
