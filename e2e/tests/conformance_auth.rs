//! Conformance of devcluster's security: HTTPS with its own CA, authentication (admin token,
//! ServiceAccount tokens from `kubectl create token` and token Secrets, client certificates), RBAC with
//! kube-apiserver's exact 401/403 texts, escalation prevention, aggregated ClusterRoles, impersonation
//! (`--as`), and the review APIs behind `kubectl auth can-i` and `kubectl auth whoami`. Real kubectl 1.32
//! and kube-rs throughout.

use base64::Engine;
use capstan_e2e::{
    check::api_error,
    cluster::client_from_yaml,
    fixtures::{install_widget_crd, Widget, WidgetSpec},
    process::DevClusterProcess,
    raw_http, wait_until, TestCluster, POLL, TIMEOUT,
};
use k8s_openapi::api::{
    authentication::v1::SelfSubjectReview,
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    core::v1::{ConfigMap, Namespace},
};
use kube::{
    api::{ListParams, PostParams},
    Api,
};
use serde_json::{json, Value};

/// What kubectl prints for a 401 on a command that needs no discovery (`auth whoami`, `create token`).
const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)";

/// The last line kubectl prints for a 401 on a command that discovers the API first (`get`, `apply`).
const DISCOVERY_UNAUTHORIZED: &str =
    "error: You must be logged in to the server (the server has asked for the client to provide credentials)";

fn assert_unauthorized_after_discovery(out: &capstan_e2e::KubectlOutput) {
    assert!(!out.success(), "{out}");
    assert_eq!(out.stderr.trim().lines().last(), Some(DISCOVERY_UNAUTHORIZED), "{out}");
}

/// A namespace with ServiceAccount `sa`; returns the namespace and a token from `kubectl create token`.
async fn account(tc: &TestCluster, prefix: &str, sa: &str) -> (String, String) {
    let ns = tc.with_namespace(prefix).await;
    tc.kubectl_ok(&["create", "serviceaccount", sa, "-n", &ns]).await;
    let token = tc
        .kubectl_ok(&["create", "token", sa, "-n", &ns])
        .await
        .trim()
        .to_owned();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    (ns, token)
}

/// `kubectl create rolebinding NAME --clusterrole=ROLE --serviceaccount=NS:SA -n NS`, as the admin.
async fn bind(tc: &TestCluster, ns: &str, name: &str, cluster_role: &str, sa: &str) {
    let role = format!("--clusterrole={cluster_role}");
    let subject = format!("--serviceaccount={ns}:{sa}");
    tc.kubectl_ok(&["create", "rolebinding", name, &role, &subject, "-n", ns])
        .await;
}

fn forbidden_list(user: &str, resource: &str, ns: &str) -> String {
    format!(
        r#"Error from server (Forbidden): {resource} is forbidden: User "{user}" cannot list resource "{resource}" in API group "" in the namespace "{ns}""#
    )
}

