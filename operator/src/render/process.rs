//! Running Helm and Kustomize: bounded, isolated subprocesses.
//!
//! - argv is a list handed to `execve` — never a shell, never a string built by concatenation;
//! - the environment is rebuilt from scratch: `PATH` plus a private `HOME`/`TMPDIR`/XDG/Helm
//!   directories, so no credentials, kubeconfigs or plugin homes leak in from the operator;
//! - the child leads its own process group, and on timeout, oversized output or cancellation the
//!   whole group is killed (a tool's own children — `git`, plugins — die with it);
//! - stdout is capped (oversized output aborts the run), stderr is kept short.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Binaries, Limits, RenderError, RenderRequest};

/// How much stderr is kept for error messages.
const MAX_STDERR_BYTES: usize = 64 * 1024;
/// How much of stderr reaches an error message (status conditions must stay small).
const MAX_ERROR_MESSAGE: usize = 1024;

/// One subprocess invocation.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Duration,
    pub max_stdout_bytes: u64,
}

/// Runs a rendering tool in `private` under the request's bounds and parses what it printed as the
/// rendered objects. `tool` names it in errors (`"helm template"`); its output is `"<first word> output"`
/// in YAML errors. Errors never show the checkout's or the private directory's real paths.
pub async fn render_objects(
    tool: &str,
    (program, args): (PathBuf, Vec<OsString>),
    private: &PrivateDir,
    repo_root: &Path,
    req: &RenderRequest,
) -> Result<Vec<serde_json::Value>, RenderError> {
    let spec = ProcessSpec {
        program,
        args,
        cwd: private.work(),
        env: private.env(&req.binaries),
        timeout: req.limits.timeout,
        max_stdout_bytes: req.limits.max_total_bytes,
    };
    let scrub = [(repo_root, "<repo>"), (private.path(), "<tmp>")];
    let output = run(&spec).await.map_err(|e| to_render_error(tool, e, &scrub))?;
    let what = format!("{} output", tool.split(' ').next().unwrap_or(tool));
    let text =
        String::from_utf8(output.stdout).map_err(|_| RenderError::InvalidYaml(format!("{what} is not UTF-8")))?;
    let docs = super::yaml::parse_stream(&text, &req.limits.yaml()).map_err(|e| RenderError::from(e).context(&what))?;
    super::objects_from_documents(docs, &what, &req.limits)
}

/// What a successful run printed.
#[derive(Clone, Debug)]
pub struct ProcessOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessError {
    Spawn(std::io::ErrorKind),
    Timeout(Duration),
    OutputTooLarge(u64),
    Failed { code: Option<i32>, stderr: String },
}

/// A private scratch area for one subprocess: `HOME`, `TMPDIR` and tool config homes live here,
/// mode 0700, removed on drop.
pub struct PrivateDir {
    dir: tempfile::TempDir,
}

