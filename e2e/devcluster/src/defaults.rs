//! Server-side defaulting for built-in kinds (what the real API server's defaulters set on create and
//! update): e.g. Deployment replicas/strategy/revisionHistoryLimit/progressDeadlineSeconds, container port
//! protocol, Service type/clusterIP/port protocol/targetPort, Pod restartPolicy, Namespace finalizers and
//! phase, Secret type. Defaults matter: SSA list-map keys include defaulted fields, and clients diff against
//! the defaulted live object.
//!
//! Rules every function here follows:
//! - a default is written only where the field is absent or `null`; a value the client set (even a mistyped
//!   one, which validation reports) is never replaced, so applying twice equals applying once;
//! - nothing here panics: objects come straight from clients, so every step tolerates missing or mistyped
//!   fields by skipping them;
//! - allocated values (Service clusterIP, nodePorts) are derived from the object's name, so they are stable
//!   across repeated defaulting and across restarts.
//!
//! Call it after `metadata.namespace` has been filled in from the URL: the clusterIP derives from it.

use serde_json::{json, Map, Value};

type Obj = Map<String, Value>;

/// Fill in API defaults on `obj` (a built-in kind identified by its apiVersion/kind) in place.
pub fn apply_defaults(obj: &mut Value) {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let Some(root) = obj.as_object_mut() else { return };
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Pod") => pod(root),
        ("v1", "PodTemplate") => template_at(root, &["template"], false),
        ("v1", "ReplicationController") => replication_controller(root),
        ("v1", "Service") => service(root),
        ("v1", "Namespace") => namespace(root),
        ("v1", "Secret") => secret(root),
        ("v1", "PersistentVolumeClaim") => pvc(root),
        ("apps/v1", "Deployment") => deployment(root),
        ("apps/v1", "ReplicaSet") => replica_set(root),
        ("apps/v1", "StatefulSet") => stateful_set(root),
        ("apps/v1", "DaemonSet") => daemon_set(root),
        ("batch/v1", "Job") => job(root),
        ("batch/v1", "CronJob") => cron_job(root),
        ("networking.k8s.io/v1", "NetworkPolicy") => network_policy(root),
        _ => {}
    }
}

/// Secret: `type` defaults to Opaque, and the write-only `stringData` is merged into `data` (base64-encoded,
/// winning over `data` on the same key) and dropped, as the v1 → internal conversion of the real server does.
/// So `stringData` is never stored or returned, whichever verb wrote it.
fn secret(root: &mut Obj) {
    use base64::Engine;
    set(root, "type", json!("Opaque"));
    let Some(string_data) = root.remove("stringData") else {
        return;
    };
    let Value::Object(entries) = string_data else { return };
    if entries.is_empty() {
        return;
    }
    let Some(data) = ensure_obj(root, "data") else { return };
    for (k, v) in entries {
        if let Value::String(text) = v {
            let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            data.insert(k, Value::String(encoded));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Small map helpers. They never replace a present non-null value, which is what makes defaulting idempotent
// and keeps user values intact.

/// Set `key` to `value` unless the client already gave it a non-null value.
fn set(m: &mut Obj, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

/// The object at `key`, created empty when absent or null; `None` when the client put a non-object there
/// (left for validation to report).
fn ensure_obj<'a>(m: &'a mut Obj, key: &str) -> Option<&'a mut Obj> {
    set(m, key, json!({}));
    m.get_mut(key).and_then(Value::as_object_mut)
}

/// The existing object at `path`, if every step is an object. Defaults for optional sub-structures (a
/// template's pod spec, a probe) only apply when the client wrote that structure.
fn existing_obj<'a>(m: &'a mut Obj, path: &[&str]) -> Option<&'a mut Obj> {
    let mut cur = m;
    for key in path {
        cur = cur.get_mut(*key).and_then(Value::as_object_mut)?;
    }
    Some(cur)
}

/// Every object element of the array at `key` (non-object elements are skipped).
fn each_obj(m: &mut Obj, key: &str, mut f: impl FnMut(&mut Obj)) {
    if let Some(items) = m.get_mut(key).and_then(Value::as_array_mut) {
        items.iter_mut().filter_map(Value::as_object_mut).for_each(&mut f);
    }
}

