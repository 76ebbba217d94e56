//! The installation's objects, rendered from the manifests embedded at build time (`build.rs`):
//! exactly what `kubectl kustomize config/default` builds (a test keeps the two equal), then the
//! `--image` and `--values` overrides. Only the kustomize features `config/` uses are understood
//! (`resources` of files and directories); anything else is an error, so a change to `config/` that
//! this renderer would get wrong fails the build's tests instead of installing something different.

use serde::Deserialize;
use serde_json::{json, Value};

use super::BootstrapError;
use crate::engine::object;
use crate::render::yaml::{parse_one, parse_stream, YamlLimits};

include!(concat!(env!("OUT_DIR"), "/embedded_manifests.rs"));

/// Bounds for the embedded manifests and a `--values` file.
const LIMITS: YamlLimits = YamlLimits {
    max_depth: 64,
    max_bytes: 4 << 20,
};

/// The kustomization every installation starts from.
pub const ROOT: &str = "config/default";
/// The container and Deployment the overrides address.
pub const DEPLOYMENT: &str = "capstan";

/// The chart-like overrides of `--values FILE` (the subset of `charts/capstan/values.yaml` that
/// shapes the operator's Deployment).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Values {
    /// `image.repository` and `image.tag`.
    #[serde(default)]
    pub image: ImageValues,
    /// Replicas of the Deployment.
    pub replica_count: Option<i64>,
    /// Arguments appended to the container's args.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// The container's `resources`.
    pub resources: Option<Value>,
}

/// `image:` of [`Values`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageValues {
    /// Repository without tag.
    pub repository: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Pull policy.
    pub pull_policy: Option<String>,
}

impl Values {
    /// Parses a values file.
    pub fn parse(text: &str) -> Result<Values, BootstrapError> {
        let value = parse_one(text, &LIMITS).map_err(|e| BootstrapError::Invalid(format!("--values: {e}")))?;
        let value = if value.is_null() { json!({}) } else { value };
        serde_json::from_value(value).map_err(|e| BootstrapError::Invalid(format!("--values: {e}")))
    }
}

fn embedded(path: &str) -> Option<&'static str> {
    FILES.iter().find(|(p, _)| *p == path).map(|(_, text)| *text)
}

/// `a/b/../c` → `a/c` (paths stay inside the embedded table, which has no absolute paths).
fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

fn kustomization(dir: &str) -> Option<&'static str> {
    ["kustomization.yaml", "kustomization.yml"]
        .iter()
        .find_map(|f| embedded(&format!("{dir}/{f}")))
}

/// The objects of the kustomization in `dir`, resources in order (depth bounded against cycles).
fn build(dir: &str, depth: usize) -> Result<Vec<Value>, BootstrapError> {
    let invalid = |m: String| BootstrapError::Invalid(format!("embedded manifests: {m}"));
    if depth > 8 {
        return Err(invalid(format!("{dir}: kustomizations nested too deep")));
    }
    let text = kustomization(dir).ok_or_else(|| invalid(format!("{dir} has no kustomization")))?;
    let k = parse_one(text, &LIMITS).map_err(|e| invalid(format!("{dir}: {e}")))?;
    let Some(fields) = k.as_object() else {
        return Ok(Vec::new());
    };
    if let Some(other) = fields
        .keys()
        .find(|f| !["resources", "apiVersion", "kind"].contains(&f.as_str()))
    {
        return Err(invalid(format!(
            "{dir}: kustomization field {other} is not supported by the embedded renderer"
        )));
    }
    let mut out = Vec::new();
    for res in fields.get("resources").and_then(Value::as_array).into_iter().flatten() {
        let path = join(dir, res.as_str().unwrap_or_default());
        if kustomization(&path).is_some() {
            out.extend(build(&path, depth + 1)?);
            continue;
        }
        let file = embedded(&path).ok_or_else(|| invalid(format!("{dir}: resource {path} is not embedded")))?;
        let docs = parse_stream(file, &LIMITS).map_err(|e| invalid(format!("{path}: {e}")))?;
        out.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    Ok(out)
}

/// kustomize's output order (its legacy kind order: namespaces and CRDs first, workloads last),
/// stable within a kind.
fn kind_rank(kind: &str) -> usize {
    const ORDER: [&str; 22] = [
        "Namespace",
        "ResourceQuota",
        "StorageClass",
        "CustomResourceDefinition",
        "ServiceAccount",
        "PodSecurityPolicy",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "Secret",
        "Endpoints",
        "Service",
        "LimitRange",
        "PriorityClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Deployment",
        "StatefulSet",
        "CronJob",
        "PodDisruptionBudget",
    ];
    const LAST: [&str; 4] = [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "APIService",
        "",
    ];
    if let Some(i) = ORDER.iter().position(|k| *k == kind) {
        return i;
    }
    if let Some(i) = LAST.iter().position(|k| *k == kind) {
        return 100 + i;
    }
    50
}

/// The objects `config/default` builds, in kustomize's order.
pub fn base() -> Result<Vec<Value>, BootstrapError> {
    let mut objects = build(ROOT, 0)?;
    objects.sort_by_key(|o| kind_rank(object::kind(o)));
    Ok(objects)
}

/// [`base`] with `image` (`REPO[:TAG]`, overriding the values' image) and `values` applied.
pub fn render(image: Option<&str>, values: &Values) -> Result<Vec<Value>, BootstrapError> {
    let mut objects = base()?;
    for obj in objects.iter_mut() {
        if object::kind(obj) == "Deployment" && object::name(obj) == DEPLOYMENT {
            override_deployment(obj, image, values);
        }
    }
    Ok(objects)
}

fn override_deployment(obj: &mut Value, image: Option<&str>, values: &Values) {
    if let Some(n) = values.replica_count {
        obj["spec"]["replicas"] = json!(n);
    }
    let Some(containers) = obj
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let Some(c) = containers.iter_mut().find(|c| c["name"] == DEPLOYMENT) else {
        return;
    };
    let current = c["image"].as_str().unwrap_or_default().to_string();
    let (repo, tag) = split_image(&current);
    let repo = values.image.repository.clone().unwrap_or(repo);
    let tag = values.image.tag.clone().filter(|t| !t.is_empty()).unwrap_or(tag);
    c["image"] = json!(image.map(str::to_string).unwrap_or(format!("{repo}:{tag}")));
    if let Some(p) = &values.image.pull_policy {
        c["imagePullPolicy"] = json!(p);
    }
    if let Some(args) = c["args"].as_array_mut() {
        args.extend(values.extra_args.iter().map(|a| json!(a)));
    }
    if let Some(r) = &values.resources {
        c["resources"] = r.clone();
    }
}

/// `repo:tag` → (`repo`, `tag`); a port in the registry host is not a tag.
fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (image.to_string(), "latest".to_string()),
    }
}