impl PrivateDir {
    pub fn new() -> Result<PrivateDir, RenderError> {
        let dir = tempfile::Builder::new()
            .prefix("capstan-render-")
            .tempdir()
            .map_err(|e| RenderError::Io(format!("cannot create a private work directory: {}", e.kind())))?;
        for sub in ["home", "tmp", "work"] {
            std::fs::create_dir(dir.path().join(sub))
                .map_err(|e| RenderError::Io(format!("cannot create a private work directory: {}", e.kind())))?;
        }
        Ok(PrivateDir { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Where the tool may write (values files, the Kustomize working copy).
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The minimal environment for a tool run from this directory.
    pub fn env(&self, binaries: &Binaries) -> Vec<(OsString, OsString)> {
        minimal_env(self.path(), binaries.path_env.as_deref())
    }
}

/// The whole environment a tool gets. Pure.
pub fn minimal_env(private: &Path, path_env: Option<&str>) -> Vec<(OsString, OsString)> {
    let path = path_env
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let home = private.join("home");
    let tmp = private.join("tmp");
    let mut env: Vec<(OsString, OsString)> = vec![("PATH".into(), path), ("LANG".into(), "C.UTF-8".into())];
    let dirs: [(&str, PathBuf); 9] = [
        ("HOME", home.clone()),
        ("TMPDIR", tmp),
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("HELM_CONFIG_HOME", home.join("helm/config")),
        ("HELM_CACHE_HOME", home.join("helm/cache")),
        ("HELM_DATA_HOME", home.join("helm/data")),
        // A kubeconfig that does not exist: tools must never reach a cluster.
        ("KUBECONFIG", home.join("no-kubeconfig")),
    ];
    env.extend(dirs.into_iter().map(|(k, v)| (OsString::from(k), v.into_os_string())));
    for (k, v) in [
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ] {
        env.push((k.into(), v.into()));
    }
    env
}

/// Kills a process group when dropped unless disarmed; covers cancellation of the render future.
struct GroupKiller {
    pgid: Option<i32>,
}

impl GroupKiller {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) with a negative pid signals the process group we created for the
            // child (`process_group(0)`); the leader is not yet reaped, so the id is still ours.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `spec` to completion, or kills its process group on timeout or oversized output.
pub async fn run(spec: &ProcessSpec) -> Result<ProcessOutput, ProcessError> {
    let mut command = tokio::process::Command::new(&spec.program);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = command.spawn().map_err(|e| ProcessError::Spawn(e.kind()))?;
    let mut killer = GroupKiller {
        pgid: child.id().and_then(|id| i32::try_from(id).ok()),
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ProcessError::Spawn(std::io::ErrorKind::BrokenPipe));
    };
    let max = spec.max_stdout_bytes;
    let work = async {
        let (out, err) = tokio::try_join!(read_capped(stdout, max), read_truncated(stderr, MAX_STDERR_BYTES))?;
        let status = child.wait().await.map_err(|e| ProcessError::Spawn(e.kind()))?;
        Ok::<_, ProcessError>((out, err, status))
    };
    let result = tokio::time::timeout(spec.timeout, work).await;
    match result {
        Err(_) => {
            killer.kill();
            let _ = child.wait().await;
            Err(ProcessError::Timeout(spec.timeout))
        }
        Ok(Err(e)) => {
            killer.kill();
            let _ = child.wait().await;
            Err(e)
        }
        Ok(Ok((stdout, stderr, status))) => {
            // The leader has been reaped: its id may be reused, so never signal it again.
            killer.pgid = None;
            if status.success() {
                Ok(ProcessOutput { stdout, stderr })
            } else {
                Err(ProcessError::Failed {
                    code: status.code(),
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                })
            }
        }
    }
}

/// Reads all of `reader`, failing as soon as more than `max` bytes arrive.
async fn read_capped(reader: impl AsyncRead + Unpin, max: u64) -> Result<Vec<u8>, ProcessError> {
    let mut buf = Vec::new();
    reader
        .take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .await
        .map_err(|e| ProcessError::Spawn(e.kind()))?;
    if buf.len() as u64 > max {
        return Err(ProcessError::OutputTooLarge(max));
    }
    Ok(buf)
}

/// Reads all of `reader`, keeping the first `max` bytes (draining the rest so the child never
/// blocks on a full pipe).
async fn read_truncated(mut reader: impl AsyncRead + Unpin, max: usize) -> Result<Vec<u8>, ProcessError> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = reader
            .read(&mut chunk)
            .await
            .map_err(|e| ProcessError::Spawn(e.kind()))?;
        if n == 0 {
            return Ok(kept);
        }
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
}

/// Replaces private absolute paths in tool messages with short placeholders, so status
/// conditions never show server paths. Pure.
pub fn scrub(message: &str, replacements: &[(&Path, &str)]) -> String {
    let mut out = message.to_string();
    for (path, placeholder) in replacements {
        if let Some(p) = path.to_str().filter(|p| p.len() > 1) {
            out = out.replace(p, placeholder);
        }
    }
    out
}

/// Maps a process failure onto a render error for `tool`.
pub fn to_render_error(tool: &str, err: ProcessError, replacements: &[(&Path, &str)]) -> RenderError {
    match err {
        ProcessError::Spawn(kind) => RenderError::ToolFailed(format!("{tool} could not be started: {kind}")),
        ProcessError::Timeout(d) => {
            RenderError::Timeout(format!("{tool} did not finish within {}s and was killed", d.as_secs()))
        }
        ProcessError::OutputTooLarge(max) => RenderError::LimitExceeded(format!("{tool} output exceeded {max} bytes")),
        ProcessError::Failed { code, stderr } => {
            let text = scrub(stderr.trim(), replacements);
            let code = code.map_or_else(|| "a signal".to_string(), |c| format!("exit code {c}"));
            RenderError::ToolFailed(format!(
                "{tool} failed with {code}: {}",
                crate::text::truncate(&text, MAX_ERROR_MESSAGE)
            ))
        }
    }
}

/// Runs `program args` and returns a one-line version string (for cache keys and status).
pub async fn probe_version(
    program: &Path,
    args: &[String],
    binaries: &Binaries,
    limits: &Limits,
) -> Result<String, RenderError> {
    let private = PrivateDir::new()?;
    let spec = ProcessSpec {
        program: program.to_path_buf(),
        args: args.iter().map(OsString::from).collect(),
        cwd: private.work(),
        env: private.env(binaries),
        timeout: limits.timeout.min(Duration::from_secs(30)),
        max_stdout_bytes: 64 * 1024,
    };
    let name = program
        .file_name()
        .map_or_else(|| "tool".to_string(), |n| n.to_string_lossy().into_owned());
    let out = run(&spec)
        .await
        .map_err(|e| to_render_error(&name, e, &[(private.path(), "<tmp>")]))?;
    Ok(version_line(&String::from_utf8_lossy(&out.stdout)))
}

/// Picks the interesting line of a `version` command's output. Pure.
pub fn version_line(output: &str) -> String {
    let line = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("Kustomize Version:").map(str::trim))
        .or_else(|| output.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("unknown");
    crate::text::truncate(line, 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn spec(program: PathBuf, private: &PrivateDir, timeout: Duration) -> ProcessSpec {
        ProcessSpec {
            program,
            args: vec![],
            cwd: private.work(),
            env: private.env(&Binaries::default()),
            timeout,
            max_stdout_bytes: 1 << 20,
        }
    }

    #[tokio::test]
    async fn sleeping_tool_and_its_children_are_killed_at_the_timeout() {
        let bin = tempfile::tempdir().unwrap();
        let marker = bin.path().join("survived");
        let body = format!("(sleep 3; touch {}) &\nsleep 30", marker.display());
        let program = script(bin.path(), "slow", &body);
        let private = PrivateDir::new().unwrap();
        let started = Instant::now();
        let err = run(&spec(program, &private, Duration::from_millis(500)))
            .await
            .unwrap_err();
        assert_eq!(err, ProcessError::Timeout(Duration::from_millis(500)));
        // The tool sleeps 30 s: anything well below that proves it was killed.
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!marker.exists(), "the background child must die with the group");
    }

    #[tokio::test]
    async fn environment_is_minimal() {
        let bin = tempfile::tempdir().unwrap();
        let program = script(bin.path(), "env", "env");
        let private = PrivateDir::new().unwrap();
        let out = run(&spec(program, &private, Duration::from_secs(10))).await.unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let given: Vec<String> = private
            .env(&Binaries::default())
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect();
        // Nothing of the operator's own environment (cargo sets plenty for tests) is inherited,
        // except what the shell adds itself.
        for (name, _) in std::env::vars() {
            if !given.contains(&name) && !["PWD", "SHLVL", "_", "OLDPWD"].contains(&name.as_str()) {
                assert!(
                    !text.lines().any(|l| l.starts_with(&format!("{name}="))),
                    "{name} leaked"
                );
            }
        }
        assert!(text.contains(&format!("HOME={}", private.path().join("home").display())));
    }

    #[tokio::test]
    async fn output_is_capped_and_failures_report_stderr() {
        let bin = tempfile::tempdir().unwrap();
        let private = PrivateDir::new().unwrap();
        let mut big = spec(
            script(bin.path(), "big", "yes aaaaaaaaaaaaaaaa"),
            &private,
            Duration::from_secs(10),
        );
        big.max_stdout_bytes = 1000;
        assert_eq!(run(&big).await.unwrap_err(), ProcessError::OutputTooLarge(1000));
        let failing = spec(
            script(bin.path(), "fail", "echo \"boom in $HOME\" >&2; exit 3"),
            &private,
            Duration::from_secs(10),
        );
        let err = run(&failing).await.unwrap_err();
        let rendered = to_render_error("tool", err, &[(private.path(), "<tmp>")]);
        assert_eq!(rendered.category(), crate::render::ErrorCategory::ToolFailed);
        assert_eq!(rendered.to_string(), "tool failed with exit code 3: boom in <tmp>/home");
    }

    #[tokio::test]
    async fn arguments_are_not_interpreted_by_a_shell() {
        let bin = tempfile::tempdir().unwrap();
        let private = PrivateDir::new().unwrap();
        let mut echo = spec(
            script(bin.path(), "echo", "printf '%s\\n' \"$@\""),
            &private,
            Duration::from_secs(10),
        );
        echo.args = vec!["$(touch pwned)".into(), "a;b".into()];
        let out = run(&echo).await.unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "$(touch pwned)\na;b\n");
        assert!(!private.work().join("pwned").exists());
    }

    #[test]
    fn version_lines() {
        assert_eq!(
            version_line("Client Version: v1.32.4\nKustomize Version: v5.5.0\n"),
            "v5.5.0"
        );
        assert_eq!(version_line("\nv4.2.3+g1\n"), "v4.2.3+g1");
    }
}
