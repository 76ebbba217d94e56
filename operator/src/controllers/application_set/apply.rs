//! Create, update and delete the generated Applications.
//!
//! Pure part: [`prepare`] turns generated Applications into the objects to write (the set's
//! namespace — a template naming another is refused —, the controller ownerReference, automated
//! sync stripped under RollingSync), [`plan`] compares them with the existing Applications under
//! `syncPolicy.applicationsSync` (Argo CD's meanings: `create-only` never updates or deletes,
//! `create-update` never deletes, `create-delete` never updates, `sync` does all three), and
//! [`keep_ignored`] applies `ignoreApplicationDifferences` to an update. Everything is validated
//! before the first write: an error means nothing is written.
//!
//! I/O part: [`execute`] writes the plan — server-side apply (field manager
//! `capstan-applicationset`, forced) for creates and updates, a plain create (409 tolerated) when
//! the policy forbids updates so a stale cache can never turn a create into an update, deletes with
//! a uid precondition so a recreated Application is never deleted by mistake.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::{json, Value};

use crate::api::application_set::{ApplicationSet, ApplicationSetIgnoreDifferences, ApplicationsSyncPolicy};
use crate::api::Application;
use crate::appset::GeneratedApp;

/// Field manager of the Applications the controller writes.
pub use crate::api::labels::APPLICATION_SET_FIELD_MANAGER as FIELD_MANAGER;
/// Parallel writes per reconcile.
const WRITE_CONCURRENCY: usize = 16;

/// The policy in effect (default `sync`).
pub fn applications_sync(set: &ApplicationSet) -> ApplicationsSyncPolicy {
    set.spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.applications_sync)
        .unwrap_or_default()
}

/// Whether `policy` allows updating existing Applications.
pub fn allows_update(policy: ApplicationsSyncPolicy) -> bool {
    matches!(
        policy,
        ApplicationsSyncPolicy::Sync | ApplicationsSyncPolicy::CreateUpdate
    )
}

/// Whether `policy` allows deleting Applications no longer generated.
pub fn allows_delete(policy: ApplicationsSyncPolicy) -> bool {
    matches!(
        policy,
        ApplicationsSyncPolicy::Sync | ApplicationsSyncPolicy::CreateDelete
    )
}

/// A generated Application ready to be written.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// Its name.
    pub name: String,
    /// The object, in the set's namespace, owned by the set.
    pub app: Application,
    /// `syncPolicy.automated.prune` of the template before RollingSync stripped it.
    pub prune: bool,
}

/// The ownerReference every generated Application carries.
pub fn owner_reference(set: &ApplicationSet) -> OwnerReference {
    OwnerReference {
        api_version: ApplicationSet::api_version(&()).into_owned(),
        kind: ApplicationSet::kind(&()).into_owned(),
        name: set.name_any(),
        uid: set.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Puts each generated Application in the set's namespace with the set's ownerReference; strips
/// `syncPolicy.automated` when `rolling`. Refuses (as a whole) a template naming another namespace.
pub fn prepare(set: &ApplicationSet, generated: Vec<GeneratedApp>, rolling: bool) -> Result<Vec<Desired>, String> {
    let ns = set.namespace().unwrap_or_default();
    let owner = owner_reference(set);
    let mut out = Vec::with_capacity(generated.len());
    for GeneratedApp { name, mut application } in generated {
        if let Some(other) = application
            .metadata
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty() && **n != ns)
        {
            return Err(format!(
                "generated Application {name:?} names namespace {other:?}: generated Applications must be in the \
                 ApplicationSet's namespace {ns:?}"
            ));
        }
        application.metadata.namespace = Some(ns.clone());
        application.metadata.owner_references = Some(vec![owner.clone()]);
        application.operation = None;
        application.status = None;
        let mut prune = false;
        if let Some(policy) = application.spec.sync_policy.as_mut() {
            prune = policy.automated.as_ref().is_some_and(|a| a.prune);
            if rolling {
                policy.automated = None;
            }
        }
        out.push(Desired {
            name,
            app: application,
            prune,
        });
    }
    Ok(out)
}

/// What an existing Application in the set's namespace is to the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Its controller ownerReference is this set.
    Ours,
    /// Its controller ownerReference is something else: never touched.
    Foreign(String),
    /// No controller ownerReference: adopted when generated, else left alone.
    Unowned,
}

