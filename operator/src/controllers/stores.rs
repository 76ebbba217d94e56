//! The watch caches of other kinds a controller reads from.

use std::sync::{Arc, OnceLock};

use kube::runtime::reflector::Store;

use crate::api::{Application, Cluster, PolicySet, Repository};

/// A controller's caches of the kinds it reads besides its own: set once its watches start, empty
/// before (tests build a controller's state without them and list instead).
#[derive(Default)]
pub struct Stores {
    /// Applications.
    pub applications: OnceLock<Store<Application>>,
    /// Clusters.
    pub clusters: OnceLock<Store<Cluster>>,
    /// Repositories.
    pub repositories: OnceLock<Store<Repository>>,
    /// PolicySets.
    pub policy_sets: OnceLock<Store<PolicySet>>,
}

impl Stores {
    /// The cached Applications (none before the watch started).
    pub fn applications(&self) -> Vec<Arc<Application>> {
        snapshot(&self.applications)
    }

    /// The cached Repositories (none before the watch started).
    pub fn repositories(&self) -> Vec<Arc<Repository>> {
        snapshot(&self.repositories)
    }

    /// The cached PolicySets (none before the watch started).
    pub fn policy_sets(&self) -> Vec<Arc<PolicySet>> {
        snapshot(&self.policy_sets)
    }
}

fn snapshot<K>(store: &OnceLock<Store<K>>) -> Vec<Arc<K>>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.get().map(|s| s.state()).unwrap_or_default()
}
