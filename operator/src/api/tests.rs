//! Tests of the generated CRDs and of the types against Argo CD-shaped YAML.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::application::{
    Application, HealthStatusCode, OperationPhase, SyncPhase, SyncStatusCode, DEFAULT_REVISION_HISTORY_LIMIT,
};
use super::application_set::{ApplicationSet, ApplicationsSyncPolicy, StrategyType};
use super::cluster::Cluster;
use super::policy_set::{Enforcement, PolicySet, PolicyTarget};
use super::repository::{Repository, VerificationMode};
use super::{crds, API_VERSION};

fn crd(kind: &str) -> CustomResourceDefinition {
    crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

fn version(crd: &CustomResourceDefinition) -> &CustomResourceDefinitionVersion {
    assert_eq!(crd.spec.versions.len(), 1, "{} has one version", crd.spec.names.kind);
    &crd.spec.versions[0]
}

fn schema(kind: &str) -> Value {
    let crd = crd(kind);
    let schema = version(&crd)
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema.expect("CRD has a schema")).expect("schema serialises")
}

/// The schema node at a path of property names (`[]` steps into list items).
fn node<'a>(schema: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(schema, |node, step| {
        let next = if *step == "[]" {
            &node["items"]
        } else {
            &node["properties"][*step]
        };
        assert!(!next.is_null(), "no schema node {step} in {path:?}");
        next
    })
}

fn rules(node: &Value) -> Vec<String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .filter_map(|r| r["rule"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/api")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Deserialises a fixture into `T`, serialises it back, and checks nothing was lost or added.
fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> T {
    let original = fixture(name);
    let typed: T = serde_json::from_value(original.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&typed).expect("serialises");
    assert_eq!(back, original, "{name} does not round-trip");
    typed
}

// ---------------------------------------------------------------------------------------------
// CRD metadata

#[test]
fn every_crd_is_namespaced_in_capstan_dev_v1alpha1_with_status() {
    let all = crds();
    assert_eq!(all.len(), 5);
    for crd in &all {
        let names = &crd.spec.names;
        assert_eq!(crd.spec.group, "capstan.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{}.capstan.dev", names.plural).as_str())
        );
        assert_eq!(names.categories, Some(vec!["capstan".to_owned(), "gitops".to_owned()]));
        let version = version(crd);
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        let status = version.subresources.as_ref().and_then(|s| s.status.as_ref());
        assert!(status.is_some(), "{} has the status subresource", names.kind);
    }
}

#[test]
fn names_and_short_names_do_not_collide_with_argo_cd_or_flux() {
    let expected = [
        ("Application", "applications", "capp"),
        ("ApplicationSet", "applicationsets", "cappset"),
        ("Repository", "repositories", "crepo"),
        ("Cluster", "clusters", "ccluster"),
        ("PolicySet", "policysets", "cpolicy"),
    ];
    for (kind, plural, short) in expected {
        let crd = crd(kind);
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.names.singular.as_deref(), Some(kind.to_lowercase().as_str()));
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_owned()]), "{kind}");
    }
}

#[test]
fn crds_are_in_a_stable_order() {
    let plurals: Vec<String> = crds().into_iter().map(|crd| crd.spec.names.plural).collect();
    let mut sorted = plurals.clone();
    sorted.sort();
    assert_eq!(plurals, sorted);
}

