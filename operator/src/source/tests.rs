//! End-to-end tests of [`Git2Source`] against real servers on loopback (see `testsupport`).

use std::time::{Duration, Instant};

use super::git::{Git2Source, GitConfig};
use super::testsupport::{self as ts, HttpAuth};
use super::{Commit, Credentials, GitSource, RepoUrl, Revision, SourceError};

const CANARY_PW: &str = "CANARY-pw-5e1f";
const CANARY_TOKEN: &str = "CANARY-token-77ab";

/// Same connect/I/O timeouts everywhere (they are process-wide in libgit2).
fn config() -> GitConfig {
    GitConfig {
        connect_timeout: Duration::from_secs(2),
        io_timeout: Duration::from_secs(3),
        total_timeout: Duration::from_secs(20),
        ..GitConfig::default()
    }
}

fn source() -> (tempfile::TempDir, Git2Source) {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = Git2Source::new(dir.path(), config());
    (dir, src)
}

fn url(s: &str) -> RepoUrl {
    RepoUrl::parse(s).expect("url")
}

fn rev(s: &str) -> Revision {
    Revision::parse(s).expect("revision")
}

async fn fetch_resolve(src: &Git2Source, u: &RepoUrl, creds: &Credentials, r: &str) -> Result<Commit, SourceError> {
    let r = rev(r);
    src.fetch(u, creds, &r).await?;
    src.resolve(u, &r).await
}

fn assert_no_canary(err: &SourceError) {
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("CANARY"), "credential leaked: {text}");
    }
}

#[tokio::test]
async fn file_transport_resolves_every_revision_kind_and_checks_out() {
    let fx = ts::Fixture::new();
    let (_d, src) = source();
    let u = url(&fx.file_url());
    let none = Credentials::default();
    let short_f1 = &fx.f1.to_string()[..7];
    let full_c1 = fx.c1.to_string();
    let cases = [
        ("HEAD", fx.c2),
        ("", fx.c2),
        ("main", fx.c2),
        ("feature", fx.f1),
        ("refs/heads/feature", fx.f1),
        ("v1", fx.c1),
        ("v2", fx.c2),
        (full_c1.as_str(), fx.c1),
        (short_f1, fx.f1),
    ];
    for (r, want) in cases {
        let got = fetch_resolve(&src, &u, &none, r)
            .await
            .unwrap_or_else(|e| panic!("{r}: {e}"));
        assert_eq!(got.sha(), want.to_string(), "revision {r:?}");
    }
    let c2 = Commit::parse(&fx.c2.to_string()).unwrap();
    let dir = src.checkout(&u, &c2).await.expect("checkout");
    assert_eq!(
        std::fs::read_to_string(dir.join("app/cm.yaml")).unwrap(),
        "kind: ConfigMap\ndata: {a: b}\n"
    );
    assert!(!dir.join(".git").exists());
    assert_eq!(src.checkout(&u, &c2).await.expect("reuse"), dir);
    assert_eq!(dir, src.cache().checkout_dir(&u, &c2));

    let err = fetch_resolve(&src, &u, &none, "no-such-branch").await.unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
    let err = fetch_resolve(&src, &u, &none, &"e".repeat(40)).await.unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
}

#[tokio::test]
async fn moved_branch_is_seen_on_next_fetch() {
    let fx = ts::Fixture::new();
    let (_d, src) = source();
    let u = url(&fx.file_url());
    let none = Credentials::default();
    assert_eq!(
        fetch_resolve(&src, &u, &none, "main").await.unwrap().sha(),
        fx.c2.to_string()
    );
    let c3 = ts::commit(&fx.repo(), "refs/heads/main", &[fx.c2], &[("x", "y")], "c3");
    assert_eq!(
        fetch_resolve(&src, &u, &none, "main").await.unwrap().sha(),
        c3.to_string()
    );
    assert_eq!(
        fetch_resolve(&src, &u, &none, "HEAD").await.unwrap().sha(),
        c3.to_string()
    );
    fx.repo()
        .find_reference("refs/heads/feature")
        .unwrap()
        .delete()
        .unwrap();
    let err = fetch_resolve(&src, &u, &none, "feature").await.unwrap_err();
    assert_eq!(
        err.category(),
        "NotFound",
        "deleted branch must not resolve from a stale cache: {err}"
    );
}

