//! kube-runtime watchers as a tape of short strings (`init`, `initapply:<name>`, `initdone`,
//! `apply:<name>`, `delete:<name>`, `error:<code>`), so tests can compare event sequences directly
//! and read them with deadlines.

use std::fmt::Debug;

use futures::{stream::BoxStream, StreamExt};
use kube::{runtime::watcher, Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::wait::{within, TIMEOUT};

/// The described events of one `kube::runtime::watcher`.
pub struct EventTape {
    events: BoxStream<'static, String>,
}

impl EventTape {
    /// Starts watching `api` with `config`.
    pub fn watch<K>(api: Api<K>, config: watcher::Config) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        Self {
            events: watcher(api, config).map(describe).boxed(),
        }
    }

    /// The next event, within [`TIMEOUT`]; `expecting` names it in the failure message.
    pub async fn next(&mut self, expecting: &str) -> String {
        within(format!("watch event {expecting}"), TIMEOUT, self.events.next())
            .await
            .unwrap_or_else(|| panic!("the watcher ended while expecting {expecting}"))
    }

    /// Reads events until one equals `expected`; returns all of them, `expected` last.
    pub async fn until(&mut self, expected: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let event = self.next(expected).await;
            seen.push(event.clone());
            if event == expected {
                return seen;
            }
        }
    }
}

/// One watcher event as a short string.
pub fn describe<K: Resource>(event: Result<watcher::Event<K>, watcher::Error>) -> String {
    match event {
        Ok(watcher::Event::Init) => "init".into(),
        Ok(watcher::Event::InitApply(o)) => format!("initapply:{}", o.name_any()),
        Ok(watcher::Event::InitDone) => "initdone".into(),
        Ok(watcher::Event::Apply(o)) => format!("apply:{}", o.name_any()),
        Ok(watcher::Event::Delete(o)) => format!("delete:{}", o.name_any()),
        Err(watcher::Error::WatchError(status)) => format!("error:{}", status.code),
        Err(other) => format!("error:{other}"),
    }
}
