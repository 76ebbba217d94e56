//! Destination → cluster connection.
//!
//! The operator's own cluster (`https://kubernetes.default.svc` or name `in-cluster`) uses the operator's
//! configuration and needs no Cluster object. Any other destination names a Cluster object, found in the
//! Application's namespace first and then in the operator namespace (a Cluster in the operator namespace is
//! shared with everyone, one elsewhere only with Applications of its own namespace; docs/user-guide.md). Its Secret
//! (in the Cluster's namespace) holds either `kubeconfig`, or `bearerToken` + `caCert` (+
//! `insecureSkipTLSVerify`). The address is always the Cluster's `spec.server`.
//!
//! A kubeconfig from a Secret is tenant input: `exec` and `auth-provider` users are refused (no process is
//! ever spawned from a kubeconfig, CVE-2022-24817), and so are file references (`tokenFile`,
//! `client-certificate`, `client-key`, `certificate-authority`), which would read the operator's own files
//! — its service-account token among them — and send them to a server the tenant chose.
//!
//! Connections ([`ClusterHandle`]: clients, discovery, live cache) are cached per Cluster and rebuilt when
//! the Cluster's uid, `spec.server`, Secret name or Secret `resourceVersion` changes, so rotated credentials
//! take effect on the next resolve. Every client has connect/read/write timeouts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::{json, Value};

use super::discovery::DiscoveryCache;
use super::live::LiveCache;
use super::openapi::SchemaCache;
use super::requests::{KubeRequestLayer, WriteScope};
use super::scope::WatchScope;
use super::{ClusterError, IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use crate::api::application::ApplicationDestination;
use crate::api::tenancy::source_namespace_allowed;
use crate::api::Cluster;

/// Secret key holding a kubeconfig.
pub const SECRET_KUBECONFIG: &str = "kubeconfig";
/// Secret key holding a bearer token.
pub const SECRET_BEARER_TOKEN: &str = "bearerToken";
/// Secret key holding the CA bundle (PEM) that signs the API server's certificate.
pub const SECRET_CA_CERT: &str = "caCert";
/// Secret key that, when `"true"`, turns TLS verification off.
pub const SECRET_INSECURE: &str = "insecureSkipTLSVerify";

/// Largest kubeconfig accepted from a Secret; real ones are a few KiB.
const MAX_KUBECONFIG_BYTES: usize = 256 * 1024;

/// Timeouts of every client built here.
#[derive(Clone, Copy, Debug)]
pub struct ClusterTimeouts {
    /// TCP + TLS connect.
    pub connect: Duration,
    /// Longest silence while reading a response (request clients; watch clients use a longer one).
    pub read: Duration,
    /// Longest time to send a request.
    pub write: Duration,
    /// Deadline of one whole call (apply, get, delete, ...).
    pub call: Duration,
}

impl Default for ClusterTimeouts {
    fn default() -> Self {
        ClusterTimeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(30),
            write: Duration::from_secs(30),
            call: Duration::from_secs(60),
        }
    }
}

/// One cluster's connection: a request client (short read timeout), a watch client (a read timeout longer
/// than any healthy quiet watch), discovery and the live cache.
///
/// A handle may also be an *impersonating* one ([`ClusterHandle::impersonating`]): its request client sends
/// `Impersonate-User: system:serviceaccount:<ns>:<name>` (and never a group header), while discovery and the
/// live cache stay the operator's own (reads for diff and health must see everything the operator manages).
pub struct ClusterHandle {
    name: String,
    server: String,
    client: Client,
    /// The operator's own request client (the same as `client` unless impersonating), for reads.
    reader: Client,
    discovery: Arc<DiscoveryCache>,
    schemas: Arc<SchemaCache>,
    live: LiveCache,
    timeouts: ClusterTimeouts,
    /// The configuration the request client was built from, for impersonating clients.
    config: Config,
    counter: Option<KubeRequestLayer>,
    /// `Some(user)` for an impersonating handle.
    identity: Option<String>,
    /// Impersonating handles by user name, bounded (see [`MAX_IMPERSONATED`]).
    impersonated: std::sync::Mutex<ImpersonatedCache>,
}

