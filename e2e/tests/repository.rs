//! The Repository controller and the push webhook end to end: the `capstan` binary
//! (`run --controllers repository`) against an in-process devcluster, Git served over real protocols
//! on loopback (`git daemon`, smart HTTP with basic auth, sshd with known_hosts, a tarpit), driven
//! with the real kubectl.
//!
//! Each test has its own devcluster, operator, git servers and namespace. Every wait is bounded;
//! negative assertions ("nothing changed") observe for a bounded window after a positive one.

use std::net::SocketAddr;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use capstan_e2e::capstan::{condition, get_object, install_crds, text, Operator, OperatorOptions, OPERATOR_NAMESPACE};
use capstan_e2e::chart;
use capstan_e2e::git::{self, Upstream};
use capstan_e2e::{wait_for, TestCluster};
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bound on anything the operator should do "soon" on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);
/// How often waits re-check.
const POLL: Duration = Duration::from_millis(250);
/// How long a negative assertion observes.
const QUIET: Duration = Duration::from_secs(4);

struct Env {
    // Declared first: the operator stops before the cluster it talks to.
    operator: Operator,
    cluster: TestCluster,
    ns: String,
    webhook: SocketAddr,
    _cache: TempDir,
}

impl Env {
    /// A devcluster with Capstan's CRDs, a namespace, `setup` applied (e.g. the webhook Secret),
    /// then the operator with only the repository controller and a webhook receiver.
    async fn start(prefix: &str, setup: &str) -> Env {
        let cluster = TestCluster::start();
        install_crds(cluster.kubectl_runner()).await;
        let ns = cluster.with_namespace(prefix).await;
        if !setup.is_empty() {
            cluster.apply(setup, &[]).await;
        }
        let cache = tempfile::Builder::new()
            .prefix("capstan-cache-")
            .tempdir()
            .expect("tempdir");
        let webhook = SocketAddr::from(([127, 0, 0, 1], git::free_port()));
        let options = OperatorOptions {
            controllers: "repository".into(),
            reconcile_interval: "120s".into(),
            sync_wave_delay: None,
            extra_args: vec![
                "--webhook-addr".into(),
                webhook.to_string(),
                "--cache-dir".into(),
                cache.path().display().to_string(),
                "--git-timeout".into(),
                "5s".into(),
            ],
            as_pod: None,
        };
        let kubeconfig = chart::kubeconfig_for(&cluster, chart::Identity::Operator).await;
        let operator = Operator::start(&kubeconfig, options).await;
        Env {
            operator,
            cluster,
            ns,
            webhook,
            _cache: cache,
        }
    }

    async fn repo(&self, name: &str) -> Value {
        get_object(&self.cluster.client().await, &self.ns, "Repository", name)
            .await
            .unwrap_or_else(|| panic!("Repository {name} does not exist"))
    }