#[tokio::test]
async fn missing_repository_is_not_found() {
    let fx = ts::Fixture::new();
    let (_d, src) = source();
    let none = Credentials::default();
    let missing = url(&format!("file://{}/nope.git", fx.base.display()));
    let err = src.fetch(&missing, &none, &rev("HEAD")).await.unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
    let daemon = ts::git_daemon(&fx.base);
    let missing = url(&format!("git://127.0.0.1:{}/nope.git", daemon.port));
    let err = src.ls_remote(&missing, &none).await.unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");
}

#[tokio::test]
async fn git_daemon_ls_remote_fetches_nothing_and_shallow_fetch_works() {
    let fx = ts::Fixture::new();
    let daemon = ts::git_daemon(&fx.base);
    let (_d, src) = source();
    let u = url(&format!("git://127.0.0.1:{}/repo.git", daemon.port));
    let none = Credentials::default();

    let refs = src.ls_remote(&u, &none).await.expect("ls-remote");
    let find = |n: &str| refs.iter().find(|r| r.name == n).map(|r| r.sha.clone());
    assert_eq!(find("HEAD"), Some(fx.c2.to_string()));
    assert_eq!(find("refs/heads/feature"), Some(fx.f1.to_string()));
    assert_eq!(find("refs/tags/v2^{}"), Some(fx.c2.to_string()));
    assert_eq!(
        ts::object_count(&src.cache().repo_dir(&u)),
        0,
        "ls-remote must not fetch objects"
    );

    let outcome = src.fetch(&u, &none, &rev("main")).await.expect("fetch");
    assert!(outcome.shallow, "git:// fetch of a branch should be shallow");
    assert_eq!(src.resolve(&u, &rev("main")).await.unwrap().sha(), fx.c2.to_string());
    let shallow_objects = ts::object_count(&src.cache().repo_dir(&u));

    // A short SHA needs history: the cache is deepened.
    let short = &fx.c1.to_string()[..8];
    let outcome = src.fetch(&u, &none, &rev(short)).await.expect("unshallow fetch");
    assert!(!outcome.shallow);
    assert_eq!(src.resolve(&u, &rev(short)).await.unwrap().sha(), fx.c1.to_string());
    assert!(ts::object_count(&src.cache().repo_dir(&u)) >= shallow_objects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checkouts_of_one_commit_write_it_once() {
    let fx = ts::Fixture::new();
    let (_d, src) = source();
    let u = url(&fx.file_url());
    let c2 = fetch_resolve(&src, &u, &Credentials::default(), "main")
        .await
        .expect("fetch");
    let dirs = futures::future::join_all((0..8).map(|_| src.checkout(&u, &c2))).await;
    let dirs: Vec<_> = dirs.into_iter().map(|d| d.expect("checkout")).collect();
    assert!(dirs.iter().all(|d| *d == dirs[0]));
    assert_eq!(
        src.checkouts_written(),
        1,
        "eight reconciles needing one commit write one checkout"
    );
    assert_eq!(
        std::fs::read_to_string(dirs[0].join("app/cm.yaml")).unwrap(),
        "kind: ConfigMap\ndata: {a: b}\n"
    );
}

#[tokio::test]
async fn concurrent_fetches_of_one_url_share_one_fetch() {
    let fx = ts::Fixture::new();
    let daemon = ts::git_daemon(&fx.base);
    let (_d, src) = source();
    let u = url(&format!("git://127.0.0.1:{}/repo.git", daemon.port));
    let none = Credentials::default();
    let r = rev("main");
    let results = tokio::join!(
        src.fetch(&u, &none, &r),
        src.fetch(&u, &none, &r),
        src.fetch(&u, &none, &r),
        src.fetch(&u, &none, &r)
    );
    let outcomes = [results.0, results.1, results.2, results.3].map(|r| r.expect("fetch"));
    let network = outcomes.iter().filter(|o| !o.coalesced).count();
    assert_eq!(network, 1, "{outcomes:?}");
    let dirs = std::fs::read_dir(src.cache().root().join("repos")).unwrap().count();
    assert_eq!(dirs, 1);
}

#[tokio::test]
async fn http_basic_auth() {
    let fx = ts::Fixture::new();
    let server = ts::http_server(&fx.base, HttpAuth::Basic("alice", CANARY_PW));
    let (_d, src) = source();
    let u = url(&format!("http://127.0.0.1:{}/repo.git", server.port));
    let good = Credentials {
        username: Some("alice".into()),
        password: Some(CANARY_PW.into()),
        ..Default::default()
    };
    let refs = src.ls_remote(&u, &good).await.expect("ls-remote");
    assert!(refs.iter().any(|r| r.name == "refs/heads/main"));
    assert_eq!(
        fetch_resolve(&src, &u, &good, "v1").await.unwrap().sha(),
        fx.c1.to_string()
    );
    let missing = url(&format!("http://127.0.0.1:{}/nope.git", server.port));
    let err = src.ls_remote(&missing, &good).await.unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");

    let wrong = Credentials {
        password: Some(format!("{CANARY_PW}-wrong")),
        ..good.clone()
    };
    let err = src.ls_remote(&u, &wrong).await.unwrap_err();
    assert_eq!(err.category(), "AuthenticationFailed", "{err}");
    assert_no_canary(&err);
    let err = src.fetch(&u, &wrong, &rev("main")).await.unwrap_err();
    assert_eq!(err.category(), "AuthenticationFailed", "{err}");
    assert_no_canary(&err);
    let err = src.ls_remote(&u, &Credentials::default()).await.unwrap_err();
    assert_eq!(err.category(), "AuthenticationFailed", "{err}");
    assert!(!format!("{wrong:?}").contains("CANARY"));
}

#[tokio::test]
async fn http_bearer_token() {
    let fx = ts::Fixture::new();
    let server = ts::http_server(&fx.base, HttpAuth::Bearer(CANARY_TOKEN));
    let (_d, src) = source();
    let u = url(&format!("http://127.0.0.1:{}/repo.git", server.port));
    let good = Credentials {
        bearer_token: Some(CANARY_TOKEN.into()),
        ..Default::default()
    };
    let refs = src.ls_remote(&u, &good).await.expect("ls-remote");
    assert!(refs.iter().any(|r| r.name == "HEAD"));
    assert_eq!(
        ts::object_count(&src.cache().repo_dir(&u)),
        0,
        "ls-remote must not fetch objects"
    );
    assert_eq!(
        fetch_resolve(&src, &u, &good, "feature").await.unwrap().sha(),
        fx.f1.to_string()
    );

    let wrong = Credentials {
        bearer_token: Some(format!("{CANARY_TOKEN}-wrong")),
        ..Default::default()
    };
    for err in [
        src.ls_remote(&u, &wrong).await.unwrap_err(),
        src.fetch(&u, &wrong, &rev("main")).await.unwrap_err(),
    ] {
        assert_eq!(err.category(), "AuthenticationFailed", "{err}");
        assert!(err.to_string().contains("rejected"), "{err}");
        assert_no_canary(&err);
    }
}

#[tokio::test]
async fn https_custom_ca_and_insecure_skip_verify() {
    let fx = ts::Fixture::new();
    let pki = ts::test_pki("capstan-test-ca");
    let other = ts::test_pki("capstan-other-ca");
    let server = ts::https_server(&fx.base, HttpAuth::Basic("alice", CANARY_PW), &pki);
    let (_d, src) = source();
    let u = url(&format!("https://127.0.0.1:{}/repo.git", server.port));
    let base = Credentials {
        username: Some("alice".into()),
        password: Some(CANARY_PW.into()),
        ..Default::default()
    };

    let err = src.ls_remote(&u, &base).await.unwrap_err();
    assert_eq!(
        err.category(),
        "TLSError",
        "system CAs must not trust the test CA: {err}"
    );
    assert_no_canary(&err);
    let wrong_ca = Credentials {
        ca_cert: Some(other.ca_pem.clone()),
        ..base.clone()
    };
    let err = src.ls_remote(&u, &wrong_ca).await.unwrap_err();
    assert_eq!(err.category(), "TLSError", "{err}");

    let with_ca = Credentials {
        ca_cert: Some(pki.ca_pem.clone()),
        ..base.clone()
    };
    assert_eq!(
        fetch_resolve(&src, &u, &with_ca, "main").await.expect("caCert").sha(),
        fx.c2.to_string()
    );
    let insecure = Credentials {
        insecure_skip_tls_verify: true,
        ..base.clone()
    };
    assert!(src.ls_remote(&u, &insecure).await.is_ok());
    let client_cert = Credentials {
        tls_client_cert: Some("x".into()),
        tls_client_key: Some("y".into()),
        ..with_ca
    };
    assert_eq!(
        src.ls_remote(&u, &client_cert).await.unwrap_err().category(),
        "TLSError"
    );
}

#[tokio::test]
async fn ssh_key_and_known_hosts() {
    let fx = ts::Fixture::new();
    let sshd = ts::sshd();
    let (_d, src) = source();
    let u = url(&format!(
        "ssh://{}@127.0.0.1:{}{}",
        sshd.user,
        sshd.server.port,
        fx.repo_path.display()
    ));
    let good = Credentials {
        ssh_private_key: Some(sshd.user_key.clone()),
        known_hosts: Some(sshd.known_hosts.clone()),
        ..Default::default()
    };
    let refs = src.ls_remote(&u, &good).await.expect("ls-remote over ssh");
    assert!(refs.iter().any(|r| r.name == "refs/tags/v1"));
    assert_eq!(
        fetch_resolve(&src, &u, &good, "main").await.unwrap().sha(),
        fx.c2.to_string()
    );
    let missing = url(&format!(
        "ssh://{}@127.0.0.1:{}{}/nope.git",
        sshd.user,
        sshd.server.port,
        fx.base.display()
    ));
    let err = src.ls_remote(&missing, &good).await.unwrap_err();
    assert_eq!(err.category(), "NotFound", "{err}");

    let wrong_key = Credentials {
        ssh_private_key: Some(sshd.other_key.clone()),
        ..good.clone()
    };
    let err = src.ls_remote(&u, &wrong_key).await.unwrap_err();
    assert_eq!(err.category(), "AuthenticationFailed", "{err}");
    assert_no_canary(&err);
    assert!(!err.to_string().contains("PRIVATE KEY"));

    let unknown = Credentials {
        known_hosts: None,
        ..good.clone()
    };
    let err = src.ls_remote(&u, &unknown).await.unwrap_err();
    assert_eq!(err.category(), "HostKeyUnknown", "{err}");
    let other_port = sshd.known_hosts.replace(&format!("]:{}", sshd.server.port), "]:1");
    let err = src
        .ls_remote(
            &u,
            &Credentials {
                known_hosts: Some(other_port),
                ..good.clone()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "HostKeyUnknown", "{err}");
    let mut fields: Vec<String> = sshd.known_hosts.split_whitespace().map(str::to_string).collect();
    fields[2] = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl".into();
    let err = src
        .ls_remote(
            &u,
            &Credentials {
                known_hosts: Some(fields.join(" ")),
                ..good
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), "HostKeyUnknown", "{err}");
    assert!(err.to_string().contains("differs"), "{err}");
}

#[tokio::test]
async fn https_client_certificate() {
    let fx = ts::Fixture::new();
    let pki = ts::test_pki("capstan-mtls-ca");
    let other = ts::test_pki("capstan-mtls-other-ca");
    let server = ts::mtls_server(&fx.base, HttpAuth::Basic("alice", CANARY_PW), &pki);
    let (_d, src) = source();
    let u = url(&format!("https://127.0.0.1:{}/repo.git", server.port));
    let trusted = Credentials {
        username: Some("alice".into()),
        password: Some(CANARY_PW.into()),
        ca_cert: Some(pki.ca_pem.clone()),
        ..Default::default()
    };
    let with_cert = |cert: &str, key: &str| Credentials {
        tls_client_cert: Some(cert.to_string()),
        tls_client_key: Some(key.to_string()),
        ..trusted.clone()
    };

    // The right certificate: refs, then a fetch (GET and POSTs all present it).
    let good = with_cert(&pki.client_cert_pem, &pki.client_key_pem);
    let refs = src.ls_remote(&u, &good).await.expect("ls-remote with client cert");
    assert!(refs.iter().any(|r| r.name == "refs/heads/main"));
    let head = fetch_resolve(&src, &u, &good, "main")
        .await
        .expect("fetch with client cert");
    assert_eq!(head.sha(), fx.c2.to_string());

    // No certificate, or one from a CA the server does not trust: the handshake fails.
    for (what, creds) in [
        ("no client certificate", trusted.clone()),
        (
            "untrusted client certificate",
            with_cert(&other.client_cert_pem, &other.client_key_pem),
        ),
    ] {
        let err = src.ls_remote(&u, &creds).await.unwrap_err();
        assert_eq!(err.category(), "TLSError", "{what}: {err}");
        assert_no_canary(&err);
    }

    // Unusable settings are refused before any connection, without echoing key material.
    let key_body = pki.client_key_pem.lines().nth(1).expect("key body line").to_string();
    let half = Credentials {
        tls_client_key: None,
        ..good.clone()
    };
    let err = src.ls_remote(&u, &half).await.unwrap_err();
    assert_eq!(err.category(), "TLSError", "{err}");
    assert!(err.to_string().contains("together"), "{err}");
    let garbled = with_cert(&pki.client_cert_pem, &format!("CANARY{key_body}"));
    let err = src.ls_remote(&u, &garbled).await.unwrap_err();
    assert_eq!(err.category(), "TLSError", "{err}");
    assert!(err.to_string().contains("tlsClientKey"), "{err}");
    assert!(!err.to_string().contains(&key_body[..20]), "key material in {err}");
    assert_no_canary(&err);
    // A certificate whose key does not match it.
    let mismatched = with_cert(&pki.client_cert_pem, &other.client_key_pem);
    let err = src.ls_remote(&u, &mismatched).await.unwrap_err();
    assert_eq!(err.category(), "TLSError", "{err}");
    assert!(err.to_string().contains("does not fit"), "{err}");
}

#[tokio::test]
async fn http_redirect_on_first_request_is_followed_for_the_whole_fetch() {
    let fx = ts::Fixture::new();
    let server = ts::http_server(&fx.base, HttpAuth::Basic("alice", CANARY_PW));
    let (_d, src) = source();
    // The server answers `/moved/...` with 301 to the path without `/moved`, for GET and POST.
    let u = url(&format!("http://127.0.0.1:{}/moved/repo.git", server.port));
    let good = Credentials {
        username: Some("alice".into()),
        password: Some(CANARY_PW.into()),
        ..Default::default()
    };
    let head = fetch_resolve(&src, &u, &good, "feature")
        .await
        .expect("fetch through a redirect");
    assert_eq!(head.sha(), fx.f1.to_string());
}

#[tokio::test]
async fn credentials_never_follow_a_redirect_to_another_host() {
    let fx = ts::Fixture::new();
    let good = Credentials {
        username: Some("alice".into()),
        password: Some(CANARY_PW.into()),
        ..Default::default()
    };
    // The same repository and credentials on another loopback address.
    let other = ts::http_server_on(&fx.base, HttpAuth::Basic("alice", CANARY_PW), [127, 0, 0, 2], None);
    let other_base = format!("http://127.0.0.2:{}", other.port);
    let (_d, src) = source();
    let direct = url(&format!("{other_base}/repo.git"));
    assert!(
        src.ls_remote(&direct, &good).await.is_ok(),
        "the other host accepts the credentials"
    );

    // A server that sends clients there: the credentials stay behind, so the other host refuses.
    let redirecting = ts::http_server_on(
        &fx.base,
        HttpAuth::Basic("alice", CANARY_PW),
        [127, 0, 0, 1],
        Some(&other_base),
    );
    let u = url(&format!("http://127.0.0.1:{}/elsewhere/repo.git", redirecting.port));
    let err = src.ls_remote(&u, &good).await.unwrap_err();
    assert_eq!(err.category(), "AuthenticationFailed", "{err}");
    assert_no_canary(&err);
}

#[tokio::test]
async fn http_proxy_carries_every_request() {
    let fx = ts::Fixture::new();
    let server = ts::http_server(&fx.base, HttpAuth::Basic("alice", CANARY_PW));
    let proxy = ts::ConnectProxy::start();
    let (_d, src) = source();
    let u = url(&format!("http://127.0.0.1:{}/repo.git", server.port));
    let via = |proxy: String| Credentials {
        username: Some("alice".into()),
        password: Some(CANARY_PW.into()),
        proxy: Some(proxy),
        ..Default::default()
    };
    let through = via(format!("http://127.0.0.1:{}", proxy.server.port));
    let head = fetch_resolve(&src, &u, &through, "main")
        .await
        .expect("fetch through the proxy");
    assert_eq!(head.sha(), fx.c2.to_string());
    let tunnels = proxy.tunnels.lock().unwrap().clone();
    let target = format!("127.0.0.1:{}", server.port);
    assert!(
        !tunnels.is_empty() && tunnels.iter().all(|t| *t == target),
        "{tunnels:?}"
    );

    // A proxy that is down fails the operation: the repository is never reached around it.
    let dead = via(format!("http://127.0.0.1:{}", ts::free_port()));
    let err = src.ls_remote(&u, &dead).await.unwrap_err();
    assert!(err.to_string().contains("proxy"), "{err}");
    assert_no_canary(&err);
    let bad = via("not a url at all".into());
    let err = src.ls_remote(&u, &bad).await.unwrap_err();
    assert_eq!(err.category(), "InvalidInput", "{err}");
}

#[tokio::test]
async fn tarpit_times_out() {
    let pit = ts::Tarpit::start();
    let (_d, src) = source();
    let none = Credentials::default();
    for u in [
        format!("git://127.0.0.1:{}/repo.git", pit.port),
        format!("http://127.0.0.1:{}/repo.git", pit.port),
    ] {
        let u = url(&u);
        let start = Instant::now();
        let err = src.ls_remote(&u, &none).await.unwrap_err();
        assert_eq!(err.category(), "Timeout", "{u}: {err}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{u}: took {:?}",
            start.elapsed()
        );
        let start = Instant::now();
        let err = src.fetch(&u, &none, &rev("main")).await.unwrap_err();
        assert_eq!(err.category(), "Timeout", "{u}: {err}");
        assert!(start.elapsed() < Duration::from_secs(60));
    }
}

#[tokio::test]
async fn total_deadline_is_enforced_and_lock_wait_is_bounded() {
    let pit = ts::Tarpit::start();
    let dir = tempfile::tempdir().unwrap();
    let src = Git2Source::new(
        dir.path(),
        GitConfig {
            total_timeout: Duration::from_millis(800),
            ..config()
        },
    );
    let u = url(&format!("git://127.0.0.1:{}/repo.git", pit.port));
    let none = Credentials::default();
    let r = rev("main");
    let start = Instant::now();
    let (a, b) = tokio::join!(src.fetch(&u, &none, &r), src.fetch(&u, &none, &r));
    assert_eq!(a.unwrap_err().category(), "Timeout");
    assert_eq!(b.unwrap_err().category(), "Timeout");
    // Unbounded lock waits would add libgit2's 3 s I/O timeout to the second fetch (≈4.3 s in all).
    assert!(
        start.elapsed() < Duration::from_millis(3800),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn commit_signatures() {
    let fx = ts::Fixture::new();
    let (trusted_secret, trusted_pub) = pgp_support::key("Trusted <t@example.com>");
    let (other_secret, _) = pgp_support::key("Other <o@example.com>");
    let good = pgp_support::signed_commit(&fx.repo(), "refs/heads/signed", fx.c2, &trusted_secret);
    let bad = pgp_support::signed_commit(&fx.repo(), "refs/heads/other", fx.c2, &other_secret);
    let (_d, src) = source();
    let u = url(&fx.file_url());
    let none = Credentials::default();
    let keys = vec![trusted_pub];
    let c = fetch_resolve(&src, &u, &none, "signed").await.unwrap();
    assert_eq!(c.sha(), good.to_string());
    let v = src.verify_commit(&u, &c, &keys).await.expect("valid signature");
    assert_eq!(v.fingerprint.len(), 40);

    let c = fetch_resolve(&src, &u, &none, "other").await.unwrap();
    assert_eq!(c.sha(), bad.to_string());
    let err = src.verify_commit(&u, &c, &keys).await.unwrap_err();
    assert_eq!(err.category(), "VerificationFailed", "{err}");

    let unsigned = Commit::parse(&fx.c2.to_string()).unwrap();
    let err = src.verify_commit(&u, &unsigned, &keys).await.unwrap_err();
    assert_eq!(err.category(), "VerificationFailed", "{err}");
    assert!(err.to_string().contains("not signed"), "{err}");

    let err = src
        .verify_commit(&u, &unsigned, &["not a key".to_string()])
        .await
        .unwrap_err();
    assert_eq!(err.category(), "VerificationFailed", "{err}");
}

#[test]
fn option_looking_inputs_are_refused() {
    for bad in [
        "--upload-pack=touch /tmp/x",
        "-u",
        "ssh://-oProxyCommand=id/x",
        "https://h/x\r\nHost: evil",
    ] {
        assert_eq!(RepoUrl::parse(bad).unwrap_err().category(), "InvalidInput", "{bad:?}");
    }
    for bad in ["--output=/tmp/x", "-b", "main\n", "a..b"] {
        assert_eq!(Revision::parse(bad).unwrap_err().category(), "InvalidInput", "{bad:?}");
    }
}

/// Test-only OpenPGP helpers: key generation and commit signing with rPGP.
mod pgp_support {
    use pgp::composed::{
        ArmorOptions, DetachedSignature, EncryptionCaps, KeyType, SecretKeyParamsBuilder, SignedPublicKey,
        SignedSecretKey,
    };
    use pgp::crypto::hash::HashAlgorithm;
    use pgp::types::Password;

    /// A signing-capable Ed25519 key and its armored public key.
    pub fn key(uid: &str) -> (SignedSecretKey, String) {
        let mut params = SecretKeyParamsBuilder::default();
        params
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .can_sign(true)
            .can_encrypt(EncryptionCaps::None)
            .primary_user_id(uid.into());
        let secret = params
            .build()
            .expect("params")
            .generate(rand08::thread_rng())
            .expect("generate");
        let public = SignedPublicKey::from(secret.clone());
        let armored = public.to_armored_string(ArmorOptions::default()).expect("armor");
        (secret, armored)
    }

    /// Creates a commit on `parent` signed by `key` and points `refname` at it.
    pub fn signed_commit(
        repo: &git2::Repository,
        refname: &str,
        parent: git2::Oid,
        key: &SignedSecretKey,
    ) -> git2::Oid {
        let sig = git2::Signature::now("Signer", "s@example.com").expect("sig");
        let parent = repo.find_commit(parent).expect("parent");
        let tree = parent.tree().expect("tree");
        let buf = repo
            .commit_create_buffer(&sig, &sig, "signed", &tree, &[&parent])
            .expect("buffer");
        let content = buf.as_str().expect("utf8");
        let detached = DetachedSignature::sign_binary_data(
            rand08::thread_rng(),
            &key.primary_key,
            &Password::empty(),
            HashAlgorithm::Sha256,
            content.as_bytes(),
        )
        .expect("sign");
        let armored = detached.to_armored_string(ArmorOptions::default()).expect("armor");
        let oid = repo.commit_signed(content, &armored, None).expect("commit_signed");
        repo.reference(refname, oid, true, "signed").expect("ref");
        oid
    }
}

#[tokio::test]
async fn changed_paths_compare_the_trees_of_two_cached_commits_within_a_bound() {
    use super::ChangedPaths;
    let fx = ts::Fixture::new();
    let (_d, src) = source();
    let u = url(&fx.file_url());
    fetch_resolve(&src, &u, &Credentials::default(), "main")
        .await
        .expect("fetch");
    let commit = |oid: git2::Oid| Commit::parse(&oid.to_string()).expect("sha");
    let (c1, c2, f1) = (commit(fx.c1), commit(fx.c2), commit(fx.f1));
    let paths = |p: &[&str]| ChangedPaths::Paths(p.iter().map(|s| s.to_string()).collect());
    assert_eq!(
        src.changed_paths(&u, &c1, &c2, 10).await.unwrap(),
        paths(&["app/cm.yaml"])
    );
    // Asked again (every Application of a monorepo asks): the same answer.
    assert_eq!(
        src.changed_paths(&u, &c1, &c2, 10).await.unwrap(),
        paths(&["app/cm.yaml"])
    );
    // A deleted and an added file are both listed; beyond the bound the answer is "too many".
    assert_eq!(
        src.changed_paths(&u, &c2, &f1, 10).await.unwrap(),
        paths(&["app/cm.yaml", "feature.txt"])
    );
    assert_eq!(src.changed_paths(&u, &c2, &f1, 1).await.unwrap(), ChangedPaths::TooMany);
    assert_eq!(src.changed_paths(&u, &c2, &c2, 10).await.unwrap(), paths(&[]));
    let absent = Commit::parse(&"1".repeat(40)).expect("sha");
    assert!(matches!(
        src.changed_paths(&u, &c1, &absent, 10).await,
        Err(SourceError::NotFound(_))
    ));
}

/// A commit of 20 MB of zeros (a few kilobytes fetched) against a 1 MiB checkout bound, and one of 50 small
/// files against a bound of 20: both refused before anything is written (no checkout directory, no partial
/// export left), and the same cache then checks out a commit within the bounds.
#[tokio::test]
async fn checkouts_past_the_bounds_are_refused_before_writing() {
    let fx = ts::Fixture::new();
    let repo = git2::Repository::open_bare(&fx.repo_path).unwrap();
    let zeros = "\0".repeat(20 << 20);
    let big = ts::commit(&repo, "refs/heads/big", &[], &[("blob.bin", &zeros)], "zeros");
    let names: Vec<String> = (0..50).map(|i| format!("d{}/f{i}.yaml", i % 5)).collect();
    let files: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "a: 1\n")).collect();
    let many = ts::commit(&repo, "refs/heads/many", &[], &files, "many files");
    let dir = tempfile::tempdir().unwrap();
    let src = Git2Source::new(
        dir.path(),
        GitConfig {
            checkout: super::bounds::CheckoutLimits {
                max_bytes: 1 << 20,
                max_files: 20,
            },
            ..config()
        },
    );
    let u = url(&fx.file_url());
    let none = Credentials::default();
    for (branch, oid, flag) in [
        ("big", big, "--max-checkout-bytes"),
        ("many", many, "--max-checkout-files"),
    ] {
        let commit = fetch_resolve(&src, &u, &none, branch).await.unwrap();
        assert_eq!(commit.sha(), oid.to_string());
        let err = src.checkout(&u, &commit).await.unwrap_err();
        assert_eq!(err.category(), "CheckoutTooLarge", "{err}");
        assert!(err.to_string().contains(flag), "{err}");
        assert!(!err.is_transient(), "a bound is not retried as a network error");
        let checkout_dir = src.cache().checkout_dir(&u, &commit);
        assert!(!checkout_dir.exists(), "nothing exported for {branch}");
        let leftovers: Vec<_> = checkout_dir
            .parent()
            .and_then(|p| std::fs::read_dir(p).ok())
            .into_iter()
            .flatten()
            .collect();
        assert!(leftovers.is_empty(), "no partial export: {leftovers:?}");
    }
    assert_eq!(src.checkouts_written(), 2, "both were attempted");
    let small = fetch_resolve(&src, &u, &none, "main").await.unwrap();
    let path = src.checkout(&u, &small).await.expect("the cache stays usable");
    assert!(path.is_dir());
}
