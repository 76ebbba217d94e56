//! `meta.k8s.io/v1 Table` rendering for `kubectl get`: per-kind columns that mirror the real
//! printers, and CRD `additionalPrinterColumns` evaluated with a JSONPath subset.
//!
//! Like the real server (whose TableConvertor always generates with `Wide: true`), every row carries a cell
//! for every column, including the `priority: 1` ones; kubectl drops those unless `-o wide`.

use chrono::{DateTime, Utc};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};

/// One CRD `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `type`: string, integer, number, boolean, date
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// `jsonPath`, e.g. `.status.sync.status`
    pub json_path: String,
}

/// `includeObject` of the Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// The printer columns of one CRD version object (`spec.versions[i]`), `None` when it declares none.
pub fn printer_columns_from_crd_version(version: &Value) -> Option<Vec<PrinterColumn>> {
    let cols: Vec<PrinterColumn> = version
        .get("additionalPrinterColumns")?
        .as_array()?
        .iter()
        .filter_map(|c| {
            Some(PrinterColumn {
                name: c.get("name")?.as_str()?.to_string(),
                type_: c.get("type").and_then(Value::as_str).unwrap_or("string").to_string(),
                format: c.get("format").and_then(Value::as_str).unwrap_or_default().to_string(),
                description: c
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: c
                    .get("jsonPath")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            })
        })
        .collect();
    (!cols.is_empty()).then_some(cols)
}

/// A Table ready to serialize. It borrows the objects, so a list of 10,000 objects copies none of them: rows
/// are written straight from the stored values when the response is serialized.
pub struct Table<'a> {
    /// List metadata (`resourceVersion`, `continue`, ...); `{}` until the caller fills it in.
    pub metadata: Value,
    definitions: Vec<Value>,
    rows: Vec<(Vec<Value>, &'a Value)>,
    include: IncludeObject,
}

impl Table<'_> {
    /// The Table as a JSON value (single-object responses and watch events).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for Table<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(5))?;
        m.serialize_entry("kind", "Table")?;
        m.serialize_entry("apiVersion", "meta.k8s.io/v1")?;
        m.serialize_entry("metadata", &self.metadata)?;
        m.serialize_entry("columnDefinitions", &self.definitions)?;
        let rows: Vec<Row<'_>> = self
            .rows
            .iter()
            .map(|(cells, obj)| Row {
                cells,
                obj,
                include: self.include,
            })
            .collect();
        m.serialize_entry("rows", &rows)?;
        m.end()
    }
}

/// `{cells, object}`; the real server serialises an absent object as `null`.
struct Row<'a> {
    cells: &'a [Value],
    obj: &'a Value,
    include: IncludeObject,
}

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(Some(2))?;
        m.serialize_entry("cells", self.cells)?;
        match self.include {
            IncludeObject::None => m.serialize_entry("object", &Value::Null)?,
            IncludeObject::Object => m.serialize_entry("object", self.obj)?,
            IncludeObject::Metadata => m.serialize_entry("object", &PartialMetadata(self.obj))?,
        }
        m.end()
    }
}

/// `PartialObjectMetadata` of a borrowed object.
struct PartialMetadata<'a>(&'a Value);

impl Serialize for PartialMetadata<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let empty = Value::Object(serde_json::Map::new());
        let mut m = ser.serialize_map(Some(3))?;
        m.serialize_entry("kind", "PartialObjectMetadata")?;
        m.serialize_entry("apiVersion", "meta.k8s.io/v1")?;
        m.serialize_entry("metadata", self.0.get("metadata").unwrap_or(&empty))?;
        m.end()
    }
}

/// Build a Table of `objects` of `group`/`kind`: built-in columns for the built-in kinds (matched on group and
/// kind, so a custom resource that reuses a built-in kind name is not printed like it), `columns` for custom
/// resources, where `None` means Name + Age.
pub fn table<'a>(
    group: &str,
    kind: &str,
    columns: Option<&[PrinterColumn]>,
    objects: &[&'a Value],
    include: IncludeObject,
    now: DateTime<Utc>,
) -> Table<'a> {
    let (definitions, cells): (Vec<Value>, Vec<Vec<Value>>) = match columns.filter(|c| !c.is_empty()) {
        Some(cols) => custom_table(cols, objects, now),
        None => builtin_table(group, kind, objects, now),
    };
    Table {
        metadata: json!({}),
        definitions,
        rows: cells.into_iter().zip(objects.iter().copied()).collect(),
        include,
    }
}

/// [`table`] as a JSON value.
pub fn build(
    group: &str,
    kind: &str,
    columns: Option<&[PrinterColumn]>,
    objects: &[&Value],
    include: IncludeObject,
    now: DateTime<Utc>,
) -> Value {
    table(group, kind, columns, objects, include, now).to_value()
}

// ---------------------------------------------------------------------------------------------------------------
// Column definitions
// ---------------------------------------------------------------------------------------------------------------

/// A static column definition; `priority: 1` columns show only with `-o wide`.
struct Col {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    priority: i64,
    description: &'static str,
}

const fn col(name: &'static str, ty: &'static str, description: &'static str) -> Col {
    Col {
        name,
        ty,
        format: "",
        priority: 0,
        description,
    }
}

const fn wide(name: &'static str, description: &'static str) -> Col {
    Col {
        name,
        ty: "string",
        format: "",
        priority: 1,
        description,
    }
}

const NAME: Col = Col {
    name: "Name",
    ty: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
};
const AGE: Col = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);
const CREATED_AT: Col = col(
    "Created At",
    "date",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);
const CONTAINERS: Col = wide("Containers", "Names of each container in the template.");
const IMAGES: Col = wide("Images", "Images referenced by each container in the template.");
const SELECTOR: Col = wide("Selector", "Label selector for pods.");

fn definition(c: &Col) -> Value {
    json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority})
}

type CellFn = fn(&Value, DateTime<Utc>) -> Vec<Value>;

/// The real printer of each built-in kind (k8s.io/kubernetes `pkg/printers/internalversion/printers.go`), by
/// API group and kind. core/v1 and events.k8s.io/v1 Events share one printer, as they share one storage.
fn builtin_printer(group: &str, kind: &str) -> (&'static [Col], CellFn) {
    match (group, kind) {
        ("", "Namespace") => (NAMESPACE_COLS, namespace_cells),
        ("", "ConfigMap") => (CONFIGMAP_COLS, configmap_cells),
        ("", "Secret") => (SECRET_COLS, secret_cells),
        ("", "Service") => (SERVICE_COLS, service_cells),
        ("", "ServiceAccount") => (SERVICEACCOUNT_COLS, serviceaccount_cells),
        ("", "Pod") => (POD_COLS, pod_cells),
        ("", "Node") => (NODE_COLS, node_cells),
        ("", "PersistentVolumeClaim") => (PVC_COLS, pvc_cells),
        ("" | "events.k8s.io", "Event") => (EVENT_COLS, event_cells),
        ("apps", "Deployment") => (DEPLOYMENT_COLS, deployment_cells),
        ("apps", "ReplicaSet") => (REPLICASET_COLS, replicaset_cells),
        ("apps", "StatefulSet") => (STATEFULSET_COLS, statefulset_cells),
        ("apps", "DaemonSet") => (DAEMONSET_COLS, daemonset_cells),
        ("batch", "Job") => (JOB_COLS, job_cells),
        ("batch", "CronJob") => (CRONJOB_COLS, cronjob_cells),
        ("coordination.k8s.io", "Lease") => (LEASE_COLS, lease_cells),
        ("apiextensions.k8s.io", "CustomResourceDefinition")
        | ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => (CREATED_AT_COLS, created_at_cells),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => (BINDING_COLS, binding_cells),
        ("networking.k8s.io", "Ingress") => (INGRESS_COLS, ingress_cells),
        ("autoscaling", "HorizontalPodAutoscaler") => (HPA_COLS, hpa_cells),
        _ => (NAME_AGE_COLS, name_age_cells),
    }
}

