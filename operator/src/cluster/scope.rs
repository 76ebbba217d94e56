//! Which namespaces this installation watches: the whole cluster (the default), or a list
//! (`capstan run --watch-namespaces`, the chart's `rbac.scope: namespace`).
//!
//! A namespaced install holds Roles in its namespaces only, so it may not list or watch anything across
//! the cluster: every watch the controllers and the live cache open goes through [`watch`] /
//! [`watch_in`], which open one namespaced watch per namespace and merge them into ONE watcher event
//! stream with the semantics of a single watch — so reflectors, predicates and `Controller`s downstream
//! work unchanged.
//!
//! The merge ([`Merge`], pure): a reflector replaces its whole store at `InitDone`, so one namespace's
//! relist must not drop the objects of the others. The merged stream is therefore "initialising" while
//! any namespace has not finished its (re)list; every `Init` of a namespace is passed on as an `Init`
//! followed by an `InitApply` of every object the other namespaces hold (replay), and `InitDone` is
//! passed on only once no namespace is listing. While initialising, an `Apply` becomes an `InitApply`
//! (it must land in the reflector's buffer), and a `Delete` restarts the init (the buffer cannot drop
//! one object). To replay, the merge keeps the objects of each namespace: twice the memory of a store,
//! for namespaced installs with more than one namespace only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;

use futures::stream::{self, BoxStream};
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::watcher::{self, watcher, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// Where this installation lists and watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WatchScope {
    /// Everywhere (cluster-wide RBAC).
    #[default]
    Cluster,
    /// Only these namespaces (namespaced RBAC), never empty.
    Namespaces(BTreeSet<String>),
}

/// Longest `--watch-namespaces` list: each namespace is a watch per kind.
pub const MAX_WATCH_NAMESPACES: usize = 64;

impl WatchScope {
    /// The scope of `--watch-namespaces` (empty: the whole cluster). `operator_namespace` is always
    /// watched too: shared Repositories and Clusters, credential templates and the webhook Secret live
    /// there. Each entry must be a DNS label.
    pub fn parse<S: AsRef<str>>(namespaces: &[S], operator_namespace: &str) -> Result<Self, String> {
        let listed: BTreeSet<String> = namespaces
            .iter()
            .map(|n| n.as_ref().trim())
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        if listed.is_empty() {
            return Ok(WatchScope::Cluster);
        }
        if let Some(bad) = listed.iter().find(|n| !crate::api::names::is_dns1123_label(n)) {
            return Err(format!(
                "{bad:?} is not a namespace name (a DNS label: lowercase letters, digits and '-', at most 63)"
            ));
        }
        let mut all = listed;
        all.insert(operator_namespace.to_owned());
        if all.len() > MAX_WATCH_NAMESPACES {
            return Err(format!("at most {MAX_WATCH_NAMESPACES} namespaces can be watched"));
        }
        Ok(WatchScope::Namespaces(all))
    }

    /// Whether objects in `namespace` are watched (`""`, cluster-scoped, only in a cluster-wide scope).
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            WatchScope::Cluster => true,
            WatchScope::Namespaces(list) => list.contains(namespace),
        }
    }

    /// The watched namespaces; `None` for the whole cluster.
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        match self {
            WatchScope::Cluster => None,
            WatchScope::Namespaces(list) => Some(list),
        }
    }

    /// `a, b, c`, for messages; `all namespaces` for the whole cluster.
    pub fn describe(&self) -> String {
        match self {
            WatchScope::Cluster => "all namespaces".into(),
            WatchScope::Namespaces(list) => list.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }
}

/// A merged watcher event stream.
pub type WatchStream<K> = BoxStream<'static, watcher::Result<Event<K>>>;

/// [`watch_in`] for a kind with a static type.
pub fn watch<K>(client: &Client, scope: &WatchScope, config: watcher::Config) -> WatchStream<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    watch_in(scope, config, |ns| match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    })
}

