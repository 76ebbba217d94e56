//! The RBAC authorizer: which rules apply to a user in a namespace, and whether one of them allows a request.
//!
//! It runs on every request, so it is built for that: the Roles, ClusterRoles and bindings are indexed once
//! (bindings by subject: user, group, ServiceAccount), the rules that apply to one (user, groups, namespace)
//! are resolved once and cached, and both are thrown away whenever an RBAC object changes: at once when a
//! client wrote it (so a RoleBinding created by one request is in force for the next one), and through the
//! store's change feed ([`watch_changes`]) when a controller did (aggregation, garbage collection,
//! namespace deletion), as kube-apiserver's informer-fed authorizer does.
//!
//! Semantics follow kube-apiserver: ClusterRoleBindings apply everywhere, RoleBindings in their namespace; a
//! binding to a missing role grants nothing and is reported in the reason (`RBAC: clusterrole... not
//! found`); members of `system:masters` are allowed everything before RBAC is asked (the privileged-group
//! authorizer), and their rule list says so (`*` on everything).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::registry::{res_key, ResKey};
use crate::server::Shared;
use crate::store::{Event, Store};

use super::rules::{rule_allows, Attributes, Rule};
use super::{UserInfo, SYSTEM_MASTERS};

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const SA_PREFIX: &str = "system:serviceaccount:";
/// Bound on cached (user, namespace) rule sets; the cache is simply cleared when full.
const CACHE_LIMIT: usize = 4096;

/// One subject of a binding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Subject {
    User(String),
    Group(String),
    /// (namespace, name); a RoleBinding's subject without a namespace means the binding's namespace.
    ServiceAccount(String, String),
}

impl Subject {
    fn describe(&self) -> String {
        match self {
            Subject::User(n) => format!("User {n:?}"),
            Subject::Group(n) => format!("Group {n:?}"),
            Subject::ServiceAccount(ns, n) => format!("ServiceAccount {:?}", format!("{n}/{ns}")),
        }
    }
}

#[derive(Debug, Clone)]
struct Binding {
    name: String,
    /// Empty for ClusterRoleBindings.
    namespace: String,
    role_kind: String,
    role_name: String,
    subjects: Vec<Subject>,
}

impl Binding {
    fn from_json(obj: &Value) -> Binding {
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
        let namespace = s("/metadata/namespace");
        let subjects = obj
            .get("subjects")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| subject(x, &namespace)).collect())
            .unwrap_or_default();
        Binding {
            name: s("/metadata/name"),
            role_kind: s("/roleRef/kind"),
            role_name: s("/roleRef/name"),
            namespace,
            subjects,
        }
    }

    /// `ClusterRoleBinding "x" of ClusterRole "y" to Group "z"` (the allow reason's source).
    fn describe(&self, subject: &Subject) -> String {
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                self.name,
                self.role_kind,
                self.role_name,
                subject.describe()
            )
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", self.name, self.namespace),
                self.role_kind,
                self.role_name,
                subject.describe()
            )
        }
    }
}

fn subject(v: &Value, binding_ns: &str) -> Option<Subject> {
    let name = v.get("name")?.as_str()?.to_string();
    match v.get("kind")?.as_str()? {
        "User" => Some(Subject::User(name)),
        "Group" => Some(Subject::Group(name)),
        "ServiceAccount" => {
            let ns = v.get("namespace").and_then(Value::as_str).unwrap_or("");
            let ns = if ns.is_empty() { binding_ns } else { ns };
            (!ns.is_empty()).then(|| Subject::ServiceAccount(ns.to_string(), name))
        }
        _ => None,
    }
}

/// The subjects a user answers to.
fn subjects_of(user: &UserInfo) -> Vec<Subject> {
    let mut out = vec![Subject::User(user.name.clone())];
    out.extend(user.groups.iter().map(|g| Subject::Group(g.clone())));
    if let Some((ns, name)) = user.name.strip_prefix(SA_PREFIX).and_then(|r| r.split_once(':')) {
        if !ns.is_empty() && !name.is_empty() && !name.contains(':') {
            out.push(Subject::ServiceAccount(ns.to_string(), name.to_string()));
        }
    }
    out
}