fn builtin_table(group: &str, kind: &str, objects: &[&Value], now: DateTime<Utc>) -> (Vec<Value>, Vec<Vec<Value>>) {
    let (cols, cells) = builtin_printer(group, kind);
    (
        cols.iter().map(definition).collect(),
        objects.iter().map(|o| cells(o, now)).collect(),
    )
}

// ---------------------------------------------------------------------------------------------------------------
// Small accessors (absent values read as Go zero values, as in the typed printers)
// ---------------------------------------------------------------------------------------------------------------

fn at<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, k| v.get(k))
}

fn s<'a>(obj: &'a Value, dotted: &str) -> &'a str {
    at(obj, dotted).and_then(Value::as_str).unwrap_or("")
}

fn i(obj: &Value, dotted: &str) -> i64 {
    at(obj, dotted).and_then(Value::as_i64).unwrap_or(0)
}

fn arr<'a>(obj: &'a Value, dotted: &str) -> &'a [Value] {
    at(obj, dotted)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn len_of(obj: &Value, dotted: &str) -> i64 {
    match at(obj, dotted) {
        Some(Value::Object(m)) => m.len() as i64,
        Some(Value::Array(a)) => a.len() as i64,
        _ => 0,
    }
}

fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".to_string()
    } else {
        v.to_string()
    }
}

fn name(obj: &Value) -> Value {
    json!(s(obj, "metadata.name"))
}

fn parse_time(v: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v).ok().map(|t| t.with_timezone(&Utc))
}

/// `translateTimestampSince`: `<unknown>` for a missing time, else the human age.
fn since(obj: &Value, dotted: &str, now: DateTime<Utc>) -> String {
    match parse_time(s(obj, dotted)) {
        Some(t) => human_duration((now - t).num_seconds()),
        None => "<unknown>".to_string(),
    }
}

fn age(obj: &Value, now: DateTime<Utc>) -> Value {
    json!(since(obj, "metadata.creationTimestamp", now))
}

/// k8s.io/apimachinery `duration.HumanDuration`, on whole seconds (it truncates to seconds itself).
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    human_duration_days(hours)
}

fn human_duration_days(hours: i64) -> String {
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{}h", hours / 24, h),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{}d", hours / 24 / 365, d),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `labels.FormatLabels`: sorted `k=v` joined by `,`, `<none>` when empty.
fn format_labels(map: Option<&Value>) -> String {
    let Some(m) = map.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return "<none>".to_string();
    };
    let mut pairs: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key, `""` for nil/empty.
fn format_label_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel else { return String::new() };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        reqs.extend(
            m.iter()
                .map(|(k, v)| (k.clone(), format!("{k}={}", v.as_str().unwrap_or_default()))),
        );
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let key = s(e, "key");
        let mut values: Vec<&str> = arr(e, "values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let text = match s(e, "operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort();
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

/// Containers and images of a pod spec, joined by `,` (`layoutContainerCells`).
fn container_cells(pod_spec: Option<&Value>) -> (Value, Value) {
    let containers = pod_spec.and_then(|p| p.get("containers")).and_then(Value::as_array);
    let list = containers.map(Vec::as_slice).unwrap_or(&[]);
    let names: Vec<&str> = list.iter().map(|c| s(c, "name")).collect();
    let images: Vec<&str> = list.iter().map(|c| s(c, "image")).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

fn has_condition(obj: &Value, ty: &str) -> bool {
    arr(obj, "status.conditions")
        .iter()
        .any(|c| s(c, "type") == ty && s(c, "status") == "True")
}

fn name_age_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(obj), age(obj, now)]
}

const NAME_AGE_COLS: &[Col] = &[NAME, AGE];

// ---------------------------------------------------------------------------------------------------------------
// core/v1 kinds
// ---------------------------------------------------------------------------------------------------------------

const NAMESPACE_COLS: &[Col] = &[NAME, col("Status", "string", "The status of the namespace"), AGE];

fn namespace_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(obj), json!(s(obj, "status.phase")), age(obj, now)]
}

const CONFIGMAP_COLS: &[Col] = &[NAME, col("Data", "string", "Number of keys in the ConfigMap."), AGE];

fn configmap_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        name(obj),
        json!(len_of(obj, "data") + len_of(obj, "binaryData")),
        age(obj, now),
    ]
}

const SECRET_COLS: &[Col] = &[
    NAME,
    col(
        "Type",
        "string",
        "Used to facilitate programmatic handling of secret data.",
    ),
    col("Data", "string", "Number of keys in the Secret."),
    AGE,
];

fn secret_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        name(obj),
        json!(s(obj, "type")),
        json!(len_of(obj, "data")),
        age(obj, now),
    ]
}

const SERVICEACCOUNT_COLS: &[Col] = &[
    NAME,
    col(
        "Secrets",
        "string",
        "Secrets is a list of the secrets in the same namespace.",
    ),
    AGE,
];

fn serviceaccount_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(obj), json!(len_of(obj, "secrets")), age(obj, now)]
}

const SERVICE_COLS: &[Col] = &[
    NAME,
    col("Type", "string", "type determines how the Service is exposed."),
    col("Cluster-IP", "string", "clusterIP is the IP address of the service."),
    col(
        "External-IP",
        "string",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic.",
    ),
    col(
        "Port(s)",
        "string",
        "The list of ports that are exposed by this service.",
    ),
    AGE,
    wide(
        "Selector",
        "Route service traffic to pods with label keys and values matching this selector.",
    ),
];

fn service_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let svc_type = match s(obj, "spec.type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = arr(obj, "spec.clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| s(obj, "spec.clusterIP"));
    vec![
        name(obj),
        json!(svc_type),
        json!(or_none(cluster_ip)),
        json!(service_external_ip(obj, svc_type)),
        json!(or_none(&service_ports(obj))),
        age(obj, now),
        json!(format_labels(at(obj, "spec.selector"))),
    ]
}

