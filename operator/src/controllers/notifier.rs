//! The hand-off between the Repository controller and everything that consumes revisions.
//!
//! [`RevisionNotifier`] is the one hub:
//! - **changes**: the Repository controller [`publish`](RevisionNotifier::publish)es a
//!   [`RevisionChange`] `(repo namespace, normalized url, ref, new sha)` whenever a tracked ref moves;
//!   consumers (the Application and ApplicationSet controllers) [`subscribe`](RevisionNotifier::subscribe)
//!   and use [`owners_tracking`](RevisionNotifier::owners_tracking) to trigger exactly the objects
//!   that track that ref;
//! - **tracked refs**: consumers [`track`](RevisionNotifier::track) the refs each of their objects
//!   uses per repository URL; the Repository controller lists HEAD, the default branch and these
//!   in `status.lastFetchedRevision` (so one `ls-remote` per repository serves everyone);
//! - **refresh requests**: webhooks (and a consumer whose tracked refs change) ask for an immediate
//!   `ls-remote` of the Repositories with a URL via [`request_refresh`](RevisionNotifier::request_refresh).
//!   Requests are coalesced per Repository: at most one per `coalesce` window, the last one
//!   delayed rather than dropped, so a burst of pushes causes one or two `ls-remote`s, never a storm.
//!
//! Namespace rule (docs/user-guide.md, Repositories): a Repository in the operator namespace serves every namespace; one in
//! another namespace only its own. Tracked refs and change owners follow that rule.
//!
//! A subscriber that lags behind the bounded broadcast channel gets `RecvError::Lagged`; it must
//! then re-check every object it owns (level-triggered), as missing a change is otherwise silent.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::api::Repository;
use crate::source::RepoUrl;

/// Capacity of the change broadcast; a slower subscriber sees `Lagged` and must resync.
const CHANGE_CAPACITY: usize = 1024;

/// The ref name of the remote's default branch pointer.
pub const HEAD: &str = "HEAD";

/// One tracked ref of one repository moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionChange {
    /// Namespace of the Repository that saw the change.
    pub namespace: String,
    /// The repository's [`url_key`].
    pub url: String,
    /// The ref as consumers name it (`HEAD`, `main`, `refs/tags/v1`).
    pub ref_: String,
    /// The new commit SHA.
    pub revision: String,
    /// The SHA before, when known.
    pub previous: Option<String>,
}

/// The matching key of a repository URL: host (plus a non-default port) and lower-cased path
/// without a trailing `.git`, with scheme and user dropped, so `https://github.com/Org/Repo`,
/// `ssh://git@github.com/org/repo.git` and `git@github.com:org/repo.git` share one key.
/// `None` for URLs that do not parse.
pub fn url_key(url: &str) -> Option<String> {
    let parsed = RepoUrl::parse(url).ok()?;
    let normalized = parsed.normalized();
    let without_scheme = normalized
        .split_once("://")
        .map_or(normalized.as_str(), |(_, rest)| rest);
    Some(without_scheme.to_ascii_lowercase())
}

