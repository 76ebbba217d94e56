//! Real Git servers on loopback for the Repository end-to-end tests: upstream bare repositories built
//! with the `git` CLI, and the servers of the operator's own source tests (`capstan::source::testsupport`,
//! shared through the crate's `testsupport` feature): `git daemon`, smart HTTP (`git http-backend` behind
//! a small Python server), `sshd` with a generated host key and user key, and a tarpit.
//!
//! Every server binds loopback on a free port, is killed (and reaped) on drop, and every wait is
//! bounded. Commands are argv lists; nothing goes through a shell.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use capstan::source::testsupport::{self as ts, HttpAuth};
pub use capstan::source::testsupport::{
    free_port, git_daemon, sshd, sshd_available, test_pki, Server, Sshd, Tarpit, TestPki, SSHD,
};
use tempfile::TempDir;

/// Runs `git` in `dir` with a fixed identity and no user or system configuration; panics on failure;
/// the output trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Capstan Test", "-c", "user.email=test@capstan.dev"])
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Upstream bare repositories `<base>/<name>.git`, each with a working clone for commits.
pub struct Upstream {
    dir: TempDir,
}

impl Default for Upstream {
    fn default() -> Self {
        Self::new()
    }
}

impl Upstream {
    /// An empty base directory.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-upstream-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(dir.path().join("srv")).expect("srv");
        Upstream { dir }
    }

    /// The directory servers export (`<base>/<name>.git` are the repositories).
    pub fn base(&self) -> PathBuf {
        self.dir.path().join("srv")
    }

    /// The bare repository `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.base().join(format!("{name}.git"))
    }

    fn work(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("work-{name}"))
    }

    /// Creates bare repository `name` (default branch `main`) with one commit; returns its SHA.
    pub fn create(&self, name: &str) -> String {
        let bare = self.path(name);
        git(
            &self.base(),
            &["init", "-q", "--bare", bare.to_str().expect("utf-8 path")],
        );
        git(
            self.dir.path(),
            &["clone", "-q", bare.to_str().expect("utf-8"), &format!("work-{name}")],
        );
        git(&self.work(name), &["checkout", "-q", "-B", "main"]);
        std::fs::write(self.work(name).join("README.md"), format!("# {name}\n")).expect("write");
        git(&self.work(name), &["add", "-A"]);
        self.commit(name, "initial")
    }

    /// Commits (an empty commit is fine) on `main` of `name`, pushes, and returns the new SHA.
    pub fn commit(&self, name: &str, message: &str) -> String {
        let work = self.work(name);
        git(&work, &["commit", "-q", "--allow-empty", "-m", message]);
        git(&work, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git(&work, &["rev-parse", "HEAD"])
    }
}

/// Smart HTTP on `http://127.0.0.1:<port>/<name>.git` requiring basic auth `user:password`.
///
/// The password travels on the server's argv: only the test's own process tree can see it, and
/// the operator never does (it reads it from a Secret).
pub fn http_server(base: &Path, user: &str, password: &str) -> Server {
    ts::http_server(base, HttpAuth::Basic(user, password))
}

/// As [`http_server`], over HTTPS with `pki`'s server certificate.
pub fn https_server(base: &Path, user: &str, password: &str, pki: &TestPki) -> Server {
    ts::https_server(base, HttpAuth::Basic(user, password), pki)
}
