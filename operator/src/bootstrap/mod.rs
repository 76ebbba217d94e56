//! `capstan bootstrap`: install Capstan into a cluster and hand its own installation to itself, so
//! that upgrades and configuration changes are commits (README, "GitOps of GitOps"); and
//! `capstan uninstall` ([`uninstall`]), which removes it again and leaves what its Applications deployed.
//!
//! One run is a reconcile of three things, each changed only when it differs:
//! 1. **Git** ([`tree`], `source::write`): the files under `--path`, at most one commit, pushed
//!    (a refused non-fast-forward push is fetched, redone and retried once);
//! 2. **the cluster** ([`cluster`]): while the self Application has never synced (or with
//!    `--force-apply`), server-side apply as `capstan-bootstrap`: Namespace and CRDs, wait until
//!    Established, then RBAC, Secret and Deployment, then the sync objects. Afterwards a push alone
//!    upgrades: the running operator applies itself;
//! 3. **the wait**: until the Repository has fetched the pushed commit and the self Application is
//!    Synced and Healthy at it.
//!
//! Refusals before anything is written: a live self Application with another URL, branch or path
//! (without `--force`), and a Deployment of an installation bootstrap did not make, such as a Helm
//! release (without `--adopt`). Credentials go to a Secret in the cluster, never to Git or output.

pub mod cluster;
pub mod components;
pub mod run;
pub mod tree;
pub mod uninstall;

use thiserror::Error;

use crate::cluster::ClusterError;
use crate::source::SourceError;

/// The field manager of everything bootstrap applies.
pub const FIELD_MANAGER: &str = "capstan-bootstrap";

/// Why bootstrap stopped.
#[derive(Debug, Error)]
pub enum BootstrapError {
    /// Bad flags or files.
    #[error("{0}")]
    Invalid(String),
    /// A guard refused to go on (another installation, another path).
    #[error("refused: {0}")]
    Refused(String),
    /// Git failed.
    #[error("git: {0}")]
    Git(#[from] SourceError),
    /// The cluster failed.
    #[error("cluster: {0}")]
    Cluster(#[from] ClusterError),
    /// The deadline passed.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl BootstrapError {
    /// A stable category for messages and exit codes.
    pub fn category(&self) -> &'static str {
        match self {
            BootstrapError::Invalid(_) => "invalid",
            BootstrapError::Refused(_) => "refused",
            BootstrapError::Git(_) => "git",
            BootstrapError::Cluster(_) => "cluster",
            BootstrapError::Timeout(_) => "timeout",
        }
    }
}