/// Whether a Repository in `repo_namespace` may serve objects in `consumer_namespace`.
pub fn repository_serves(repo_namespace: &str, consumer_namespace: &str, operator_namespace: &str) -> bool {
    repo_namespace == consumer_namespace || repo_namespace == operator_namespace
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Tracking {
    namespace: String,
    url: String,
    refs: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct Slot {
    last: Option<Instant>,
    pending: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub struct RevisionNotifier {
    operator_namespace: String,
    coalesce: Duration,
    changes: broadcast::Sender<RevisionChange>,
    /// The last commit announced per (Repository namespace, url, ref): a change is announced once, though
    /// two paths report it (see [`publish`](Self::publish)).
    announced: Mutex<HashMap<(String, String, String), String>>,
    tracked: Mutex<HashMap<String, Vec<Tracking>>>,
    repositories: OnceLock<Store<Repository>>,
    refresh_tx: mpsc::UnboundedSender<ObjectRef<Repository>>,
    refresh_rx: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<Repository>>>>,
    slots: Arc<Mutex<HashMap<ObjectRef<Repository>, Slot>>>,
}

impl RevisionNotifier {
    /// A notifier for an operator whose namespace is `operator_namespace`; refresh requests for one
    /// Repository are coalesced to at most one per `coalesce`.
    pub fn new(operator_namespace: &str, coalesce: Duration) -> Self {
        let (changes, _) = broadcast::channel(CHANGE_CAPACITY);
        let (refresh_tx, refresh_rx) = mpsc::unbounded_channel();
        RevisionNotifier {
            operator_namespace: operator_namespace.to_string(),
            coalesce,
            changes,
            announced: Mutex::default(),
            tracked: Mutex::default(),
            repositories: OnceLock::new(),
            refresh_tx,
            refresh_rx: Mutex::new(Some(refresh_rx)),
            slots: Arc::default(),
        }
    }

    // ---- changes ----

    /// Announces a moved ref to every subscriber (none listening is fine), unless the same commit of the
    /// same ref was the last one announced. Two paths report a change: the Repository controller when it
    /// writes a new listing, and the Repository watch of every replica when it sees that listing (how a
    /// replica that does not run the Repository controller learns of new commits); the first one wins.
    pub fn publish(&self, change: RevisionChange) {
        let key = (change.namespace.clone(), change.url.clone(), change.ref_.clone());
        let mut announced = self.announced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if announced.get(&key) == Some(&change.revision) {
            return;
        }
        announced.insert(key, change.revision.clone());
        drop(announced);
        let _ = self.changes.send(change);
    }

    /// A receiver of every change published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RevisionChange> {
        self.changes.subscribe()
    }

    /// The owners (as passed to [`track`](Self::track)) that track `change.ref_` of `change.url`
    /// and may use the Repository that saw it (namespace rule). Sorted, without duplicates.
    pub fn owners_tracking(&self, change: &RevisionChange) -> Vec<String> {
        let tracked = self.lock_tracked();
        let mut owners: Vec<String> = tracked
            .iter()
            .filter(|(_, entries)| {
                entries.iter().any(|t| {
                    t.url == change.url
                        && t.refs.contains(&change.ref_)
                        && repository_serves(&change.namespace, &t.namespace, &self.operator_namespace)
                })
            })
            .map(|(owner, _)| owner.clone())
            .collect();
        owners.sort();
        owners
    }

    // ---- tracked refs ----

    /// Records that `owner` (e.g. `Application/<ns>/<name>`, in `namespace`) uses `refs` of the
    /// repository at `repo_url`, replacing what it tracked for that URL before. When the set is new
    /// or different, the matching Repositories are refreshed so `lastFetchedRevision` covers it.
    /// Returns whether anything changed.
    pub fn track(&self, owner: &str, namespace: &str, repo_url: &str, refs: impl IntoIterator<Item = String>) -> bool {
        let Some(url) = url_key(repo_url) else {
            return false;
        };
        let entry = Tracking {
            namespace: namespace.to_string(),
            url: url.clone(),
            refs: refs.into_iter().filter(|r| !r.is_empty()).collect(),
        };
        let changed = {
            let mut tracked = self.lock_tracked();
            let entries = tracked.entry(owner.to_string()).or_default();
            match entries.iter_mut().find(|t| t.url == url) {
                Some(existing) if *existing == entry => false,
                Some(existing) => {
                    *existing = entry;
                    true
                }
                None => {
                    entries.push(entry);
                    true
                }
            }
        };
        if changed {
            self.request_refresh(repo_url);
        }
        changed
    }

    /// Forgets everything `owner` tracked (its object was deleted).
    pub fn untrack(&self, owner: &str) {
        self.lock_tracked().remove(owner);
    }

    /// The refs tracked for the repository `url_key` that a Repository in `repo_namespace` serves.
    pub fn tracked_refs(&self, repo_namespace: &str, url_key: &str) -> BTreeSet<String> {
        self.lock_tracked()
            .values()
            .flatten()
            .filter(|t| t.url == url_key && repository_serves(repo_namespace, &t.namespace, &self.operator_namespace))
            .flat_map(|t| t.refs.iter().cloned())
            .collect()
    }

    fn lock_tracked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Tracking>>> {
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- refresh requests ----

    /// Called once by the Repository controller: the store refresh requests are matched against.
    pub fn attach_repositories(&self, store: Store<Repository>) {
        let _ = self.repositories.set(store);
    }

    /// Called once by the Repository controller: the stream of Repositories to reconcile now.
    pub fn take_refresh_receiver(&self) -> Option<mpsc::UnboundedReceiver<ObjectRef<Repository>>> {
        self.refresh_rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Asks for an immediate `ls-remote` of every (non-template) Repository whose URL has the same
    /// [`url_key`] as `repo_url`. Returns how many matched (0 before the Repository controller runs).
    pub fn request_refresh(&self, repo_url: &str) -> usize {
        let Some(key) = url_key(repo_url) else {
            return 0;
        };
        self.request_refresh_keys(&[key])
    }

    /// Like [`request_refresh`](Self::request_refresh) for several keys at once (a webhook payload
    /// names a repository by several URLs); each matching Repository counts once.
    pub fn request_refresh_keys(&self, keys: &[String]) -> usize {
        let Some(store) = self.repositories.get() else {
            return 0;
        };
        let matched: Vec<ObjectRef<Repository>> = store
            .state()
            .iter()
            .filter(|r| !r.spec.credential_template)
            .filter(|r| url_key(&r.spec.url).is_some_and(|k| keys.contains(&k)))
            .map(|r| ObjectRef::from_obj(r.as_ref()))
            .collect();
        for obj in &matched {
            self.refresh(obj.clone());
        }
        matched.len()
    }

    /// Asks for an immediate reconcile of one Repository, coalesced: sent now if none was sent in
    /// the last `coalesce`, otherwise one delayed request is scheduled (and further ones join it).
    pub fn refresh(&self, obj: ObjectRef<Repository>) {
        let now = Instant::now();
        let delay = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if slots.len() > 10_000 {
                slots.retain(|_, s| s.pending || s.last.is_some_and(|t| now.duration_since(t) < self.coalesce));
            }
            let slot = slots.entry(obj.clone()).or_default();
            match slot.last {
                _ if slot.pending => return,
                Some(last) if now.duration_since(last) < self.coalesce => {
                    slot.pending = true;
                    last + self.coalesce - now
                }
                _ => {
                    slot.last = Some(now);
                    Duration::ZERO
                }
            }
        };
        if delay.is_zero() {
            let _ = self.refresh_tx.send(obj);
            return;
        }
        let (tx, slots) = (self.refresh_tx.clone(), Arc::clone(&self.slots));
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(slot) = slots.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&obj) {
                slot.pending = false;
                slot.last = Some(Instant::now());
            }
            let _ = tx.send(obj);
        });
    }
}

