//! Controller-driven behaviour over real HTTP: CRD termination (creates refused, watches closed), CRD name
//! conflicts, garbage collection with several owners, read-time CR defaulting, the shared Event storage, and
//! `gracePeriodSeconds`. Asynchronous outcomes are polled for with a generous deadline rather than timed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};

use serde_json::{json, Value};

/// Deadline for asynchronous outcomes; only reached when something is broken.
const PATIENCE: Duration = Duration::from_secs(60);

/// A minimal HTTPS client trusting the cluster CA and sending the admin token.
struct Http {
    addr: String,
    token: String,
    tls: Arc<rustls::ClientConfig>,
}

type Conn = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

impl Http {
    fn new(dc: &devcluster::DevCluster) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(dc.ca_pem().as_bytes()) {
            roots.add(c.expect("a PEM certificate")).expect("the CA");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Http {
            addr: dc.url().trim_start_matches("https://").to_string(),
            token: dc.admin_token(),
            tls: Arc::new(tls),
        }
    }

    fn connect(&self) -> Conn {
        let tcp = TcpStream::connect(&self.addr).expect("connect");
        tcp.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let name = ServerName::try_from("127.0.0.1").expect("a server name");
        rustls::StreamOwned::new(rustls::ClientConnection::new(self.tls.clone(), name).expect("TLS"), tcp)
    }

    fn call(&self, method: &str, path: &str, content_type: &str, body: &str) -> (u16, Value) {
        let mut s = self.connect();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        );
        s.write_all(req.as_bytes()).expect("write");
        let mut raw = Vec::new();
        // The server may close without a TLS close_notify; what arrived is the answer.
        let _ = s.read_to_end(&mut raw);
        let out = String::from_utf8_lossy(&raw).into_owned();
        let code = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("");
        (code, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, "application/json", "")
    }

    fn post(&self, path: &str, obj: &Value) -> (u16, Value) {
        self.call("POST", path, "application/json", &obj.to_string())
    }

    fn delete(&self, path: &str) -> (u16, Value) {
        self.call("DELETE", path, "application/json", "")
    }

    fn merge(&self, path: &str, patch: &Value) -> (u16, Value) {
        self.call("PATCH", path, "application/merge-patch+json", &patch.to_string())
    }
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for: {what}");
}

fn crd(group: &str, plural: &str, kind: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "default": 3},
                        "mode": {"type": "string"}}}}}}}]}})
}

fn condition<'a>(crd: &'a Value, type_: &str) -> &'a Value {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn install(http: &Http, group: &str, plural: &str, kind: &str) {
    let (code, body) = http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd(group, plural, kind),
    );
    assert_eq!(code, 201, "{body}");
    let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{group}");
    eventually("the CRD is established", || {
        condition(&http.get(&path).1, "Established")["status"] == "True"
    });
}

#[test]
fn a_terminating_crd_refuses_new_objects_and_its_watches_end_when_it_is_gone() {
    let dc = devcluster::start(devcluster::Config::default()).expect("devcluster");
    let http = Http::new(&dc);
    install(&http, "life.example.com", "gizmos", "Gizmo");
    let coll = "/apis/life.example.com/v1/namespaces/default/gizmos";
    let held = json!({"apiVersion": "life.example.com/v1", "kind": "Gizmo",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "spec": {}});
    assert_eq!(http.post(coll, &held).0, 201);

    // Reads are defaulted from the schema, like writes.
    let (_, got) = http.get(&format!("{coll}/held"));
    assert_eq!(got["spec"]["size"], 3, "{got}");

    // An open watch on the custom resource.
    let mut watch = http.connect();
    write!(
        watch,
        "GET {coll}?watch=true HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        http.addr, http.token
    )
    .expect("watch request");
    let mut watch = BufReader::new(watch);
    let mut first = String::new();
    while !first.contains("\"ADDED\"") {
        first.clear();
        assert!(
            watch.read_line(&mut first).expect("watch line") > 0,
            "watch ended early"
        );
    }

    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.life.example.com";
    assert_eq!(http.delete(crd_path).0, 200);
    eventually("the CRD reports Terminating", || {
        condition(&http.get(crd_path).1, "Terminating")["status"] == "True"
    });
    let fresh = json!({"apiVersion": "life.example.com/v1", "kind": "Gizmo", "metadata": {"name": "fresh"}});
    let (code, status) = http.post(coll, &fresh);
    assert_eq!(
        (code, status["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{status}"
    );
    assert!(
        status["message"].as_str().unwrap_or("").contains("terminating"),
        "{status}"
    );

    // Releasing the last object lets the CRD go; the watch then ends instead of hanging.
    let (code, body) = http.merge(&format!("{coll}/held"), &json!({"metadata": {"finalizers": null}}));
    assert_eq!(code, 200, "{body}");
    eventually("the CRD is gone", || http.get(crd_path).0 == 404);
    let mut raw = Vec::new();
    if let Err(e) = watch.read_to_end(&mut raw) {
        // A close without TLS close_notify still ends the stream; a timeout would mean it hung.
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "the watch stream ends: {e}"
        );
    }
    let rest = String::from_utf8_lossy(&raw);
    assert!(rest.contains("\"DELETED\""), "{rest}");
}

#[test]
fn crd_names_that_clash_with_served_resources_are_not_accepted() {
    let dc = devcluster::start(devcluster::Config::default()).expect("devcluster");
    let http = Http::new(&dc);
    install(&http, "clash.example.com", "widgets", "Widget");

    let (code, _) = http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("clash.example.com", "gadgets", "Widget"),
    );
    assert_eq!(code, 201);
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.clash.example.com";
    eventually("the clashing CRD reports NamesAccepted=False", || {
        condition(&http.get(path).1, "NamesAccepted")["status"] == "False"
    });
    let (_, gadgets) = http.get(path);
    assert_eq!(
        condition(&gadgets, "NamesAccepted")["reason"],
        "KindConflict",
        "{gadgets}"
    );
    assert_eq!(condition(&gadgets, "Established")["status"], "False", "{gadgets}");
    assert_eq!(http.get("/apis/clash.example.com/v1/namespaces/default/gadgets").0, 404);

    let (code, _) = http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("networking.k8s.io", "ingresses", "Ingress"),
    );
    assert_eq!(code, 201);
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ingresses.networking.k8s.io";
    eventually("a CRD shadowing a built-in is refused", || {
        condition(&http.get(path).1, "NamesAccepted")["reason"] == "PluralConflict"
    });

    // Deleting the refused CRD leaves the built-in alone; deleting the owner of the name frees it.
    assert_eq!(http.delete(path).0, 200);
    eventually("the refused CRD is gone", || http.get(path).0 == 404);
    assert_eq!(
        http.get("/apis/networking.k8s.io/v1/namespaces/default/ingresses").0,
        200
    );
    assert_eq!(
        http.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.clash.example.com")
            .0,
        200
    );
    eventually("the waiting CRD is accepted once the name is free", || {
        let (_, g) = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.clash.example.com");
        condition(&g, "Established")["status"] == "True"
    });
}