/// A YAML stream of `objects`, one document each.
pub fn to_yaml(objects: &[Value]) -> Result<String, BootstrapError> {
    let mut out = String::new();
    for obj in objects {
        let doc = serde_saphyr::to_string(obj).map_err(|e| BootstrapError::Invalid(format!("serialising: {e}")))?;
        out.push_str("---\n");
        out.push_str(&doc);
        if !doc.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn key(o: &Value) -> String {
        object::ObjectKey::of(o).to_string()
    }

    /// The embedded renderer builds what `kubectl kustomize config/default` builds, object for
    /// object, in the same order, with the image set.
    #[test]
    fn components_equal_kubectl_kustomize_config_default() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/default");
        let out = Command::new("kubectl")
            .args(["kustomize", root])
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).expect("utf-8");
        let mut expected = parse_stream(&text, &LIMITS).expect("kustomize output parses");
        let image = "registry.local:5000/capstan:9.9.9";
        for obj in expected.iter_mut().filter(|o| object::kind(o) == "Deployment") {
            obj["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        }
        let ours = render(Some(image), &Values::default()).expect("renders");
        assert_eq!(
            ours.iter().map(key).collect::<Vec<_>>(),
            expected.iter().map(key).collect::<Vec<_>>()
        );
        for (a, b) in ours.iter().zip(&expected) {
            assert!(same(a, b), "{} differs from kustomize's", key(a));
        }
    }

    /// Equal as the API server reads them: kustomize writes `1.0` as `1`.
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(u, v)| same(u, v)),
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, u)| y.get(k).is_some_and(|v| same(u, v)))
            }
            _ => a == b,
        }
    }

    #[test]
    fn values_override_image_replicas_args_and_resources() {
        let values = Values::parse(
            "image: {repository: example.org/capstan, tag: '2.0'}\nreplicaCount: 2\nextraArgs: ['--reconcile-interval=30s']\nresources: {limits: {memory: 1Gi}}\n",
        )
        .expect("parses");
        let objects = render(None, &values).expect("renders");
        let d = objects
            .iter()
            .find(|o| object::kind(o) == "Deployment")
            .expect("a Deployment");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "example.org/capstan:2.0");
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(
            c["args"].as_array().and_then(|a| a.last()),
            Some(&json!("--reconcile-interval=30s"))
        );
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        assert!(Values::parse("imagee: {}\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn split_image_keeps_registry_ports() {
        assert_eq!(split_image("r:5000/c:1"), ("r:5000/c".into(), "1".into()));
        assert_eq!(split_image("r:5000/c"), ("r:5000/c".into(), "latest".into()));
    }
}