#[tokio::test]
async fn the_kubeconfig_carries_the_ca_and_an_admin_token_and_anything_else_is_refused() {
    let tc = TestCluster::start();
    assert!(tc.url().starts_with("https://127.0.0.1:"), "{}", tc.url());
    let kubeconfig = std::fs::read_to_string(tc.kubeconfig_path()).expect("kubeconfig");
    assert!(kubeconfig.contains("certificate-authority-data: "), "{kubeconfig}");
    let who = tc.kubectl_ok(&["auth", "whoami"]).await;
    assert!(who.contains("Username    admin"), "{who}");
    assert!(who.contains("[system:masters system:authenticated]"), "{who}");

    // Without the CA the server is not trusted.
    let no_ca: String = kubeconfig
        .lines()
        .filter(|l| !l.contains("certificate-authority-data"))
        .map(|l| format!("{l}\n"))
        .collect();
    let out = tc.kubectl_with_kubeconfig("no-ca", &no_ca).run(&["get", "ns"]).await;
    assert!(!out.success());
    assert!(out.stderr.contains("certificate signed by unknown authority"), "{out}");

    // A wrong token is 401 with kube's exact body and kubectl's exact text.
    let out = tc.kubectl(&["--token", "not-a-token", "auth", "whoami"]).await;
    assert_eq!(out.stderr.trim(), UNAUTHORIZED, "{out}");
    let fresh = tc.kubectl_with_token("bad", "not-a-token");
    assert_unauthorized_after_discovery(&fresh.run(&["get", "configmaps"]).await);
    let response = raw_http::request(
        &tc.endpoint().with_token("nope"),
        "GET",
        "/api/v1/namespaces",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(response.status, 401);
    assert_eq!(
        response.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
}

#[tokio::test]
async fn anonymous_requests_see_only_what_the_default_public_bindings_allow() {
    let tc = TestCluster::start();
    let anonymous = tc.endpoint().anonymous();
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let response = raw_http::request(&anonymous, "GET", path, None, Vec::new()).await;
        assert_eq!(response.status, 200, "{path}: {response:?}");
    }
    // system:discovery is bound to system:authenticated only (kube >= 1.14).
    let response = raw_http::request(&anonymous, "GET", "/api", None, Vec::new()).await;
    assert_eq!(
        response.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "forbidden: User \"system:anonymous\" cannot get path \"/api\"", "reason": "Forbidden",
            "details": {}, "code": 403})
    );
    let response = raw_http::request(
        &anonymous,
        "GET",
        "/api/v1/namespaces/default/configmaps/x",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(
        response.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"x\" is forbidden: User \"system:anonymous\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\"",
            "reason": "Forbidden", "details": {"name": "x", "kind": "configmaps"}, "code": 403})
    );
    let response = raw_http::request(&anonymous, "GET", "/_devcluster/requests", None, Vec::new()).await;
    assert_eq!(response.status, 403, "the test hooks need system:masters");
    // Any authenticated user may discover the API.
    let (ns, token) = account(&tc, "disco", "reader").await;
    let who = tc.endpoint().with_token(&token);
    let response = raw_http::request(&who, "GET", "/apis", None, Vec::new()).await;
    assert_eq!(response.status, 200, "{ns}: {response:?}");
}

#[tokio::test]
async fn a_service_account_token_works_with_kubectl_once_a_rolebinding_allows_it() {
    let tc = TestCluster::start();
    let (ns, token) = account(&tc, "ci", "deployer").await;
    let user = format!("system:serviceaccount:{ns}:deployer");
    let as_sa = tc.kubectl_with_token("deployer", &token);

    let out = as_sa.run(&["get", "configmaps", "-n", &ns]).await;
    assert_eq!(out.stderr.trim(), forbidden_list(&user, "configmaps", &ns), "{out}");
    let who = as_sa.ok(&["auth", "whoami"]).await;
    assert!(
        who.contains(&format!("Username    {user}")) || who.contains(&user),
        "{who}"
    );
    assert!(
        who.contains(&format!(
            "[system:serviceaccounts system:serviceaccounts:{ns} system:authenticated]"
        )),
        "{who}"
    );

    bind(&tc, &ns, "deployer-edit", "edit", "deployer").await;
    tc.kubectl_ok(&["create", "configmap", "cfg", "--from-literal=a=1", "-n", &ns])
        .await;
    // `--token` on the admin kubeconfig works the same as a kubeconfig of its own.
    let out = tc
        .kubectl_ok(&["--token", &token, "get", "configmaps", "cfg", "-n", &ns, "-o", "name"])
        .await;
    assert_eq!(out.trim(), "configmap/cfg");
    as_sa.ok(&["create", "configmap", "made-by-ci", "-n", &ns]).await;
    assert_eq!(
        as_sa
            .ok(&["auth", "can-i", "delete", "configmaps", "-n", &ns])
            .await
            .trim(),
        "yes"
    );
    // edit does not manage RBAC, and the binding is namespaced.
    let out = as_sa.run(&["auth", "can-i", "create", "rolebindings", "-n", &ns]).await;
    assert_eq!(out.stdout.trim(), "no", "{out}");
    let out = as_sa.run(&["get", "configmaps", "-n", "default"]).await;
    assert_eq!(
        out.stderr.trim(),
        forbidden_list(&user, "configmaps", "default"),
        "{out}"
    );

    // The request log names the authenticated user of every request.
    let posts: Vec<_> = tc
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/api/v1/namespaces/{ns}/configmaps"))
        .collect();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(
        (posts[0].user.as_str(), posts[0].groups[0].as_str()),
        ("admin", "system:masters")
    );
    assert_eq!(posts[1].user, user);
}