/// The ownership of `app` relative to the set with uid `set_uid`.
pub fn ownership(app: &Application, set_uid: &str) -> Ownership {
    let controller = app
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    match controller {
        Some(r) if r.uid == set_uid => Ownership::Ours,
        Some(r) => Ownership::Foreign(format!("{} {}", r.kind, r.name)),
        None => Ownership::Unowned,
    }
}

/// The writes one reconcile makes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Applications to create.
    pub create: Vec<Desired>,
    /// Applications to update (already merged with the ignored fields of the live object).
    pub update: Vec<Desired>,
    /// Names of Applications already as generated (or the policy forbids updating them).
    pub unchanged: Vec<String>,
    /// Applications to delete: `(name, uid)`.
    pub delete: Vec<(String, String)>,
    /// Problems found before any write; a plan with problems must not be executed.
    pub problems: Vec<String>,
    /// `jqPathExpressions` outside the supported subset (reported, ignored).
    pub warnings: Vec<String>,
}

/// Compares desired with existing Applications (those of the set's namespace) under `policy`.
pub fn plan(
    policy: ApplicationsSyncPolicy,
    set_uid: &str,
    desired: Vec<Desired>,
    existing: &[Arc<Application>],
    ignore: &[ApplicationSetIgnoreDifferences],
) -> Plan {
    let mut out = Plan::default();
    let by_name: HashMap<String, &Arc<Application>> = existing.iter().map(|a| (a.name_any(), a)).collect();
    let wanted: BTreeSet<String> = desired.iter().map(|d| d.name.clone()).collect();
    let mut warnings = BTreeSet::new();
    for mut d in desired {
        match by_name.get(&d.name) {
            None => out.create.push(d),
            Some(live) => match ownership(live, set_uid) {
                Ownership::Foreign(owner) => out.problems.push(format!(
                    "Application {:?} already exists and is controlled by {owner}",
                    d.name
                )),
                _ if live.metadata.deletion_timestamp.is_some() => out.unchanged.push(d.name),
                _ if !allows_update(policy) => out.unchanged.push(d.name),
                own => {
                    warnings.extend(keep_ignored(&mut d, live, ignore));
                    if own == Ownership::Ours && up_to_date(&d.app, live) {
                        out.unchanged.push(d.name);
                    } else {
                        out.update.push(d);
                    }
                }
            },
        }
    }
    if allows_delete(policy) {
        for live in existing {
            let name = live.name_any();
            if !wanted.contains(&name)
                && ownership(live, set_uid) == Ownership::Ours
                && live.metadata.deletion_timestamp.is_none()
            {
                out.delete.push((name, live.uid().unwrap_or_default()));
            }
        }
    }
    out.warnings = warnings.into_iter().collect();
    out
}

/// Whether `live` already carries everything `desired` sets: the same spec, and desired labels,
/// annotations, finalizers and ownerReferences present.
pub fn up_to_date(desired: &Application, live: &Application) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>, have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let list_subset = |want: &Option<Vec<String>>, have: &Option<Vec<String>>| {
        want.iter().flatten().all(|f| have.iter().flatten().any(|h| h == f))
    };
    let owners_present = desired
        .metadata
        .owner_references
        .iter()
        .flatten()
        .all(|o| live.metadata.owner_references.iter().flatten().any(|l| l == o));
    let spec_equal = serde_json::to_value(&desired.spec).ok() == serde_json::to_value(&live.spec).ok();
    spec_equal
        && owners_present
        && subset(&desired.metadata.labels, &live.metadata.labels)
        && subset(&desired.metadata.annotations, &live.metadata.annotations)
        && list_subset(&desired.metadata.finalizers, &live.metadata.finalizers)
}

