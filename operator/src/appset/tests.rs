//! Fixture tests: each file under `operator/testdata/appset/` holds an ApplicationSet as a user
//! writes it (modelled on Argo CD's documented examples), the Cluster objects and Git trees it
//! reads, and either the exact Applications it must generate or the error it must fail with.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use super::*;
use crate::api::application_set::ApplicationSet;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Fixture {
    application_set: ApplicationSet,
    #[serde(default)]
    clusters: Vec<Cluster>,
    #[serde(default)]
    repositories: Vec<Repository>,
    #[serde(default)]
    expected: Option<Vec<Value>>,
    #[serde(default)]
    error: Option<ExpectedError>,
}

#[derive(Deserialize)]
struct Repository {
    #[serde(rename = "repoURL")]
    repo_url: String,
    #[serde(default = "head")]
    revision: String,
    files: BTreeMap<String, String>,
}

fn head() -> String {
    "HEAD".to_owned()
}

#[derive(Deserialize)]
struct ExpectedError {
    category: String,
    contains: String,
}

fn load(text: &str) -> Fixture {
    let value: Value = serde_saphyr::from_str(text).expect("fixture is YAML");
    serde_json::from_value(value).expect("fixture has the fixture shape")
}

fn run(text: &str) -> (Fixture, Result<Vec<GeneratedApp>, AppSetError>) {
    let fixture = load(text);
    let repos = fixture.repositories.iter().fold(MemoryRepos::default(), |repos, r| {
        repos.with(
            &r.repo_url,
            &r.revision,
            MemoryTree::new(r.files.iter().map(|(p, c)| (p.clone(), c.clone()))),
        )
    });
    let inputs = Inputs {
        clusters: &fixture.clusters,
        git: &repos,
        limits: Limits::default(),
    };
    let result = generate(&fixture.application_set.spec, &inputs);
    (fixture, result)
}

fn check(name: &str, text: &str) {
    let (fixture, result) = run(text);
    match (fixture.expected, fixture.error, result) {
        (Some(expected), None, Ok(apps)) => {
            let got: Vec<Value> = apps
                .iter()
                .map(|a| serde_json::to_value(&a.application).expect("serializes"))
                .collect();
            let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
            assert_eq!(got, expected, "{name}: generated {names:?}");
        }
        (None, Some(want), Err(err)) => {
            assert_eq!(err.category(), want.category, "{name}: {err}");
            assert!(err.to_string().contains(&want.contains), "{name}: {err}");
        }
        (_, _, result) => panic!("{name}: unexpected outcome {result:?}"),
    }
}

macro_rules! fixture_tests {
    ($($test:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check($file, include_str!(concat!("../../testdata/appset/", $file)));
            }
        )*
    };
}

fixture_tests! {
    list_guestbook => "list-guestbook.yaml",
    list_go_elements_yaml_and_generator_template => "list-go-elements-yaml.yaml",
    list_post_selector => "list-selector.yaml",
    clusters_selector_and_values => "clusters-selector-values.yaml",
    clusters_all_include_in_cluster => "clusters-all-go.yaml",
    git_directories_with_exclude => "git-directories.yaml",
    git_files_flattened => "git-files.yaml",
    git_files_go_template_with_prefix => "git-files-go.yaml",
    matrix_git_directories_by_clusters => "matrix-clusters-git.yaml",
    matrix_second_child_uses_first_params => "matrix-interpolation.yaml",
    merge_on_server => "merge-keys-server.yaml",
    template_patch_adds_automated_sync => "template-patch.yaml",
    go_template_missing_key_fails => "go-missingkey-error.yaml",
    duplicate_names_fail => "duplicate-names.yaml",
}

// ---------------------------------------------------------------------------------------------
// Focused tests of rules that need no fixture.

fn spec(value: Value) -> ApplicationSetSpec {
    serde_json::from_value(value).expect("valid spec")
}

fn list_spec(elements: Value, extra: Value) -> ApplicationSetSpec {
    let mut v = json!({
        "generators": [{"list": {"elements": elements}}],
        "template": {
            "metadata": {"name": "{{cluster}}"},
            "spec": {"source": {"repoURL": "https://example.com/r.git"}, "destination": {"server": "https://k"}},
        },
    });
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    spec(v)
}

fn generate_with(spec: &ApplicationSetSpec, limits: Limits) -> Result<Vec<GeneratedApp>, AppSetError> {
    generate(
        spec,
        &Inputs {
            clusters: &[],
            git: &NoGit,
            limits,
        },
    )
}

#[test]
fn the_application_cap_is_an_error() {
    let elements: Vec<Value> = (0..5).map(|i| json!({"cluster": format!("c{i}")})).collect();
    let s = list_spec(Value::Array(elements), json!({}));
    let limits = Limits {
        max_applications: 4,
        ..Limits::default()
    };
    assert_eq!(generate_with(&s, limits).unwrap_err().category(), "LimitExceeded");
    assert_eq!(generate_with(&s, Limits::default()).unwrap().len(), 5);
}