#[tokio::test]
async fn can_i_follows_verbs_subresources_and_resource_names() {
    let tc = TestCluster::start();
    let (ns, token) = account(&tc, "cani", "bot").await;
    let sa = format!("{ns}:bot");
    tc.kubectl_ok(&[
        "create",
        "role",
        "lister",
        "--verb=list",
        "--resource=configmaps",
        "-n",
        &ns,
    ])
    .await;
    tc.kubectl_ok(&[
        "create",
        "role",
        "one",
        "--verb=get,update",
        "--resource=configmaps",
        "--resource-name=cfg",
        "-n",
        &ns,
    ])
    .await;
    tc.kubectl_ok(&[
        "create",
        "role",
        "scaler",
        "--verb=get,update",
        "--resource=deployments/scale",
        "-n",
        &ns,
    ])
    .await;
    for role in ["lister", "one", "scaler"] {
        tc.kubectl_ok(&[
            "create",
            "rolebinding",
            role,
            &format!("--role={role}"),
            &format!("--serviceaccount={sa}"),
            "-n",
            &ns,
        ])
        .await;
    }
    let as_sa = tc.kubectl_with_token("bot", &token);
    let can = |args: Vec<&'static str>| {
        let (as_sa, ns) = (as_sa.clone(), ns.clone());
        async move {
            let mut full = vec!["auth", "can-i"];
            full.extend(args);
            full.extend(["-n", ns.as_str()]);
            as_sa.run(&full).await.stdout.trim().to_owned()
        }
    };
    assert_eq!(can(vec!["list", "configmaps"]).await, "yes");
    assert_eq!(
        can(vec!["watch", "configmaps"]).await,
        "no",
        "list does not grant watch"
    );
    assert_eq!(can(vec!["get", "configmaps/cfg"]).await, "yes");
    assert_eq!(can(vec!["get", "configmaps/other"]).await, "no");
    assert_eq!(
        can(vec!["update", "deployments.apps", "--subresource=scale"]).await,
        "yes"
    );
    assert_eq!(can(vec!["update", "deployments.apps"]).await, "no");

    // A watch is its own verb on the wire too.
    tc.kubectl_ok(&["create", "configmap", "cfg", "-n", &ns]).await;
    as_sa.ok(&["get", "configmaps", "-n", &ns]).await;
    let out = as_sa
        .run(&["get", "configmaps", "-n", &ns, "--watch-only", "--request-timeout=5s"])
        .await;
    assert!(
        out.stderr.contains(&format!(
            r#"cannot watch resource "configmaps" in API group "" in the namespace "{ns}""#
        )),
        "{out}"
    );

    let list = as_sa.ok(&["auth", "can-i", "--list", "-n", &ns]).await;
    let row = list
        .lines()
        .find(|l| l.starts_with("configmaps "))
        .unwrap_or_default()
        .to_owned();
    assert!(row.contains("[cfg]") || list.contains("[cfg]"), "{list}");
    assert!(list.contains("deployments.apps/scale"), "{list}");
    assert!(list.contains("selfsubjectaccessreviews.authorization.k8s.io"), "{list}");
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_and_runs_as_the_impersonated_user() {
    let tc = TestCluster::start();
    let (ns, token) = account(&tc, "imp", "worker").await;
    let sa_user = format!("system:serviceaccount:{ns}:worker");
    bind(&tc, &ns, "worker-view", "view", "worker").await;

    // The admin may impersonate anyone; the request then has only the impersonated rights.
    tc.kubectl_ok(&["get", "configmaps", "-n", &ns, "--as", &sa_user]).await;
    let out = tc.kubectl(&["get", "secrets", "-n", &ns, "--as", &sa_user]).await;
    assert_eq!(out.stderr.trim(), forbidden_list(&sa_user, "secrets", &ns), "{out}");
    let who = tc
        .kubectl_ok(&["auth", "whoami", "--as", "jane", "--as-group", "devs"])
        .await;
    assert!(
        who.contains("jane") && who.contains("[devs system:authenticated]"),
        "{who}"
    );
    let who = tc.kubectl_ok(&["auth", "whoami", "--as", &sa_user]).await;
    assert!(
        who.contains(&format!(
            "[system:serviceaccounts system:serviceaccounts:{ns} system:authenticated]"
        )),
        "{who}"
    );
    let out = tc
        .kubectl(&["auth", "can-i", "list", "secrets", "-n", &ns, "--as", &sa_user])
        .await;
    assert_eq!(out.stdout.trim(), "no", "{out}");

    // The log records who impersonated whom.
    let log = tc.requests();
    let imp = log
        .iter()
        .find(|r| r.path == format!("/api/v1/namespaces/{ns}/secrets"))
        .expect("the impersonated request is logged");
    assert_eq!(imp.user, "admin");
    assert_eq!(imp.impersonated_user.as_deref(), Some(sa_user.as_str()));
    assert_eq!(imp.impersonated_groups[0], "system:serviceaccounts");

    // A service account without the verb is refused, with kube's message.
    let as_sa = tc.kubectl_with_token("worker", &token);
    // Impersonation is checked on every request, discovery too: with a cold discovery cache kubectl only
    // reports "Forbidden: unknown" (as against a real cluster), so warm it first.
    as_sa.ok(&["get", "configmaps", "-n", &ns]).await;
    let out = as_sa.run(&["get", "configmaps", "-n", &ns, "--as", "bob"]).await;
    assert_eq!(
        out.stderr.trim(),
        format!(
            r#"Error from server (Forbidden): users "bob" is forbidden: User "{sa_user}" cannot impersonate resource "users" in API group "" at the cluster scope"#
        ),
        "{out}"
    );
    // edit grants `impersonate serviceaccounts` in its namespace, so then it may act as another account.
    tc.kubectl_ok(&["create", "serviceaccount", "helper", "-n", &ns]).await;
    bind(&tc, &ns, "worker-edit", "edit", "worker").await;
    let helper = format!("system:serviceaccount:{ns}:helper");
    let out = as_sa.run(&["get", "configmaps", "-n", &ns, "--as", &helper]).await;
    assert_eq!(out.stderr.trim(), forbidden_list(&helper, "configmaps", &ns), "{out}");
}