/// Spawns the reaction of one controller to new commits: for every change, `refresh(Some(change),
/// the objects of kind `K` tracking the ref that moved)`; when the receiver lagged behind,
/// `refresh(None, every object in store)` (level-triggered: a missed change must not go unnoticed).
/// The consumer decides the order and forces a fresh resolution of each object it wakes.
pub fn on_new_commits<K>(
    notifier: Arc<RevisionNotifier>,
    store: Store<K>,
    refresh: impl Fn(Option<&RevisionChange>, Vec<ObjectRef<K>>) + Send + 'static,
) where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut changes = notifier.subscribe();
    let prefix = format!("{}/", K::kind(&()));
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(change) => {
                    let owners = notifier
                        .owners_tracking(&change)
                        .iter()
                        .filter_map(|owner| owner.strip_prefix(&prefix).and_then(|r| r.split_once('/')))
                        .map(|(ns, name)| ObjectRef::new(name).within(ns))
                        .collect();
                    refresh(Some(&change), owners);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let all = store.state().iter().map(|o| ObjectRef::from_obj(o.as_ref())).collect();
                    refresh(None, all);
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// The owner key other controllers pass to [`RevisionNotifier::track`] for an object.
pub fn owner_key<K: kube::Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_reported_by_both_paths_is_announced_once_a_later_commit_again() {
        let n = RevisionNotifier::new("capstan-system", Duration::from_secs(1));
        let mut rx = n.subscribe();
        let change = |rev: char, prev: char| RevisionChange {
            namespace: "capstan-system".into(),
            url: "g.example/o/r".into(),
            ref_: "HEAD".into(),
            revision: rev.to_string().repeat(40),
            previous: Some(prev.to_string().repeat(40)),
        };
        n.publish(change('b', 'a')); // the Repository controller
        n.publish(change('b', 'a')); // the Repository watch, seeing the status it wrote
        n.publish(change('c', 'b'));
        n.publish(change('b', 'c')); // a force-push back is a change too
        let got: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|c| c.revision[..1].to_string())
            .collect();
        assert_eq!(got, ["b", "c", "b"]);
    }

    #[test]
    fn url_forms_share_one_key() {
        let key = url_key("https://github.com/Org/Repo").unwrap();
        assert_eq!(key, "github.com/org/repo");
        for same in [
            "https://github.com/org/repo.git",
            "https://github.com/org/repo/",
            "https://alice@github.com:443/org/repo.git",
            "http://github.com/org/repo",
            "ssh://git@github.com/org/repo.git",
            "ssh://git@github.com:22/org/repo",
            "git@github.com:org/repo.git",
            "git@github.com:org/repo",
            "git://github.com/org/repo.git",
            "git@GitHub.com:Org/Repo.git",
        ] {
            assert_eq!(url_key(same).as_deref(), Some(key.as_str()), "{same}");
        }
        for different in [
            "https://github.com/org/repo2",
            "https://github.com/org/repo/sub",
            "https://github.com.evil.io/org/repo",
            "https://gitlab.com/org/repo",
            "ssh://git@github.com:2222/org/repo",
        ] {
            assert_ne!(url_key(different).as_deref(), Some(key.as_str()), "{different}");
        }
        assert_eq!(url_key("not a url"), None);
        assert_eq!(
            url_key("http://127.0.0.1:8080/repo.git"),
            url_key("git://127.0.0.1:8080/repo")
        );
    }

    #[test]
    fn tracked_refs_follow_the_namespace_rule() {
        let n = RevisionNotifier::new("capstan-system", Duration::from_secs(1));
        n.track(
            "Application/team-a/app1",
            "team-a",
            "https://g.example/o/r",
            ["main".to_string()],
        );
        n.track(
            "Application/team-b/app2",
            "team-b",
            "git@g.example:o/r.git",
            ["v2".to_string(), "HEAD".to_string()],
        );
        n.track(
            "Application/team-a/app3",
            "team-a",
            "https://g.example/o/other",
            ["dev".to_string()],
        );
        let key = url_key("https://g.example/o/r").unwrap();
        let refs = |ns: &str| n.tracked_refs(ns, &key).into_iter().collect::<Vec<_>>();
        assert_eq!(refs("team-a"), vec!["main"]);
        assert_eq!(refs("team-b"), vec!["HEAD", "v2"]);
        assert_eq!(refs("capstan-system"), vec!["HEAD", "main", "v2"]);
        assert!(refs("team-c").is_empty());

        let change = |ns: &str, r: &str| RevisionChange {
            namespace: ns.into(),
            url: key.clone(),
            ref_: r.into(),
            revision: "a".repeat(40),
            previous: None,
        };
        assert_eq!(
            n.owners_tracking(&change("team-a", "main")),
            vec!["Application/team-a/app1"]
        );
        assert!(n.owners_tracking(&change("team-b", "main")).is_empty());
        assert_eq!(
            n.owners_tracking(&change("capstan-system", "main")),
            vec!["Application/team-a/app1"]
        );
        assert_eq!(
            n.owners_tracking(&change("capstan-system", "HEAD")),
            vec!["Application/team-b/app2"]
        );
        // Re-tracking the same set is not a change; a different set is; untrack forgets.
        assert!(!n.track(
            "Application/team-a/app1",
            "team-a",
            "https://g.example/o/r.git",
            ["main".to_string()]
        ));
        assert!(n.track(
            "Application/team-a/app1",
            "team-a",
            "https://g.example/o/r.git",
            ["release".to_string()]
        ));
        assert_eq!(refs("team-a"), vec!["release"]);
        n.untrack("Application/team-a/app1");
        assert!(refs("team-a").is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn refresh_requests_are_coalesced_not_dropped() {
        let n = RevisionNotifier::new("capstan-system", Duration::from_secs(2));
        let mut rx = n.take_refresh_receiver().unwrap();
        assert!(n.take_refresh_receiver().is_none());
        let a = ObjectRef::<Repository>::new("a").within("ns");
        let b = ObjectRef::<Repository>::new("b").within("ns");
        n.refresh(a.clone());
        n.refresh(b.clone());
        for _ in 0..10 {
            n.refresh(a.clone());
        }
        assert_eq!(rx.recv().await.unwrap(), a);
        assert_eq!(rx.recv().await.unwrap(), b);
        // The burst collapsed into one delayed request, delivered after the window.
        let start = Instant::now();
        assert_eq!(rx.recv().await.unwrap(), a);
        assert!(Instant::now() - start >= Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(rx.try_recv().is_err());
        // After the window a request goes out at once.
        n.refresh(a.clone());
        assert_eq!(rx.try_recv().unwrap(), a);
    }

    #[test]
    fn refresh_without_repository_controller_matches_nothing() {
        let n = RevisionNotifier::new("capstan-system", Duration::from_secs(1));
        assert_eq!(n.request_refresh("https://g.example/o/r"), 0);
        assert_eq!(n.request_refresh("::"), 0);
    }
}
