//! Writing to a repository (used by `capstan bootstrap`, never by the operator): fetch one branch
//! into a private repository, commit a set of files on top of it only when the tree changes, push
//! the commit. The network goes through the same session as every fetch (credentials of every
//! kind, host keys, deadlines, sanitised errors), so what the operator can read, bootstrap can
//! write with the same flags.
//!
//! Over HTTP(S) the push goes through the project's own smart-HTTP transport (`source::http`),
//! which sends `git-receive-pack` only for a session that asked for it ([`Writer::push`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use git2::{Oid, PushOptions, Repository, Signature};

use super::credentials::Credentials;
use super::git::{GitConfig, Session};
use super::url::RepoUrl;
use super::SourceError;

/// A private repository holding one fetched branch, for writing.
pub struct Writer {
    repo: Repository,
    url: RepoUrl,
    creds: Credentials,
    config: GitConfig,
    branch: String,
    tip: Option<Oid>,
}

/// The outcome of a push.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// The branch now points at the commit.
    Done,
    /// The server refused an update that is not a fast-forward (someone pushed meanwhile).
    NotFastForward,
}

fn internal(what: &str) -> impl Fn(git2::Error) -> SourceError + '_ {
    move |e| SourceError::Internal(format!("{what}: {}", e.message()))
}

impl Writer {
    /// Fetches `branch` of `url` into a new repository in `dir` (an empty repository or a missing
    /// branch is fine: the first commit creates it).
    pub fn open(
        dir: &Path,
        url: RepoUrl,
        creds: Credentials,
        config: GitConfig,
        branch: &str,
    ) -> Result<Writer, SourceError> {
        super::http::register();
        let repo = Repository::init_bare(dir).map_err(internal("creating the work repository"))?;
        let mut writer = Writer {
            repo,
            url,
            creds,
            config,
            branch: branch.to_string(),
            tip: None,
        };
        writer.fetch()?;
        Ok(writer)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.config.total_timeout
    }

    fn local_ref(&self) -> String {
        format!("refs/remotes/origin/{}", self.branch)
    }

    /// Fetches the branch again (after a refused push); the tip is `None` when it does not exist.
    pub fn fetch(&mut self) -> Result<(), SourceError> {
        let session = Session::new(&self.url, &self.creds, &self.config, self.deadline())?;
        let wrap = |e: git2::Error| session.map_error(&e);
        let mut remote = self.repo.remote_anonymous(self.url.as_git_url()).map_err(wrap)?;
        let mut fo = git2::FetchOptions::new();
        fo.remote_callbacks(session.callbacks());
        remote
            .connect_auth(git2::Direction::Fetch, Some(session.callbacks()), None)
            .map_err(wrap)?;
        let wanted = format!("refs/heads/{}", self.branch);
        let exists = remote.list().map_err(wrap)?.iter().any(|h| h.name() == wanted);
        let _ = remote.disconnect();
        self.tip = None;
        if !exists {
            return Ok(());
        }
        let spec = format!("+{wanted}:{}", self.local_ref());
        remote.fetch(&[spec.as_str()], Some(&mut fo), None).map_err(wrap)?;
        self.tip = Some(
            self.repo
                .refname_to_id(&self.local_ref())
                .map_err(internal("reading the fetched branch"))?,
        );
        Ok(())
    }

    /// The branch's commit, `None` for a missing branch.
    pub fn tip(&self) -> Option<String> {
        self.tip.map(|o| o.to_string())
    }

    /// The content of `path` at the branch's tip.
    pub fn read(&self, path: &str) -> Option<String> {
        let commit = self.repo.find_commit(self.tip?).ok()?;
        let entry = commit.tree().ok()?.get_path(Path::new(path)).ok()?;
        let blob = self.repo.find_blob(entry.id()).ok()?;
        String::from_utf8(blob.content().to_vec()).ok()
    }