#[tokio::test]
async fn escalation_through_roles_and_bindings_is_refused() {
    let tc = TestCluster::start();
    let (ns, token) = account(&tc, "esc", "lead").await;
    let user = format!("system:serviceaccount:{ns}:lead");
    let groups = format!(r#"["system:serviceaccounts" "system:serviceaccounts:{ns}" "system:authenticated"]"#);
    bind(&tc, &ns, "lead-admin", "admin", "lead").await;
    let as_lead = tc.kubectl_with_token("lead", &token);

    // Granting what one holds is fine; granting more is not.
    as_lead
        .ok(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=configmaps",
            "-n",
            &ns,
        ])
        .await;
    as_lead
        .ok(&[
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--user=bob",
            "-n",
            &ns,
        ])
        .await;
    as_lead
        .ok(&[
            "create",
            "rolebinding",
            "viewers",
            "--clusterrole=view",
            "--group=viewers",
            "-n",
            &ns,
        ])
        .await;
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: grabber}\nrules:\n- apiGroups: [rbac.authorization.k8s.io]\n  resources: [clusterroles]\n  verbs: [create]\n";
    let out = as_lead.fails_with_stdin(&["create", "-f", "-", "-n", &ns], role).await;
    assert_eq!(
        out.stderr.trim(),
        format!(
            "Error from server (Forbidden): error when creating \"STDIN\": roles.rbac.authorization.k8s.io \"grabber\" is forbidden: user \"{user}\" (groups={groups}) is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"rbac.authorization.k8s.io\"], Resources:[\"clusterroles\"], Verbs:[\"create\"]}}"
        )
    );
    let out = as_lead
        .fails(&[
            "create",
            "rolebinding",
            "root",
            "--clusterrole=cluster-admin",
            "--user=bob",
            "-n",
            &ns,
        ])
        .await;
    assert_eq!(
        out.stderr.trim(),
        format!(
            "error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io \"root\" is forbidden: user \"{user}\" (groups={groups}) is attempting to grant RBAC permissions not currently held:\n{{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}}\n{{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}}"
        )
    );
    // Widening an existing role by patch is checked on the patched object.
    let out = as_lead
        .run(&[
            "patch",
            "role",
            "reader",
            "-n",
            &ns,
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["nodes"],"verbs":["get"]}}]"#,
        ])
        .await;
    assert!(
        out.stderr
            .contains("attempting to grant RBAC permissions not currently held"),
        "{out}"
    );

    // `bind` on a role allows binding it without holding it; `escalate` allows writing any rules.
    tc.kubectl_ok(&[
        "create",
        "clusterrole",
        "binder",
        "--verb=bind",
        "--resource=clusterroles",
        "--resource-name=cluster-admin",
    ])
    .await;
    tc.kubectl_ok(&[
        "create",
        "clusterrole",
        "escalator",
        "--verb=escalate",
        "--resource=roles",
    ])
    .await;
    for role in ["binder", "escalator"] {
        tc.kubectl_ok(&[
            "create",
            "rolebinding",
            role,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:lead"),
            "-n",
            &ns,
        ])
        .await;
    }
    as_lead
        .ok(&[
            "create",
            "rolebinding",
            "root",
            "--clusterrole=cluster-admin",
            "--user=bob",
            "-n",
            &ns,
        ])
        .await;
    as_lead.ok_with_stdin(&["create", "-f", "-", "-n", &ns], role).await;
}