/// Every Role, ClusterRole and binding, with bindings indexed by subject.
#[derive(Default)]
struct Index {
    roles: HashMap<(String, String), Arc<Vec<Rule>>>,
    cluster_roles: HashMap<String, Arc<Vec<Rule>>>,
    cluster_bindings: Vec<Binding>,
    /// Subject → indexes into `cluster_bindings`, in binding order.
    cluster_by_subject: HashMap<Subject, Vec<usize>>,
    bindings: HashMap<String, Vec<Binding>>,
    /// (namespace, subject) → indexes into `bindings[namespace]`.
    by_subject: HashMap<(String, Subject), Vec<usize>>,
}

/// The storage keys of the four RBAC resources.
pub struct RbacKeys {
    pub roles: ResKey,
    pub cluster_roles: ResKey,
    pub role_bindings: ResKey,
    pub cluster_role_bindings: ResKey,
}

impl Default for RbacKeys {
    fn default() -> Self {
        RbacKeys {
            roles: res_key(RBAC_GROUP, "roles"),
            cluster_roles: res_key(RBAC_GROUP, "clusterroles"),
            role_bindings: res_key(RBAC_GROUP, "rolebindings"),
            cluster_role_bindings: res_key(RBAC_GROUP, "clusterrolebindings"),
        }
    }
}

impl RbacKeys {
    pub fn contains(&self, k: &ResKey) -> bool {
        [
            &self.roles,
            &self.cluster_roles,
            &self.role_bindings,
            &self.cluster_role_bindings,
        ]
        .contains(&k)
    }
}

fn name_of(obj: &Value) -> (String, String) {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    (s("/metadata/namespace"), s("/metadata/name"))
}

impl Index {
    fn build(store: &Store, keys: &RbacKeys) -> Index {
        let mut ix = Index::default();
        for r in store.list(&keys.roles, None).1 {
            ix.roles.insert(name_of(&r), Arc::new(Rule::list_from(&r)));
        }
        for r in store.list(&keys.cluster_roles, None).1 {
            ix.cluster_roles.insert(name_of(&r).1, Arc::new(Rule::list_from(&r)));
        }
        for b in store.list(&keys.cluster_role_bindings, None).1 {
            let b = Binding::from_json(&b);
            for s in &b.subjects {
                ix.cluster_by_subject
                    .entry(s.clone())
                    .or_default()
                    .push(ix.cluster_bindings.len());
            }
            ix.cluster_bindings.push(b);
        }
        for b in store.list(&keys.role_bindings, None).1 {
            let b = Binding::from_json(&b);
            let list = ix.bindings.entry(b.namespace.clone()).or_default();
            for s in &b.subjects {
                ix.by_subject
                    .entry((b.namespace.clone(), s.clone()))
                    .or_default()
                    .push(list.len());
            }
            list.push(b);
        }
        ix
    }

    /// The rules a role reference names, or the error kube reports for a missing role.
    fn role_rules(&self, kind: &str, name: &str, ns: &str) -> Result<Arc<Vec<Rule>>, String> {
        match kind {
            "ClusterRole" => self
                .cluster_roles
                .get(name)
                .cloned()
                .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {name:?} not found")),
            "Role" => self
                .roles
                .get(&(ns.to_string(), name.to_string()))
                .cloned()
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {name:?} not found")),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    fn add_binding(&self, b: &Binding, subjects: &[Subject], out: &mut RuleSet) {
        let Some(matched) = b.subjects.iter().find(|s| subjects.contains(s)) else {
            return;
        };
        match self.role_rules(&b.role_kind, &b.role_name, &b.namespace) {
            Ok(rules) => {
                let source: Arc<str> = Arc::from(b.describe(matched));
                out.rules.extend(rules.iter().map(|r| (r.clone(), source.clone())));
            }
            Err(e) => out.errors.push(e),
        }
    }

    /// `RulesFor`: ClusterRoleBindings first, then the RoleBindings of `ns`, each in creation-list order.
    fn rules_for(&self, user: &UserInfo, ns: &str) -> RuleSet {
        let subjects = subjects_of(user);
        let mut out = RuleSet::default();
        let mut idx: Vec<usize> = subjects
            .iter()
            .filter_map(|s| self.cluster_by_subject.get(s))
            .flatten()
            .copied()
            .collect();
        idx.sort_unstable();
        idx.dedup();
        for i in idx {
            self.add_binding(&self.cluster_bindings[i], &subjects, &mut out);
        }
        if ns.is_empty() {
            return out;
        }
        let mut idx: Vec<usize> = subjects
            .iter()
            .filter_map(|s| self.by_subject.get(&(ns.to_string(), s.clone())))
            .flatten()
            .copied()
            .collect();
        idx.sort_unstable();
        idx.dedup();
        if let Some(list) = self.bindings.get(ns) {
            for i in idx {
                self.add_binding(&list[i], &subjects, &mut out);
            }
        }
        out
    }
}

/// The rules that apply to one user in one namespace, each with the binding that grants it, plus the
/// resolution errors (bindings to missing roles).
#[derive(Debug, Default, Clone)]
pub struct RuleSet {
    pub rules: Vec<(Rule, Arc<str>)>,
    pub errors: Vec<String>,
}

/// An authorization decision. RBAC never denies: it allows or has no opinion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// `RBAC: <error>` or `RBAC: [<e1>, <e2>]` (Go's aggregate error text).
fn reason_from_errors(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => format!("RBAC: {one}"),
        many => format!("RBAC: [{}]", many.join(", ")),
    }
}