fn owner_ref(obj: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]})
}

#[test]
fn a_dependent_with_a_living_owner_only_loses_its_dangling_reference() {
    let dc = devcluster::start(devcluster::Config::default()).expect("devcluster");
    let http = Http::new(&dc);
    let coll = "/api/v1/namespaces/default/configmaps";
    let (_, a) = http.post(coll, &json!({"metadata": {"name": "owner-a"}}));
    let (_, b) = http.post(coll, &json!({"metadata": {"name": "owner-b"}}));
    let dep = json!({"metadata": {"name": "dep", "ownerReferences": [owner_ref(&a), owner_ref(&b)]}});
    assert_eq!(http.post(coll, &dep).0, 201);

    assert_eq!(http.delete(&format!("{coll}/owner-a")).0, 200);
    eventually("the dangling reference is stripped", || {
        let (_, d) = http.get(&format!("{coll}/dep"));
        d.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(Vec::len)
            == Some(1)
    });
    let (code, d) = http.get(&format!("{coll}/dep"));
    assert_eq!(code, 200, "the dependent lives on");
    assert_eq!(d["metadata"]["ownerReferences"][0]["name"], "owner-b");

    assert_eq!(http.delete(&format!("{coll}/owner-b")).0, 200);
    eventually("the dependent is collected once every owner is gone", || {
        http.get(&format!("{coll}/dep")).0 == 404
    });
}

#[test]
fn events_are_one_resource_in_two_shapes_and_deletes_take_a_grace_period() {
    let dc = devcluster::start(devcluster::Config::default()).expect("devcluster");
    let http = Http::new(&dc);
    let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "eventTime": "2026-11-22T01:27:18.721491Z", "reportingController": "rec", "reportingInstance": "rec-1",
        "action": "Check", "reason": "SomethingHappened", "type": "Warning", "note": "a note",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "noted", "namespace": "default"}});
    let (code, created) = http.post("/apis/events.k8s.io/v1/namespaces/default/events", &ev);
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["note"], "a note");

    let (code, core) = http.get(
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dnoted,involvedObject.kind%3DConfigMap",
    );
    assert_eq!(code, 200);
    let item = &core["items"][0];
    assert_eq!(item["message"], "a note", "{core}");
    assert_eq!(item["reportingComponent"], "rec");
    assert_eq!(
        item["eventTime"], "2026-11-22T01:27:18.721491Z",
        "MicroTime keeps its microseconds"
    );

    // A series update through events.k8s.io (kube-runtime's Recorder) is visible in both shapes.
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-11-22T01:28:00.000000Z"}});
    let (code, patched) = http.merge("/apis/events.k8s.io/v1/namespaces/default/events/e1", &series);
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["regarding"]["name"], "noted");
    let (_, core_e1) = http.get("/api/v1/namespaces/default/events/e1");
    assert_eq!(core_e1["series"]["count"], 2);
    assert_eq!(core_e1["apiVersion"], "v1");
    assert!(core_e1.get("note").is_none(), "{core_e1}");

    let (code, _) = http.delete("/api/v1/namespaces/default/events/e1?gracePeriodSeconds=0");
    assert_eq!(code, 200);
    assert_eq!(http.get("/apis/events.k8s.io/v1/namespaces/default/events/e1").0, 404);
    let (code, status) = http.call(
        "DELETE",
        "/api/v1/namespaces/default/configmaps/x?gracePeriodSeconds=soon",
        "application/json",
        "",
    );
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")), "{status}");
}