#[tokio::test]
async fn an_aggregated_cluster_role_picks_up_a_new_labelled_role() {
    let tc = TestCluster::start();
    let client = tc.client().await;
    install_widget_crd(&client).await;
    let (ns, token) = account(&tc, "agg", "viewer").await;
    bind(&tc, &ns, "viewer", "view", "viewer").await;
    let widgets: Api<Widget> = Api::namespaced(client, &ns);
    let spec = WidgetSpec {
        replicas: 1,
        image: "nginx:1".into(),
    };
    widgets
        .create(&PostParams::default(), &Widget::new("w", spec))
        .await
        .expect("a widget");
    let as_viewer = tc.kubectl_with_token("viewer", &token);
    let out = as_viewer.run(&["get", "widgets", "-n", &ns]).await;
    assert!(
        out.stderr
            .contains("cannot list resource \"widgets\" in API group \"e2e.capstan.dev\""),
        "{out}"
    );

    tc.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: widgets-view\n  labels:\n    rbac.authorization.k8s.io/aggregate-to-view: \"true\"\nrules:\n- apiGroups: [e2e.capstan.dev]\n  resources: [widgets]\n  verbs: [get, list, watch]\n",
        &[],
    )
    .await;
    for role in ["view", "edit", "admin"] {
        wait_until(format!("{role} aggregates widgets-view"), TIMEOUT, POLL, || async {
            let out = tc.kubectl_ok(&["get", "clusterrole", role, "-o", "json"]).await;
            out.contains("\"widgets\"")
        })
        .await;
    }
    let out = as_viewer.ok(&["get", "widgets", "-n", &ns, "-o", "name"]).await;
    assert_eq!(out.trim(), "widget.e2e.capstan.dev/w");

    // Removing the label takes the rules away again.
    tc.kubectl_ok(&[
        "label",
        "clusterrole",
        "widgets-view",
        "rbac.authorization.k8s.io/aggregate-to-view-",
    ])
    .await;
    wait_until("view drops widgets-view", TIMEOUT, POLL, || async {
        !tc.kubectl_ok(&["get", "clusterrole", "view", "-o", "json"])
            .await
            .contains("\"widgets\"")
    })
    .await;
    assert!(!as_viewer.run(&["get", "widgets", "-n", &ns]).await.success());
}