fn str_of<'a>(m: &'a Obj, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

// ---------------------------------------------------------------------------------------------------------
// Pods and pod templates.

/// A bare Pod: PodSpec defaults plus what the Pod defaulter and the always-on admission plugins add
/// (ServiceAccount, Priority), because `kubectl get pod -o yaml` on a real cluster shows them.
fn pod(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    pod_spec(spec, true);
    set(spec, "enableServiceLinks", json!(true));
    set(spec, "serviceAccountName", json!("default"));
    let account = spec.get("serviceAccountName").cloned().unwrap_or(json!("default"));
    set(spec, "serviceAccount", account);
    set(spec, "priority", json!(0));
    set(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// Defaults of the pod template at `path`, when the client wrote one. `job` leaves restartPolicy alone:
/// Job templates must say Never or OnFailure themselves, and defaulting Always would invent an invalid Job.
fn template_at(root: &mut Obj, path: &[&str], job: bool) {
    let mut spec_path = path.to_vec();
    spec_path.push("spec");
    if let Some(spec) = existing_obj(root, &spec_path) {
        pod_spec(spec, !job);
    }
}

/// SetDefaults_PodSpec and the per-container and per-volume defaulters.
fn pod_spec(spec: &mut Obj, default_restart_policy: bool) {
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    if default_restart_policy {
        set(spec, "restartPolicy", json!("Always"));
    }
    set(spec, "schedulerName", json!("default-scheduler"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "securityContext", json!({}));
    each_obj(spec, "containers", container);
    each_obj(spec, "initContainers", container);
    each_obj(spec, "volumes", volume);
}

fn container(c: &mut Obj) {
    let policy = image_pull_policy(str_of(c, "image").unwrap_or_default());
    set(c, "imagePullPolicy", json!(policy));
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    set(c, "resources", json!({}));
    each_obj(c, "ports", |p| set(p, "protocol", json!("TCP")));
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = existing_obj(c, &[probe]) {
            probe_defaults(p);
        }
    }
    each_obj(c, "env", |e| {
        if let Some(f) = existing_obj(e, &["valueFrom", "fieldRef"]) {
            set(f, "apiVersion", json!("v1"));
        }
    });
}

fn probe_defaults(p: &mut Obj) {
    set(p, "timeoutSeconds", json!(1));
    set(p, "periodSeconds", json!(10));
    set(p, "successThreshold", json!(1));
    set(p, "failureThreshold", json!(3));
    if let Some(h) = existing_obj(p, &["httpGet"]) {
        set(h, "scheme", json!("HTTP"));
    }
}

/// `Always` for `:latest` or untagged images (a moving target), `IfNotPresent` for pinned tags and digests.
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" && !tag.is_empty() => "IfNotPresent",
        _ => "Always",
    }
}