/// Most impersonating clients kept per cluster; beyond it the oldest is dropped (and rebuilt on its next
/// use), so a namespace churn of ServiceAccounts cannot grow memory without bound.
pub const MAX_IMPERSONATED: usize = 256;

/// Insertion-ordered, bounded map of impersonating handles.
#[derive(Default)]
struct ImpersonatedCache {
    handles: HashMap<String, Arc<ClusterHandle>>,
    order: std::collections::VecDeque<String>,
}

impl ImpersonatedCache {
    fn get(&self, user: &str) -> Option<Arc<ClusterHandle>> {
        self.handles.get(user).cloned()
    }

    fn insert(&mut self, user: String, handle: Arc<ClusterHandle>) {
        if self.handles.insert(user.clone(), handle).is_none() {
            self.order.push_back(user);
        }
        while self.order.len() > MAX_IMPERSONATED {
            if let Some(old) = self.order.pop_front() {
                self.handles.remove(&old);
            }
        }
    }
}

/// The Kubernetes user name of a ServiceAccount.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// `config` acting as `user`: any `as`, `as-groups`, `as-uid` or `as-user-extra` of a Cluster's kubeconfig is
/// overwritten, so the API server authorizes exactly that ServiceAccount (and its own groups) and nothing the
/// kubeconfig's author added.
pub fn impersonating_config(mut config: Config, user: &str) -> Config {
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = None;
    config.auth_info.impersonate_uid = None;
    config.auth_info.impersonate_user_extra = None;
    config
}

/// Name and server only: a handle's clients hold credentials.
impl std::fmt::Debug for ClusterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterHandle")
            .field("name", &self.name)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl ClusterHandle {
    /// A handle from a client configuration; `name` and `server` are for messages and status. With a
    /// `requests` layer, every request of the handle (watches and discovery too) is counted there and
    /// passes its write fence.
    pub fn from_config(
        name: &str,
        server: &str,
        config: Config,
        timeouts: ClusterTimeouts,
        counter: Option<&KubeRequestLayer>,
    ) -> Result<Arc<ClusterHandle>, ClusterError> {
        Self::from_config_in(name, server, config, timeouts, counter, WatchScope::Cluster)
    }

    /// As [`ClusterHandle::from_config`], the live cache watching only where `scope` says.
    pub fn from_config_in(
        name: &str,
        server: &str,
        config: Config,
        timeouts: ClusterTimeouts,
        counter: Option<&KubeRequestLayer>,
        scope: WatchScope,
    ) -> Result<Arc<ClusterHandle>, ClusterError> {
        let client = build_client(request_config(config.clone(), &timeouts), name, counter)?;
        let watch_client = build_client(watch_config(config.clone(), &timeouts), name, counter)?;
        let discovery = Arc::new(DiscoveryCache::new(client.clone()));
        let schemas = Arc::new(SchemaCache::new(client.clone()));
        let live = LiveCache::scoped(watch_client, discovery.clone(), scope);
        Ok(Arc::new(ClusterHandle {
            name: name.to_string(),
            server: server.to_string(),
            reader: client.clone(),
            client,
            discovery,
            schemas,
            live,
            timeouts,
            config,
            counter: counter.cloned(),
            identity: None,
            impersonated: std::sync::Mutex::new(ImpersonatedCache::default()),
        }))
    }

    /// This cluster's handle acting as ServiceAccount `namespace/name`: its request client impersonates
    /// the ServiceAccount (every write made through it is authorized by the cluster's RBAC as that
    /// ServiceAccount); discovery and the live cache are this handle's. Cached per ServiceAccount, bounded.
    pub fn impersonating(&self, namespace: &str, name: &str) -> Result<Arc<ClusterHandle>, ClusterError> {
        let user = service_account_user(namespace, name);
        let mut cache = self.impersonated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = cache.get(&user) {
            return Ok(h);
        }
        let config = request_config(impersonating_config(self.config.clone(), &user), &self.timeouts);
        let client = build_client(config, &self.name, self.counter.as_ref())?;
        let handle = Arc::new(ClusterHandle {
            name: self.name.clone(),
            server: self.server.clone(),
            client,
            reader: self.reader.clone(),
            discovery: self.discovery.clone(),
            schemas: self.schemas.clone(),
            live: self.live.clone(),
            timeouts: self.timeouts,
            config: self.config.clone(),
            counter: self.counter.clone(),
            identity: Some(user.clone()),
            impersonated: std::sync::Mutex::new(ImpersonatedCache::default()),
        });
        cache.insert(user, handle.clone());
        Ok(handle)
    }

    /// The user this handle's request client impersonates; `None` for the operator's own identity.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// `in-cluster`, or `<namespace>/<name>` of the Cluster object.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The API server URL (the Cluster's `spec.server`, or `https://kubernetes.default.svc`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The request client (read timeout set).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The operator's own request client, also on an impersonating handle: for reads that decide how to
    /// validate or compare (as discovery and the live cache read), never for writes.
    pub fn reader(&self) -> &Client {
        &self.reader
    }

    pub fn discovery(&self) -> &Arc<DiscoveryCache> {
        &self.discovery
    }

    /// The cluster's published schemas (`/openapi/v3`), for client-side validation.
    pub fn schemas(&self) -> &Arc<SchemaCache> {
        &self.schemas
    }

    pub fn live(&self) -> &LiveCache {
        &self.live
    }

    pub fn timeouts(&self) -> ClusterTimeouts {
        self.timeouts
    }
}

