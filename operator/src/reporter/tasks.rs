//! I/O: the SaaS asks, the agent pulls. `GET /tasks?wait=30` (long poll) while leading; each task is
//! carried out through the Kubernetes API exactly as a user would with kubectl — the `operation` field
//! for sync and rollback, the `capstan.dev/refresh` annotation for refresh, the status phase
//! `Terminating` for terminate — so RBAC, PolicySets, `suspend` and the rollback rules still decide.
//!
//! A task whose target is not a namespace and an object name, or whose namespace is not in
//! `tasks.namespaces`, is rejected without touching the cluster ([`check_target`]).
//! Tasks are idempotent by id: the id is written into `operation.info` (`capstanTaskId`) and kept in a
//! bounded memory of recent ids, so a task delivered twice is carried out once and its result posted
//! again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

use super::sender::Outcome;
use super::wire::{PlainAnswer, Task, TaskResult, TaskTarget, TasksAnswer};
use super::{Endpoint, Shared};
use crate::api::labels::{REFRESH_ANNOTATION, REFRESH_HARD, REFRESH_NORMAL};
use crate::api::names::{is_dns1123_label, is_dns1123_subdomain};
use crate::controllers::{lock, Shutdown};

/// Long-poll wait asked of the receiver.
pub const WAIT_SECONDS: u64 = 30;
/// The longest a sync or rollback is followed before the result says it is still running.
pub const FOLLOW_FOR: Duration = Duration::from_secs(15 * 60);
/// Task ids remembered.
const RECENT: usize = 1024;
/// Tasks carried out at once.
const MAX_RUNNING: usize = 16;
/// `operation.info` name of the task id.
pub const TASK_ID_INFO: &str = "capstanTaskId";
/// The field manager of the reporter's writes (the operations of tasks, its checkpoint).
pub(super) const FIELD_MANAGER: &str = "capstan-reporter";

/// Recent task ids and their results (`None` while running).
#[derive(Debug, Default)]
pub struct RecentTasks {
    results: HashMap<String, Option<TaskResult>>,
    order: VecDeque<String>,
}

impl RecentTasks {
    /// Whether `id` is new; if so it is recorded as running.
    pub fn begin(&mut self, id: &str) -> Result<(), Option<TaskResult>> {
        if let Some(known) = self.results.get(id) {
            return Err(known.clone());
        }
        if self.order.len() >= RECENT {
            if let Some(old) = self.order.pop_front() {
                self.results.remove(&old);
            }
        }
        self.order.push_back(id.to_string());
        self.results.insert(id.to_string(), None);
        Ok(())
    }

    /// Records `id`'s result.
    pub fn finish(&mut self, id: &str, result: TaskResult) {
        if let Some(slot) = self.results.get_mut(id) {
            *slot = Some(result);
        }
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.results.values().filter(|r| r.is_none()).count()
    }
}

