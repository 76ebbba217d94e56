//! `make demo` as a test: runs the `capstan-demo` binary with `DEMO_ONESHOT=1` and expects it to bring the
//! guestbook sample from `config/samples/` to Synced and Healthy, then exit 0.
//!
//! The demo needs the `capstan` and `devcluster` binaries next to it (`make test` and `make e2e` build every
//! binary first). Its work directory is a temporary directory, so the test never disturbs a `make demo`
//! that is running at the same time. The wait is bounded: after [`DEADLINE`] the demo gets SIGTERM (it
//! stops its children) and then SIGKILL.

use std::{path::PathBuf, process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    process::Command,
    sync::mpsc,
};

/// The demo's own deadline (`DEMO_DEADLINE`): it fails with its diagnosis before the test gives up.
const DEMO_DEADLINE: &str = "150s";

/// How long the test waits for the demo to exit: start-up of three processes plus the demo's deadline.
const DEADLINE: Duration = Duration::from_secs(300);

/// The demo binary: Cargo builds a package's binaries for its integration tests and says where.
fn demo_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_capstan-demo"))
}

fn forward(pipe: impl AsyncRead + Unpin + Send + 'static, tx: mpsc::UnboundedSender<String>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_demo_oneshot_reaches_synced_and_healthy_and_exits_zero() {
    let binary = demo_binary();
    let profile_dir = binary.parent().expect("target/<profile>/").to_path_buf();
    for needed in ["capstan", "capstan-hub", "devcluster"] {
        assert!(
            profile_dir.join(needed).exists(),
            "{} is missing: build it first (`cargo build --workspace --bins`, or `make e2e`)",
            profile_dir.join(needed).display()
        );
    }
    let work = tempfile::Builder::new()
        .prefix("capstan-demo-")
        .tempdir()
        .expect("a temporary directory");

    let mut child = Command::new(&binary)
        .env("DEMO_ONESHOT", "1")
        .env("DEMO_DEADLINE", DEMO_DEADLINE)
        .env("DEMO_DIR", work.path().join("demo"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("capstan-demo starts");
    let (tx, mut rx) = mpsc::unbounded_channel();
    forward(child.stdout.take().expect("stdout"), tx.clone());
    forward(child.stderr.take().expect("stderr"), tx);

    let status = match tokio::time::timeout(DEADLINE, child.wait()).await {
        Ok(status) => Some(status.expect("wait for capstan-demo")),
        Err(_) => {
            // SIGTERM first so the demo stops devcluster, git daemon and the operator; then SIGKILL.
            if let Some(pid) = child.id() {
                let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await;
            }
            if tokio::time::timeout(Duration::from_secs(20), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
            None
        }
    };
    // Let the readers drain what is left in the pipes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut output = Vec::new();
    while let Ok(line) = rx.try_recv() {
        output.push(line);
    }
    let output = output.join("\n");

    let Some(status) = status else {
        panic!("capstan-demo did not exit within {DEADLINE:?}; its output:\n{output}");
    };
    assert!(
        status.success(),
        "capstan-demo exited with {status}; its output:\n{output}"
    );
    assert!(
        output
            .lines()
            .any(|l| l.contains("Application guestbook is Synced and Healthy at revision")),
        "the demo says when the Application is Synced and Healthy; its output:\n{output}"
    );
    assert!(
        output
            .lines()
            .any(|l| l.contains("the hub page shows Application guestbook Synced/Healthy: http://127.0.0.1:")),
        "the demo's reporter gets the Application to the hub page; its output:\n{output}"
    );
    // The live view showed the sync as it happened: the PreSync hook and both waves.
    for expected in [
        "PreSync hook",
        "Deployment/guestbook-redis",
        "Deployment/guestbook-ui",
        "health=Progressing",
    ] {
        assert!(
            output.contains(expected),
            "the live view mentions {expected:?}; its output:\n{output}"
        );
    }
    // It stopped what it started.
    assert!(
        output.contains("stopping the reporter, the operator, capstan-hub, git daemon and devcluster"),
        "{output}"
    );
}