/// A resolved destination: the connection, the Cluster's namespace allow-list, and which Cluster object.
#[derive(Clone, Debug)]
pub struct ResolvedDestination {
    pub cluster: Arc<ClusterHandle>,
    /// `spec.namespaces` of the Cluster, or the watched namespaces of a namespaced install for the
    /// operator's own cluster; empty allows all.
    pub allowed_namespaces: Vec<String>,
    /// `(namespace, name)` of the Cluster object; `None` for the operator's own cluster.
    pub cluster_ref: Option<(String, String)>,
}

impl ResolvedDestination {
    /// `NamespaceNotAllowed` unless `namespace` may be deployed to (see [`namespace_allowed`]).
    pub fn check_namespace(&self, namespace: &str) -> Result<(), ClusterError> {
        if namespace_allowed(&self.allowed_namespaces, namespace) {
            return Ok(());
        }
        if self.cluster_ref.is_none() {
            // The operator's own cluster with a list: a namespaced install, whose RBAC and watches end
            // at its namespaces, so anything else would be a request it is forbidden to make.
            let what = if namespace.is_empty() {
                "cluster-scoped objects cannot be deployed".to_string()
            } else {
                format!("namespace {namespace:?} is not watched")
            };
            return Err(ClusterError::NamespaceNotAllowed(format!(
                "{what} by this namespaced installation (--watch-namespaces: {})",
                self.allowed_namespaces.join(", ")
            )));
        }
        let what = if namespace.is_empty() {
            "cluster-scoped objects are not allowed".to_string()
        } else {
            format!("namespace {namespace:?} is not in the allow-list")
        };
        Err(ClusterError::NamespaceNotAllowed(format!(
            "{what} of Cluster {}",
            self.cluster.name()
        )))
    }
}

/// The `spec.namespaces` rule: an empty list allows everything; otherwise the namespace must be listed, and
/// cluster-scoped objects (`namespace == ""`) are refused, since they would escape the list (as Argo CD does
/// for clusters with namespaces and no cluster resources).
pub fn namespace_allowed(allowed: &[String], namespace: &str) -> bool {
    allowed.is_empty() || (!namespace.is_empty() && allowed.iter().any(|n| n == namespace))
}

/// What a cached connection was built from; any change rebuilds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct BuildKey {
    cluster_uid: String,
    server: String,
    secret_name: Option<String>,
    secret_resource_version: Option<String>,
}

struct Cached {
    key: BuildKey,
    handle: Arc<ClusterHandle>,
}