/// The long poll, until `stop`.
pub async fn run(shared: Arc<Shared>, stop: Shutdown) {
    let mut attempt = 0;
    loop {
        let Some(endpoint) = shared.wait_open(&stop).await else {
            return;
        };
        let client = Arc::clone(&endpoint.client);
        let path = format!("/tasks?wait={WAIT_SECONDS}");
        let timeout = Duration::from_secs(WAIT_SECONDS) + Duration::from_secs(10);
        let result = tokio::task::spawn_blocking(move || client.get(&path, timeout))
            .await
            .unwrap_or_else(|e| {
                Err(super::client::TransportError::Other(format!(
                    "request task failed: {e}"
                )))
            });
        let outcome: Option<Outcome<TasksAnswer>> =
            shared.interpret(&endpoint, "tasks", result, &mut attempt, &stop).await;
        match outcome {
            None => return,
            Some(Outcome::Ok(answer)) => {
                if let Some(what) = answer.resync.filter(|w| matches!(w.as_str(), "digest" | "full")) {
                    *lock(&shared.resync_request) = Some(what);
                    shared.full_batch.notify_one();
                }
                for task in answer.tasks.into_iter().take(MAX_RUNNING * 4) {
                    accept(&shared, &endpoint, task);
                }
            }
            Some(Outcome::StepDown(_)) => {
                shared.full_batch.notify_one();
                return;
            }
            Some(Outcome::Again) => {}
            Some(_) => {
                tokio::select! {
                    _ = stop.wait() => return,
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
            }
        }
    }
}

/// Starts a new task, or posts a repeated task's known result again.
fn accept(shared: &Arc<Shared>, endpoint: &Arc<Endpoint>, task: Task) {
    let begun = {
        let mut recent = lock(&shared.recent_tasks);
        if recent.running() >= MAX_RUNNING {
            return; // delivered again later by the receiver
        }
        recent.begin(&task.id)
    };
    let (shared, endpoint) = (Arc::clone(shared), Arc::clone(endpoint));
    match begun {
        Err(None) => tracing::debug!(task = task.id, "task delivered again while running"),
        Err(Some(result)) => {
            tracing::info!(task = task.id, "task delivered again; posting its result again");
            tokio::spawn(async move { post_result(&shared, &endpoint, &task.id, &result).await });
        }
        Ok(()) => {
            tokio::spawn(async move {
                let result = carry_out(&shared, &endpoint, &task).await;
                tracing::info!(
                    task = task.id,
                    kind = task.type_,
                    state = result.state,
                    "task done: {}",
                    result.message
                );
                let type_ = if matches!(task.type_.as_str(), "sync" | "refresh" | "rollback" | "terminate") {
                    task.type_.as_str()
                } else {
                    "unknown"
                };
                shared.metrics.tasks.with_label_values(&[type_, result.state]).inc();
                lock(&shared.recent_tasks).finish(&task.id, result.clone());
                post_result(&shared, &endpoint, &task.id, &result).await;
            });
        }
    }
}

async fn post_result(shared: &Shared, endpoint: &Endpoint, id: &str, result: &TaskResult) {
    let stop = Shutdown::new();
    let mut attempt = 0;
    let id_segment: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .take(128)
        .collect();
    for _ in 0..5 {
        let Some(endpoint_now) = shared.wait_open(&stop).await else {
            return;
        };
        let json = serde_json::to_vec(result).unwrap_or_default();
        let answer = super::sender::post(&endpoint_now, &format!("/tasks/{id_segment}/result"), json, None).await;
        match shared
            .interpret::<PlainAnswer>(endpoint, "task_result", answer, &mut attempt, &stop)
            .await
        {
            Some(Outcome::Ok(_)) | None => return,
            Some(Outcome::StepDown(_)) => return,
            _ => {}
        }
    }
    tracing::warn!(
        task = id,
        "could not post the task result; the receiver will deliver the task again"
    );
}

fn result(state: &'static str, message: impl Into<String>) -> TaskResult {
    TaskResult {
        state,
        message: crate::text::truncate(&message.into(), 1024),
    }
}

fn applications(shared: &Shared, namespace: &str) -> Api<DynamicObject> {
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Application"),
        "applications",
    );
    Api::namespaced_with(shared.ctx.client.clone(), namespace, &ar)
}

/// Whether the receiver may have the agent act on `target`: a namespace name (a DNS-1123 label) that
/// `allowed` (`tasks.namespaces`) lists and an object name (a DNS-1123 subdomain). Both become segments of
/// an API path, so anything else (`team-x/../capstan-system`, `a?watch=1`) is refused before any use. Pure.
pub fn check_target(target: &TaskTarget, allowed: impl Fn(&str) -> bool) -> Result<(), String> {
    let (ns, name) = (&target.namespace, &target.name);
    let shown = |s: &str| crate::text::truncate(s, 100);
    if !is_dns1123_label(ns) {
        return Err(format!(
            "target.namespace {:?} is not a namespace name (a DNS-1123 label)",
            shown(ns)
        ));
    }
    if !is_dns1123_subdomain(name) {
        return Err(format!(
            "target.name {:?} is not an Application name (a DNS-1123 subdomain)",
            shown(name)
        ));
    }
    if !allowed(ns) {
        return Err(format!(
            "namespace {ns:?} is not in tasks.namespaces of ConfigMap capstan-reporter"
        ));
    }
    Ok(())
}