/// `(name, type, jsonPath)` of a printer column.
type Column = (&'static str, &'static str, &'static str);

#[test]
fn printer_columns_match_the_issue() {
    let ready = ".status.conditions[?(@.type==\"Ready\")].status";
    let age = ".metadata.creationTimestamp";
    let expected: [(&str, &[Column]); 5] = [
        (
            "Application",
            &[
                ("Sync Status", "string", ".status.sync.status"),
                ("Health Status", "string", ".status.health.status"),
                ("Revision", "string", ".status.sync.revision"),
                ("Age", "date", age),
            ],
        ),
        (
            "ApplicationSet",
            &[
                ("Applications", "integer", ".status.resourcesCount"),
                ("Age", "date", age),
            ],
        ),
        (
            "Repository",
            &[
                ("Ready", "string", ready),
                ("URL", "string", ".spec.url"),
                ("Age", "date", age),
            ],
        ),
        (
            "Cluster",
            &[
                ("Ready", "string", ready),
                ("Server", "string", ".spec.server"),
                ("Version", "string", ".status.serverVersion"),
                ("Age", "date", age),
            ],
        ),
        (
            "PolicySet",
            &[
                ("Ready", "string", ready),
                ("Enforcement", "string", ".spec.enforcement"),
                ("Age", "date", age),
            ],
        ),
    ];
    for (kind, columns) in expected {
        let crd = crd(kind);
        let actual: Vec<(String, String, String)> = version(&crd)
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect();
        let expected: Vec<(String, String, String)> = columns
            .iter()
            .map(|(n, t, p)| ((*n).to_owned(), (*t).to_owned(), (*p).to_owned()))
            .collect();
        assert_eq!(actual, expected, "{kind}");
    }
}

#[test]
fn application_resource_impl_matches_its_crd() {
    let crd = crd("Application");
    assert_eq!(Application::group(&()), crd.spec.group);
    assert_eq!(Application::version(&()), version(&crd).name);
    assert_eq!(Application::plural(&()), crd.spec.names.plural);
    assert_eq!(Application::api_version(&()), API_VERSION);
    assert_eq!(<Application as kube::CustomResourceExt>::shortnames(), &["capp"]);
}

// ---------------------------------------------------------------------------------------------
// Schemas

/// Checks the apiextensions structural schema rules this crate can break: every node has a
/// `type` unless it preserves unknown fields or is int-or-string; no `$ref`, no unions; arrays
/// have `items`; `properties` and `additionalProperties` are exclusive.
fn structural_violations(node: &Value, path: &str, out: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        out.push(format!("{path}: not an object"));
        return;
    };
    for keyword in [
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "definitions",
        "$defs",
        "const",
    ] {
        if object.contains_key(keyword) {
            out.push(format!("{path}: has {keyword}"));
        }
    }
    let free_form = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if !free_form && !object.contains_key("type") {
        out.push(format!("{path}: no type"));
    }
    if object.contains_key("properties") && object.contains_key("additionalProperties") {
        out.push(format!("{path}: properties and additionalProperties"));
    }
    if object.get("type").and_then(Value::as_str) == Some("array") && !object.contains_key("items") {
        out.push(format!("{path}: array without items"));
    }
    for (name, child) in object
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        structural_violations(child, &format!("{path}.{name}"), out);
    }
    if let Some(items) = object.get("items") {
        structural_violations(items, &format!("{path}[]"), out);
    }
    if let Some(additional) = object.get("additionalProperties").filter(|a| a.is_object()) {
        structural_violations(additional, &format!("{path}{{}}"), out);
    }
}

#[test]
fn every_schema_is_structural() {
    for crd in crds() {
        let kind = crd.spec.names.kind.clone();
        let mut violations = Vec::new();
        structural_violations(&schema(&kind), &kind, &mut violations);
        assert!(
            violations.is_empty(),
            "{kind} is not structural:\n{}",
            violations.join("\n")
        );
    }
}

#[test]
fn crds_stay_far_below_the_client_side_apply_annotation_limit() {
    for crd in crds() {
        let bytes = serde_json::to_vec(&crd).expect("serialises").len();
        assert!(bytes < 200_000, "{} is {bytes} bytes", crd.spec.names.kind);
    }
}

#[test]
fn application_has_top_level_operation_beside_spec_and_status() {
    let schema = schema("Application");
    let properties: Vec<&String> = schema["properties"].as_object().expect("properties").keys().collect();
    assert_eq!(properties, ["operation", "spec", "status"]);
    assert_eq!(schema["required"], serde_json::json!(["spec"]));
}