/// Resolves Application destinations to cluster connections, caching them.
pub struct ClusterClients {
    local: Arc<ClusterHandle>,
    /// The watched namespaces of a namespaced install (empty: cluster-wide): the allow-list of the
    /// operator's own cluster.
    local_namespaces: Vec<String>,
    operator_namespace: String,
    timeouts: ClusterTimeouts,
    /// `capstan_kube_requests_total` and the write fence, for every handle built here.
    counter: Option<KubeRequestLayer>,
    cache: tokio::sync::Mutex<HashMap<(String, String), Cached>>,
}

impl ClusterClients {
    /// `local` configures the operator's own cluster (where Cluster objects and Secrets are read too).
    pub fn new(local: Config, operator_namespace: &str) -> Result<Self, ClusterError> {
        Self::with_timeouts(local, operator_namespace, ClusterTimeouts::default(), None)
    }

    /// As [`ClusterClients::new`], every request of every cluster going through `counter` (counted,
    /// and fenced when it carries a fence).
    pub fn counted(local: Config, operator_namespace: &str, counter: KubeRequestLayer) -> Result<Self, ClusterError> {
        Self::with_timeouts(local, operator_namespace, ClusterTimeouts::default(), Some(counter))
    }

    /// As [`ClusterClients::counted`] for an installation watching only where `scope` says: the operator's
    /// own cluster is watched there only, and Applications may deploy there only.
    pub fn counted_in(
        local: Config,
        operator_namespace: &str,
        counter: KubeRequestLayer,
        scope: WatchScope,
    ) -> Result<Self, ClusterError> {
        Self::build(
            local,
            operator_namespace,
            ClusterTimeouts::default(),
            Some(counter),
            scope,
        )
    }

    pub fn with_timeouts(
        local: Config,
        operator_namespace: &str,
        timeouts: ClusterTimeouts,
        counter: Option<KubeRequestLayer>,
    ) -> Result<Self, ClusterError> {
        Self::build(local, operator_namespace, timeouts, counter, WatchScope::Cluster)
    }

