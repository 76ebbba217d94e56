//! I/O: the watches that feed the reporter.
//!
//! - [`objects`]: one watcher per kind (the five Capstan kinds, and core/v1 Events whose
//!   `involvedObject` is a `capstan.dev` kind), across namespaces. Each object is projected at once and
//!   only the projection is kept; a relist forgets what it no longer lists (tombstones).
//! - [`settings`]: ConfigMap and Secret `capstan-reporter` in the operator namespace (by name), turned
//!   into the [`Endpoint`] in force on every change — a new token is used by the next request.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use tokio::sync::watch as channel;

use super::client::Client as HttpClient;
use super::config::{ConfigError, Credentials, Settings, SETTINGS_NAME};
use super::project::{is_capstan_event, Kind, CAPSTAN_API_VERSION};
use super::{Endpoint, Shared};
use crate::controllers::{lock, Shutdown};

fn api_resource(kind: Kind) -> ApiResource {
    if kind == Kind::Event {
        return ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events");
    }
    let (group, version) = CAPSTAN_API_VERSION.split_once('/').unwrap_or_default();
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind.as_str()), kind.plural())
}

/// Watches `kind` in every namespace until `shutdown`.
pub async fn objects(client: Client, kind: Kind, shared: Arc<Shared>, shutdown: Shutdown) {
    let ar = api_resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let mut config = watcher::Config::default();
    if kind == Kind::Event {
        config = config.fields(&format!("involvedObject.apiVersion={CAPSTAN_API_VERSION}"));
    }
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listed: HashSet<String> = HashSet::new();
    loop {
        let event = tokio::select! {
            _ = shutdown.wait() => return,
            e = stream.next() => match e { Some(e) => e, None => return },
        };
        match event {
            Ok(Event::Apply(obj)) => observe(&shared, kind, &obj),
            Ok(Event::Delete(obj)) => {
                if let Some(uid) = obj.uid() {
                    shared.forget(&uid);
                }
            }
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(obj)) => {
                if let Some(uid) = obj.uid() {
                    listed.insert(uid);
                }
                observe(&shared, kind, &obj);
            }
            Ok(Event::InitDone) => {
                let gone: Vec<String> = {
                    let cache = lock(&shared.cache);
                    cache
                        .uids_of(kind)
                        .into_iter()
                        .filter(|u| !listed.contains(u))
                        .collect()
                };
                for uid in gone {
                    shared.forget(&uid);
                }
                listed = HashSet::new();
                lock(&shared.synced).insert(kind);
            }
            Err(e) => tracing::warn!(kind = kind.as_str(), "reporter watch failed (retrying): {e}"),
        }
    }
}

fn observe(shared: &Shared, kind: Kind, obj: &DynamicObject) {
    let Ok(value) = serde_json::to_value(obj) else { return };
    if kind == Kind::Event && !is_capstan_event(&value) {
        return;
    }
    shared.observe(kind, &value);
}

/// Watches ConfigMap and Secret `capstan-reporter` and publishes the endpoint they make.
pub async fn settings(
    client: Client,
    namespace: String,
    endpoint: channel::Sender<Option<Arc<Endpoint>>>,
    shared: Arc<Shared>,
    shutdown: Shutdown,
) {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={SETTINGS_NAME}"));
    let maps = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), &namespace),
        by_name.clone(),
    )
    .default_backoff()
    .touched_objects()
    .map(|r| r.map(|cm| Source::Map(cm.data.unwrap_or_default())));
    let secrets = watcher(Api::<Secret>::namespaced(client, &namespace), by_name)
        .default_backoff()
        .touched_objects()
        .map(|r| r.map(|s| Source::Secret(decode(s))));
    let merged = futures::stream::select(maps, secrets);
    futures::pin_mut!(merged);
    let mut state = SettingsState::default();
    loop {
        let next = tokio::select! {
            _ = shutdown.wait() => return,
            n = merged.next() => match n { Some(n) => n, None => return },
        };
        match next {
            Ok(Source::Map(data)) => state.map = Some(data),
            Ok(Source::Secret(data)) => state.secret = Some(data),
            Err(e) => {
                tracing::warn!("watching ConfigMap/Secret {SETTINGS_NAME} failed (retrying): {e}");
                continue;
            }
        }
        let built = state.build();
        match built {
            Ok(Some(e)) => {
                if e.settings.insecure_skip_tls_verify {
                    tracing::warn!(
                        "insecureSkipTLSVerify is on: the receiver's TLS certificate is NOT verified; anyone on \
                         the path can read the token and the reports"
                    );
                }
                tracing::info!(
                    url = e.settings.url,
                    agent = e.settings.agent_id,
                    "reporter configuration loaded"
                );
                endpoint.send_replace(Some(Arc::new(e)));
            }
            Ok(None) => {}
            Err(e) => {
                let message = format!("reporter configuration unusable: {e}");
                tracing::error!("{message}");
                lock(&shared.gate).last_error = Some(message);
                endpoint.send_replace(None);
            }
        }
    }
}

enum Source {
    Map(BTreeMap<String, String>),
    Secret(BTreeMap<String, Vec<u8>>),
}

fn decode(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        out.insert(k, v.into_bytes());
    }
    out
}

#[derive(Default)]
struct SettingsState {
    map: Option<BTreeMap<String, String>>,
    secret: Option<BTreeMap<String, Vec<u8>>>,
    last: Option<(Settings, Credentials)>,
    generation: u64,
}

impl SettingsState {
    /// The endpoint, if both objects are there and something changed.
    fn build(&mut self) -> Result<Option<Endpoint>, ConfigError> {
        let (Some(map), Some(secret)) = (&self.map, &self.secret) else {
            return Ok(None);
        };
        let settings = Settings::parse(map)?;
        let creds = Credentials::parse(secret)?;
        if self.last.as_ref() == Some(&(settings.clone(), creds.clone())) {
            return Ok(None);
        }
        if self.last.as_ref().is_none_or(|(_, old)| *old != creds) {
            self.generation += 1;
        }
        let client = HttpClient::new(&settings, &creds).map_err(ConfigError::Invalid)?;
        self.last = Some((settings.clone(), creds));
        Ok(Some(Endpoint {
            settings,
            client: Arc::new(client),
            credentials_generation: self.generation,
        }))
    }
}