/// `ignoreApplicationDifferences`: at every ignored path of a rule matching the Application, the
/// live value is kept (or the field left absent when the live object has none), so an update never
/// overwrites it. jq expressions are accepted when they are plain paths (`.spec.a.b`, `."k"`,
/// `.["k"]`, `.a[0]`); others are returned as warnings and ignored.
pub fn keep_ignored(
    desired: &mut Desired,
    live: &Application,
    rules: &[ApplicationSetIgnoreDifferences],
) -> Vec<String> {
    let matching: Vec<&ApplicationSetIgnoreDifferences> = rules
        .iter()
        .filter(|r| r.name.as_deref().is_none_or(|n| n.is_empty() || n == desired.name))
        .collect();
    if matching.is_empty() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    let mut pointers: Vec<String> = Vec::new();
    for rule in matching {
        pointers.extend(rule.json_pointers.iter().cloned());
        for expr in &rule.jq_path_expressions {
            match jq_to_pointer(expr) {
                Some(p) => pointers.push(p),
                None => warnings.push(format!(
                    "unsupported jqPathExpression {:?} in ignoreApplicationDifferences (ignored)",
                    crate::text::truncate(expr, 100)
                )),
            }
        }
    }
    let (Ok(mut want), Ok(have)) = (serde_json::to_value(&desired.app), serde_json::to_value(live)) else {
        return warnings;
    };
    for pointer in &pointers {
        if pointer.is_empty() || pointer.starts_with("/metadata/ownerReferences") || pointer == "/metadata" {
            continue;
        }
        match have.pointer(pointer) {
            Some(v) => set_pointer(&mut want, pointer, v.clone()),
            None => crate::engine::diff::ignore::remove_pointer(&mut want, pointer),
        }
    }
    match serde_json::from_value::<Application>(want) {
        Ok(app) => desired.app = app,
        Err(e) => warnings.push(format!(
            "ignoreApplicationDifferences produced an invalid Application: {e}"
        )),
    }
    warnings
}

/// Sets `value` at an RFC 6901 pointer, creating missing objects on the way (array indices must
/// exist). Does nothing when the path crosses a scalar.
pub fn set_pointer(doc: &mut Value, pointer: &str, value: Value) {
    let Some(rest) = pointer.strip_prefix('/') else {
        return;
    };
    let tokens: Vec<String> = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut cur = doc;
    for t in parents {
        let next = match cur {
            Value::Object(m) => Some(m.entry(t.clone()).or_insert_with(|| json!({}))),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else { return };
        cur = next;
    }
    match cur {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if let Some(slot) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                *slot = value;
            }
        }
        _ => {}
    }
}

/// A jq path expression that names one path (`.a.b`, `."a.b"`, `.["a"]`, `.a[0]`) as a JSON pointer.
pub fn jq_to_pointer(expr: &str) -> Option<String> {
    let s = expr.trim();
    if s.len() > 1024 || !s.starts_with('.') {
        return None;
    }
    let bytes: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = String::new();
    let escape = |t: &str| t.replace('~', "~0").replace('/', "~1");
    let read_quoted = |i: &mut usize| -> Option<String> {
        // at opening quote
        *i += 1;
        let mut t = String::new();
        while *i < bytes.len() && bytes[*i] != '"' {
            if bytes[*i] == '\\' {
                return None;
            }
            t.push(bytes[*i]);
            *i += 1;
        }
        if *i >= bytes.len() {
            return None;
        }
        *i += 1;
        Some(t)
    };
    while i < bytes.len() {
        match bytes[i] {
            '.' => {
                i += 1;
                if i < bytes.len() && bytes[i] == '"' {
                    out.push('/');
                    out.push_str(&escape(&read_quoted(&mut i)?));
                } else if i < bytes.len() && bytes[i] == '[' {
                    continue;
                } else {
                    let start = i;
                    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_' || bytes[i] == '-') {
                        i += 1;
                    }
                    if start == i {
                        return None;
                    }
                    out.push('/');
                    out.push_str(&bytes[start..i].iter().collect::<String>());
                }
            }
            '[' => {
                i += 1;
                if i < bytes.len() && bytes[i] == '"' {
                    let t = read_quoted(&mut i)?;
                    out.push('/');
                    out.push_str(&escape(&t));
                } else {
                    let start = i;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    if start == i {
                        return None;
                    }
                    out.push('/');
                    out.push_str(&bytes[start..i].iter().collect::<String>());
                }
                if i >= bytes.len() || bytes[i] != ']' {
                    return None;
                }
                i += 1;
            }
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The server-side apply body of a desired Application (no status, no operation).
pub fn apply_body(d: &Desired) -> Value {
    let mut body = serde_json::to_value(&d.app).unwrap_or(Value::Null);
    if let Some(map) = body.as_object_mut() {
        map.remove("status");
        map.remove("operation");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "managedFields",
                "generation",
            ] {
                meta.remove(field);
            }
        }
    }
    body
}