/// File-projecting volume sources default their mode to 0644 (420).
fn volume(v: &mut Obj) {
    for source in ["configMap", "secret", "projected", "downwardAPI"] {
        if let Some(s) = existing_obj(v, &[source]) {
            set(s, "defaultMode", json!(420));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Workloads.

fn deployment(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    set(spec, "replicas", json!(1));
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
    if let Some(strategy) = ensure_obj(spec, "strategy") {
        set(strategy, "type", json!("RollingUpdate"));
        if str_of(strategy, "type") == Some("RollingUpdate") {
            if let Some(ru) = ensure_obj(strategy, "rollingUpdate") {
                set(ru, "maxUnavailable", json!("25%"));
                set(ru, "maxSurge", json!("25%"));
            }
        }
    }
    template_at(root, &["spec", "template"], false);
}

fn replica_set(root: &mut Obj) {
    if let Some(spec) = existing_obj(root, &["spec"]) {
        set(spec, "replicas", json!(1));
    }
    template_at(root, &["spec", "template"], false);
}

fn replication_controller(root: &mut Obj) {
    replica_set(root);
}

fn stateful_set(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    set(spec, "replicas", json!(1));
    set(spec, "podManagementPolicy", json!("OrderedReady"));
    set(spec, "revisionHistoryLimit", json!(10));
    if let Some(strategy) = ensure_obj(spec, "updateStrategy") {
        set(strategy, "type", json!("RollingUpdate"));
        if str_of(strategy, "type") == Some("RollingUpdate") {
            if let Some(ru) = ensure_obj(strategy, "rollingUpdate") {
                set(ru, "partition", json!(0));
            }
        }
    }
    if let Some(policy) = ensure_obj(spec, "persistentVolumeClaimRetentionPolicy") {
        set(policy, "whenDeleted", json!("Retain"));
        set(policy, "whenScaled", json!("Retain"));
    }
    each_obj(spec, "volumeClaimTemplates", |t| {
        set(t, "apiVersion", json!("v1"));
        set(t, "kind", json!("PersistentVolumeClaim"));
        pvc(t);
    });
    template_at(root, &["spec", "template"], false);
}

fn daemon_set(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    set(spec, "revisionHistoryLimit", json!(10));
    if let Some(strategy) = ensure_obj(spec, "updateStrategy") {
        set(strategy, "type", json!("RollingUpdate"));
        if str_of(strategy, "type") == Some("RollingUpdate") {
            if let Some(ru) = ensure_obj(strategy, "rollingUpdate") {
                set(ru, "maxUnavailable", json!(1));
                set(ru, "maxSurge", json!(0));
            }
        }
    }
    template_at(root, &["spec", "template"], false);
}

/// SetDefaults_Job. completions stays unset for a work-queue Job (parallelism given, completions not).
fn job(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    let unset = |s: &Obj, k: &str| s.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        set(spec, "completions", json!(1));
    }
    set(spec, "parallelism", json!(1));
    if unset(spec, "backoffLimitPerIndex") {
        set(spec, "backoffLimit", json!(6));
    }
    set(spec, "completionMode", json!("NonIndexed"));
    set(spec, "suspend", json!(false));
    if unset(spec, "podFailurePolicy") {
        set(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    }
    template_at(root, &["spec", "template"], true);
}

/// SetDefaults_CronJob. The job template's JobSpec is not defaulted (that happens when the Job is created),
/// only its pod template.
fn cron_job(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    set(spec, "concurrencyPolicy", json!("Allow"));
    set(spec, "suspend", json!(false));
    set(spec, "successfulJobsHistoryLimit", json!(3));
    set(spec, "failedJobsHistoryLimit", json!(1));
    template_at(root, &["spec", "jobTemplate", "spec", "template"], true);
}

// ---------------------------------------------------------------------------------------------------------
// Core kinds.

fn namespace(root: &mut Obj) {
    let name = root
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if let (Some(name), Some(meta)) = (name, ensure_obj(root, "metadata")) {
        // The real defaulter always (re)sets this label; it lets NetworkPolicies select namespaces by name.
        if let Some(labels) = ensure_obj(meta, "labels") {
            labels.insert("kubernetes.io/metadata.name".to_string(), json!(name));
        }
    }
    if let Some(spec) = ensure_obj(root, "spec") {
        set(spec, "finalizers", json!(["kubernetes"]));
    }
    if let Some(status) = ensure_obj(root, "status") {
        set(status, "phase", json!("Active"));
    }
}

fn pvc(root: &mut Obj) {
    if let Some(spec) = existing_obj(root, &["spec"]) {
        set(spec, "volumeMode", json!("Filesystem"));
    }
    if let Some(status) = ensure_obj(root, "status") {
        set(status, "phase", json!("Pending"));
    }
}

fn network_policy(root: &mut Obj) {
    let Some(spec) = existing_obj(root, &["spec"]) else {
        return;
    };
    let has_egress = spec.get("egress").is_some_and(|e| !e.is_null());
    let types = if has_egress {
        json!(["Ingress", "Egress"])
    } else {
        json!(["Ingress"])
    };
    set(spec, "policyTypes", types);
    for dir in ["ingress", "egress"] {
        each_obj(spec, dir, |rule| {
            each_obj(rule, "ports", |p| set(p, "protocol", json!("TCP")))
        });
    }
}

/// Service defaults plus the allocations the registry makes on create (clusterIP, nodePorts).
fn service(root: &mut Obj) {
    let meta = root.get("metadata");
    let key = format!(
        "{}/{}",
        meta.and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or_default(),
        meta.and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    );
    if let Some(spec) = existing_obj(root, &["spec"]) {
        service_spec(spec, &key);
    }
    if let Some(status) = ensure_obj(root, "status") {
        set(status, "loadBalancer", json!({}));
    }
}

fn service_spec(spec: &mut Obj, key: &str) {
    set(spec, "type", json!("ClusterIP"));
    set(spec, "sessionAffinity", json!("None"));
    let ty = str_of(spec, "type").unwrap_or("ClusterIP").to_string();
    let wants_node_ports = ty == "NodePort" || ty == "LoadBalancer";
    let mut index = 0u64;
    each_obj(spec, "ports", |p| {
        set(p, "protocol", json!("TCP"));
        if let Some(port) = p.get("port").cloned() {
            set(p, "targetPort", port);
        }
        if wants_node_ports {
            set(p, "nodePort", json!(30000 + hash(&format!("{key}#{index}")) % 2768));
        }
        index += 1;
    });
    if ty == "ExternalName" {
        return;
    }
    cluster_ips(spec, key);
    set(spec, "ipFamilies", json!(["IPv4"]));
    set(spec, "ipFamilyPolicy", json!("SingleStack"));
    set(spec, "internalTrafficPolicy", json!("Cluster"));
    if wants_node_ports {
        set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

/// Keep `clusterIP` and `clusterIPs` consistent, allocating from 10.96.0.0/16 when neither is given.
fn cluster_ips(spec: &mut Obj, key: &str) {
    if str_of(spec, "clusterIP") == Some("") {
        // An empty string asks for allocation, exactly like an absent field.
        spec.remove("clusterIP");
    }
    let first_of_list = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .and_then(|l| l.first())
        .cloned();
    if let Some(first) = first_of_list {
        set(spec, "clusterIP", first);
    }
    set(spec, "clusterIP", json!(allocate_cluster_ip(key)));
    if let Some(ip) = spec.get("clusterIP").cloned() {
        set(spec, "clusterIPs", json!([ip]));
    }
}

/// A stable address in 10.96.0.0/16 that avoids the network, broadcast, `kubernetes` (.0.1) and DNS (.0.10)
/// addresses.
fn allocate_cluster_ip(key: &str) -> String {
    let h = hash(key);
    let third = h % 256;
    let mut fourth = 2 + (h >> 8) % 253;
    if third == 0 && fourth == 10 {
        fourth = 11;
    }
    format!("10.96.{third}.{fourth}")
}

/// FNV-1a with a final mix: stable across runs and platforms (std's hasher is randomly seeded).
fn hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(mut v: Value) -> Value {
        apply_defaults(&mut v);
        v
    }

    fn ptr<'a>(v: &'a Value, p: &str) -> &'a Value {
        v.pointer(p).unwrap_or(&Value::Null)
    }

    fn deployment_fixture() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}}}})
    }

    #[test]
    fn table_of_defaults() {
        /// (case name, input, expected value per JSON pointer; `null` = absent).
        type Case = (&'static str, Value, Vec<(&'static str, Value)>);
        let cases: Vec<Case> = vec![
            (
                "deployment",
                deployment_fixture(),
                vec![
                    ("/spec/replicas", json!(1)),
                    ("/spec/revisionHistoryLimit", json!(10)),
                    ("/spec/progressDeadlineSeconds", json!(600)),
                    ("/spec/strategy/type", json!("RollingUpdate")),
                    ("/spec/strategy/rollingUpdate/maxSurge", json!("25%")),
                    ("/spec/strategy/rollingUpdate/maxUnavailable", json!("25%")),
                    ("/spec/template/spec/restartPolicy", json!("Always")),
                    ("/spec/template/spec/dnsPolicy", json!("ClusterFirst")),
                    ("/spec/template/spec/schedulerName", json!("default-scheduler")),
                    ("/spec/template/spec/terminationGracePeriodSeconds", json!(30)),
                    ("/spec/template/spec/securityContext", json!({})),
                    (
                        "/spec/template/spec/containers/0/imagePullPolicy",
                        json!("IfNotPresent"),
                    ),
                    (
                        "/spec/template/spec/containers/0/terminationMessagePath",
                        json!("/dev/termination-log"),
                    ),
                    (
                        "/spec/template/spec/containers/0/terminationMessagePolicy",
                        json!("File"),
                    ),
                    ("/spec/template/spec/containers/0/ports/0/protocol", json!("TCP")),
                    ("/spec/template/spec/enableServiceLinks", Value::Null),
                ],
            ),
            (
                "recreate strategy gets no rollingUpdate",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"strategy": {"type": "Recreate"}}}),
                vec![
                    ("/spec/strategy/rollingUpdate", Value::Null),
                    ("/spec/replicas", json!(1)),
                ],
            ),
            (
                "statefulset",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
                    "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}],
                        "template": {"spec": {"containers": [{"name": "db", "image": "postgres"}]}}}}),
                vec![
                    ("/spec/replicas", json!(1)),
                    ("/spec/podManagementPolicy", json!("OrderedReady")),
                    (
                        "/spec/updateStrategy",
                        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                    ),
                    ("/spec/revisionHistoryLimit", json!(10)),
                    (
                        "/spec/persistentVolumeClaimRetentionPolicy/whenDeleted",
                        json!("Retain"),
                    ),
                    ("/spec/persistentVolumeClaimRetentionPolicy/whenScaled", json!("Retain")),
                    ("/spec/volumeClaimTemplates/0/spec/volumeMode", json!("Filesystem")),
                    ("/spec/template/spec/containers/0/imagePullPolicy", json!("Always")),
                ],
            ),
            (
                "daemonset",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "spec": {"template": {"spec": {}}}}),
                vec![
                    ("/spec/updateStrategy/rollingUpdate/maxUnavailable", json!(1)),
                    ("/spec/updateStrategy/rollingUpdate/maxSurge", json!(0)),
                    ("/spec/revisionHistoryLimit", json!(10)),
                    ("/spec/template/spec/restartPolicy", json!("Always")),
                ],
            ),
            (
                "replicaset",
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": {}}),
                vec![("/spec/replicas", json!(1))],
            ),
            (
                "job keeps its restartPolicy and gets none invented",
                json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox:latest"}]}}}}),
                vec![
                    ("/spec/backoffLimit", json!(6)),
                    ("/spec/completions", json!(1)),
                    ("/spec/parallelism", json!(1)),
                    ("/spec/completionMode", json!("NonIndexed")),
                    ("/spec/suspend", json!(false)),
                    ("/spec/manualSelector", Value::Null),
                    ("/spec/template/spec/restartPolicy", json!("Never")),
                    ("/spec/template/spec/containers/0/imagePullPolicy", json!("Always")),
                ],
            ),
            (
                "work-queue job keeps completions unset",
                json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 3, "template": {"spec": {}}}}),
                vec![
                    ("/spec/completions", Value::Null),
                    ("/spec/parallelism", json!(3)),
                    ("/spec/template/spec/restartPolicy", Value::Null),
                ],
            ),
            (
                "cronjob",
                json!({"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"schedule": "* * * * *",
                    "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}}}),
                vec![
                    ("/spec/concurrencyPolicy", json!("Allow")),
                    ("/spec/suspend", json!(false)),
                    ("/spec/successfulJobsHistoryLimit", json!(3)),
                    ("/spec/failedJobsHistoryLimit", json!(1)),
                    ("/spec/jobTemplate/spec/backoffLimit", Value::Null),
                    ("/spec/jobTemplate/spec/template/spec/dnsPolicy", json!("ClusterFirst")),
                    ("/spec/jobTemplate/spec/template/spec/restartPolicy", json!("OnFailure")),
                ],
            ),
            (
                "pod",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
                    "containers": [{"name": "c", "image": "registry:5000/team/app@sha256:abc",
                        "readinessProbe": {"httpGet": {"port": 80}},
                        "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "e", "emptyDir": {}}]}}),
                vec![
                    ("/spec/restartPolicy", json!("Always")),
                    ("/spec/enableServiceLinks", json!(true)),
                    ("/spec/serviceAccountName", json!("default")),
                    ("/spec/serviceAccount", json!("default")),
                    ("/spec/containers/0/imagePullPolicy", json!("IfNotPresent")),
                    ("/spec/containers/0/readinessProbe/periodSeconds", json!(10)),
                    ("/spec/containers/0/readinessProbe/httpGet/scheme", json!("HTTP")),
                    ("/spec/containers/0/env/0/valueFrom/fieldRef/apiVersion", json!("v1")),
                    ("/spec/volumes/0/configMap/defaultMode", json!(420)),
                    ("/spec/volumes/1/emptyDir", json!({})),
                ],
            ),
            (
                "service",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
                vec![
                    ("/spec/type", json!("ClusterIP")),
                    ("/spec/sessionAffinity", json!("None")),
                    ("/spec/ports/0/protocol", json!("TCP")),
                    ("/spec/ports/0/targetPort", json!(80)),
                    ("/spec/ports/0/nodePort", Value::Null),
                    ("/spec/ipFamilies", json!(["IPv4"])),
                    ("/spec/ipFamilyPolicy", json!("SingleStack")),
                    ("/spec/internalTrafficPolicy", json!("Cluster")),
                    ("/spec/externalTrafficPolicy", Value::Null),
                    ("/status/loadBalancer", json!({})),
                ],
            ),
            (
                "headless service",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                    "spec": {"clusterIP": "None", "ports": [{"port": 5432, "targetPort": "pg"}]}}),
                vec![
                    ("/spec/clusterIP", json!("None")),
                    ("/spec/clusterIPs", json!(["None"])),
                    ("/spec/ports/0/targetPort", json!("pg")),
                ],
            ),
            (
                "external name service",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext"},
                    "spec": {"type": "ExternalName", "externalName": "example.com"}}),
                vec![
                    ("/spec/clusterIP", Value::Null),
                    ("/spec/ipFamilies", Value::Null),
                    ("/spec/sessionAffinity", json!("None")),
                ],
            ),
            (
                "load balancer service",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
                    "spec": {"type": "LoadBalancer", "ports": [{"port": 443, "protocol": "UDP"}]}}),
                vec![
                    ("/spec/ports/0/protocol", json!("UDP")),
                    ("/spec/externalTrafficPolicy", json!("Cluster")),
                    ("/spec/allocateLoadBalancerNodePorts", json!(true)),
                ],
            ),
            (
                "namespace",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
                vec![
                    ("/spec/finalizers", json!(["kubernetes"])),
                    ("/status/phase", json!("Active")),
                    ("/metadata/labels/kubernetes.io~1metadata.name", json!("team")),
                ],
            ),
            (
                "secret",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
                vec![("/type", json!("Opaque"))],
            ),
            (
                "secret stringData merges into data",
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "eA==", "password": "b2xk"},
                    "stringData": {"password": "s3cret"}}),
                vec![
                    ("/data/password", json!("czNjcmV0")),
                    ("/data/a", json!("eA==")),
                    ("/stringData", Value::Null),
                ],
            ),
            (
                "secret keeps its type",
                json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls"}),
                vec![("/type", json!("kubernetes.io/tls"))],
            ),
            (
                "pvc",
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "spec": {"accessModes": ["ReadWriteOnce"]}}),
                vec![
                    ("/spec/volumeMode", json!("Filesystem")),
                    ("/status/phase", json!("Pending")),
                ],
            ),
            (
                "serviceaccount untouched",
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}}),
                vec![
                    ("/secrets", Value::Null),
                    ("/automountServiceAccountToken", Value::Null),
                ],
            ),
        ];
        for (name, input, expectations) in cases {
            let out = defaulted(input);
            for (path, want) in expectations {
                assert_eq!(ptr(&out, path), &want, "{name}: {path} in {out:#}");
            }
        }
    }

    #[test]
    fn cluster_ip_is_stable_and_in_range() {
        let svc = || {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "a"},
                "spec": {"ports": [{"port": 80}]}})
        };
        let a = defaulted(svc());
        let b = defaulted(svc());
        let ip = ptr(&a, "/spec/clusterIP").as_str().unwrap_or_default().to_string();
        assert!(ip.starts_with("10.96."), "{ip}");
        assert_eq!(ptr(&a, "/spec/clusterIPs"), &json!([ip]));
        assert_eq!(a, b);
        let other = defaulted(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "b"}, "spec": {}}));
        assert_ne!(ptr(&other, "/spec/clusterIP"), &json!(ip));
    }

    #[test]
    fn explicit_cluster_ips_fill_cluster_ip() {
        let out = defaulted(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
            "spec": {"clusterIPs": ["10.96.7.7"]}}));
        assert_eq!(ptr(&out, "/spec/clusterIP"), &json!("10.96.7.7"));
    }

    #[test]
    fn user_values_are_never_overwritten() {
        let input = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 0, "revisionHistoryLimit": 2, "progressDeadlineSeconds": 60,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                "template": {"spec": {"restartPolicy": "OnFailure", "dnsPolicy": "None",
                    "terminationGracePeriodSeconds": 5, "securityContext": {"runAsUser": 1000},
                    "containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "Never",
                        "ports": [{"containerPort": 53, "protocol": "UDP"}]}]}}}});
        let out = defaulted(input);
        let expect = [
            ("/spec/replicas", json!(0)),
            ("/spec/revisionHistoryLimit", json!(2)),
            ("/spec/progressDeadlineSeconds", json!(60)),
            ("/spec/strategy/rollingUpdate/maxSurge", json!(1)),
            ("/spec/strategy/rollingUpdate/maxUnavailable", json!("25%")),
            ("/spec/template/spec/restartPolicy", json!("OnFailure")),
            ("/spec/template/spec/dnsPolicy", json!("None")),
            ("/spec/template/spec/terminationGracePeriodSeconds", json!(5)),
            ("/spec/template/spec/securityContext", json!({"runAsUser": 1000})),
            ("/spec/template/spec/containers/0/imagePullPolicy", json!("Never")),
            ("/spec/template/spec/containers/0/ports/0/protocol", json!("UDP")),
        ];
        for (path, want) in expect {
            assert_eq!(ptr(&out, path), &want, "{path}");
        }
    }

    #[test]
    fn defaulting_is_idempotent() {
        let inputs = vec![
            deployment_fixture(),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb", "namespace": "x"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": []}}}}),
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "image": "a:1"}]}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"template": {"spec": {}}}}),
        ];
        for input in inputs {
            let once = defaulted(input);
            let twice = defaulted(once.clone());
            assert_eq!(once, twice);
        }
    }

    #[test]
    fn malformed_objects_do_not_panic() {
        let inputs = vec![
            json!(null),
            json!([1, 2]),
            json!({"apiVersion": 3, "kind": "Deployment"}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": "nope"}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"strategy": 5, "template": []}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {
                "containers": [1, {"ports": "x"}, {"image": 7, "ports": [null, {"containerPort": 1}]}]}}}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": 1, "spec": {"ports": [{"port": null}],
                "clusterIPs": "bad"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": "bad"}, "spec": 1}),
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"volumes": [{"configMap": 1}], "containers": null}}),
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": 1}}}),
        ];
        for mut input in inputs {
            apply_defaults(&mut input);
        }
    }

    #[test]
    fn image_pull_policy_by_tag() {
        let cases = [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/app", "Always"),
            ("localhost:5000/app:v2", "IfNotPresent"),
            ("ghcr.io/org/app@sha256:0123", "IfNotPresent"),
            ("", "Always"),
        ];
        for (image, want) in cases {
            assert_eq!(image_pull_policy(image), want, "{image}");
        }
    }
}