    /// Commits `files` (path → content, other files untouched) on top of the tip; `None` when the
    /// tree would not change.
    pub fn commit(
        &self,
        files: &BTreeMap<String, String>,
        message: &str,
        author: (&str, &str),
    ) -> Result<Option<Oid>, SourceError> {
        let mut index = self.repo.index().map_err(internal("opening the index"))?;
        index.clear().map_err(internal("clearing the index"))?;
        let parent = match self.tip {
            Some(oid) => Some(self.repo.find_commit(oid).map_err(internal("reading the tip"))?),
            None => None,
        };
        if let Some(p) = &parent {
            index
                .read_tree(&p.tree().map_err(internal("reading the tree"))?)
                .map_err(internal("reading the tree"))?;
        }
        for (path, content) in files {
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: content.len() as u32,
                id: Oid::ZERO_SHA1,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index
                .add_frombuffer(&entry, content.as_bytes())
                .map_err(internal("staging a file"))?;
        }
        let tree_id = index.write_tree_to(&self.repo).map_err(internal("writing the tree"))?;
        if parent.as_ref().is_some_and(|p| p.tree_id() == tree_id) {
            return Ok(None);
        }
        let tree = self.repo.find_tree(tree_id).map_err(internal("reading the new tree"))?;
        let sig = Signature::now(author.0, author.1)
            .map_err(|e| SourceError::InvalidInput(format!("author: {}", e.message())))?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(None, &sig, &sig, message, &tree, &parents)
            .map_err(internal("committing"))?;
        Ok(Some(oid))
    }

    /// Pushes `commit` to the branch (never forced).
    pub fn push(&self, commit: Oid) -> Result<Pushed, SourceError> {
        let session = Session::new(&self.url, &self.creds, &self.config, self.deadline())?;
        session.allow_push();
        let wrap = |e: git2::Error| session.map_error(&e);
        let mut remote = self.repo.remote_anonymous(self.url.as_git_url()).map_err(wrap)?;
        let rejected = std::cell::RefCell::new(None::<String>);
        let mut callbacks = session.callbacks();
        callbacks.push_update_reference(|_, status| {
            if let Some(s) = status {
                *rejected.borrow_mut() = Some(s.to_string());
            }
            Ok(())
        });
        let mut po = PushOptions::new();
        po.remote_callbacks(callbacks);
        let refname = format!("refs/capstan/push/{}", self.branch);
        self.repo
            .reference(&refname, commit, true, "push")
            .map_err(internal("preparing the push"))?;
        let spec = format!("{refname}:refs/heads/{}", self.branch);
        let pushed = remote.push(&[spec.as_str()], Some(&mut po));
        drop(po);
        match pushed {
            Err(e) if e.code() == git2::ErrorCode::NotFastForward => return Ok(Pushed::NotFastForward),
            Err(e) => return Err(wrap(e)),
            Ok(()) => {}
        }
        match rejected.into_inner() {
            None => Ok(Pushed::Done),
            Some(s) if s.contains("fast-forward") || s.contains("fetch first") => Ok(Pushed::NotFastForward),
            Some(s) => Err(SourceError::Internal(format!("{}: push refused: {s}", self.url))),
        }
    }
}

#[cfg(all(test, feature = "testsupport"))]
mod tests {
    use super::*;
    use crate::source::testsupport::Fixture;

