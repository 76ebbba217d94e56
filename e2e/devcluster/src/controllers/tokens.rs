//! The ServiceAccount token controller of kube-controller-manager: a Secret of type
//! `kubernetes.io/service-account-token` naming an existing ServiceAccount gets `token` (a legacy token for
//! that account), `ca.crt` and `namespace`; one whose ServiceAccount is missing, or deleted later, is
//! deleted.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::auth::tokens::{fill_secret, secret_action, SecretAction, SA_NAME_ANNOTATION, SA_UID_ANNOTATION};
use crate::registry::res_key;
use crate::server::ops::Sub;
use crate::server::Shared;
use crate::store::{Event, EventType, ObjRef};

const MANAGER: &str = "kube-controller-manager";

pub async fn run(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>) {
    let secrets = res_key("", "secrets");
    let accounts = res_key("", "serviceaccounts");
    while let Some(ev) = rx.recv().await {
        let res = &ev.obj.res;
        if *res == secrets && ev.kind != EventType::Deleted {
            sync_secret(&sh, &ev.obj);
        } else if *res == accounts {
            for r in token_secrets_of(&sh, &ev.obj.ns, &ev.obj.name) {
                sync_secret(&sh, &r);
            }
        }
    }
}

fn annotation<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Token Secrets in `ns` that name ServiceAccount `sa`.
fn token_secrets_of(sh: &Shared, ns: &str, sa: &str) -> Vec<ObjRef> {
    let key = res_key("", "secrets");
    sh.store
        .list(&key, Some(ns))
        .1
        .iter()
        .filter(|s| annotation(s, SA_NAME_ANNOTATION) == sa)
        .map(|s| ObjRef {
            res: key.clone(),
            ns: ns.to_string(),
            name: s
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        })
        .collect()
}

fn sync_secret(sh: &Shared, r: &ObjRef) {
    let Some(secret) = sh.store.get(&r.res, &r.ns, &r.name) else {
        return;
    };
    let sa_name = annotation(&secret, SA_NAME_ANNOTATION);
    let sa = sh.store.get(&res_key("", "serviceaccounts"), &r.ns, sa_name);
    match secret_action(&secret, sa.as_deref()) {
        SecretAction::Nothing => {}
        SecretAction::Delete => super::delete_background(sh, r),
        SecretAction::Fill(uid) => super::edit(sh, r, Sub::Main, MANAGER, |obj| {
            // Another account with this name may have replaced the one this Secret was filled for.
            let recorded = annotation(obj, SA_UID_ANNOTATION).to_string();
            (recorded.is_empty() || recorded == uid) && fill_secret(sh, obj, &uid)
        }),
    }
}