/// Carries `task` out and says how it went.
async fn carry_out(shared: &Shared, endpoint: &Endpoint, task: &Task) -> TaskResult {
    if let Err(why) = check_target(&task.target, |ns| endpoint.settings.task_allowed(ns)) {
        return result("rejected", why);
    }
    let (ns, name) = (&task.target.namespace, &task.target.name);
    let api = applications(shared, ns);
    let app = match api.get_opt(name).await {
        Ok(Some(app)) => app,
        Ok(None) => return result("failed", format!("Application {ns}/{name} not found")),
        Err(e) => return result("failed", kube_message(&e)),
    };
    match task.type_.as_str() {
        "sync" | "rollback" => sync(&api, &app, task).await,
        "refresh" => {
            let mode = if task.args["hard"].as_bool() == Some(true) {
                REFRESH_HARD
            } else {
                REFRESH_NORMAL
            };
            let patch = json!({"metadata": {"annotations": {REFRESH_ANNOTATION: mode}}});
            match api.patch(name, &params(), &Patch::Merge(&patch)).await {
                Ok(_) => result("succeeded", format!("{mode} refresh requested")),
                Err(e) => result("failed", kube_message(&e)),
            }
        }
        "terminate" => {
            let phase = app.data["status"]["operationState"]["phase"]
                .as_str()
                .unwrap_or_default();
            if phase != "Running" {
                return result("failed", "no operation is running");
            }
            let patch = json!({"status": {"operationState": {"phase": "Terminating"}}});
            match api.patch_status(name, &params(), &Patch::Merge(&patch)).await {
                Ok(_) => result("succeeded", "termination requested"),
                Err(e) => result("failed", kube_message(&e)),
            }
        }
        other => result(
            "rejected",
            format!("unknown task type {:?}", crate::text::truncate(other, 32)),
        ),
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("Kubernetes API: {} ({})", s.message, s.code),
        other => format!("Kubernetes API: {other}"),
    }
}

fn carries_task(operation: &Value, id: &str) -> bool {
    operation["info"]
        .as_array()
        .is_some_and(|info| info.iter().any(|i| i["name"] == TASK_ID_INFO && i["value"] == id))
}

/// The `operation` a sync or rollback task writes.
pub fn operation_for(task: &Task) -> Result<Value, String> {
    let info = json!([{"name": TASK_ID_INFO, "value": task.id}]);
    let initiated = json!({"username": FIELD_MANAGER});
    if task.type_ == "rollback" {
        let id = task.args["id"]
            .as_i64()
            .ok_or("rollback needs args.id (a status.history[].id)")?;
        return Ok(json!({"initiatedBy": initiated, "info": info, "rollback": {"id": id}}));
    }
    let mut sync = json!({});
    if let Some(rev) = task.args["revision"].as_str() {
        sync["revision"] = json!(crate::text::truncate(rev, 256));
    }
    for key in ["prune", "dryRun"] {
        if let Some(b) = task.args[key].as_bool() {
            sync[key] = json!(b);
        }
    }
    Ok(json!({"initiatedBy": initiated, "info": info, "sync": sync}))
}

async fn sync(api: &Api<DynamicObject>, app: &DynamicObject, task: &Task) -> TaskResult {
    let name = app.metadata.name.clone().unwrap_or_default();
    let ours = carries_task(&app.data["operation"], &task.id)
        || carries_task(&app.data["status"]["operationState"]["operation"], &task.id);
    if !ours {
        if !app.data["operation"].is_null() {
            return result("failed", "another operation is already requested on this Application");
        }
        let operation = match operation_for(task) {
            Ok(op) => op,
            Err(e) => return result("rejected", e),
        };
        let patch = json!({"operation": operation});
        if let Err(e) = api.patch(&name, &params(), &Patch::Merge(&patch)).await {
            return result("failed", kube_message(&e));
        }
    }
    follow(api, &name, &task.id).await
}