#[tokio::test]
async fn a_legacy_token_secret_is_filled_usable_and_dies_with_its_account() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("legacy").await;
    tc.kubectl_ok(&["create", "serviceaccount", "old", "-n", &ns]).await;
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: old-token\n  annotations:\n    kubernetes.io/service-account.name: old\ntype: kubernetes.io/service-account-token\n";
    tc.kubectl_ok_stdin(&["apply", "-n", &ns, "-f", "-"], secret).await;
    let data = capstan_e2e::wait_for("the token controller fills the Secret", TIMEOUT, POLL, || async {
        let out = tc
            .kubectl_ok(&["get", "secret", "old-token", "-n", &ns, "-o", "json"])
            .await;
        let v: Value = serde_json::from_str(&out).expect("JSON");
        v.pointer("/data/token").is_some().then(|| v["data"].clone())
    })
    .await;
    let decode = |k: &str| {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(data[k].as_str().expect("a string"))
            .expect("base64");
        String::from_utf8(raw).expect("UTF-8")
    };
    assert_eq!(decode("namespace"), ns);
    assert_eq!(decode("ca.crt"), tc.dev().ca_pem());
    let token = decode("token");
    let who = tc.kubectl_with_token("old", &token).ok(&["auth", "whoami"]).await;
    assert!(who.contains(&format!("system:serviceaccount:{ns}:old")), "{who}");

    tc.kubectl_ok(&["delete", "serviceaccount", "old", "-n", &ns]).await;
    wait_until("the Secret goes with its ServiceAccount", TIMEOUT, POLL, || async {
        !tc.kubectl(&["get", "secret", "old-token", "-n", &ns]).await.success()
    })
    .await;
    let out = tc.kubectl_with_token("old", &token).run(&["auth", "whoami"]).await;
    assert_eq!(out.stderr.trim(), UNAUTHORIZED, "{out}");
}

#[tokio::test]
async fn expired_foreign_audience_and_orphaned_tokens_are_401() {
    let tc = TestCluster::start();
    let (ns, token) = account(&tc, "bad", "gone").await;
    tc.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{ns}-view"),
        "--clusterrole=view",
        &format!("--serviceaccount={ns}:gone"),
    ])
    .await;
    let ok = tc.kubectl_with_token("gone", &token);
    ok.ok(&["get", "configmaps", "-n", &ns]).await;

    // Audience: a token for another audience is not for the API server.
    let other = tc
        .kubectl_ok(&[
            "create",
            "token",
            "gone",
            "-n",
            &ns,
            "--audience",
            "https://vault.example",
        ])
        .await;
    let out = tc
        .kubectl_with_token("other-aud", other.trim())
        .run(&["get", "configmaps", "-n", &ns])
        .await;
    assert_unauthorized_after_discovery(&out);

    // Expiry: a correctly signed token whose exp has passed (beyond the minute of clock-skew leeway).
    let uid = tc
        .kubectl_ok(&["get", "sa", "gone", "-n", &ns, "-o", "jsonpath={.metadata.uid}"])
        .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    let claims = json!({"aud": ["https://kubernetes.default.svc.cluster.local"], "exp": now - 120, "iat": now - 720,
        "nbf": now - 720, "iss": "https://kubernetes.default.svc.cluster.local",
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": "gone", "uid": uid}},
        "sub": format!("system:serviceaccount:{ns}:gone")});
    let expired = tc.dev().sign_token(&claims);
    let out = tc
        .kubectl_with_token("expired", &expired)
        .run(&["get", "configmaps", "-n", &ns])
        .await;
    assert_unauthorized_after_discovery(&out);
    let mut fresh = claims.clone();
    fresh["exp"] = json!(now + 600);
    tc.kubectl_with_token("fresh", &tc.dev().sign_token(&fresh))
        .ok(&["get", "configmaps", "-n", &ns])
        .await;

    // Too short a duration is refused by the TokenRequest API itself.
    let out = tc
        .kubectl(&["create", "token", "gone", "-n", &ns, "--duration=1m"])
        .await;
    assert!(
        out.stderr.contains("may not specify a duration less than 10 minutes"),
        "{out}"
    );

    // A deleted ServiceAccount's tokens stop working, also when an account of the same name returns.
    tc.kubectl_ok(&["delete", "serviceaccount", "gone", "-n", &ns]).await;
    let out = ok.run(&["get", "configmaps", "-n", &ns]).await;
    assert_eq!(out.stderr.trim(), UNAUTHORIZED, "{out}");
    tc.kubectl_ok(&["create", "serviceaccount", "gone", "-n", &ns]).await;
    let out = ok.run(&["get", "configmaps", "-n", &ns]).await;
    assert_eq!(out.stderr.trim(), UNAUTHORIZED, "{out}");
}