/// Watches `K` where `scope` says: `api(None)` cluster-wide, or one `api(Some(ns))` per namespace,
/// merged (see the module documentation).
pub fn watch_in<K>(scope: &WatchScope, config: watcher::Config, api: impl Fn(Option<&str>) -> Api<K>) -> WatchStream<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let namespaces = match scope {
        WatchScope::Cluster => return watcher(api(None), config).boxed(),
        WatchScope::Namespaces(list) if list.len() == 1 => {
            let ns = list.iter().next().map(String::as_str);
            return watcher(api(ns), config).boxed();
        }
        WatchScope::Namespaces(list) => list,
    };
    let streams = namespaces.iter().map(|ns| {
        let ns = ns.clone();
        watcher(api(Some(&ns)), config.clone())
            .map(move |event| (ns.clone(), event))
            .boxed()
    });
    let merge = Merge::new(namespaces.iter().cloned());
    stream::select_all(streams)
        .scan(merge, |merge, (ns, event)| {
            futures::future::ready(Some(merge.handle(&ns, event)))
        })
        .flat_map(stream::iter)
        .boxed()
}

/// The pure merge of per-namespace watcher events into one stream (see the module documentation).
pub struct Merge<K> {
    /// Namespaces that have not finished a first list.
    fresh: BTreeSet<String>,
    /// Per namespace that finished its last list: its objects, kept current.
    listed: HashMap<String, BTreeMap<String, K>>,
    /// Per namespace that is (re)listing: the objects seen so far.
    listing: HashMap<String, BTreeMap<String, K>>,
}

impl<K: Resource + Clone> Merge<K> {
    /// A merge of `namespaces`, none listed yet.
    pub fn new(namespaces: impl IntoIterator<Item = String>) -> Self {
        Merge {
            fresh: namespaces.into_iter().collect(),
            listed: HashMap::new(),
            listing: HashMap::new(),
        }
    }

    /// Whether the merged stream is between an `Init` and its `InitDone`.
    fn initialising(&self) -> bool {
        !self.fresh.is_empty() || !self.listing.is_empty()
    }

    /// The merged events for one event of namespace `ns`.
    pub fn handle(&mut self, ns: &str, event: watcher::Result<Event<K>>) -> Vec<watcher::Result<Event<K>>> {
        let event = match event {
            Ok(event) => event,
            Err(e) => return vec![Err(e)],
        };
        match event {
            Event::Init => {
                self.fresh.remove(ns);
                self.listed.remove(ns);
                self.listing.insert(ns.to_owned(), BTreeMap::new());
                self.replay()
            }
            Event::InitApply(obj) => {
                self.listing
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(obj.name_any(), obj.clone());
                vec![Ok(Event::InitApply(obj))]
            }
            Event::InitDone => {
                let objects = self.listing.remove(ns).unwrap_or_default();
                self.fresh.remove(ns);
                self.listed.insert(ns.to_owned(), objects);
                if self.initialising() {
                    Vec::new()
                } else {
                    vec![Ok(Event::InitDone)]
                }
            }
            Event::Apply(obj) => {
                let target = match self.listing.get_mut(ns) {
                    Some(objects) => objects,
                    None => self.listed.entry(ns.to_owned()).or_default(),
                };
                target.insert(obj.name_any(), obj.clone());
                if self.initialising() {
                    vec![Ok(Event::InitApply(obj))]
                } else {
                    vec![Ok(Event::Apply(obj))]
                }
            }
            Event::Delete(obj) => {
                let name = obj.name_any();
                for objects in [self.listing.get_mut(ns), self.listed.get_mut(ns)]
                    .into_iter()
                    .flatten()
                {
                    objects.remove(&name);
                }
                if self.initialising() {
                    self.replay()
                } else {
                    vec![Ok(Event::Delete(obj))]
                }
            }
        }
    }