/// Follows the operation written for task `id` to its end.
async fn follow(api: &Api<DynamicObject>, name: &str, id: &str) -> TaskResult {
    let started = Instant::now();
    let mut removed_seen = 0;
    while started.elapsed() < FOLLOW_FOR {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let app = match api.get_opt(name).await {
            Ok(Some(app)) => app,
            Ok(None) => return result("failed", "the Application was deleted"),
            Err(_) => continue,
        };
        let state = &app.data["status"]["operationState"];
        if carries_task(&state["operation"], id) {
            let phase = state["phase"].as_str().unwrap_or_default();
            let message = state["message"].as_str().unwrap_or_default();
            match phase {
                "Succeeded" => return result("succeeded", message),
                "Failed" | "Error" => return result("failed", message),
                _ => continue,
            }
        }
        if carries_task(&app.data["operation"], id) {
            continue;
        }
        // The request is gone and never ran: the operator refused it (policy, rollback rules).
        removed_seen += 1;
        if removed_seen >= 2 {
            return result("failed", refusal(&app.data["status"]));
        }
    }
    result(
        "failed",
        format!(
            "no outcome within {} minutes; the operation may still be running",
            FOLLOW_FOR.as_secs() / 60
        ),
    )
}

/// Why a requested operation was removed without running, from the status conditions.
pub fn refusal(status: &Value) -> String {
    let conditions = status["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
    for type_ in ["PolicyDenied", "SyncError"] {
        if let Some(m) = conditions
            .iter()
            .find(|c| c["type"] == type_ && c["status"] == "True")
            .and_then(|c| c["message"].as_str())
        {
            return format!("{type_}: {m}");
        }
    }
    "the operation request was removed without running".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(type_: &str, args: Value) -> Task {
        Task {
            id: "t-1".into(),
            type_: type_.into(),
            target: TaskTarget {
                namespace: "team-a".into(),
                name: "web".into(),
            },
            args,
        }
    }

    #[test]
    fn operations_carry_the_task_id() {
        let op = operation_for(&task("sync", json!({"revision": "main", "prune": true}))).unwrap();
        assert_eq!(op["sync"], json!({"revision": "main", "prune": true}));
        assert!(carries_task(&op, "t-1") && !carries_task(&op, "t-2"));
        let rb = operation_for(&task("rollback", json!({"id": 3}))).unwrap();
        assert_eq!(rb["rollback"]["id"], 3);
        assert!(operation_for(&task("rollback", json!({}))).is_err());
    }

    #[test]
    fn targets_are_names_before_any_use() {
        let allowed = |ns: &str| crate::reporter::policy::glob_match("team-*", ns);
        let target = |namespace: &str, name: &str| TaskTarget {
            namespace: namespace.into(),
            name: name.into(),
        };
        assert_eq!(check_target(&target("team-a", "web"), allowed), Ok(()));
        assert_eq!(check_target(&target("team-a", "web.v2"), allowed), Ok(()));
        for (ns, name, field) in [
            ("team-x/../capstan-system", "web", "target.namespace"),
            ("team-a/../../apis", "web", "target.namespace"),
            ("team-", "web", "target.namespace"),
            ("Team-A", "web", "target.namespace"),
            ("", "web", "target.namespace"),
            ("team-a", "../../secrets/x", "target.name"),
            ("team-a", "web?dryRun=All", "target.name"),
            ("team-a", "web/status", "target.name"),
            ("team-a", "", "target.name"),
            ("team-a", &"a".repeat(254), "target.name"),
        ] {
            let why = check_target(&target(ns, name), allowed).unwrap_err();
            assert!(why.starts_with(field), "{ns:?}/{name:?}: {why}");
        }
        let why = check_target(&target("shop", "web"), allowed).unwrap_err();
        assert!(why.contains("tasks.namespaces"), "{why}");
    }

    #[test]
    fn recent_ids_are_bounded_and_remember_results() {
        let mut recent = RecentTasks::default();
        assert!(recent.begin("a").is_ok());
        assert_eq!(recent.begin("a"), Err(None));
        recent.finish("a", result("succeeded", "ok"));
        assert_eq!(recent.begin("a").unwrap_err().unwrap().state, "succeeded");
        for i in 0..RECENT + 5 {
            let _ = recent.begin(&format!("x{i}"));
        }
        assert!(recent.begin("a").is_ok(), "the oldest ids are forgotten");
    }

    #[test]
    fn refusals_quote_the_condition() {
        let status = json!({"conditions": [
            {"type": "Ready", "status": "False", "message": "x"},
            {"type": "PolicyDenied", "status": "True", "message": "[team-label] no team label"}
        ]});
        assert_eq!(refusal(&status), "PolicyDenied: [team-label] no team label");
        assert!(refusal(&json!({})).contains("removed"));
    }
}