    fn build(
        local: Config,
        operator_namespace: &str,
        timeouts: ClusterTimeouts,
        counter: Option<KubeRequestLayer>,
        scope: WatchScope,
    ) -> Result<Self, ClusterError> {
        let local_namespaces = scope.namespaces().into_iter().flatten().cloned().collect();
        let local = ClusterHandle::from_config_in(
            IN_CLUSTER_NAME,
            IN_CLUSTER_SERVER,
            local,
            timeouts,
            scoped(counter.as_ref(), IN_CLUSTER_NAME).as_ref(),
            scope,
        )?;
        Ok(ClusterClients {
            local,
            local_namespaces,
            operator_namespace: operator_namespace.to_string(),
            timeouts,
            counter,
            cache: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The operator's own cluster.
    pub fn local(&self) -> &Arc<ClusterHandle> {
        &self.local
    }

    pub fn operator_namespace(&self) -> &str {
        &self.operator_namespace
    }

    /// Resolves an Application's destination (`server` or `name`, not both) for an Application in
    /// `app_namespace`.
    pub async fn resolve(
        &self,
        app_namespace: &str,
        destination: &ApplicationDestination,
    ) -> Result<ResolvedDestination, ClusterError> {
        let cluster = self.find_cluster(app_namespace, destination).await?;
        let Some(cluster) = cluster else {
            return Ok(ResolvedDestination {
                cluster: self.local.clone(),
                allowed_namespaces: self.local_namespaces.clone(),
                cluster_ref: None,
            });
        };
        let handle = self.connect(&cluster).await?;
        Ok(ResolvedDestination {
            cluster: handle,
            allowed_namespaces: cluster.spec.namespaces.clone(),
            cluster_ref: Some((cluster.namespace().unwrap_or_default(), cluster.name_any())),
        })
    }

    /// The connection for a Cluster object (the Cluster controller probes through this).
    pub async fn connect(&self, cluster: &Cluster) -> Result<Arc<ClusterHandle>, ClusterError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let name = cluster.name_any();
        let secret = self.read_secret(cluster).await?;
        let key = BuildKey {
            cluster_uid: cluster.uid().unwrap_or_default(),
            server: cluster.spec.server.clone(),
            secret_name: cluster.spec.secret_ref.as_ref().map(|r| r.name.clone()),
            secret_resource_version: secret.as_ref().and_then(|s| s.resource_version()),
        };
        let mut cache = self.cache.lock().await;
        let slot = (namespace.clone(), name.clone());
        if let Some(c) = cache.get(&slot) {
            if c.key == key {
                return Ok(c.handle.clone());
            }
        }
        let label = format!("{namespace}/{name}");
        let config = remote_config(&label, &cluster.spec.server, secret.as_ref()).await?;
        let handle = ClusterHandle::from_config(
            &label,
            &cluster.spec.server,
            config,
            self.timeouts,
            scoped(self.counter.as_ref(), &label).as_ref(),
        )?;
        cache.insert(
            slot,
            Cached {
                key,
                handle: handle.clone(),
            },
        );
        Ok(handle)
    }

    /// Drops the cached connection of a deleted Cluster (stopping its watches once nobody holds it).
    pub async fn forget(&self, namespace: &str, name: &str) {
        self.cache
            .lock()
            .await
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// `None` for the operator's own cluster, else the Cluster object the destination names.
    async fn find_cluster(
        &self,
        app_namespace: &str,
        destination: &ApplicationDestination,
    ) -> Result<Option<Cluster>, ClusterError> {
        match destination_target(destination)? {
            DestinationTarget::InCluster => Ok(None),
            DestinationTarget::Server(s) => self.cluster_by_server(app_namespace, s).await.map(Some),
            DestinationTarget::Name(n) => self.cluster_by_name(app_namespace, n).await.map(Some),
        }
    }

    /// Namespaces whose Clusters an Application in `app_namespace` may use, most specific first.
    fn search_namespaces<'a>(&'a self, app_namespace: &'a str) -> Vec<&'a str> {
        search_namespaces(app_namespace, &self.operator_namespace)
    }

    async fn cluster_by_name(&self, app_namespace: &str, name: &str) -> Result<Cluster, ClusterError> {
        for ns in self.search_namespaces(app_namespace) {
            let api: Api<Cluster> = Api::namespaced(self.local.client().clone(), ns);
            let context = format!("get Cluster {ns}/{name}");
            let found = self.call(&context, false, async { api.get_opt(name).await }).await?;
            if let Some(c) = found {
                return self.permitted(app_namespace, c, &format!("Cluster {name:?}"));
            }
        }
        Err(ClusterError::NotFound(format!(
            "Cluster {name:?} not found in namespace {:?}",
            self.search_namespaces(app_namespace).join(" or ")
        )))
    }

    async fn cluster_by_server(&self, app_namespace: &str, server: &str) -> Result<Cluster, ClusterError> {
        for ns in self.search_namespaces(app_namespace) {
            let api: Api<Cluster> = Api::namespaced(self.local.client().clone(), ns);
            let context = format!("list Clusters in {ns}");
            let list = self
                .call(&context, false, async { api.list(&ListParams::default()).await })
                .await?;
            let mut matches: Vec<Cluster> = list
                .items
                .into_iter()
                .filter(|c| same_server(&c.spec.server, server))
                .collect();
            match matches.len() {
                0 => continue,
                1 => {
                    return self.permitted(
                        app_namespace,
                        matches.remove(0),
                        &format!("Cluster with server {server:?}"),
                    )
                }
                n => {
                    return Err(ClusterError::InvalidConfig(format!(
                        "{n} Clusters in namespace {ns:?} have server {server:?}; use destination.name"
                    )))
                }
            }
        }
        Err(ClusterError::NotFound(format!(
            "no Cluster with server {server:?} in namespace {:?}",
            self.search_namespaces(app_namespace).join(" or ")
        )))
    }

    /// `cluster` if an Application in `app_namespace` may use it (`spec.sourceNamespaces`, see
    /// [`crate::api::tenancy`]), else `NotPermitted` naming only what the Application itself wrote.
    fn permitted(&self, app_namespace: &str, cluster: Cluster, what: &str) -> Result<Cluster, ClusterError> {
        let cluster_ns = cluster.namespace().unwrap_or_default();
        if source_namespace_allowed(
            &cluster.spec.source_namespaces,
            &cluster_ns,
            &self.operator_namespace,
            app_namespace,
        ) {
            return Ok(cluster);
        }
        Err(ClusterError::NotPermitted(format!(
            "{what} is not permitted for namespace {app_namespace:?}"
        )))
    }

    async fn read_secret(&self, cluster: &Cluster) -> Result<Option<Secret>, ClusterError> {
        let Some(secret_ref) = &cluster.spec.secret_ref else {
            return Ok(None);
        };
        let ns = cluster.namespace().unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(self.local.client().clone(), &ns);
        let context = format!("get Secret {ns}/{}", secret_ref.name);
        match self
            .call(&context, true, async { api.get_opt(&secret_ref.name).await })
            .await?
        {
            Some(s) => Ok(Some(s)),
            None => Err(ClusterError::NotFound(format!(
                "Secret {ns}/{} referenced by Cluster {} not found",
                secret_ref.name,
                cluster.name_any()
            ))),
        }
    }

    /// A local read under the call deadline; `redact` (Secret reads) keeps the API's message out of errors.
    async fn call<T>(
        &self,
        context: &str,
        redact: bool,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ClusterError> {
        super::with_deadline(self.timeouts.call, context, async {
            fut.await.map_err(|e| ClusterError::from_kube(e, context, redact))
        })
        .await
    }
}

/// What an Application's destination names, before any lookup: the rules [`ClusterClients::resolve`]
/// and the shard assignment (which must place an Application where it resolves) share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationTarget<'a> {
    /// The operator's own cluster (`in-cluster`, or its well-known server URL).
    InCluster,
    /// A Cluster object by `spec.server` (exactly one in the first namespace that has any).
    Server(&'a str),
    /// A Cluster object by name (the first namespace that has it).
    Name(&'a str),
}

/// The target of `destination` (`server` or `name`, not both, not neither).
pub fn destination_target(destination: &ApplicationDestination) -> Result<DestinationTarget<'_>, ClusterError> {
    let server = destination.server.as_deref().filter(|s| !s.is_empty());
    let name = destination.name.as_deref().filter(|s| !s.is_empty());
    match (server, name) {
        (Some(_), Some(_)) => Err(ClusterError::InvalidConfig(
            "destination sets both server and name; set one".into(),
        )),
        (None, None) => Err(ClusterError::InvalidConfig(
            "destination sets neither server nor name".into(),
        )),
        (Some(s), None) if same_server(s, IN_CLUSTER_SERVER) => Ok(DestinationTarget::InCluster),
        (None, Some(IN_CLUSTER_NAME)) => Ok(DestinationTarget::InCluster),
        (Some(s), None) => Ok(DestinationTarget::Server(s)),
        (None, Some(n)) => Ok(DestinationTarget::Name(n)),
    }
}

/// Namespaces whose Clusters an Application in `app_namespace` may use, most specific first (its
/// own, then the operator namespace).
pub fn search_namespaces<'a>(app_namespace: &'a str, operator_namespace: &'a str) -> Vec<&'a str> {
    if app_namespace == operator_namespace {
        vec![app_namespace]
    } else {
        vec![app_namespace, operator_namespace]
    }
}

/// Servers compare without a trailing slash (`https://h/` and `https://h` are the same cluster).
pub fn same_server(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The client configuration of a remote cluster, from its Secret (or anonymous when it has none).
async fn remote_config(label: &str, server: &str, secret: Option<&Secret>) -> Result<Config, ClusterError> {
    let data = secret.and_then(|s| s.data.clone()).unwrap_or_default();
    let get = |k: &str| data.get(k).map(|b| b.0.as_slice());
    let kubeconfig = match get(SECRET_KUBECONFIG) {
        Some(raw) => parse_kubeconfig(label, raw)?,
        None => token_kubeconfig(
            label,
            server,
            get(SECRET_BEARER_TOKEN),
            get(SECRET_CA_CERT),
            get(SECRET_INSECURE),
        )?,
    };
    config_from_kubeconfig(label, server, kubeconfig).await
}

/// Parses and vets a kubeconfig from a Secret. Parse errors are reported without the parser's message,
/// which can quote the document (and so a token).
pub fn parse_kubeconfig(label: &str, raw: &[u8]) -> Result<Kubeconfig, ClusterError> {
    if raw.len() > MAX_KUBECONFIG_BYTES {
        return Err(ClusterError::InvalidConfig(format!(
            "Cluster {label}: kubeconfig larger than {MAX_KUBECONFIG_BYTES} bytes"
        )));
    }
    let text = std::str::from_utf8(raw)
        .map_err(|_| ClusterError::InvalidConfig(format!("Cluster {label}: kubeconfig is not UTF-8")))?;
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| ClusterError::InvalidConfig(format!("Cluster {label}: kubeconfig is not a valid kubeconfig")))?;
    vet_kubeconfig(label, &kubeconfig)?;
    Ok(kubeconfig)
}

/// Refuses everything in a kubeconfig that would run a process or read the operator's files.
pub fn vet_kubeconfig(label: &str, kubeconfig: &Kubeconfig) -> Result<(), ClusterError> {
    let refuse = |what: String| Err(ClusterError::InvalidConfig(format!("Cluster {label}: {what}")));
    for user in &kubeconfig.auth_infos {
        let Some(auth) = &user.auth_info else { continue };
        let name = &user.name;
        if auth.exec.is_some() {
            return refuse(format!(
                "kubeconfig user {name:?} uses an exec credential plugin; refused (no process is spawned from a kubeconfig)"
            ));
        }
        if auth.auth_provider.is_some() {
            return refuse(format!("kubeconfig user {name:?} uses an auth-provider; refused"));
        }
        let files = [
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ];
        if let Some((field, _)) = files.iter().find(|(_, set)| *set) {
            return refuse(format!(
                "kubeconfig user {name:?} references a file ({field}); only inline data is accepted"
            ));
        }
    }
    for cluster in &kubeconfig.clusters {
        let Some(c) = &cluster.cluster else { continue };
        if c.certificate_authority.is_some() {
            return refuse(format!(
                "kubeconfig cluster {:?} references a file (certificate-authority); only inline data is accepted",
                cluster.name
            ));
        }
    }
    Ok(())
}

/// A one-user kubeconfig for `bearerToken` + `caCert` (+ `insecureSkipTLSVerify`), so both Secret shapes go
/// through the same loader. The CA may be PEM or base64-encoded PEM.
fn token_kubeconfig(
    label: &str,
    server: &str,
    token: Option<&[u8]>,
    ca: Option<&[u8]>,
    insecure: Option<&[u8]>,
) -> Result<Kubeconfig, ClusterError> {
    let invalid = |what: &str| ClusterError::InvalidConfig(format!("Cluster {label}: {what}"));
    let mut user = serde_json::Map::new();
    if let Some(t) = token {
        let t = std::str::from_utf8(t)
            .map_err(|_| invalid("bearerToken is not UTF-8"))?
            .trim();
        if t.is_empty() || t.contains(['\n', '\r']) {
            return Err(invalid("bearerToken is empty or spans lines"));
        }
        user.insert("token".into(), Value::String(t.to_string()));
    }
    let mut cluster = serde_json::Map::new();
    cluster.insert("server".into(), Value::String(server.to_string()));
    if let Some(ca) = ca.filter(|c| !c.iter().all(u8::is_ascii_whitespace)) {
        cluster.insert("certificate-authority-data".into(), Value::String(ca_data(ca)));
    }
    if let Some(flag) = insecure {
        let flag = std::str::from_utf8(flag).unwrap_or_default().trim();
        cluster.insert(
            "insecure-skip-tls-verify".into(),
            Value::Bool(flag.eq_ignore_ascii_case("true")),
        );
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "cluster", "user": "user"}}],
        "current-context": "ctx",
    });
    serde_json::from_value(doc).map_err(|_| invalid("bearerToken/caCert could not be assembled"))
}