type CacheKey = (String, Vec<String>, String);

struct State {
    index: Arc<Index>,
    cache: HashMap<CacheKey, Arc<RuleSet>>,
    stale: bool,
}

/// Mark the authorizer stale whenever an RBAC object changes (a task fed by the store's controller feed).
pub async fn watch_changes(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>) {
    while let Some(ev) = rx.recv().await {
        if sh.auth.authorizer.keys.contains(&ev.obj.res) {
            sh.auth.authorizer.invalidate();
        }
    }
}

/// The authorizer shared by every request.
pub struct Authorizer {
    pub keys: RbacKeys,
    state: RwLock<State>,
}

impl Default for Authorizer {
    fn default() -> Self {
        Authorizer {
            keys: RbacKeys::default(),
            state: RwLock::new(State {
                index: Arc::new(Index::default()),
                cache: HashMap::new(),
                stale: true,
            }),
        }
    }
}

impl Authorizer {
    /// Forget the index and every cached rule set; the next decision rebuilds them from the store.
    pub fn invalidate(&self) {
        self.state.write().stale = true;
    }

    /// The index, rebuilt first if an RBAC object changed since it was built.
    fn refresh(&self, store: &Store) -> Arc<Index> {
        {
            let st = self.state.read();
            if !st.stale {
                return st.index.clone();
            }
        }
        let mut st = self.state.write();
        if st.stale {
            st.index = Arc::new(Index::build(store, &self.keys));
            st.cache.clear();
            st.stale = false;
        }
        st.index.clone()
    }

    /// The rules that apply to `user` in `ns` (cluster-wide ones only for `ns == ""`).
    pub fn rules_for(&self, store: &Store, user: &UserInfo, ns: &str) -> Arc<RuleSet> {
        let index = self.refresh(store);
        let mut groups = user.groups.clone();
        groups.sort();
        let key = (user.name.clone(), groups, ns.to_string());
        if let Some(hit) = self.state.read().cache.get(&key) {
            return hit.clone();
        }
        let set = Arc::new(index.rules_for(user, ns));
        let mut st = self.state.write();
        if !Arc::ptr_eq(&st.index, &index) {
            return set;
        }
        if st.cache.len() >= CACHE_LIMIT {
            st.cache.clear();
        }
        st.cache.insert(key, set.clone());
        set
    }

    /// Decide one request.
    pub fn authorize(&self, store: &Store, user: &UserInfo, a: &Attributes) -> Decision {
        if user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let set = self.rules_for(store, user, &a.namespace);
        match set.rules.iter().find(|(r, _)| rule_allows(a, r)) {
            Some((_, source)) => Decision {
                allowed: true,
                reason: format!("RBAC: allowed by {source}"),
            },
            None => Decision {
                allowed: false,
                reason: reason_from_errors(&set.errors),
            },
        }
    }