    /// Applies a Repository (and optional Secret YAML before it).
    async fn apply_repository(&self, name: &str, url: &str, poll: &str, secret: Option<&str>) {
        let secret_ref = secret.map_or(String::new(), |s| format!("\n  secretRef:\n    name: {s}"));
        let manifest = format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: Repository\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
             spec:\n  url: {url}\n  pollInterval: {poll}{secret_ref}\n",
            ns = self.ns
        );
        self.cluster.apply(&manifest, &[]).await;
    }

    /// A Secret with `data` from literal values (kubectl does the base64), labelled as repository
    /// credentials (a Repository uses no other).
    async fn secret(&self, name: &str, literals: &[(&str, &str)], files: &[(&str, &str)]) {
        self.unlabelled_secret(name, literals, files).await;
        self.cluster
            .kubectl_ok(&["label", "secret", name, "-n", &self.ns, REPOSITORY_SECRET_LABEL])
            .await;
    }

    /// A Secret as [`Env::secret`] makes it, without the label.
    async fn unlabelled_secret(&self, name: &str, literals: &[(&str, &str)], files: &[(&str, &str)]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args: Vec<String> = vec![
            "create".into(),
            "secret".into(),
            "generic".into(),
            name.into(),
            "-n".into(),
            self.ns.clone(),
        ];
        for (k, v) in literals {
            args.push(format!("--from-literal={k}={v}"));
        }
        for (k, content) in files {
            let path = dir.path().join(k);
            std::fs::write(&path, content).expect("write secret file");
            args.push(format!("--from-file={k}={}", path.display()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cluster.kubectl_ok(&args).await;
    }

    /// Waits until Repository `name` has condition Ready with `status` (and `reason`, when given).
    async fn wait_ready(&self, name: &str, status: &str, reason: Option<&str>) -> Value {
        let what = format!("Repository {name} Ready={status} {reason:?}");
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                let repo = self.repo(name).await;
                if let Some(c) = condition(&repo, "Ready") {
                    if text(c, "/status") == status && reason.is_none_or(|r| text(c, "/reason") == r) {
                        return repo;
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        match found {
            Ok(repo) => repo,
            Err(_) => panic!(
                "timed out waiting for {what}; last: {}\n{}",
                self.repo(name).await,
                self.operator.log_tail(80)
            ),
        }
    }

    /// Waits until `ref_` of Repository `name` is listed at `sha`.
    async fn wait_revision(&self, name: &str, ref_: &str, sha: &str) {
        let what = format!("Repository {name} to list {ref_} at {sha}");
        wait_for(what, DEADLINE, POLL, || async {
            (revision(&self.repo(name).await, ref_).as_deref() == Some(sha)).then_some(())
        })
        .await;
    }

    /// Every event in the namespace, both APIs, as YAML text.
    async fn events_yaml(&self) -> String {
        let new_api = self
            .cluster
            .kubectl_ok(&["get", "events.events.k8s.io", "-n", &self.ns, "-o", "yaml"])
            .await;
        let core = self
            .cluster
            .kubectl(&["get", "events", "-n", &self.ns, "-o", "yaml"])
            .await;
        format!("{new_api}\n{}", core.stdout)
    }

    /// POSTs to the webhook with extra headers; returns the status and body.
    async fn webhook(&self, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        post(self.webhook, "/api/webhook", headers, body).await
    }
}

/// `status.lastFetchedRevision[ref]`.
fn revision(repo: &Value, ref_: &str) -> Option<String> {
    repo.pointer("/status/lastFetchedRevision")?
        .as_array()?
        .iter()
        .find(|r| text(r, "/ref") == ref_)
        .map(|r| text(r, "/revision").to_string())
}

/// A raw HTTP/1.1 POST with custom headers; tolerates the server answering before the whole body
/// was sent (413).
async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to the webhook");
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let (mut reader, mut writer) = stream.split();
        let send = async {
            let _ = writer.write_all(head.as_bytes()).await;
            let _ = writer.write_all(body).await;
        };
        let mut raw = Vec::new();
        let recv = reader.read_to_end(&mut raw);
        let (_, received) = tokio::join!(send, recv);
        let _ = received;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the webhook answers in time")
}

fn hmac_sha256_hex(secret: &[u8], body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Asserts that `needle` appears in none of the places a credential could leak to.
async fn assert_nowhere(env: &Env, needle: &str) {
    let statuses = env
        .cluster
        .kubectl_ok(&["get", "repositories.capstan.dev", "-A", "-o", "yaml"])
        .await;
    assert!(!statuses.contains(needle), "canary in Repository objects:\n{statuses}");
    let events = env.events_yaml().await;
    assert!(!events.contains(needle), "canary in events:\n{events}");
    let metrics = env.operator.metrics().await;
    assert!(!metrics.contains(needle), "canary in /metrics");
    let logs = env.operator.logs();
    assert!(!logs.contains(needle), "canary in the operator's logs:\n{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_daemon_repository_becomes_ready_and_picks_up_new_commits() {
    let env = Env::start("repo-daemon", "").await;
    let upstream = Upstream::new();
    let c1 = upstream.create("app");
    let daemon = git::git_daemon(&upstream.base());
    let url = format!("git://127.0.0.1:{}/app.git", daemon.port);
    env.apply_repository("app", &url, "2s", None).await;

    // kubectl wait works on the Ready condition.
    env.cluster
        .kubectl_ok(&[
            "wait",
            "--for=condition=Ready",
            "--timeout=60s",
            "-n",
            &env.ns,
            "repositories.capstan.dev/app",
        ])
        .await;
    let repo = env.repo("app").await;
    assert_eq!(revision(&repo, "HEAD").as_deref(), Some(c1.as_str()), "{repo}");
    assert_eq!(revision(&repo, "main").as_deref(), Some(c1.as_str()), "{repo}");
    assert_eq!(
        repo.pointer("/status/observedGeneration").and_then(Value::as_i64),
        Some(1)
    );
    let ready = condition(&repo, "Ready").expect("Ready");
    assert_eq!(text(ready, "/reason"), "Succeeded");

    // A new commit is picked up on the next poll, with an event.
    let c2 = upstream.commit("app", "second");
    env.wait_revision("app", "main", &c2).await;
    env.wait_revision("app", "HEAD", &c2).await;
    let what = "a NewRevision event";
    wait_for(what, DEADLINE, POLL, || async {
        let events = env.events_yaml().await;
        (events.contains("NewRevision")
            && events.contains(capstan::text::short_sha(&c2))
            && events.contains("RepositoryReady"))
        .then_some(())
    })
    .await;
    // Polling never fetched: only ls-remote requests were made.
    let metrics = env.operator.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("capstan_git_request_total") && l.contains("request_type=\"ls-remote\"")),
        "{metrics}"
    );
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("capstan_git_request_total") && l.contains("\"fetch\"")),
        "{metrics}"
    );
    assert!(metrics.contains("capstan_kube_requests_total{"), "{metrics}");
    assert!(metrics.contains("capstan_reconcile_total{controller=\"repository\",result=\"success\"}"));

    // Status writes do not loop: with no new commit, the object settles.
    let settled = env.repo("app").await;
    let rv = text(&settled, "/metadata/resourceVersion").to_string();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = env.repo("app").await;
    assert_eq!(
        text(&later, "/metadata/resourceVersion"),
        rv,
        "status rewritten without a change"
    );

    // SIGTERM: a clean, prompt exit.
    let mut env = env;
    assert!(
        env.operator.terminate().await,
        "capstan exits 0 on SIGTERM:\n{}",
        env.operator.log_tail(40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_verification_refuses_unsigned_commits() {
    let env = Env::start("repo-verify", "").await;
    let upstream = Upstream::new();
    upstream.create("signed");
    let daemon = git::git_daemon(&upstream.base());
    let keys = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: trusted-keys\n  namespace: {ns}\ndata:\n  \
         release.asc: |\n    -----BEGIN PGP PUBLIC KEY BLOCK-----\n    not a real key\n    \
         -----END PGP PUBLIC KEY BLOCK-----\n---\napiVersion: capstan.dev/v1alpha1\nkind: Repository\nmetadata:\n  \
         name: signed\n  namespace: {ns}\nspec:\n  url: git://127.0.0.1:{port}/signed.git\n  pollInterval: 2s\n  \
         verification:\n    mode: Head\n    keysConfigMapRef:\n      name: trusted-keys\n",
        ns = env.ns,
        port = daemon.port
    );
    env.cluster.apply(&keys, &[]).await;
    let repo = env.wait_ready("signed", "False", Some("VerificationFailed")).await;
    // Unverified commits are never published as fetched revisions.
    assert!(revision(&repo, "HEAD").is_none(), "{repo}");
    // Verification needed the commit object: one fetch, not one per poll.
    let count = |metrics: &str, request_type: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("capstan_git_request_total{") && l.contains(&format!("\"{request_type}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    wait_for("a few more polls", DEADLINE, POLL, || async {
        (count(&env.operator.metrics().await, "ls-remote") >= 3).then_some(())
    })
    .await;
    let metrics = env.operator.metrics().await;
    assert_eq!(count(&metrics, "fetch"), 1, "{metrics}");
}

/// The label that lets a Repository use a Secret.
const REPOSITORY_SECRET_LABEL: &str = "capstan.dev/secret-type=repository";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_basic_auth_right_and_wrong_password_and_canary_never_leaks() {
    let env = Env::start("repo-http", "").await;
    let upstream = Upstream::new();
    let c1 = upstream.create("private");
    let right = "CANARY-right-7f3a9c";
    let wrong = "CANARY-wrong-0b12de";
    let http = git::http_server(&upstream.base(), "alice", right);
    let url = format!("http://127.0.0.1:{}/private.git", http.port);
    env.secret("good-creds", &[("username", "alice"), ("password", right)], &[])
        .await;
    env.secret("bad-creds", &[("username", "alice"), ("password", wrong)], &[])
        .await;
    env.apply_repository("good", &url, "2s", Some("good-creds")).await;
    env.apply_repository("bad", &url, "2s", Some("bad-creds")).await;
    env.apply_repository("missing-secret", &url, "2s", Some("nope")).await;
    // Right credentials, but the Secret was never marked as repository credentials: whoever may create a
    // Repository must not be able to send any Secret of the namespace to a URL of their choosing.
    env.unlabelled_secret("plain-creds", &[("username", "alice"), ("password", right)], &[])
        .await;
    env.apply_repository("unlabelled", &url, "2s", Some("plain-creds"))
        .await;

    let good = env.wait_ready("good", "True", Some("Succeeded")).await;
    assert_eq!(revision(&good, "HEAD").as_deref(), Some(c1.as_str()));
    let bad = env.wait_ready("bad", "False", Some("AuthenticationFailed")).await;
    assert!(!text(&bad, "/status/lastError").is_empty(), "lastError is set: {bad}");
    env.wait_ready("missing-secret", "False", Some("NotFound")).await;
    let unlabelled = env.wait_ready("unlabelled", "False", Some("SecretNotLabelled")).await;
    let said = text(&unlabelled, "/status/lastError");
    assert!(
        said.contains(&format!(
            "kubectl label secret plain-creds -n {} {REPOSITORY_SECRET_LABEL}",
            env.ns
        )),
        "the message says which label to add: {unlabelled}"
    );
    env.cluster
        .kubectl_ok(&["label", "secret", "plain-creds", "-n", &env.ns, REPOSITORY_SECRET_LABEL])
        .await;
    env.wait_ready("unlabelled", "True", Some("Succeeded")).await;
    wait_for("a Warning AuthenticationFailed event", DEADLINE, POLL, || async {
        env.events_yaml().await.contains("AuthenticationFailed").then_some(())
    })
    .await;

    // Fixing the Secret makes the Repository Ready (the Secret watch triggers it).
    env.cluster
        .kubectl_ok(&["delete", "secret", "bad-creds", "-n", &env.ns])
        .await;
    env.secret("bad-creds", &[("username", "alice"), ("password", right)], &[])
        .await;
    env.wait_ready("bad", "True", Some("Succeeded")).await;

    for canary in [right, wrong] {
        assert_nowhere(&env, canary).await;
    }
    assert_nowhere(&env, "CANARY").await;
}

/// Requests in the smart-HTTP server's log that asked for objects (fetches), and ref listings.
fn fetches_and_listings(server: &capstan_e2e::git::Server) -> (usize, usize) {
    let log = server.requests();
    let fetches = log.iter().filter(|l| l.ends_with(" want")).count();
    let listings = log
        .iter()
        .filter(|l| l.starts_with("GET ") && l.contains("/info/refs"))
        .count();
    (fetches, listings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_lists_refs_and_never_fetches_per_the_git_servers_own_log() {
    let env = Env::start("repo-polls", "").await;
    let upstream = Upstream::new();
    let c1 = upstream.create("polled");
    let http = git::http_server(&upstream.base(), "alice", "s3cret");
    let url = format!("http://127.0.0.1:{}/polled.git", http.port);
    env.secret("creds", &[("username", "alice"), ("password", "s3cret")], &[])
        .await;
    env.apply_repository("polled", &url, "1s", Some("creds")).await;
    env.wait_revision("polled", "main", &c1).await;

    // The server sees poll after poll, each a ref listing, none asking for objects.
    wait_for("five more ref listings", DEADLINE, POLL, || async {
        let (_, listings) = fetches_and_listings(&http);
        (listings >= 5).then_some(())
    })
    .await;
    // A ref that moves is listed too, still without a fetch (the Repository only reads refs).
    let c2 = upstream.commit("polled", "second");
    env.wait_revision("polled", "main", &c2).await;
    let (fetches, listings) = fetches_and_listings(&http);
    assert!(listings >= 6, "{:?}", http.requests());
    assert_eq!(fetches, 0, "no poll fetched: {:?}", http.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_with_known_hosts_and_unknown_host_key() {
    if !git::sshd_available() {
        eprintln!(
            "SKIPPED: {} is not installed (.ci/run installs openssh-server)",
            git::SSHD
        );
        return;
    }
    let env = Env::start("repo-ssh", "").await;
    let upstream = Upstream::new();
    let c1 = upstream.create("infra");
    let sshd = git::sshd();
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        sshd.user,
        sshd.server.port,
        upstream.path("infra").display()
    );
    env.secret(
        "ssh-known",
        &[],
        &[("sshPrivateKey", &sshd.user_key), ("knownHosts", &sshd.known_hosts)],
    )
    .await;
    env.secret(
        "ssh-unknown",
        &[],
        &[
            ("sshPrivateKey", &sshd.user_key),
            ("knownHosts", &sshd.wrong_known_hosts),
        ],
    )
    .await;
    env.apply_repository("known", &url, "5s", Some("ssh-known")).await;
    env.apply_repository("unknown", &url, "5s", Some("ssh-unknown")).await;
    let known = env.wait_ready("known", "True", Some("Succeeded")).await;
    assert_eq!(revision(&known, "HEAD").as_deref(), Some(c1.as_str()));
    env.wait_ready("unknown", "False", Some("HostKeyUnknown")).await;
    // The private key never shows up anywhere.
    let key_line = sshd
        .user_key
        .lines()
        .find(|l| l.len() > 40)
        .expect("a key body line")
        .to_string();
    assert_nowhere(&env, &key_line).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tarpit_times_out_within_the_deadline() {
    let env = Env::start("repo-tarpit", "").await;
    let tarpit = git::Tarpit::start();
    let url = format!("git://127.0.0.1:{}/stuck.git", tarpit.port);
    let started = std::time::Instant::now();
    env.apply_repository("stuck", &url, "10s", None).await;
    let repo = env.wait_ready("stuck", "False", Some("Timeout")).await;
    // --git-timeout 5s: well under the 60 s deadline.
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "took {:?}",
        started.elapsed()
    );
    assert!(text(&repo, "/status/lastError").contains("127.0.0.1"), "{repo}");
    // The operator keeps serving while a git call hangs.
    assert_eq!(env.operator.http_get("/healthz").await.map(|r| r.0), Some(200));
    drop(tarpit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_webhook_refreshes_only_the_matching_repository() {
    let secret = "webhook-s3cret";
    let setup = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: capstan-webhook\n  namespace: {OPERATOR_NAMESPACE}\n\
         data:\n  github: {b64}\n",
        b64 = BASE64.encode(secret.as_bytes())
    );
    let env = Env::start("repo-webhook", &setup).await;
    let upstream = Upstream::new();
    let a1 = upstream.create("team-a");
    let b1 = upstream.create("team-b");
    let daemon = git::git_daemon(&upstream.base());
    let url = |name: &str| format!("git://127.0.0.1:{}/{name}.git", daemon.port);
    // Polling so slow that only the webhook can explain an update.
    env.apply_repository("a", &url("team-a"), "1h", None).await;
    env.apply_repository("b", &url("team-b"), "1h", None).await;
    env.wait_ready("a", "True", None).await;
    env.wait_ready("b", "True", None).await;
    env.wait_revision("a", "HEAD", &a1).await;
    env.wait_revision("b", "HEAD", &b1).await;

    let a2 = upstream.commit("team-a", "a2");
    let b2 = upstream.commit("team-b", "b2");
    assert_ne!(b1, b2);

    // GitHub names the repository by several URLs; the ssh form matches the git:// Repository.
    let payload = |name: &str| {
        serde_json::json!({
            "ref": "refs/heads/main",
            "after": "0000000000000000000000000000000000000000",
            "repository": {
                "full_name": format!("org/{name}"),
                "html_url": format!("http://127.0.0.1:{}/{name}", daemon.port),
                "clone_url": format!("http://127.0.0.1:{}/{name}.git", daemon.port),
                "ssh_url": format!("ssh://git@127.0.0.1:{}/{name}.git", daemon.port),
            },
            "commits": []
        })
        .to_string()
    };
    let body = payload("team-a");
    let sig = format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), body.as_bytes()));
    let gh = |sig: &str| {
        vec![
            ("X-GitHub-Event", "push".to_string()),
            ("X-Hub-Signature-256", sig.to_string()),
        ]
    };
    let headers = gh(&sig);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // The webhook secret may take a moment to reach the operator's watch.
    let (status, answer) = wait_for("the webhook to accept a signed push", DEADLINE, POLL, || async {
        let (status, answer) = env.webhook(&headers, body.as_bytes()).await;
        (status != 403).then_some((status, answer))
    })
    .await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer.contains("\"matched\":1"), "{answer}");
    env.wait_revision("a", "HEAD", &a2).await;
    // b was not refreshed: it still shows its old commit after a quiet period.
    tokio::time::sleep(QUIET).await;
    assert_eq!(revision(&env.repo("b").await, "HEAD").as_deref(), Some(b1.as_str()));

    // An invalid signature is refused and refreshes nothing.
    let a3 = upstream.commit("team-a", "a3");
    let body = payload("team-a");
    let bad = gh("sha256=0000000000000000000000000000000000000000000000000000000000000000");
    let bad: Vec<(&str, &str)> = bad.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, _) = env.webhook(&bad, body.as_bytes()).await;
    assert_eq!(status, 401);
    let unsigned = [("X-GitHub-Event", "push")];
    assert_eq!(env.webhook(&unsigned, body.as_bytes()).await.0, 401);
    tokio::time::sleep(QUIET).await;
    assert_eq!(revision(&env.repo("a").await, "HEAD").as_deref(), Some(a2.as_str()));

    // Oversized and garbage bodies.
    let big = vec![b'x'; 2 * 1024 * 1024];
    let big_sig = format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), &big));
    let big_headers = gh(&big_sig);
    let big_headers: Vec<(&str, &str)> = big_headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(env.webhook(&big_headers, &big).await.0, 413);
    let garbage = b"{\"repository\": {\"clone_url\": [\"x\"]}}";
    let g_sig = format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), garbage));
    let g_headers = gh(&g_sig);
    let g_headers: Vec<(&str, &str)> = g_headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(env.webhook(&g_headers, garbage).await.0, 400);
    let noise = b"\x00\x01garbage\xff";
    let n_sig = format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), noise));
    let n_headers = gh(&n_sig);
    let n_headers: Vec<(&str, &str)> = n_headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(env.webhook(&n_headers, noise).await.0, 400);
    // A provider without a configured secret is disabled.
    let gitlab = [("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", "anything")];
    assert_eq!(env.webhook(&gitlab, body.as_bytes()).await.0, 403);

    // The operator kept running: a valid push still works, and it is healthy.
    let sig = format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), body.as_bytes()));
    let ok = gh(&sig);
    let ok: Vec<(&str, &str)> = ok.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(env.webhook(&ok, body.as_bytes()).await.0, 202);
    env.wait_revision("a", "HEAD", &a3).await;
    assert_eq!(revision(&env.repo("b").await, "HEAD").as_deref(), Some(b1.as_str()));
    assert_eq!(env.operator.http_get("/healthz").await.map(|r| r.0), Some(200));
    let metrics = env.operator.metrics().await;
    assert!(
        metrics.contains("capstan_webhook_requests_total{code=\"401\",provider=\"github\"}"),
        "{metrics}"
    );
}