/// `certificate-authority-data` from a Secret's `caCert`: PEM is base64-encoded, already-encoded PEM kept.
fn ca_data(ca: &[u8]) -> String {
    let text = String::from_utf8_lossy(ca);
    if text.trim_start().starts_with("-----BEGIN") {
        base64::engine::general_purpose::STANDARD.encode(ca)
    } else {
        text.split_whitespace().collect()
    }
}

/// The kubeconfig's current context, pointed at `server` (the Cluster's address wins over the file's).
async fn config_from_kubeconfig(label: &str, server: &str, kubeconfig: Kubeconfig) -> Result<Config, ClusterError> {
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClusterError::InvalidConfig(format!("Cluster {label}: {}", kubeconfig_error(&e))))?;
    config.cluster_url = server
        .parse()
        .map_err(|_| ClusterError::InvalidConfig(format!("Cluster {label}: spec.server is not a valid URL")))?;
    Ok(config)
}

/// A kubeconfig loading error in words that cannot carry key material or file contents.
fn kubeconfig_error(e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as K;
    match e {
        K::CurrentContextNotSet | K::LoadContext(_) | K::LoadClusterOfContext(_) | K::MissingClusterUrl => {
            e.to_string()
        }
        K::LoadCertificateAuthority(_) | K::ParseCertificates(_) => "the CA certificate is not valid PEM".into(),
        K::LoadClientCertificate(_) | K::LoadClientKey(_) => "the client certificate or key is not valid".into(),
        _ => "kubeconfig could not be loaded".into(),
    }
}