    fn files(v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("a/b.yaml".to_string(), format!("v: {v}\n"))])
    }

    #[test]
    fn commits_only_on_change_pushes_and_detects_a_race() {
        let fx = Fixture::new();
        let url = RepoUrl::parse(&fx.file_url()).expect("url");
        let open = |d: &Path| {
            Writer::open(d, url.clone(), Credentials::default(), GitConfig::default(), "fleet").expect("opens")
        };
        let (one, two) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
        let w = open(one.path());
        assert_eq!(w.tip(), None, "a missing branch");
        let c1 = w
            .commit(&files("1"), "first", ("Bot", "bot@example.com"))
            .expect("commits")
            .expect("a change");
        assert_eq!(w.push(c1).expect("pushes"), Pushed::Done);

        let mut late = open(two.path());
        assert_eq!(late.tip(), Some(c1.to_string()));
        assert_eq!(late.read("a/b.yaml").as_deref(), Some("v: 1\n"));
        assert_eq!(
            late.commit(&files("1"), "again", ("Bot", "bot@example.com"))
                .expect("commits"),
            None
        );

        let three = tempfile::tempdir().expect("tmp");
        let mut w = open(three.path());
        let c2 = w
            .commit(&files("2"), "second", ("Bot", "bot@example.com"))
            .expect("commits")
            .expect("a change");
        assert_eq!(w.push(c2).expect("pushes"), Pushed::Done);
        let c3 = late
            .commit(&files("3"), "racing", ("Bot", "bot@example.com"))
            .expect("commits")
            .expect("a change");
        assert_eq!(late.push(c3).expect("answers"), Pushed::NotFastForward);
        late.fetch().expect("fetches");
        let c3 = late
            .commit(&files("3"), "redone", ("Bot", "bot@example.com"))
            .expect("commits")
            .expect("a change");
        assert_eq!(late.push(c3).expect("pushes"), Pushed::Done);
        w.fetch().expect("fetches");
        assert_eq!(w.read("a/b.yaml").as_deref(), Some("v: 3\n"));
    }

    /// Pushes over smart HTTP(S) with every HTTP credential kind, refuses a wrong password without
    /// naming it, and a session that did not ask to push cannot.
    #[test]
    fn pushes_over_https_and_http_with_basic_auth_and_bearer_tokens() {
        use crate::source::testsupport::{self as ts, HttpAuth};
        let fx = Fixture::new();
        let pki = ts::test_pki("capstan-push-ca");
        let basic = Credentials {
            username: Some("alice".into()),
            password: Some("PUSH-CANARY-pw".into()),
            ca_cert: Some(pki.ca_pem.clone()),
            ..Credentials::default()
        };
        let bearer = Credentials {
            bearer_token: Some("PUSH-CANARY-token".into()),
            ..Credentials::default()
        };
        let https = ts::https_server(&fx.base, HttpAuth::Basic("alice", "PUSH-CANARY-pw"), &pki);
        let http = ts::http_server(&fx.base, HttpAuth::Bearer("PUSH-CANARY-token"));
        let cases = [
            (format!("https://127.0.0.1:{}/repo.git", https.port), basic.clone(), "1"),
            (format!("http://127.0.0.1:{}/repo.git", http.port), bearer, "2"),
        ];
        for (url, creds, v) in cases {
            let url = RepoUrl::parse(&url).expect("url");
            let dir = tempfile::tempdir().expect("tmp");
            let w = Writer::open(dir.path(), url, creds, GitConfig::default(), "main").expect("opens");
            let c = w
                .commit(&files(v), "over http", ("Bot", "bot@example.com"))
                .expect("commits")
                .expect("a change");
            assert_eq!(w.push(c).expect("pushes"), Pushed::Done);
            assert_eq!(fx.repo().refname_to_id("refs/heads/main").expect("main"), c);
        }

        let url = RepoUrl::parse(&format!("https://127.0.0.1:{}/repo.git", https.port)).expect("url");
        let wrong = Credentials {
            password: Some("PUSH-CANARY-wrong".into()),
            ..basic
        };
        let dir = tempfile::tempdir().expect("tmp");
        let err = Writer::open(dir.path(), url.clone(), wrong, GitConfig::default(), "main")
            .err()
            .expect("a wrong password is refused");
        assert_eq!(err.category(), "AuthenticationFailed", "{err}");
        assert!(!err.to_string().contains("CANARY"), "{err}");
    }

    /// The transport refuses receive-pack to a session that did not allow pushing: the operator's
    /// fetches share it and must never write.
    #[test]
    fn a_fetch_session_cannot_push_over_http() {
        use crate::source::testsupport::{self as ts, HttpAuth};
        let fx = Fixture::new();
        let server = ts::http_server(&fx.base, HttpAuth::Bearer("tok"));
        let url = RepoUrl::parse(&format!("http://127.0.0.1:{}/repo.git", server.port)).expect("url");
        let creds = Credentials {
            bearer_token: Some("tok".into()),
            ..Credentials::default()
        };
        let dir = tempfile::tempdir().expect("tmp");
        let w = Writer::open(dir.path(), url.clone(), creds.clone(), GitConfig::default(), "main").expect("opens");
        let c = w
            .commit(&files("x"), "sneaky", ("Bot", "bot@example.com"))
            .expect("commits")
            .expect("a change");
        w.repo.reference("refs/capstan/sneaky", c, true, "test").expect("ref");
        let config = GitConfig::default();
        let session = Session::new(&url, &creds, &config, Instant::now() + config.total_timeout).expect("session");
        let mut remote = w.repo.remote_anonymous(url.as_git_url()).expect("remote");
        let mut po = PushOptions::new();
        po.remote_callbacks(session.callbacks());
        let err = remote
            .push(&["refs/capstan/sneaky:refs/heads/main"], Some(&mut po))
            .expect_err("refused");
        assert!(err.message().contains("only reads"), "{}", err.message());
        assert_eq!(fx.repo().refname_to_id("refs/heads/main").expect("main"), fx.c2);
    }
}
