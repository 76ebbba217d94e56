//! Capstan's end-to-end test harness.
//!
//! Every test gets its own [`TestCluster`]: an in-process `devcluster`, a kubeconfig in a temporary
//! directory and a private kubectl `--cache-dir`, so tests never share discovery caches, objects or
//! request logs. On top of it:
//!
//! - [`kubectl`]: the real `kubectl` binary with a hard timeout, stdin piping and a `get -w` line reader;
//! - [`wait`]: bounded polling (`wait_until`, `wait_for`, `within`); tests synchronise on conditions,
//!   never on sleeps;
//! - [`raw_http`]: a tiny HTTP/1.1 client (TLS with the cluster CA, a bearer token) for requests no
//!   well-behaved client would send;
//! - [`requests`]: queries over devcluster's request log, to assert *how* clients talk;
//! - [`fixtures`]: the test custom resource (`Widget`) and manifest builders;
//! - [`check`]: reading kubectl tables and JSON, kube-rs API errors and managedFields;
//! - [`watching`]: kube-runtime watchers as comparable event strings, read with deadlines;
//! - [`etcd`]: a real etcd per test for devcluster's `--etcd` storage (`CAPSTAN_E2E_ETCD=1` puts every
//!   [`TestCluster`] on one);
//! - [`process`]: long-running binaries (`devcluster`, `capstan`) with captured output and SIGTERM;
//! - [`hub`]: `capstan-hub`, the reporter protocol's receiver, as a process, with its fault switches,
//!   invariant check and a client that talks to it like a reporter;
//! - [`kubelet`]: the test as kubelet for a self-installed operator: runs (and restarts) `capstan run`
//!   as the applied Deployment's pod template says.
//!
//! Later suites (operator e2e) reuse the same pieces: [`kubectl::Kubectl`] only needs a kubeconfig path,
//! so it works against a devcluster started as a process ([`process::DevClusterProcess`]) too.

pub mod capstan;
pub mod chart;
pub mod check;
pub mod cluster;
pub mod election;
pub mod etcd;
pub mod fixtures;
pub mod git;
pub mod hub;
pub mod kubectl;
pub mod kubelet;
pub mod process;
pub mod raw_http;
pub mod reporter;
pub mod requests;
pub mod wait;
pub mod watching;

pub use cluster::TestCluster;
pub use kubectl::{Kubectl, KubectlOutput, KubectlWatch};
pub use raw_http::RawResponse;
pub use wait::{wait_for, wait_until, within, POLL, TIMEOUT};