/// `getServiceExternalIP` with `wide` (the server always prints wide).
fn service_external_ip(obj: &Value, svc_type: &str) -> String {
    let external: Vec<&str> = arr(obj, "spec.externalIPs").iter().filter_map(Value::as_str).collect();
    match svc_type {
        "ClusterIP" | "NodePort" => or_none(&external.join(",")),
        "LoadBalancer" => {
            let lb = load_balancer_ips(obj);
            let all: Vec<&str> = lb.iter().map(String::as_str).chain(external.iter().copied()).collect();
            if all.is_empty() {
                "<pending>".to_string()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(obj, "spec.externalName").to_string(),
        _ => "<unknown>".to_string(),
    }
}

fn load_balancer_ips(obj: &Value) -> Vec<String> {
    arr(obj, "status.loadBalancer.ingress")
        .iter()
        .filter_map(|ing| {
            let ip = s(ing, "ip");
            let host = s(ing, "hostname");
            [ip, host].into_iter().find(|v| !v.is_empty()).map(str::to_string)
        })
        .collect()
}

/// `makePortString`: `port[:nodePort]/protocol` joined by `,`.
fn service_ports(obj: &Value) -> String {
    let pieces: Vec<String> = arr(obj, "spec.ports")
        .iter()
        .map(|p| {
            let proto = match s(p, "protocol") {
                "" => "TCP",
                x => x,
            };
            match i(p, "nodePort") {
                n if n > 0 => format!("{}:{n}/{proto}", i(p, "port")),
                _ => format!("{}/{proto}", i(p, "port")),
            }
        })
        .collect();
    pieces.join(",")
}

const POD_COLS: &[Col] = &[
    NAME,
    col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    col("Status", "string", "The aggregate status of the containers in this pod."),
    col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
    AGE,
    wide("IP", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
    wide("Node", "NodeName is a request to schedule this pod onto a specific node."),
    wide("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node."),
    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness."),
];

/// Counters gathered from the container statuses (`printPod`).
#[derive(Default)]
struct PodCounts {
    ready: usize,
    restarts: i64,
    last_restart: Option<DateTime<Utc>>,
}

fn pod_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let total = arr(obj, "spec.containers").len();
    let mut counts = PodCounts::default();
    let reason = pod_reason(obj, &mut counts);
    let restarts = match counts.last_restart {
        Some(t) if counts.restarts != 0 => {
            format!("{} ({} ago)", counts.restarts, human_duration((now - t).num_seconds()))
        }
        _ => counts.restarts.to_string(),
    };
    vec![
        name(obj),
        json!(format!("{}/{}", counts.ready, total)),
        json!(reason),
        json!(restarts),
        age(obj, now),
        json!(or_none(s(obj, "status.podIP"))),
        json!(or_none(s(obj, "spec.nodeName"))),
        json!(or_none(s(obj, "status.nominatedNodeName"))),
        json!(readiness_gates(obj)),
    ]
}

/// The STATUS column: phase, overridden by init/container state reasons, then Terminating.
fn pod_reason(obj: &Value, counts: &mut PodCounts) -> String {
    let phase = s(obj, "status.phase");
    let mut reason = match (s(obj, "status.reason"), phase) {
        ("", "") => "Pending".to_string(),
        ("", p) => p.to_string(),
        (r, _) => r.to_string(),
    };
    if arr(obj, "status.conditions")
        .iter()
        .any(|c| s(c, "type") == "PodScheduled" && s(c, "reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".to_string();
    }
    let initializing = init_container_reason(obj, counts, &mut reason);
    if !initializing {
        container_reason(obj, counts, &mut reason);
    }
    if at(obj, "metadata.deletionTimestamp").is_some_and(|v| !v.is_null()) {
        if s(obj, "status.reason") == "NodeLost" {
            reason = "Unknown".to_string();
        } else if !matches!(phase, "Succeeded" | "Failed") {
            reason = "Terminating".to_string();
        }
    }
    reason
}

/// Returns whether the pod is still initializing (then container statuses are not consulted).
fn init_container_reason(obj: &Value, counts: &mut PodCounts, reason: &mut String) -> bool {
    let statuses = arr(obj, "status.initContainerStatuses");
    let total = arr(obj, "spec.initContainers").len();
    for (idx, st) in statuses.iter().enumerate() {
        counts.restarts += i(st, "restartCount");
        let terminated = at(st, "state.terminated");
        let waiting = s(st, "state.waiting.reason");
        match terminated {
            Some(t) if i(t, "exitCode") == 0 => continue,
            Some(t) => *reason = format!("Init:{}", terminated_reason(t)),
            None if !waiting.is_empty() && waiting != "PodInitializing" => *reason = format!("Init:{waiting}"),
            None => *reason = format!("Init:{idx}/{total}"),
        }
        return true;
    }
    false
}

fn terminated_reason(t: &Value) -> String {
    match (s(t, "reason"), i(t, "signal")) {
        ("", 0) => format!("ExitCode:{}", i(t, "exitCode")),
        ("", sig) => format!("Signal:{sig}"),
        (r, _) => r.to_string(),
    }
}

fn container_reason(obj: &Value, counts: &mut PodCounts, reason: &mut String) {
    let mut has_running = false;
    for st in arr(obj, "status.containerStatuses").iter().rev() {
        counts.restarts += i(st, "restartCount");
        if let Some(t) = parse_time(s(st, "lastState.terminated.finishedAt")) {
            counts.last_restart = Some(counts.last_restart.map_or(t, |l| l.max(t)));
        }
        let waiting = s(st, "state.waiting.reason");
        if !waiting.is_empty() {
            *reason = waiting.to_string();
        } else if let Some(t) = at(st, "state.terminated") {
            *reason = terminated_reason(t);
        } else if at(st, "ready").and_then(Value::as_bool) == Some(true) && at(st, "state.running").is_some() {
            has_running = true;
            counts.ready += 1;
        }
    }
    if reason == "Completed" && has_running {
        *reason = if has_condition(obj, "Ready") {
            "Running"
        } else {
            "NotReady"
        }
        .to_string();
    }
}

fn readiness_gates(obj: &Value) -> String {
    let gates = arr(obj, "spec.readinessGates");
    if gates.is_empty() {
        return "<none>".to_string();
    }
    let ok = gates
        .iter()
        .filter(|g| has_condition(obj, s(g, "conditionType")))
        .count();
    format!("{ok}/{}", gates.len())
}

const NODE_COLS: &[Col] = &[
    NAME,
    col("Status", "string", "The status of the node"),
    col("Roles", "string", "The roles of the node"),
    AGE,
    col("Version", "string", "Kubelet Version reported by the node."),
    wide("Internal-IP", "List of addresses reachable to the node."),
    wide("External-IP", "List of addresses reachable to the node."),
    wide(
        "OS-Image",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    wide(
        "Kernel-Version",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    wide(
        "Container-Runtime",
        "Container runtime version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];

fn node_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ready = arr(obj, "status.conditions").iter().find(|c| s(c, "type") == "Ready");
    let mut status = match ready.map(|c| s(c, "status")) {
        Some("True") => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if at(obj, "spec.unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = at(obj, "metadata.labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    let address = |ty: &str| {
        let found = arr(obj, "status.addresses").iter().find(|a| s(a, "type") == ty);
        or_none(found.map(|a| s(a, "address")).unwrap_or_default())
    };
    vec![
        name(obj),
        json!(status),
        json!(or_none(&roles.join(","))),
        age(obj, now),
        json!(s(obj, "status.nodeInfo.kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(or_none(s(obj, "status.nodeInfo.osImage"))),
        json!(or_none(s(obj, "status.nodeInfo.kernelVersion"))),
        json!(or_none(s(obj, "status.nodeInfo.containerRuntimeVersion"))),
    ]
}

const PVC_COLS: &[Col] = &[
    NAME,
    col(
        "Status",
        "string",
        "phase represents the current phase of PersistentVolumeClaim.",
    ),
    col(
        "Volume",
        "string",
        "volumeName is the binding reference to the PersistentVolume backing this claim.",
    ),
    col(
        "Capacity",
        "string",
        "capacity represents the actual resources of the underlying volume.",
    ),
    col(
        "Access Modes",
        "string",
        "accessModes contains the actual access modes the volume backing the PVC has.",
    ),
    col(
        "StorageClass",
        "string",
        "storageClassName is the name of the StorageClass required by the claim.",
    ),
    col(
        "VolumeAttributesClass",
        "string",
        "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim.",
    ),
    AGE,
    wide(
        "VolumeMode",
        "volumeMode defines what type of volume is required by the claim.",
    ),
];

fn pvc_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let deleting = at(obj, "metadata.deletionTimestamp").is_some_and(|v| !v.is_null());
    let phase = if deleting {
        "Terminating"
    } else {
        s(obj, "status.phase")
    };
    let bound = !s(obj, "spec.volumeName").is_empty();
    let (capacity, modes) = if bound {
        (
            s(obj, "status.capacity.storage").to_string(),
            access_modes(arr(obj, "status.accessModes")),
        )
    } else {
        (String::new(), String::new())
    };
    // The beta annotation still wins over the field, as in `GetPersistentVolumeClaimClass`.
    let class = at(obj, "metadata.annotations")
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| s(obj, "spec.storageClassName"));
    let vac = match s(obj, "spec.volumeAttributesClassName") {
        "" => "<unset>",
        v => v,
    };
    let mode = match s(obj, "spec.volumeMode") {
        "" => "<unset>",
        v => v,
    };
    vec![
        name(obj),
        json!(phase),
        json!(s(obj, "spec.volumeName")),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(vac),
        age(obj, now),
        json!(mode),
    ]
}

/// `GetAccessModesAsString`: short forms joined by `,`.
fn access_modes(modes: &[Value]) -> String {
    let short: Vec<&str> = modes
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    short.join(",")
}

const EVENT_COLS: &[Col] = &[
    col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
    col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future"),
    col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
    col("Object", "string", "The object that this event is about."),
    wide("Subobject", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go-field access statement."),
    wide("Source", "The component reporting this event. Should be a short machine understandable string."),
    col("Message", "string", "A human-readable description of the status of this operation."),
    wide("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
    wide("Count", "The number of times this event has occurred."),
    Col { name: "Name", ty: "string", format: "name", priority: 1, description: NAME.description },
];

/// core/v1 and events.k8s.io/v1 Events share one printer; read whichever field spelling the object has.
fn first<'a>(obj: &'a Value, paths: &[&str]) -> &'a str {
    paths.iter().map(|p| s(obj, p)).find(|v| !v.is_empty()).unwrap_or("")
}

fn event_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ts = |paths: &[&str]| {
        paths
            .iter()
            .find_map(|p| parse_time(s(obj, p)))
            .map(|t| human_duration((now - t).num_seconds()))
            .unwrap_or_else(|| "<unknown>".to_string())
    };
    let first_seen = ts(&["firstTimestamp", "deprecatedFirstTimestamp", "eventTime"]);
    let last_seen = ts(&[
        "series.lastObservedTime",
        "lastTimestamp",
        "deprecatedLastTimestamp",
        "firstTimestamp",
        "deprecatedFirstTimestamp",
        "eventTime",
    ]);
    let count = [i(obj, "series.count"), i(obj, "count"), i(obj, "deprecatedCount"), 1]
        .into_iter()
        .find(|c| *c > 0)
        .unwrap_or(1);
    let kind = first(obj, &["involvedObject.kind", "regarding.kind"]).to_lowercase();
    let target = match first(obj, &["involvedObject.name", "regarding.name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let component = first(
        obj,
        &[
            "source.component",
            "deprecatedSource.component",
            "reportingController",
            "reportingComponent",
        ],
    );
    let instance = first(obj, &["source.host", "deprecatedSource.host", "reportingInstance"]);
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last_seen),
        json!(s(obj, "type")),
        json!(s(obj, "reason")),
        json!(target),
        json!(first(obj, &["involvedObject.fieldPath", "regarding.fieldPath"])),
        json!(source),
        json!(first(obj, &["message", "note"]).trim()),
        json!(first_seen),
        json!(count),
        name(obj),
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// apps/v1, batch/v1
// ---------------------------------------------------------------------------------------------------------------

const DEPLOYMENT_COLS: &[Col] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    col(
        "Up-to-date",
        "string",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    col(
        "Available",
        "string",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

/// `spec.replicas`, defaulted to 1 as the registry would have done.
fn desired_replicas(obj: &Value) -> i64 {
    at(obj, "spec.replicas").and_then(Value::as_i64).unwrap_or(1)
}

fn deployment_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = container_cells(at(obj, "spec.template.spec"));
    vec![
        name(obj),
        json!(format!("{}/{}", i(obj, "status.readyReplicas"), desired_replicas(obj))),
        json!(i(obj, "status.updatedReplicas")),
        json!(i(obj, "status.availableReplicas")),
        age(obj, now),
        containers,
        images,
        json!(format_label_selector(at(obj, "spec.selector"))),
    ]
}

const REPLICASET_COLS: &[Col] = &[
    NAME,
    col("Desired", "integer", "Replicas is the number of desired replicas."),
    col(
        "Current",
        "integer",
        "Replicas is the most recently observed number of replicas.",
    ),
    col(
        "Ready",
        "integer",
        "readyReplicas is the number of pods targeted by this ReplicaSet with a Ready Condition.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn replicaset_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = container_cells(at(obj, "spec.template.spec"));
    vec![
        name(obj),
        json!(desired_replicas(obj)),
        json!(i(obj, "status.replicas")),
        json!(i(obj, "status.readyReplicas")),
        age(obj, now),
        containers,
        images,
        json!(format_label_selector(at(obj, "spec.selector"))),
    ]
}

const STATEFULSET_COLS: &[Col] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

fn statefulset_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = container_cells(at(obj, "spec.template.spec"));
    vec![
        name(obj),
        json!(format!("{}/{}", i(obj, "status.readyReplicas"), desired_replicas(obj))),
        age(obj, now),
        containers,
        images,
    ]
}

const DAEMONSET_COLS: &[Col] = &[
    NAME,
    col("Desired", "integer", "The total number of nodes that should be running the daemon pod."),
    col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
    col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
    col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."),
    col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn daemonset_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = container_cells(at(obj, "spec.template.spec"));
    vec![
        name(obj),
        json!(i(obj, "status.desiredNumberScheduled")),
        json!(i(obj, "status.currentNumberScheduled")),
        json!(i(obj, "status.numberReady")),
        json!(i(obj, "status.updatedNumberScheduled")),
        json!(i(obj, "status.numberAvailable")),
        json!(format_labels(at(obj, "spec.template.spec.nodeSelector"))),
        age(obj, now),
        containers,
        images,
        json!(format_label_selector(at(obj, "spec.selector"))),
    ]
}

const JOB_COLS: &[Col] = &[
    NAME,
    col("Status", "string", "Status of the job."),
    col("Completions", "string", "The successful completion status of the job."),
    col("Duration", "string", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn job_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = container_cells(at(obj, "spec.template.spec"));
    vec![
        name(obj),
        json!(job_status(obj)),
        json!(job_completions(obj)),
        json!(job_duration(obj, now)),
        age(obj, now),
        containers,
        images,
        json!(format_label_selector(at(obj, "spec.selector"))),
    ]
}

fn job_status(obj: &Value) -> &'static str {
    if has_condition(obj, "Complete") {
        "Complete"
    } else if has_condition(obj, "Failed") {
        "Failed"
    } else if at(obj, "metadata.deletionTimestamp").is_some_and(|v| !v.is_null()) {
        "Terminating"
    } else if has_condition(obj, "Suspended") {
        "Suspended"
    } else if has_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(obj, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}

fn job_completions(obj: &Value) -> String {
    let succeeded = i(obj, "status.succeeded");
    if let Some(c) = at(obj, "spec.completions").and_then(Value::as_i64) {
        return format!("{succeeded}/{c}");
    }
    match i(obj, "spec.parallelism") {
        p if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    }
}

fn job_duration(obj: &Value, now: DateTime<Utc>) -> String {
    let Some(start) = parse_time(s(obj, "status.startTime")) else {
        return String::new();
    };
    let end = parse_time(s(obj, "status.completionTime")).unwrap_or(now);
    human_duration((end - start).num_seconds())
}

const CRONJOB_COLS: &[Col] = &[
    NAME,
    col("Schedule", "string", "The schedule in Cron format."),
    col("Timezone", "string", "The time zone name for the given schedule."),
    col(
        "Suspend",
        "boolean",
        "This flag tells the controller to suspend subsequent executions.",
    ),
    col("Active", "integer", "A list of pointers to currently running jobs."),
    col(
        "Last Schedule",
        "string",
        "Information when was the last time the job was successfully scheduled.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
];

fn cronjob_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = container_cells(at(obj, "spec.jobTemplate.spec.template.spec"));
    let suspend = match at(obj, "spec.suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let last = match parse_time(s(obj, "status.lastScheduleTime")) {
        Some(t) => human_duration((now - t).num_seconds()),
        None => "<none>".to_string(),
    };
    vec![
        name(obj),
        json!(s(obj, "spec.schedule")),
        json!(or_none(s(obj, "spec.timeZone"))),
        json!(suspend),
        json!(len_of(obj, "status.active")),
        json!(last),
        age(obj, now),
        containers,
        images,
        json!(format_label_selector(at(obj, "spec.jobTemplate.spec.selector"))),
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// Other groups
// ---------------------------------------------------------------------------------------------------------------

const LEASE_COLS: &[Col] = &[
    NAME,
    col(
        "Holder",
        "string",
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];

fn lease_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![name(obj), json!(s(obj, "spec.holderIdentity")), age(obj, now)]
}

/// CRDs use the default TableConvertor and the RBAC roles print the same two columns.
const CREATED_AT_COLS: &[Col] = &[NAME, CREATED_AT];

fn created_at_cells(obj: &Value, _now: DateTime<Utc>) -> Vec<Value> {
    let created = parse_time(s(obj, "metadata.creationTimestamp"))
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    vec![name(obj), json!(created)]
}

const BINDING_COLS: &[Col] = &[
    NAME,
    col(
        "Role",
        "string",
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
    ),
    AGE,
    wide("Users", "Users in the roleBinding"),
    wide("Groups", "Groups in the roleBinding"),
    wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
];

fn binding_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let subjects = arr(obj, "subjects");
    let of_kind = |kind: &str| -> String {
        let names: Vec<String> = subjects
            .iter()
            .filter(|sub| s(sub, "kind") == kind)
            .map(|sub| match (kind, s(sub, "namespace")) {
                ("ServiceAccount", ns) => format!("{ns}/{}", s(sub, "name")),
                _ => s(sub, "name").to_string(),
            })
            .collect();
        names.join(", ")
    };
    vec![
        name(obj),
        json!(format!("{}/{}", s(obj, "roleRef.kind"), s(obj, "roleRef.name"))),
        age(obj, now),
        json!(of_kind("User")),
        json!(of_kind("Group")),
        json!(of_kind("ServiceAccount")),
    ]
}

const INGRESS_COLS: &[Col] = &[
    NAME,
    col(
        "Class",
        "string",
        "ingressClassName is the name of an IngressClass cluster resource.",
    ),
    col(
        "Hosts",
        "string",
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    col(
        "Address",
        "string",
        "Address is a list containing ingress points for the load-balancer",
    ),
    col("Ports", "string", "Ports of TLS configurations that open"),
    AGE,
];

fn ingress_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let hosts: Vec<&str> = arr(obj, "spec.rules")
        .iter()
        .map(|r| s(r, "host"))
        .filter(|h| !h.is_empty())
        .collect();
    let hosts = match hosts.len() {
        0 => "*".to_string(),
        n if n > 3 => format!("{} + {} more...", hosts[..3].join(","), n - 3),
        _ => hosts.join(","),
    };
    let ports = if arr(obj, "spec.tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        name(obj),
        json!(or_none(s(obj, "spec.ingressClassName"))),
        json!(hosts),
        json!(load_balancer_ips(obj).join(",")),
        json!(ports),
        age(obj, now),
    ]
}

const HPA_COLS: &[Col] = &[
    NAME,
    col("Reference", "string", "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource."),
    col("Targets", "string", "metrics contains the specifications for which to use to calculate the desired replica count."),
    col("MinPods", "string", "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down."),
    col("MaxPods", "string", "maxReplicas is the upper limit for the number of pods that can be set by the autoscaler."),
    col("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler."),
    AGE,
];

fn hpa_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let min = match at(obj, "spec.minReplicas").and_then(Value::as_i64) {
        Some(m) => json!(m),
        None => json!("<unset>"),
    };
    vec![
        name(obj),
        json!(format!(
            "{}/{}",
            s(obj, "spec.scaleTargetRef.kind"),
            s(obj, "spec.scaleTargetRef.name")
        )),
        json!(hpa_targets(obj)),
        min,
        json!(i(obj, "spec.maxReplicas")),
        json!(i(obj, "status.currentReplicas")),
        age(obj, now),
    ]
}

/// Resource metrics only (`cpu: 40%/80%`); other metric kinds print `<unknown>` targets.
fn hpa_targets(obj: &Value) -> String {
    let specs = arr(obj, "spec.metrics");
    if specs.is_empty() {
        return "<none>".to_string();
    }
    let current = arr(obj, "status.currentMetrics");
    let parts: Vec<String> = specs
        .iter()
        .map(|m| {
            let res = s(m, "resource.name");
            let cur = current.iter().find(|c| s(c, "resource.name") == res && !res.is_empty());
            match at(m, "resource.target.averageUtilization").and_then(Value::as_i64) {
                Some(t) => {
                    let c = cur
                        .and_then(|c| at(c, "resource.current.averageUtilization"))
                        .and_then(Value::as_i64);
                    let c = c.map_or("<unknown>".to_string(), |v| format!("{v}%"));
                    format!("{res}: {c}/{t}%")
                }
                None => format!("{res}: <unknown>/{}", s(m, "resource.target.averageValue")),
            }
        })
        .collect();
    parts.join(", ")
}

// ---------------------------------------------------------------------------------------------------------------
// Custom resources
// ---------------------------------------------------------------------------------------------------------------

fn custom_table(cols: &[PrinterColumn], objects: &[&Value], now: DateTime<Utc>) -> (Vec<Value>, Vec<Vec<Value>>) {
    let mut defs = vec![definition(&NAME)];
    defs.extend(cols.iter().map(|c| {
        json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
    }));
    let paths: Vec<Option<Vec<Step>>> = cols.iter().map(|c| parse_json_path(&c.json_path)).collect();
    let rows = objects
        .iter()
        .map(|obj| {
            let mut cells = vec![name(obj)];
            cells.extend(cols.iter().zip(&paths).map(|(c, p)| {
                let value = p.as_ref().and_then(|p| first_result(obj, p));
                custom_cell(&c.type_, value, now)
            }));
            cells
        })
        .collect();
    (defs, rows)
}

/// The apiextensions TableConvertor's `cellForJSONValue`, except a missing or unconvertible value prints as an
/// empty cell rather than `null`.
fn custom_cell(ty: &str, value: Option<&Value>, now: DateTime<Utc>) -> Value {
    let Some(v) = value.filter(|v| !v.is_null()) else {
        return json!("");
    };
    let cell = match ty {
        "integer" => v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)).map(Value::from),
        "number" => v.as_f64().map(Value::from),
        "boolean" => v.as_bool().map(Value::from),
        "date" => v.as_str().map(|t| match parse_time(t) {
            Some(t) => json!(human_duration((now - t).num_seconds())),
            None => json!("<invalid>"),
        }),
        _ => Some(json!(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })),
    };
    cell.unwrap_or_else(|| json!(""))
}

/// One step of the JSONPath subset CRD printer columns use.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Wildcard,
    Filter(Filter),
}

/// `[?(@.a.b == "x")]`, `!=`, or bare `[?(@.a)]` (exists).
#[derive(Debug, Clone, PartialEq)]
struct Filter {
    lhs: Vec<Step>,
    op: Option<(bool, Value)>,
}

/// Parse `.a.b`, `.a[0].b`, `.a[*].b`, `['a.b']`, `[?(@.t=="x")].s` (with or without `{}`); `None` if malformed.
fn parse_json_path(path: &str) -> Option<Vec<Step>> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|q| q.strip_suffix('}'))
        .unwrap_or(p)
        .trim();
    let p = p.strip_prefix('$').unwrap_or(p);
    let chars: Vec<char> = p.chars().collect();
    let mut steps = Vec::new();
    let mut pos = 0;
    while pos < chars.len() {
        let (step, next) = parse_step(&chars, pos)?;
        steps.push(step);
        pos = next;
    }
    Some(steps)
}

fn parse_step(chars: &[char], pos: usize) -> Option<(Step, usize)> {
    match chars.get(pos)? {
        '.' => {
            let start = pos + 1;
            let end = (start..chars.len())
                .find(|&j| matches!(chars[j], '.' | '['))
                .unwrap_or(chars.len());
            let name: String = chars[start..end].iter().collect();
            match name.as_str() {
                "" => None,
                "*" => Some((Step::Wildcard, end)),
                _ => Some((Step::Field(name), end)),
            }
        }
        '[' => parse_bracket(chars, pos),
        _ => None,
    }
}

/// The bracket step starting at `chars[pos] == '['`.
fn parse_bracket(chars: &[char], pos: usize) -> Option<(Step, usize)> {
    let close = matching_bracket(chars, pos)?;
    let inner: String = chars[pos + 1..close].iter().collect();
    let inner = inner.trim();
    let step = if inner == "*" {
        Step::Wildcard
    } else if let Some(expr) = inner.strip_prefix("?(").and_then(|e| e.strip_suffix(')')) {
        Step::Filter(parse_filter(expr.trim())?)
    } else if let Some(q) = unquote(inner) {
        Step::Field(q)
    } else {
        Step::Index(inner.parse().ok()?)
    };
    Some((step, close + 1))
}

/// Index of the `]` closing the `[` at `open`, skipping quoted text and nested brackets.
fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<String> {
    let s = s.trim();
    ['"', '\'']
        .into_iter()
        .find_map(|q| s.strip_prefix(q).and_then(|r| r.strip_suffix(q)).map(str::to_string))
}

fn parse_filter(expr: &str) -> Option<Filter> {
    let (lhs, op) = match (expr.find("=="), expr.find("!=")) {
        (Some(at), _) => (&expr[..at], Some((false, &expr[at + 2..]))),
        (None, Some(at)) => (&expr[..at], Some((true, &expr[at + 2..]))),
        (None, None) => (expr, None),
    };
    let lhs = parse_json_path(lhs.trim().strip_prefix('@')?)?;
    let op = match op {
        None => None,
        Some((negate, rhs)) => Some((negate, parse_literal(rhs.trim())?)),
    };
    Some(Filter { lhs, op })
}

fn parse_literal(s: &str) -> Option<Value> {
    if let Some(q) = unquote(s) {
        return Some(Value::String(q));
    }
    match s {
        "true" => Some(Value::Bool(true)),
        "false" => Some(Value::Bool(false)),
        "null" => Some(Value::Null),
        _ => s.parse::<f64>().ok().map(|f| json!(f)),
    }
}

/// The first value the path selects, as the real TableConvertor uses `results[0][0]`.
fn first_result<'a>(obj: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    evaluate(obj, steps).into_iter().next()
}

fn evaluate<'a>(obj: &'a Value, steps: &[Step]) -> Vec<&'a Value> {
    steps.iter().fold(vec![obj], |current, step| {
        current.into_iter().flat_map(|v| apply_step(v, step)).collect()
    })
}

fn apply_step<'a>(v: &'a Value, step: &Step) -> Vec<&'a Value> {
    match (step, v) {
        (Step::Field(name), Value::Object(m)) => m.get(name).into_iter().collect(),
        (Step::Index(idx), Value::Array(a)) => {
            let idx = if *idx < 0 { a.len() as i64 + idx } else { *idx };
            usize::try_from(idx).ok().and_then(|i| a.get(i)).into_iter().collect()
        }
        (Step::Wildcard, Value::Array(a)) => a.iter().collect(),
        (Step::Wildcard, Value::Object(m)) => m.values().collect(),
        (Step::Filter(f), Value::Array(a)) => a.iter().filter(|e| filter_holds(e, f)).collect(),
        _ => Vec::new(),
    }
}