#[tokio::test]
async fn a_token_bound_to_a_secret_dies_with_the_secret() {
    let tc = TestCluster::start();
    let (ns, _) = account(&tc, "bound", "app").await;
    tc.kubectl_ok(&["create", "secret", "generic", "anchor", "-n", &ns])
        .await;
    let token = tc
        .kubectl_ok(&[
            "create",
            "token",
            "app",
            "-n",
            &ns,
            "--bound-object-kind=Secret",
            "--bound-object-name=anchor",
        ])
        .await;
    let as_app = tc.kubectl_with_token("app", token.trim());
    let who = as_app.ok(&["auth", "whoami"]).await;
    assert!(who.contains(&format!("system:serviceaccount:{ns}:app")), "{who}");
    tc.kubectl_ok(&["delete", "secret", "anchor", "-n", &ns]).await;
    let out = as_app.run(&["auth", "whoami"]).await;
    assert_eq!(out.stderr.trim(), UNAUTHORIZED, "{out}");
}

#[tokio::test]
async fn kube_rs_authenticates_with_a_token_and_with_a_client_certificate() {
    let tc = TestCluster::start();
    let (ns, _) = account(&tc, "kubers", "rs").await;
    bind(&tc, &ns, "rs-view", "view", "rs").await;
    let token = tc.create_token(&ns, "rs");
    let client = tc.client_with_token(&token).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.list(&ListParams::default())
        .await
        .expect("view may list configmaps");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("a ConfigMap");
    let status = api_error(cms.create(&PostParams::default(), &cm).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        format!(
            r#"configmaps is forbidden: User "system:serviceaccount:{ns}:rs" cannot create resource "configmaps" in API group "" in the namespace "{ns}""#
        )
    );

    // A client certificate: CN is the user, O the groups.
    let yaml = tc
        .dev()
        .kubeconfig_for_client_cert("jane", &["devs", "qa"])
        .expect("a client certificate");
    let jane = client_from_yaml(&yaml).await;
    let review = Api::<SelfSubjectReview>::all(jane.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview");
    let info = review.status.and_then(|s| s.user_info).expect("userInfo");
    assert_eq!(info.username.as_deref(), Some("jane"));
    assert_eq!(
        info.groups.unwrap_or_default(),
        vec!["devs".to_string(), "qa".to_string(), "system:authenticated".to_string()]
    );
    let status = api_error(Api::<Namespace>::all(jane.clone()).list(&ListParams::default()).await);
    assert_eq!(status.code, 403);
    tc.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "devs-view",
        "--clusterrole=view",
        "--group=devs",
    ])
    .await;
    Api::<Namespace>::all(jane)
        .list(&ListParams::default())
        .await
        .expect("devs may list namespaces");
    let who = tc.kubectl_with_kubeconfig("jane", &yaml).ok(&["auth", "whoami"]).await;
    assert!(
        who.contains("jane") && who.contains("[devs qa system:authenticated]"),
        "{who}"
    );
}