    /// Every rule `user` holds in `ns`, as SelfSubjectRulesReview and the escalation check see them: for
    /// `system:masters` the privileged-group grant (`*` on everything) comes first.
    pub fn effective_rules(&self, store: &Store, user: &UserInfo, ns: &str) -> (Vec<Rule>, Vec<String>) {
        let set = self.rules_for(store, user, ns);
        let mut rules = Vec::new();
        if user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            rules.push(Rule::new(&["*"], &["*"], &["*"]));
            rules.push(Rule::urls(&["*"], &["*"]));
        }
        rules.extend(set.rules.iter().map(|(r, _)| r.clone()));
        (rules, set.errors.clone())
    }

    /// The rules a role reference grants in `ns` (for binding escalation checks).
    pub fn role_ref_rules(&self, store: &Store, kind: &str, name: &str, ns: &str) -> Result<Vec<Rule>, String> {
        self.refresh(store)
            .role_rules(kind, name, ns)
            .map(|r| r.as_ref().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn index() -> Index {
        let mut ix = Index::default();
        ix.cluster_roles.insert(
            "view".into(),
            Arc::new(vec![Rule::new(&["get", "list", "watch"], &[""], &["configmaps"])]),
        );
        ix.roles.insert(
            ("team".into(), "editor".into()),
            Arc::new(vec![Rule::new(&["*"], &[""], &["secrets"])]),
        );
        let crb = Binding::from_json(&json!({"metadata": {"name": "viewers"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "Group", "name": "readers"}]}));
        ix.cluster_by_subject.insert(Subject::Group("readers".into()), vec![0]);
        ix.cluster_bindings.push(crb);
        let rbs = vec![
            Binding::from_json(&json!({"metadata": {"name": "sa-edit", "namespace": "team"},
                "roleRef": {"kind": "Role", "name": "editor"},
                "subjects": [{"kind": "ServiceAccount", "name": "bot"}]})),
            Binding::from_json(&json!({"metadata": {"name": "dangling", "namespace": "team"},
                "roleRef": {"kind": "ClusterRole", "name": "gone"},
                "subjects": [{"kind": "User", "name": "alice"}]})),
        ];
        ix.by_subject.insert(
            ("team".into(), Subject::ServiceAccount("team".into(), "bot".into())),
            vec![0],
        );
        ix.by_subject
            .insert(("team".into(), Subject::User("alice".into())), vec![1]);
        ix.bindings.insert("team".into(), rbs);
        ix
    }

    #[test]
    fn cluster_bindings_apply_everywhere_role_bindings_in_their_namespace() {
        let ix = index();
        let reader = user("bob", &["readers"]);
        assert_eq!(ix.rules_for(&reader, "").rules.len(), 1);
        assert_eq!(ix.rules_for(&reader, "team").rules.len(), 1);
        let bot = user("system:serviceaccount:team:bot", &[]);
        let set = ix.rules_for(&bot, "team");
        assert_eq!(set.rules.len(), 1);
        assert_eq!(
            set.rules[0].1.as_ref(),
            r#"RoleBinding "sa-edit/team" of Role "editor" to ServiceAccount "bot/team""#
        );
        assert!(ix.rules_for(&bot, "other").rules.is_empty());
        assert!(ix
            .rules_for(&user("system:serviceaccount:other:bot", &[]), "team")
            .rules
            .is_empty());
    }

    #[test]
    fn missing_roles_grant_nothing_and_are_reported() {
        let set = index().rules_for(&user("alice", &[]), "team");
        assert!(set.rules.is_empty());
        assert_eq!(
            reason_from_errors(&set.errors),
            r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#
        );
        assert_eq!(reason_from_errors(&["a".into(), "b".into()]), "RBAC: [a, b]");
    }

    #[test]
    fn service_account_usernames_are_parsed_strictly() {
        let subjects = subjects_of(&user("system:serviceaccount:ns:sa", &["g"]));
        assert!(subjects.contains(&Subject::ServiceAccount("ns".into(), "sa".into())));
        assert!(subjects.contains(&Subject::Group("g".into())));
        for name in [
            "system:serviceaccount:ns",
            "system:serviceaccount::sa",
            "system:serviceaccount:a:b:c",
        ] {
            assert!(
                !subjects_of(&user(name, &[]))
                    .iter()
                    .any(|s| matches!(s, Subject::ServiceAccount(..))),
                "{name}"
            );
        }
    }
}
