//! The `capstan` command line.

use std::process::{Command, Output};

fn capstan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("runs capstan")
}

#[test]
fn crd_prints_every_crd_as_one_yaml_stream() {
    let output = capstan(&["crd"]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let documents: Vec<&str> = stdout.split("\n---\n").collect();
    assert_eq!(documents.len(), 5);
    for (document, plural) in documents.iter().zip([
        "applications",
        "applicationsets",
        "clusters",
        "policysets",
        "repositories",
    ]) {
        assert!(document.starts_with("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"));
        assert!(document.contains(&format!("name: {plural}.capstan.dev\n")), "{plural}");
    }
}

#[test]
fn version_prints_the_version() {
    let output = capstan(&["version"]);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("capstan {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn run_rejects_an_unknown_controller_by_name() {
    let output = capstan(&[
        "run",
        "--namespace",
        "capstan-system",
        "--controllers",
        "application,bogus",
        "--metrics-addr",
        "127.0.0.1:0",
        "--webhook-addr",
        "127.0.0.1:0",
        "--reconcile-interval",
        "30s",
        "--log-format",
        "json",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown controller \"bogus\""), "{stderr}");
}

#[test]
fn run_without_a_cluster_fails_with_a_clear_message() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("run capstan");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no Kubernetes configuration"), "{stderr}");
}

#[test]
fn run_rejects_an_unknown_log_format() {
    let output = capstan(&["run", "--log-format", "xml"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn the_binary_allocates_with_jemalloc_configured_to_return_freed_memory() {
    // jemalloc prints its effective options at exit with `stats_print`; the settings compiled into the
    // binary must be in effect (glibc's malloc would ignore the variable and print nothing).
    let output = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("runs capstan");
    assert!(output.status.success());
    let stats = String::from_utf8_lossy(&output.stderr);
    for option in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
    ] {
        assert!(
            stats.contains(option),
            "{option} missing from jemalloc's stats:\n{stats}"
        );
    }
}