/// What executing a plan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Created Applications.
    pub created: Vec<String>,
    /// Updated Applications.
    pub updated: Vec<String>,
    /// Deleted Applications.
    pub deleted: Vec<String>,
    /// Failures (`name: message`), sanitized.
    pub failures: Vec<String>,
}

enum Write {
    Created(String),
    Updated(String),
    Deleted(String),
    Failed(String),
    Nothing,
}

/// Writes `plan` (which must have no problems) to the set's namespace, `WRITE_CONCURRENCY` at a time.
pub async fn execute(api: &Api<Application>, plan: &Plan, policy: ApplicationsSyncPolicy) -> Applied {
    let upsert = allows_update(policy);
    let mut jobs: Vec<(Desired, bool)> = plan.create.iter().cloned().map(|d| (d, true)).collect();
    jobs.extend(plan.update.iter().cloned().map(|d| (d, false)));
    let writes: Vec<Write> = futures::stream::iter(jobs)
        .map(|(d, create)| write_one(api.clone(), d, create, upsert))
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let deletes: Vec<Write> = futures::stream::iter(plan.delete.clone())
        .map(|(name, uid)| delete_one(api.clone(), name, uid))
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut applied = Applied::default();
    for r in writes.into_iter().chain(deletes) {
        match r {
            Write::Created(n) => applied.created.push(n),
            Write::Updated(n) => applied.updated.push(n),
            Write::Deleted(n) => applied.deleted.push(n),
            Write::Failed(m) => applied.failures.push(m),
            Write::Nothing => {}
        }
    }
    applied.created.sort();
    applied.updated.sort();
    applied.deleted.sort();
    applied
}

async fn write_one(api: Api<Application>, d: Desired, create: bool, upsert: bool) -> Write {
    let name = d.name.clone();
    if create && !upsert {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        return match api.create(&params, &d.app).await {
            Ok(_) => Write::Created(name),
            Err(kube::Error::Api(s)) if s.code == 409 => Write::Nothing,
            Err(e) => Write::Failed(format!("{name}: {}", kube_message(&e))),
        };
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(&name, &params, &Patch::Apply(apply_body(&d))).await {
        Ok(_) if create => Write::Created(name),
        Ok(_) => Write::Updated(name),
        Err(e) => Write::Failed(format!("{name}: {}", kube_message(&e))),
    }
}

async fn delete_one(api: Api<Application>, name: String, uid: String) -> Write {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Write::Deleted(name),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Write::Nothing,
        Err(e) => Write::Failed(format!("{name}: {}", kube_message(&e))),
    }
}