#[tokio::test]
async fn subject_access_reviews_answer_for_other_users() {
    let tc = TestCluster::start();
    let (ns, _) = account(&tc, "sar", "svc").await;
    bind(&tc, &ns, "svc-view", "view", "svc").await;
    let sar = |user: &str, verb: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.clone()),
                verb: Some(verb.to_owned()),
                resource: Some("configmaps".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(tc.client().await);
    let user = format!("system:serviceaccount:{ns}:svc");
    let answer = api
        .create(&PostParams::default(), &sar(&user, "list"))
        .await
        .expect("SAR");
    let status = answer.status.expect("status");
    assert!(status.allowed);
    assert_eq!(
        status.reason.as_deref(),
        Some(
            format!(
                r#"RBAC: allowed by RoleBinding "svc-view/{ns}" of ClusterRole "view" to ServiceAccount "svc/{ns}""#
            )
            .as_str()
        )
    );
    let answer = api
        .create(&PostParams::default(), &sar(&user, "delete"))
        .await
        .expect("SAR");
    assert!(!answer.status.expect("status").allowed);
    // Asking needs the right to ask.
    let token = tc.create_token(&ns, "svc");
    let status = api_error(
        Api::<SubjectAccessReview>::all(tc.client_with_token(&token).await)
            .create(&PostParams::default(), &sar(&user, "list"))
            .await,
    );
    assert_eq!(status.code, 403);
}

#[tokio::test]
async fn the_binary_serves_https_reuses_its_cert_dir_and_can_serve_plain_http() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let certs = dir.path().join("certs");
    let certs_arg = certs.to_str().expect("a UTF-8 path");
    let first = DevClusterProcess::start_with(&["--tls-cert-dir", certs_arg]).await;
    assert!(first.url.starts_with("https://"), "{}", first.url);
    let ca = std::fs::read_to_string(certs.join("ca.crt")).expect("ca.crt is written");
    let sa_key = std::fs::read(certs.join("sa.key")).expect("sa.key is written");
    let endpoint = first.endpoint();
    assert_eq!(endpoint.ca_pem.as_deref(), Some(ca.as_str()));
    first.kubectl.ok(&["get", "ns", "default"]).await;
    first.process.terminate(TIMEOUT).await;

    let second = DevClusterProcess::start_with(&["--tls-cert-dir", certs_arg]).await;
    let again = second.endpoint();
    assert_eq!(again.ca_pem, endpoint.ca_pem, "the CA is reused");
    assert_eq!(again.token, endpoint.token, "the admin token is reused");
    assert_eq!(
        std::fs::read(certs.join("sa.key")).expect("sa.key"),
        sa_key,
        "the signing key is reused"
    );
    // The first run's kubeconfig, pointed at the new port, is still trusted and authorized.
    let old = std::fs::read_to_string(first.kubectl.kubeconfig()).expect("the first kubeconfig");
    let moved = old.replace(&endpoint.url, &again.url);
    let kc = dir.path().join("moved.kubeconfig");
    std::fs::write(&kc, moved).expect("write");
    let kubectl = capstan_e2e::Kubectl::new(&kc, dir.path().join("cache"));
    kubectl.ok(&["get", "ns", "default"]).await;
    second.process.terminate(TIMEOUT).await;

    let plain = DevClusterProcess::start_with(&["--insecure-http"]).await;
    assert!(plain.url.starts_with("http://"), "{}", plain.url);
    let kubeconfig = std::fs::read_to_string(plain.kubectl.kubeconfig()).expect("kubeconfig");
    assert!(!kubeconfig.contains("certificate-authority-data"), "{kubeconfig}");
    plain.kubectl.ok(&["get", "ns", "default"]).await;
    // Without credentials the plain port is the superuser (client-go sends no token over plain HTTP);
    // credentials that are sent still count.
    let who = plain.kubectl.ok(&["auth", "whoami"]).await;
    assert!(
        who.contains("system:unsecured") && who.contains("system:masters"),
        "{who}"
    );
    let response = raw_http::request(&plain.endpoint().with_token("wrong"), "GET", "/api", None, Vec::new()).await;
    assert_eq!(response.status, 401);
    plain.process.terminate(TIMEOUT).await;
}