/// Request clients: every read bounded, counted from when the request was written.
fn request_config(mut config: Config, t: &ClusterTimeouts) -> Config {
    config.connect_timeout = Some(t.connect);
    config.read_timeout = Some(t.read);
    config.write_timeout = Some(t.write);
    config.reset_reader_on_write = true;
    config
}

/// Read timeout of watch clients: above the server's 290 s watch timeout (plus up to 90 s a pooled
/// connection may have idled), so a healthy quiet watch never trips it, yet a list that hangs on a tarpit
/// server ends. Dead watches are caught sooner by the watcher's own idle timeout.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(400);

/// Watch clients: a read timeout only long enough to bound hung lists (see [`WATCH_READ_TIMEOUT`]).
fn watch_config(mut config: Config, t: &ClusterTimeouts) -> Config {
    config.connect_timeout = Some(t.connect);
    config.read_timeout = Some(WATCH_READ_TIMEOUT.max(t.read));
    config.write_timeout = Some(t.write);
    config.reset_reader_on_write = true;
    config
}

/// The layer of one cluster's handle: its writes are that cluster's (`in-cluster` or the Cluster's
/// `namespace/name`), which is what a sharded replica's write gate decides on.
fn scoped(layer: Option<&KubeRequestLayer>, cluster: &str) -> Option<KubeRequestLayer> {
    layer.map(|l| l.scoped(WriteScope::Cluster(cluster.to_string())))
}

fn build_client(mut config: Config, name: &str, counter: Option<&KubeRequestLayer>) -> Result<Client, ClusterError> {
    // No hidden retry below the counting layer: every attempt is counted and every failure reaches the
    // caller's own bounded retry (kube's retry would wait up to 15 times what `Retry-After` asks).
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| match e {
        kube::Error::RustlsTls(_) | kube::Error::TlsRequired => {
            ClusterError::InvalidConfig(format!("Cluster {name}: TLS setup failed (check caCert)"))
        }
        kube::Error::Auth(_) => ClusterError::InvalidConfig(format!("Cluster {name}: credentials could not be loaded")),
        _ => ClusterError::InvalidConfig(format!("Cluster {name}: client could not be built")),
    })?;
    Ok(match counter {
        Some(layer) => builder.with_layer(layer).build(),
        None => builder.build(),
    })
}