    /// `Init`, then every object known so far: the reflector's buffer starts over with all of them.
    fn replay(&self) -> Vec<watcher::Result<Event<K>>> {
        let known = self
            .listed
            .values()
            .chain(self.listing.values())
            .flat_map(BTreeMap::values);
        std::iter::once(Ok(Event::Init))
            .chain(known.cloned().map(|o| Ok(Event::InitApply(o))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store::Writer;

    use super::*;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// Feeds `events` through a merge into a reflector store; returns the store's `ns/name`s and
    /// whether the merged stream emitted `InitDone`.
    fn run(events: Vec<(&str, Event<ConfigMap>)>) -> (Vec<String>, bool) {
        let mut merge = Merge::new(["a".to_string(), "b".to_string()]);
        let mut writer: Writer<ConfigMap> = Writer::default();
        let reader = writer.as_reader();
        let mut done = false;
        for (ns, event) in events {
            for merged in merge.handle(ns, Ok(event)) {
                let merged = merged.expect("no error");
                done |= matches!(merged, Event::InitDone);
                writer.apply_watcher_event(&merged);
            }
        }
        let mut names: Vec<String> = reader
            .state()
            .iter()
            .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
            .collect();
        names.sort();
        (names, done)
    }

    fn list(ns: &str, names: &[&str]) -> Vec<(String, Event<ConfigMap>)> {
        let mut events = vec![(ns.to_string(), Event::Init)];
        events.extend(names.iter().map(|n| (ns.to_string(), Event::InitApply(cm(ns, n)))));
        events.push((ns.to_string(), Event::InitDone));
        events
    }

    fn owned(events: &[(String, Event<ConfigMap>)]) -> Vec<(&str, Event<ConfigMap>)> {
        events.iter().map(|(ns, e)| (ns.as_str(), e.clone())).collect()
    }

    #[test]
    fn init_done_waits_for_every_namespace() {
        let a = list("a", &["x"]);
        let (names, done) = run(owned(&a));
        assert!(!done, "b has not listed yet");
        assert!(names.is_empty(), "{names:?}");
        let mut both = a.clone();
        both.extend(list("b", &["y"]));
        assert_eq!(run(owned(&both)), (vec!["a/x".into(), "b/y".into()], true));
    }

    #[test]
    fn one_namespace_relisting_keeps_the_others_objects() {
        let mut events = list("a", &["x", "gone"]);
        events.extend(list("b", &["y"]));
        events.push(("b".into(), Event::Apply(cm("b", "z"))));
        // a relists (410 Gone): "gone" was deleted meanwhile; b's objects must survive.
        events.extend(list("a", &["x"]));
        let (names, done) = run(owned(&events));
        assert!(done);
        assert_eq!(names, ["a/x", "b/y", "b/z"]);
    }

    #[test]
    fn changes_while_another_namespace_lists_are_not_lost() {
        let mut events = list("a", &["x"]);
        events.push(("b".into(), Event::Init));
        events.push(("a".into(), Event::Apply(cm("a", "new"))));
        events.push(("a".into(), Event::Delete(cm("a", "x"))));
        events.push(("b".into(), Event::InitApply(cm("b", "y"))));
        events.push(("b".into(), Event::InitDone));
        events.push(("a".into(), Event::Delete(cm("a", "new"))));
        events.push(("b".into(), Event::Apply(cm("b", "w"))));
        let (names, done) = run(owned(&events));
        assert!(done);
        assert_eq!(names, ["b/w", "b/y"]);
    }

    #[test]
    fn errors_pass_through() {
        let mut merge: Merge<ConfigMap> = Merge::new(["a".to_string()]);
        let out = merge.handle("a", Err(watcher::Error::NoResourceVersion));
        assert!(matches!(out.as_slice(), [Err(watcher::Error::NoResourceVersion)]));
    }

    #[test]
    fn scope_from_flags() {
        assert_eq!(
            WatchScope::parse::<&str>(&[], "capstan-system"),
            Ok(WatchScope::Cluster)
        );
        assert_eq!(WatchScope::parse(&[" ", ""], "capstan-system"), Ok(WatchScope::Cluster));
        let scope = WatchScope::parse(&["team-a", "team-b", "team-a"], "capstan-system").unwrap();
        assert_eq!(scope.describe(), "capstan-system, team-a, team-b");
        assert!(scope.contains("team-a") && scope.contains("capstan-system"));
        assert!(!scope.contains("team-c") && !scope.contains(""));
        assert!(WatchScope::Cluster.contains(""));
        for bad in ["Team", "-a", "a-", "a_b", &"x".repeat(64)] {
            let e = WatchScope::parse(&[bad], "capstan-system").unwrap_err();
            assert!(e.contains("not a namespace name"), "{bad}: {e}");
        }
        let many: Vec<String> = (0..MAX_WATCH_NAMESPACES).map(|i| format!("n{i}")).collect();
        assert!(WatchScope::parse(&many, "capstan-system").is_err());
    }
}