/// A name rule on a string's content holds in the Application CRD but not in an ApplicationSet's template,
/// where `{{name}}` placeholders stand for names still to be generated (each generated Application meets the
/// Application CRD and the controller).
#[test]
fn name_rules_apply_to_applications_not_to_templates() {
    let app = schema("Application");
    let set = schema("ApplicationSet");
    for path in [
        &["spec", "source", "helm", "releaseName"][..],
        &["spec", "destination", "serviceAccountName"],
    ] {
        let in_app = rules(node(&app, path));
        assert!(
            in_app.iter().any(|r| r.contains("self.matches(")),
            "{path:?}: {in_app:?}"
        );
        let in_template: Vec<&str> = ["spec", "template"].iter().chain(path).copied().collect();
        assert!(rules(node(&set, &in_template)).is_empty(), "{in_template:?}");
    }
}

#[test]
fn cel_rules_guard_the_invariants() {
    let app = schema("Application");
    let destination = rules(node(&app, &["spec", "destination"]));
    assert_eq!(destination, ["has(self.server) != has(self.name)"]);
    assert_eq!(
        rules(node(&app, &["operation"])),
        ["has(self.sync) != has(self.rollback)"]
    );
    // The template of an ApplicationSet carries the same destination rule.
    let set = schema("ApplicationSet");
    assert_eq!(
        rules(node(&set, &["spec", "template", "spec", "destination"])),
        destination
    );
    for path in [
        &["spec", "generators", "[]"][..],
        &["spec", "generators", "[]", "matrix", "generators", "[]"],
        &[
            "spec",
            "generators",
            "[]",
            "merge",
            "generators",
            "[]",
            "matrix",
            "generators",
            "[]",
        ],
    ] {
        let generator = rules(node(&set, path));
        assert_eq!(generator.len(), 1, "{path:?}");
        assert!(generator[0].ends_with(".filter(x, x).size() == 1"), "{path:?}");
    }
    let policy = schema("PolicySet");
    assert_eq!(
        rules(node(&policy, &["spec", "policies", "[]"])),
        ["has(self.rego) != has(self.configMapRef)"]
    );
    let repo = schema("Repository");
    let poll = node(&repo, &["spec", "pollInterval"]);
    assert_eq!(poll["default"], "60s");
    assert_eq!(poll["pattern"], super::schema::DURATION_PATTERN);
    assert!(rules(poll)[0].contains("duration(self) >= duration('1s')"));
    assert_eq!(rules(node(&repo, &["spec", "verification"])).len(), 1);
}

#[test]
fn duration_patterns_accept_go_durations_only() {
    let duration = regex::Regex::new(super::schema::DURATION_PATTERN).expect("valid pattern");
    for good in ["60s", "1m30s", "500ms", "2h", "1.5h", "0s"] {
        assert!(duration.is_match(good), "{good}");
    }
    for bad in ["", "60", "-1s", "1d", "s", "1 s", "1m-5s", "ten seconds"] {
        assert!(!duration.is_match(bad), "{bad}");
    }
    let or_seconds = regex::Regex::new(super::schema::DURATION_OR_SECONDS_PATTERN).expect("valid pattern");
    for good in ["5", "5s", "3m"] {
        assert!(or_seconds.is_match(good), "{good}");
    }
    for bad in ["-5", "5x", "5s3"] {
        assert!(!or_seconds.is_match(bad), "{bad}");
    }
}