/// A Kubernetes error as a short message (API status message, never request bodies).
pub fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => crate::text::truncate(&format!("{} ({})", s.message, s.code), 300),
        other => crate::text::truncate(&other.to_string(), 300),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::{ApplicationSpec, SyncPolicy, SyncPolicyAutomated};
    use crate::api::application_set::ApplicationSetSpec;
    use kube::api::ObjectMeta;

    fn set() -> ApplicationSet {
        let mut s = ApplicationSet::new("set", ApplicationSetSpec::default());
        s.metadata.namespace = Some("apps".into());
        s.metadata.uid = Some("set-uid".into());
        s
    }

    fn generated(name: &str, path: &str) -> GeneratedApp {
        let mut spec: ApplicationSpec = serde_json::from_value(json!({
            "source": {"repoURL": "https://git.example/r", "path": path},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"},
            "syncPolicy": {"automated": {"prune": true}}
        }))
        .unwrap();
        spec.project = "default".into();
        GeneratedApp {
            name: name.into(),
            application: Application::new(name, spec),
        }
    }

    fn desired(names: &[&str]) -> Vec<Desired> {
        prepare(&set(), names.iter().map(|n| generated(n, n)).collect(), false).unwrap()
    }

    fn live(name: &str, path: &str, owner_uid: Option<&str>) -> Arc<Application> {
        let mut app = generated(name, path).application;
        app.metadata.namespace = Some("apps".into());
        app.metadata.uid = Some(format!("uid-{name}"));
        app.metadata.owner_references = owner_uid.map(|uid| {
            let mut o = owner_reference(&set());
            o.uid = uid.into();
            vec![o]
        });
        Arc::new(app)
    }

    fn names(d: &[Desired]) -> Vec<&str> {
        d.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn prepare_sets_namespace_owner_and_strips_automated_for_rolling_sync() {
        let out = prepare(&set(), vec![generated("a", "a")], true).unwrap();
        let app = &out[0].app;
        assert_eq!(app.metadata.namespace.as_deref(), Some("apps"));
        let owner = &app.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("ApplicationSet", "set-uid"));
        assert!(app.spec.sync_policy.as_ref().unwrap().automated.is_none());
        assert!(out[0].prune);
        let kept = prepare(&set(), vec![generated("a", "a")], false).unwrap();
        assert!(kept[0].app.spec.sync_policy.as_ref().unwrap().automated.is_some());
    }

    #[test]
    fn prepare_refuses_another_namespace() {
        let mut g = generated("a", "a");
        g.application.metadata.namespace = Some("kube-system".into());
        let err = prepare(&set(), vec![generated("b", "b"), g], false).unwrap_err();
        assert!(err.contains("kube-system"), "{err}");
        let mut same = generated("a", "a");
        same.application.metadata.namespace = Some("apps".into());
        assert!(prepare(&set(), vec![same], false).is_ok());
    }

    #[test]
    fn policies_decide_create_update_delete() {
        use ApplicationsSyncPolicy::*;
        // existing: "keep" (up to date), "change" (different path), "gone" (no longer generated).
        let existing = vec![
            live("keep", "keep", Some("set-uid")),
            live("change", "old-path", Some("set-uid")),
            live("gone", "gone", Some("set-uid")),
        ];
        let want = || desired(&["keep", "change", "new"]);
        let cases = [
            (CreateOnly, vec!["new"], vec![], vec![]),
            (CreateUpdate, vec!["new"], vec!["change"], vec![]),
            (CreateDelete, vec!["new"], vec![], vec!["gone"]),
            (Sync, vec!["new"], vec!["change"], vec!["gone"]),
        ];
        for (policy, create, update, delete) in cases {
            let p = plan(policy, "set-uid", want(), &existing, &[]);
            assert!(p.problems.is_empty(), "{policy:?}");
            assert_eq!(names(&p.create), create, "{policy:?} create");
            assert_eq!(names(&p.update), update, "{policy:?} update");
            let deleted: Vec<&str> = p.delete.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(deleted, delete, "{policy:?} delete");
            if !delete.is_empty() {
                assert_eq!(p.delete[0].1, "uid-gone");
            }
        }
    }

    #[test]
    fn only_own_applications_are_deleted_and_foreign_ones_are_refused() {
        let existing = vec![
            live("other-set", "x", Some("another-uid")),
            live("unowned", "x", None),
            live("mine", "mine", Some("set-uid")),
        ];
        let p = plan(
            ApplicationsSyncPolicy::Sync,
            "set-uid",
            desired(&["mine"]),
            &existing,
            &[],
        );
        assert!(p.delete.is_empty(), "{:?}", p.delete);
        assert!(p.problems.is_empty());
        // Generating a name another controller owns is an error (nothing applied); unowned is adopted.
        let p = plan(
            ApplicationsSyncPolicy::Sync,
            "set-uid",
            desired(&["other-set", "unowned"]),
            &existing,
            &[],
        );
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert_eq!(names(&p.update), vec!["unowned"]);
    }

    #[test]
    fn deleting_applications_are_left_alone() {
        let mut app = (*live("gone", "gone", Some("set-uid"))).clone();
        app.metadata.deletion_timestamp = Some(crate::controllers::status::now());
        let p = plan(
            ApplicationsSyncPolicy::Sync,
            "set-uid",
            desired(&[]),
            &[Arc::new(app)],
            &[],
        );
        assert!(p.delete.is_empty());
    }

    #[test]
    fn ignored_fields_keep_live_values() {
        let mut live_app = (*live("a", "a", Some("set-uid"))).clone();
        live_app.spec.source.target_revision = Some("hotfix".into());
        live_app.spec.sync_policy = Some(SyncPolicy {
            automated: None,
            ..SyncPolicy::default()
        });
        let live_app = Arc::new(live_app);
        let rules = vec![ApplicationSetIgnoreDifferences {
            name: None,
            json_pointers: vec!["/spec/source/targetRevision".into()],
            jq_path_expressions: vec![
                ".spec.syncPolicy.automated".into(),
                ".spec.x[] | select(.a == 1)".into(),
            ],
        }];
        let p = plan(
            ApplicationsSyncPolicy::Sync,
            "set-uid",
            desired(&["a"]),
            &[live_app],
            &rules,
        );
        // Nothing but ignored fields differ: no update.
        assert!(p.update.is_empty(), "{:?}", p.update);
        assert_eq!(p.unchanged, vec!["a"]);
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        // A rule for another name does not apply.
        let mut live_app = (*live("a", "a", Some("set-uid"))).clone();
        live_app.spec.source.target_revision = Some("hotfix".into());
        let rules = vec![ApplicationSetIgnoreDifferences {
            name: Some("b".into()),
            json_pointers: vec!["/spec/source/targetRevision".into()],
            jq_path_expressions: vec![],
        }];
        let p = plan(
            ApplicationsSyncPolicy::Sync,
            "set-uid",
            desired(&["a"]),
            &[Arc::new(live_app)],
            &rules,
        );
        assert_eq!(names(&p.update), vec!["a"]);
        assert_eq!(p.update[0].app.spec.source.target_revision, None);
    }

    #[test]
    fn ignored_field_absent_live_is_left_absent() {
        let mut d = desired(&["a"]).remove(0);
        let mut l = (*live("a", "a", None)).clone();
        l.spec.sync_policy = None;
        let rules = vec![ApplicationSetIgnoreDifferences {
            json_pointers: vec!["/spec/syncPolicy/automated".into()],
            ..Default::default()
        }];
        keep_ignored(&mut d, &l, &rules);
        assert!(d.app.spec.sync_policy.as_ref().is_none_or(|p| p.automated.is_none()));
        let mut d = desired(&["a"]).remove(0);
        l.spec.sync_policy = Some(SyncPolicy {
            automated: Some(SyncPolicyAutomated {
                self_heal: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        keep_ignored(&mut d, &l, &rules);
        let automated = d.app.spec.sync_policy.unwrap().automated.unwrap();
        assert!(automated.self_heal && !automated.prune);
    }

    #[test]
    fn jq_paths_convert_to_pointers() {
        assert_eq!(
            jq_to_pointer(".spec.source.targetRevision").as_deref(),
            Some("/spec/source/targetRevision")
        );
        assert_eq!(
            jq_to_pointer(".metadata.annotations.\"a/b\"").as_deref(),
            Some("/metadata/annotations/a~1b")
        );
        assert_eq!(jq_to_pointer(".spec[\"x\"][0]").as_deref(), Some("/spec/x/0"));
        assert_eq!(jq_to_pointer(".spec.x[]"), None);
        assert_eq!(jq_to_pointer(".a | select(.b == 1)"), None);
        assert_eq!(jq_to_pointer("spec"), None);
        assert_eq!(jq_to_pointer("."), None);
    }

    #[test]
    fn apply_body_has_no_server_fields() {
        let mut d = desired(&["a"]).remove(0);
        d.app.metadata = ObjectMeta {
            resource_version: Some("5".into()),
            ..d.app.metadata
        };
        let body = apply_body(&d);
        assert!(body.pointer("/metadata/resourceVersion").is_none());
        assert_eq!(body["kind"], "Application");
        assert_eq!(body.pointer("/metadata/ownerReferences/0/uid").unwrap(), "set-uid");
    }
}