#[test]
fn matrix_products_are_bounded_before_rendering() {
    let elements: Vec<Value> = (0..50).map(|i| json!({"a": format!("a{i}")})).collect();
    let other: Vec<Value> = (0..50).map(|i| json!({"b": format!("b{i}")})).collect();
    let s = spec(json!({
        "generators": [{"matrix": {"generators": [{"list": {"elements": elements}}, {"list": {"elements": other}}]}}],
        "template": {"metadata": {"name": "{{a}}-{{b}}"}, "spec": {"source": {"repoURL": "r"}, "destination": {"server": "s"}}},
    }));
    let limits = Limits {
        max_param_sets: 1000,
        ..Limits::default()
    };
    assert_eq!(generate_with(&s, limits).unwrap_err().category(), "LimitExceeded");
}

#[test]
fn fasttemplate_list_values_must_be_strings() {
    let s = list_spec(json!([{"cluster": "a", "replicas": 3}]), json!({}));
    assert_eq!(
        generate_with(&s, Limits::default()).unwrap_err().category(),
        "GeneratorError"
    );
}

#[test]
fn template_patch_requires_go_template() {
    let s = list_spec(json!([{"cluster": "a"}]), json!({"templatePatch": "spec: {}"}));
    assert_eq!(
        generate_with(&s, Limits::default()).unwrap_err().category(),
        "InvalidSpec"
    );
}

#[test]
fn json_patch_template_patch_is_applied() {
    let s = list_spec(
        json!([{"cluster": "a", "files": ["x.yaml", "y.yaml"]}]),
        json!({
            "goTemplate": true,
            "template": {
                "metadata": {"name": "{{.cluster}}"},
                "spec": {"source": {"repoURL": "r", "helm": {"valueFiles": ["base.yaml"]}}, "destination": {"server": "s"}},
            },
            "templatePatch": r#"[{"op": "replace", "path": "/spec/source/helm/valueFiles", "value": {{ toJson .files }}}]"#,
        }),
    );
    let apps = generate_with(&s, Limits::default()).unwrap();
    let helm = apps[0].application.spec.source.helm.clone().unwrap_or_default();
    assert_eq!(helm.value_files, vec!["x.yaml", "y.yaml"]);
}

#[test]
fn invalid_generated_names_are_refused() {
    let s = list_spec(json!([{"cluster": "Not_Valid"}]), json!({}));
    assert_eq!(
        generate_with(&s, Limits::default()).unwrap_err().category(),
        "ApplicationValidationError"
    );
}

#[test]
fn a_generator_must_set_exactly_one_kind() {
    let s = spec(json!({
        "generators": [{}],
        "template": {"metadata": {"name": "x"}, "spec": {"source": {"repoURL": "r"}, "destination": {"server": "s"}}},
    }));
    assert_eq!(
        generate_with(&s, Limits::default()).unwrap_err().category(),
        "InvalidSpec"
    );
}

#[test]
fn unknown_repositories_are_git_errors() {
    let s = spec(json!({
        "generators": [{"git": {"repoURL": "https://example.com/r.git", "directories": [{"path": "*"}]}}],
        "template": {"metadata": {"name": "{{path.basename}}"}, "spec": {"source": {"repoURL": "r"}, "destination": {"server": "s"}}},
    }));
    let err = generate_with(&s, Limits::default()).unwrap_err();
    assert_eq!(err.category(), "GitError");
    assert!(err.is_transient());
}

#[test]
fn merge_keys_must_be_unique_within_a_child() {
    let s = spec(json!({
        "generators": [{"merge": {"mergeKeys": ["k"], "generators": [
            {"list": {"elements": [{"k": "1"}, {"k": "1"}]}},
            {"list": {"elements": [{"k": "1"}]}},
        ]}}],
        "template": {"metadata": {"name": "x{{k}}"}, "spec": {"source": {"repoURL": "r"}, "destination": {"server": "s"}}},
    }));
    let err = generate_with(&s, Limits::default()).unwrap_err();
    assert!(err.to_string().contains("not unique"), "{err}");
}

#[test]
fn referenced_repositories_lists_literal_git_sources() {
    let s = spec(json!({
        "generators": [
            {"git": {"repoURL": "https://a.example/r.git", "revision": "main", "files": [{"path": "x"}]}},
            {"matrix": {"generators": [
                {"git": {"repoURL": "https://b.example/r.git", "directories": [{"path": "*"}]}},
                {"git": {"repoURL": "{{url}}", "directories": [{"path": "*"}]}},
            ]}},
        ],
        "template": {"metadata": {"name": "x"}, "spec": {"source": {"repoURL": "r"}, "destination": {"server": "s"}}},
    }));
    assert_eq!(
        referenced_repositories(&s),
        vec![
            ("https://a.example/r.git".to_owned(), "main".to_owned()),
            ("https://b.example/r.git".to_owned(), "HEAD".to_owned())
        ]
    );
}

#[test]
fn generator_template_merge_keeps_spec_fields_the_generator_leaves_empty() {
    let base =
        json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"project": "p", "source": {"path": "base"}}});
    let overlay = json!({"metadata": {"labels": {"y": "2"}}, "spec": {"project": "", "source": {"path": "over"}}});
    assert_eq!(
        merge_template(Some(&overlay), &base),
        json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "spec": {"project": "p", "source": {"path": "over"}}})
    );
}