#[test]
fn free_form_values_preserve_unknown_fields() {
    let app = schema("Application");
    let source = ["spec", "source"];
    let values_object = node(&app, &[&source[..], &["helm", "valuesObject"]].concat());
    assert_eq!(values_object["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(values_object["type"], "object");
    let patches = node(&app, &[&source[..], &["kustomize", "patches", "[]"]].concat());
    assert_eq!(patches["x-kubernetes-preserve-unknown-fields"], true);
    let set = schema("ApplicationSet");
    let elements = node(&set, &["spec", "generators", "[]", "list", "elements", "[]"]);
    assert_eq!(elements["x-kubernetes-preserve-unknown-fields"], true);
    let template = node(&set, &["spec", "generators", "[]", "git", "template"]);
    assert_eq!(template["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn conditions_are_metav1_conditions_merged_by_type() {
    for kind in ["Application", "ApplicationSet", "Repository", "Cluster", "PolicySet"] {
        let schema = schema(kind);
        let conditions = node(&schema, &["status", "conditions"]);
        assert_eq!(conditions["x-kubernetes-list-type"], "map", "{kind}");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"]),
            "{kind}"
        );
        let required = &conditions["items"]["required"];
        assert_eq!(
            required,
            &serde_json::json!(["lastTransitionTime", "message", "reason", "status", "type"]),
            "{kind}"
        );
        let generation = node(&schema, &["status", "observedGeneration"]);
        assert_eq!(generation["type"], "integer", "{kind}");
    }
}

#[test]
fn argo_cd_field_names_keep_their_spelling() {
    let app = schema("Application");
    node(&app, &["spec", "source", "repoURL"]);
    node(&app, &["status", "summary", "externalURLs"]);
    let repo = schema("Repository");
    node(&repo, &["spec", "insecureSkipTLSVerify"]);
    let set = schema("ApplicationSet");
    node(&set, &["spec", "generators", "[]", "git", "repoURL"]);
    let sync = node(&set, &["spec", "syncPolicy", "applicationsSync"]);
    assert_eq!(
        sync["enum"],
        serde_json::json!(["create-only", "create-update", "create-delete", "sync"])
    );
}

// ---------------------------------------------------------------------------------------------
// Argo CD-shaped YAML through the types

#[test]
fn argo_cd_guestbook_application_round_trips() {
    let app: Application = round_trip("application-guestbook.yaml");
    assert_eq!(app.spec.source.path.as_deref(), Some("guestbook"));
    assert_eq!(
        app.spec.destination.server.as_deref(),
        Some("https://kubernetes.default.svc")
    );
    let policy = app.spec.sync_policy.as_ref().expect("syncPolicy");
    let automated = policy.automated.as_ref().expect("automated");
    assert!(automated.prune && automated.self_heal && !automated.allow_empty);
    assert_eq!(policy.sync_options, ["CreateNamespace=true"]);
    let value = serde_json::to_value(&app).expect("serialises");
    assert_eq!(value["apiVersion"], API_VERSION);
    assert_eq!(value["kind"], "Application");
}

#[test]
fn application_with_operation_and_status_round_trips() {
    let app: Application = round_trip("application-full.yaml");
    let helm = app.spec.source.helm.as_ref().expect("helm");
    assert_eq!(helm.values_object.as_ref().expect("valuesObject")["replicaCount"], 3);
    assert_eq!(app.spec.depends_on, ["database", "cache"]);
    let sync = app
        .operation
        .as_ref()
        .and_then(|o| o.sync.as_ref())
        .expect("operation.sync");
    assert!(sync.prune && sync.dry_run);
    let status = app.status.as_ref().expect("status");
    assert_eq!(status.sync.as_ref().map(|s| s.status), Some(SyncStatusCode::OutOfSync));
    assert_eq!(
        status.health.as_ref().map(|h| h.status),
        Some(HealthStatusCode::Progressing)
    );
    let state = status.operation_state.as_ref().expect("operationState");
    assert_eq!(state.phase, OperationPhase::Running);
    assert_eq!(
        state.step.as_ref().map(|s| (s.phase, s.wave)),
        Some((SyncPhase::Sync, 1))
    );
    assert_eq!(status.conditions[0].type_, "Ready");
}

#[test]
fn kustomize_and_directory_applications_round_trip() {
    let app: Application = round_trip("application-kustomize.yaml");
    assert_eq!(
        app.operation.as_ref().and_then(|o| o.rollback.as_ref()).map(|r| r.id),
        Some(3)
    );
    assert!(app.spec.suspend);
    let app: Application = round_trip("application-directory.yaml");
    assert_eq!(app.spec.destination.name.as_deref(), Some("prod-eu"));
    assert_eq!(app.spec.revision_history_limit, Some(3));
}

#[test]
fn application_set_generators_round_trip() {
    let set: ApplicationSet = round_trip("applicationset-list.yaml");
    let elements = &set.spec.generators[0].list.as_ref().expect("list").elements;
    assert_eq!(elements[1]["values"]["replicas"], 3);
    let set: ApplicationSet = round_trip("applicationset-git-directories.yaml");
    let git = set.spec.generators[0].git.as_ref().expect("git");
    assert_eq!(git.directories.len(), 2);
    assert!(git.directories[1].exclude);
    let set: ApplicationSet = round_trip("applicationset-matrix.yaml");
    let matrix = set.spec.generators[0].matrix.as_ref().expect("matrix");
    let merge = matrix.generators[1].merge.as_ref().expect("nested merge");
    assert_eq!(merge.merge_keys, ["server"]);
    let sync_policy = set.spec.sync_policy.as_ref().expect("syncPolicy");
    assert_eq!(
        sync_policy.applications_sync,
        Some(ApplicationsSyncPolicy::CreateUpdate)
    );
    let strategy = set.spec.strategy.as_ref().expect("strategy");
    assert_eq!(strategy.type_, StrategyType::RollingSync);
    assert_eq!(set.status.as_ref().and_then(|s| s.resources_count), Some(1));
}

#[test]
fn repository_cluster_and_policy_set_round_trip() {
    let repo: Repository = round_trip("repository.yaml");
    let verification = repo.spec.verification.as_ref().expect("verification");
    assert_eq!(verification.mode, VerificationMode::Head);
    let cluster: Cluster = round_trip("cluster.yaml");
    assert_eq!(cluster.spec.namespaces, ["apps", "monitoring"]);
    let policy: PolicySet = round_trip("policyset.yaml");
    assert_eq!(policy.spec.enforcement, Enforcement::Warn);
    assert_eq!(policy.spec.targets, [PolicyTarget::Resource]);
}

#[test]
fn omitted_fields_take_their_documented_defaults() {
    let repo: Repository = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "Repository", "metadata": {"name": "r"},
        "spec": {"url": "https://example.com/r.git"},
    }))
    .expect("minimal Repository");
    assert_eq!(repo.spec.poll_interval, "60s");
    assert_eq!(repo.spec.verification, None);
    let policy: PolicySet = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "PolicySet", "metadata": {"name": "p"},
        "spec": {"policies": [{"name": "a", "rego": "package a"}]},
    }))
    .expect("minimal PolicySet");
    assert_eq!(policy.spec.enforcement, Enforcement::Deny);
    assert_eq!(policy.spec.targets, [PolicyTarget::Application, PolicyTarget::Resource]);
    let app: Application = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "Application", "metadata": {"name": "a"},
        "spec": {"source": {"repoURL": "https://example.com/r.git"}, "destination": {"name": "in-cluster"}},
    }))
    .expect("minimal Application");
    assert_eq!(app.spec.project, "default");
    assert_eq!(
        app.spec.revision_history_limit, None,
        "{DEFAULT_REVISION_HISTORY_LIMIT} applies"
    );
}

#[test]
fn minimal_objects_serialise_minimally() {
    let app = Application::new("a", Default::default());
    let value = serde_json::to_value(&app).expect("serialises");
    let keys: Vec<&String> = value.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec"]);
    assert_eq!(
        value["spec"],
        serde_json::json!({"project": "default", "source": {"repoURL": ""}, "destination": {}})
    );
}