fn filter_holds(element: &Value, f: &Filter) -> bool {
    let found = first_result(element, &f.lhs);
    match (&f.op, found) {
        (None, found) => found.is_some(),
        (Some((negate, rhs)), Some(found)) => literal_eq(found, rhs) != *negate,
        (Some((negate, _)), None) => *negate,
    }
}

/// Numbers compare by value (`1` == `1.0`), everything else structurally.
fn literal_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API group a built-in kind of these tests belongs to; other kinds are custom resources.
    fn group_of(kind: &str) -> &'static str {
        match kind {
            "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => "apps",
            "Job" | "CronJob" => "batch",
            "Lease" => "coordination.k8s.io",
            "CustomResourceDefinition" => "apiextensions.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => "rbac.authorization.k8s.io",
            "Ingress" => "networking.k8s.io",
            "HorizontalPodAutoscaler" => "autoscaling",
            "App" | "Widget" => "demo.example.com",
            _ => "",
        }
    }

    fn tbuild(
        kind: &str,
        cols: Option<&[PrinterColumn]>,
        objs: &[Value],
        include: IncludeObject,
        now: DateTime<Utc>,
    ) -> Value {
        let refs: Vec<&Value> = objs.iter().collect();
        build(group_of(kind), kind, cols, &refs, include, now)
    }

    fn now() -> DateTime<Utc> {
        parse_time("2026-11-22T12:00:00Z").unwrap()
    }

    fn ago(secs: i64) -> String {
        (now() - chrono::Duration::seconds(secs))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    fn col_names(t: &Value) -> Vec<String> {
        t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn visible(t: &Value) -> Vec<String> {
        t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn cells(t: &Value, row: usize) -> Vec<Value> {
        t["rows"][row]["cells"].as_array().unwrap().clone()
    }

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 3 * 3600, "2d3h"),
            (3 * 86400, "3d"),
            (8 * 86400, "8d"),
            (800 * 86400, "2y70d"),
            (730 * 86400, "2y"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn namespace_table_with_partial_metadata() {
        let ns = json!({"metadata": {"name": "t1", "creationTimestamp": ago(11), "uid": "u"}, "status": {"phase": "Active"}});
        let t = tbuild("Namespace", None, &[ns], IncludeObject::Metadata, now());
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(col_names(&t), ["Name", "Status", "Age"]);
        assert_eq!(cells(&t, 0), [json!("t1"), json!("Active"), json!("11s")]);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["uid"], "u");
        let def = &t["columnDefinitions"][0];
        assert_eq!(
            (def["type"].as_str(), def["format"].as_str(), def["priority"].as_i64()),
            (Some("string"), Some("name"), Some(0))
        );
    }

    #[test]
    fn include_object_variants() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}});
        let full = tbuild(
            "ConfigMap",
            None,
            std::slice::from_ref(&cm),
            IncludeObject::Object,
            now(),
        );
        assert_eq!(full["rows"][0]["object"], cm);
        let none = tbuild("ConfigMap", None, &[cm], IncludeObject::None, now());
        assert!(none["rows"][0]["object"].is_null());
        assert_eq!(cells(&none, 0), [json!("c"), json!(1), json!("<unknown>")]);
    }

    #[test]
    fn secret_and_serviceaccount_columns() {
        let sec =
            json!({"metadata": {"name": "s", "creationTimestamp": ago(60)}, "type": "Opaque", "data": {"k": "dg=="}});
        let t = tbuild("Secret", None, &[sec], IncludeObject::Metadata, now());
        assert_eq!(col_names(&t), ["Name", "Type", "Data", "Age"]);
        assert_eq!(cells(&t, 0), [json!("s"), json!("Opaque"), json!(1), json!("60s")]);
        let sa = json!({"metadata": {"name": "default"}});
        let t = tbuild("ServiceAccount", None, &[sa], IncludeObject::Metadata, now());
        assert_eq!(col_names(&t), ["Name", "Secrets", "Age"]);
        assert_eq!(cells(&t, 0)[1], json!(0));
    }

    #[test]
    fn deployment_columns_and_cells() {
        let d = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(200)},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}, {"name": "s", "image": "envoy"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
        });
        let t = tbuild("Deployment", None, &[d], IncludeObject::Metadata, now());
        assert_eq!(visible(&t), ["Name", "Ready", "Up-to-date", "Available", "Age"]);
        assert_eq!(
            col_names(&t),
            [
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(
            cells(&t, 0),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("3m20s"),
                json!("c,s"),
                json!("nginx:1,envoy"),
                json!("app=web")
            ]
        );
    }

    #[test]
    fn label_selector_formatting() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"},
                         "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                              {"key": "x", "operator": "DoesNotExist"}]});
        assert_eq!(format_label_selector(Some(&sel)), "a=1,b=2,env in (dev,prod),!x");
    }

    #[test]
    fn pod_status_variants() {
        let running = json!({
            "metadata": {"name": "p", "creationTimestamp": ago(30)},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                       "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}]},
        });
        let waiting = json!({
            "metadata": {"name": "q", "creationTimestamp": ago(30), "deletionTimestamp": ago(1)},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending",
                       "containerStatuses": [{"name": "c", "ready": false, "restartCount": 2,
                                              "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                              "lastState": {"terminated": {"finishedAt": ago(90)}}}]},
        });
        let t = tbuild("Pod", None, &[running, waiting], IncludeObject::Metadata, now());
        assert_eq!(visible(&t), ["Name", "Ready", "Status", "Restarts", "Age"]);
        assert_eq!(
            cells(&t, 0),
            [
                json!("p"),
                json!("1/1"),
                json!("Running"),
                json!("0"),
                json!("30s"),
                json!("10.0.0.5"),
                json!("n1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
        let q = cells(&t, 1);
        assert_eq!(
            (q[1].clone(), q[2].clone(), q[3].clone()),
            (json!("0/1"), json!("Terminating"), json!("2 (90s ago)"))
        );
    }

    #[test]
    fn service_columns() {
        let svc = json!({"metadata": {"name": "web"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "selector": {"app": "web"},
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}});
        let t = tbuild("Service", None, &[svc], IncludeObject::Metadata, now());
        assert_eq!(
            visible(&t),
            ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"]
        );
        let c = cells(&t, 0);
        assert_eq!(
            c[1..5],
            [
                json!("NodePort"),
                json!("10.96.0.10"),
                json!("<none>"),
                json!("80:30080/TCP,53/UDP")
            ]
        );
        assert_eq!(c[6], json!("app=web"));
        let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer"}});
        assert_eq!(
            cells(&tbuild("Service", None, &[lb], IncludeObject::None, now()), 0)[3],
            json!("<pending>")
        );
    }

    #[test]
    fn job_columns() {
        let job = json!({"metadata": {"name": "j", "creationTimestamp": ago(100)},
            "spec": {"completions": 1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"succeeded": 1, "startTime": ago(100), "completionTime": ago(95),
                       "conditions": [{"type": "Complete", "status": "True"}]}});
        let t = tbuild("Job", None, &[job], IncludeObject::Metadata, now());
        assert_eq!(visible(&t), ["Name", "Status", "Completions", "Duration", "Age"]);
        assert_eq!(
            cells(&t, 0)[..5],
            [json!("j"), json!("Complete"), json!("1/1"), json!("5s"), json!("100s")]
        );
        let running = json!({"metadata": {"name": "r"}, "spec": {"parallelism": 2}, "status": {}});
        let c = cells(&tbuild("Job", None, &[running], IncludeObject::None, now()), 0);
        assert_eq!(c[1..4], [json!("Running"), json!("0/1 of 2"), json!("")]);
    }

    #[test]
    fn event_columns() {
        let ev = json!({"metadata": {"name": "web.1"}, "type": "Normal", "reason": "Synced", "message": " ok ",
            "involvedObject": {"kind": "App", "name": "web"}, "source": {"component": "capstan"},
            "firstTimestamp": ago(300), "lastTimestamp": ago(5), "count": 3});
        let t = tbuild("Event", None, &[ev], IncludeObject::Metadata, now());
        assert_eq!(visible(&t), ["Last Seen", "Type", "Reason", "Object", "Message"]);
        assert_eq!(
            cells(&t, 0),
            [
                json!("5s"),
                json!("Normal"),
                json!("Synced"),
                json!("app/web"),
                json!(""),
                json!("capstan"),
                json!("ok"),
                json!("5m"),
                json!(3),
                json!("web.1")
            ]
        );
    }

    #[test]
    fn misc_builtin_columns() {
        let expect = [
            ("ReplicaSet", vec!["Name", "Desired", "Current", "Ready", "Age"]),
            ("StatefulSet", vec!["Name", "Ready", "Age"]),
            (
                "DaemonSet",
                vec![
                    "Name",
                    "Desired",
                    "Current",
                    "Ready",
                    "Up-to-date",
                    "Available",
                    "Node Selector",
                    "Age",
                ],
            ),
            (
                "CronJob",
                vec![
                    "Name",
                    "Schedule",
                    "Timezone",
                    "Suspend",
                    "Active",
                    "Last Schedule",
                    "Age",
                ],
            ),
            ("Lease", vec!["Name", "Holder", "Age"]),
            ("CustomResourceDefinition", vec!["Name", "Created At"]),
            ("ClusterRole", vec!["Name", "Created At"]),
            ("RoleBinding", vec!["Name", "Role", "Age"]),
            (
                "PersistentVolumeClaim",
                vec![
                    "Name",
                    "Status",
                    "Volume",
                    "Capacity",
                    "Access Modes",
                    "StorageClass",
                    "VolumeAttributesClass",
                    "Age",
                ],
            ),
            ("Ingress", vec!["Name", "Class", "Hosts", "Address", "Ports", "Age"]),
            (
                "HorizontalPodAutoscaler",
                vec!["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"],
            ),
            ("Widget", vec!["Name", "Age"]),
        ];
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": ago(3)}});
        for (kind, cols) in expect {
            let t = tbuild(kind, None, std::slice::from_ref(&obj), IncludeObject::Metadata, now());
            assert_eq!(visible(&t), cols, "{kind}");
            let n = t["columnDefinitions"].as_array().unwrap().len();
            assert_eq!(cells(&t, 0).len(), n, "{kind}: one cell per column");
        }
        let t = tbuild("Role", None, &[obj], IncludeObject::Metadata, now());
        assert_eq!(cells(&t, 0), [json!("x"), json!(ago(3))]);
    }

    #[test]
    fn binding_cells_list_subjects() {
        let rb = json!({"metadata": {"name": "rb"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        let c = cells(&tbuild("RoleBinding", None, &[rb], IncludeObject::None, now()), 0);
        assert_eq!(c[1], json!("ClusterRole/view"));
        assert_eq!(c[3..], [json!("alice"), json!(""), json!("ns/sa")]);
    }

    fn crd_version() -> Value {
        json!({"name": "v1", "additionalPrinterColumns": [
            {"name": "Sync", "type": "string", "jsonPath": ".status.sync.status"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1, "format": "int32", "description": "desired"},
            {"name": "First", "type": "string", "jsonPath": ".spec.items[0].name"},
            {"name": "All", "type": "string", "jsonPath": ".spec.items[*].name"},
            {"name": "NotReady", "type": "string", "jsonPath": ".status.conditions[?(@.type!=\"Ready\")].type"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]})
    }

    #[test]
    fn printer_columns_are_read_from_crd_version() {
        let cols = printer_columns_from_crd_version(&crd_version()).unwrap();
        assert_eq!(cols.len(), 7);
        assert_eq!(cols[2].priority, 1);
        assert_eq!(cols[2].format, "int32");
        assert_eq!(cols[2].description, "desired");
        assert_eq!(cols[0].json_path, ".status.sync.status");
        assert!(printer_columns_from_crd_version(&json!({"name": "v1"})).is_none());
        assert!(printer_columns_from_crd_version(&json!({"additionalPrinterColumns": []})).is_none());
    }

    #[test]
    fn custom_resource_printer_columns() {
        let cols = printer_columns_from_crd_version(&crd_version()).unwrap();
        let app = json!({"apiVersion": "demo.example.com/v1", "kind": "App",
            "metadata": {"name": "web", "creationTimestamp": ago(7200)},
            "spec": {"replicas": 2, "items": [{"name": "a"}, {"name": "b"}]},
            "status": {"sync": {"status": "Synced"},
                       "conditions": [{"type": "Progressing", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let bare = json!({"metadata": {"name": "empty"}});
        let t = tbuild("App", Some(&cols), &[app, bare], IncludeObject::Metadata, now());
        assert_eq!(
            col_names(&t),
            ["Name", "Sync", "Ready", "Replicas", "First", "All", "NotReady", "Age"]
        );
        assert_eq!(t["columnDefinitions"][7]["type"], "date");
        assert_eq!(t["columnDefinitions"][3]["priority"], 1);
        assert_eq!(
            cells(&t, 0),
            [
                json!("web"),
                json!("Synced"),
                json!("True"),
                json!(2),
                json!("a"),
                json!("a"),
                json!("Progressing"),
                json!("120m")
            ]
        );
        assert_eq!(
            cells(&t, 1),
            [
                json!("empty"),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!("")
            ]
        );
    }

    #[test]
    fn custom_resource_without_columns_gets_name_and_age() {
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": ago(5)}});
        for cols in [None, Some(&[][..])] {
            let t = tbuild(
                "Widget",
                cols,
                std::slice::from_ref(&obj),
                IncludeObject::Metadata,
                now(),
            );
            assert_eq!(col_names(&t), ["Name", "Age"]);
            assert_eq!(cells(&t, 0), [json!("w"), json!("5s")]);
        }
    }

    #[test]
    fn columns_are_chosen_by_group_and_kind() {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": ago(3)}, "spec": {"nodeName": "n"}});
        let t = build("example.com", "Pod", None, &[&obj], IncludeObject::Metadata, now());
        assert_eq!(
            col_names(&t),
            ["Name", "Age"],
            "a custom resource named Pod is not printed as a Pod"
        );
        let t = build("", "Pod", None, &[&obj], IncludeObject::Metadata, now());
        assert_eq!(visible(&t), ["Name", "Ready", "Status", "Restarts", "Age"]);
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": ago(10), "reason": "R", "type": "Warning", "note": "a note",
            "regarding": {"kind": "ConfigMap", "name": "noted"}, "reportingController": "rec"});
        let t = build("events.k8s.io", "Event", None, &[&ev], IncludeObject::Metadata, now());
        assert_eq!(visible(&t), ["Last Seen", "Type", "Reason", "Object", "Message"]);
        assert_eq!(cells(&t, 0)[3], json!("configmap/noted"));
        assert_eq!(cells(&t, 0)[6], json!("a note"));
    }

    #[test]
    fn table_rows_borrow_their_objects() {
        let a = json!({"metadata": {"name": "a", "managedFields": [{"manager": "m"}]}, "data": {"k": "v"}});
        let b = json!({"metadata": {"name": "b"}});
        let t = table("", "ConfigMap", None, &[&a, &b], IncludeObject::Metadata, now());
        let v = t.to_value();
        assert_eq!(v["rows"][0]["object"]["metadata"], a["metadata"]);
        assert_eq!(v["rows"][1]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(serde_json::to_value(&t).unwrap(), v);
    }

    #[test]
    fn json_path_edge_cases() {
        let obj = json!({"a": {"b.c": 1, "list": [1, 2, 3]}, "n": [{"v": 1.0, "x": "y"}]});
        let get = |p: &str| parse_json_path(p).and_then(|s| first_result(&obj, &s).cloned());
        assert_eq!(get("{.a['b.c']}"), Some(json!(1)));
        assert_eq!(get(".a.list[-1]"), Some(json!(3)));
        assert_eq!(get(".a.list[7]"), None);
        assert_eq!(get(".n[?(@.v==1)].x"), Some(json!("y")));
        assert_eq!(get(".n[?(@.x)].v"), Some(json!(1.0)));
        assert_eq!(get(".n[?(@.missing!='q')].x"), Some(json!("y")));
        for bad in ["a", ".", ".a[", ".a[x]", ".a[?(b==1)]", "..a", "[?(@.a==)]"] {
            assert_eq!(get(bad), None, "{bad}");
        }
        assert_eq!(custom_cell("date", Some(&json!("nope")), now()), json!("<invalid>"));
        assert_eq!(custom_cell("number", Some(&json!(2)), now()), json!(2.0));
        assert_eq!(custom_cell("boolean", Some(&json!(true)), now()), json!(true));
        assert_eq!(custom_cell("string", Some(&json!({"k": 1})), now()), json!("{\"k\":1}"));
    }

    proptest::proptest! {
        #[test]
        fn json_path_parser_never_panics(p in ".{0,40}") {
            if let Some(steps) = parse_json_path(&p) {
                let _ = first_result(&json!({"a": [{"b": 1}]}), &steps);
            }
        }
    }
}
