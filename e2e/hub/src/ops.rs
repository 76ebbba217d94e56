//! The hub's own operator surface, for tests and the demo: `/api/*` (agents, objects, tasks), `/_hub/*`
//! (faults, tokens, the request log, search, verify) and the page at `/`. It has no authentication: the hub is
//! a test and demo receiver, meant for loopback (README.md says so). These requests are not in the request log
//! (a search would otherwise find its own needle).

use std::collections::HashMap;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::faults::{Action, Fault};
use crate::http::{self, Body};
use crate::server::Hub;
use crate::store::{self, read, tasks, StoreError};
use crate::wire;

/// Largest body of an operator request.
const MAX_OPS_BODY: usize = 1024 * 1024;
/// Most Applications the page lists.
pub const PAGE_APPLICATIONS: usize = 2000;

type Reply = Result<Response<Body>, (u16, String)>;

fn ok(body: Value) -> Reply {
    Ok(http::json_response(200, &body))
}

fn fail(code: u16, message: impl Into<String>) -> Reply {
    Err((code, message.into()))
}

fn storage(e: StoreError) -> (u16, String) {
    (500, e.to_string())
}

pub async fn handle(hub: &Hub, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let query = parse_query(parts.uri.query());
    let segments: Vec<String> = parts.uri.path().split('/').skip(1).map(decode).collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let body = match http::read_body(body, &parts.headers, MAX_OPS_BODY).await {
        Ok(body) => body,
        Err(e) => return http::wire_error_response(&e),
    };
    let reply: Reply = async {
        match (&parts.method, segments.as_slice()) {
            (&Method::GET, [""]) => page(hub).await,
            (&Method::GET, ["healthz"]) => Ok(http::response(200, "text/plain; charset=utf-8", "ok")),
            (&Method::GET, ["api", "agents"]) => ok(json!(agents(hub).await?)),
            (&Method::GET, ["api", "agents", agent, what]) => agent_data(hub, agent, what, &query).await,
            (&Method::GET, ["api", "applications"]) => {
                let apps = hub
                    .store
                    .call(|c| read::applications(c, usize::MAX >> 1))
                    .await
                    .map_err(storage)?;
                ok(json!(apps))
            }
            (&Method::POST, ["api", "tasks"]) => enqueue(hub, &body).await,
            (&Method::GET, ["api", "tasks"]) => {
                let agent = query.get("agent").cloned();
                ok(json!(hub
                    .store
                    .call(move |c| tasks::tasks(c, agent.as_deref()))
                    .await
                    .map_err(storage)?))
            }
            (&Method::GET, ["api", "tasks", id]) => {
                let id = id.to_string();
                match hub.store.call(move |c| tasks::task(c, &id)).await.map_err(storage)? {
                    Some(task) => ok(task),
                    None => fail(404, "no such task"),
                }
            }
            (&Method::GET, ["_hub", "faults"]) => ok(json!({"pending": faults(hub).pending()})),
            (&Method::DELETE, ["_hub", "faults"]) => {
                faults(hub).clear();
                ok(json!({"pending": []}))
            }
            (&Method::POST, ["_hub", "faults"]) => post_fault(hub, &body).await,
            (&Method::POST, ["_hub", "tokens"]) => change_tokens(hub, &body).await,
            (&Method::GET, ["_hub", "requests"]) => request_log(hub, &query).await,
            (&Method::POST, ["_hub", "search"]) => search(hub, &body).await,
            (&Method::GET, ["_hub", "verify"]) => verify(hub).await,
            _ => fail(
                404,
                format!("no such page or API: {} {}", parts.method, parts.uri.path()),
            ),
        }
    }
    .await;
    reply.unwrap_or_else(|(code, message)| {
        http::json_response(code, &http::error_body(http::error_code(code), &message))
    })
}

fn faults(hub: &Hub) -> std::sync::MutexGuard<'_, crate::faults::Faults> {
    hub.faults.lock().unwrap_or_else(|p| p.into_inner())
}

fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(&v.replace('+', " ")))
        })
        .collect()
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

fn parse_body<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, (u16, String)> {
    wire::parse_json(what, body).map_err(|e| (e.status, e.message))
}

/// The agents, with their waiting long polls.
async fn agents(hub: &Hub) -> Result<Vec<read::AgentView>, (u16, String)> {
    let mut agents = hub.store.call(|c| read::agents(c)).await.map_err(storage)?;
    for a in &mut agents {
        a.polling = hub.polls_of(&a.agent_id);
    }
    Ok(agents)
}

async fn page(hub: &Hub) -> Reply {
    let agents = agents(hub).await?;
    let apps = hub
        .store
        .call(|c| read::applications(c, PAGE_APPLICATIONS + 1))
        .await
        .map_err(storage)?;
    let html = crate::page::render(&agents, &apps, PAGE_APPLICATIONS);
    Ok(http::response(200, "text/html; charset=utf-8", html))
}

async fn agent_data(hub: &Hub, agent: &str, what: &str, query: &HashMap<String, String>) -> Reply {
    let agent = agent.to_owned();
    let q = read::ObjectQuery {
        kind: query.get("kind").cloned(),
        include_deleted: query.get("deleted").is_some_and(|v| v == "true"),
    };
    let data = match what {
        "objects" => hub.store.call(move |c| read::objects(c, &agent, &q)).await,
        "events" => hub.store.call(move |c| read::events(c, &agent)).await,
        "snapshots" => hub.store.call(move |c| read::snapshots(c, &agent)).await,
        _ => return fail(404, format!("agents have objects, events and snapshots, not {what:?}")),
    };
    ok(json!(data.map_err(storage)?))
}

async fn enqueue(hub: &Hub, body: &[u8]) -> Reply {
    let task = wire::parse_new_task(body).map_err(|e| (e.status, e.message))?;
    if !crate::server::valid_agent_id(&task.agent_id) {
        return fail(422, format!("agentId {:?} is not a valid agent id", task.agent_id));
    }
    let id = hub
        .store
        .transaction(move |tx| tasks::enqueue(tx, &task))
        .await
        .map_err(storage)?;
    hub.tasks_changed.notify_waiters();
    ok(json!({"id": id}))
}

async fn post_fault(hub: &Hub, body: &[u8]) -> Reply {
    let value: Value = parse_body("the fault", body)?;
    let fault = Fault::from_json(value).map_err(|m| (422, m))?;
    match &fault.action {
        Action::Forget => {
            let forgotten = hub.store.transaction(store::forget).await.map_err(storage)?;
            ok(json!({"forgotten": {"objects": forgotten}}))
        }
        Action::Resync { mode } => {
            let (agent, mode) = (fault.agent.clone(), mode.as_str());
            let n = hub
                .store
                .transaction(move |tx| store::request_resync(tx, agent.as_deref(), mode))
                .await
                .map_err(storage)?;
            ok(json!({"agents": n}))
        }
        _ => {
            let mut faults = faults(hub);
            faults.push(fault);
            ok(json!({"pending": faults.pending()}))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenChange {
    #[serde(default)]
    add: Vec<String>,
    #[serde(default)]
    remove: Vec<String>,
}

async fn change_tokens(hub: &Hub, body: &[u8]) -> Reply {
    let change: TokenChange = parse_body("the token change", body)?;
    if change
        .add
        .iter()
        .any(|t| t.trim().is_empty() || t.contains(char::is_whitespace))
    {
        return fail(422, "a token is non-empty and has no whitespace");
    }
    let (add, remove) = (change.add.clone(), change.remove.clone());
    hub.store
        .transaction(move |tx| {
            remove.iter().try_for_each(|t| store::change_token(tx, t, false))?;
            add.iter().try_for_each(|t| store::change_token(tx, t, true))
        })
        .await
        .map_err(storage)?;
    let mut tokens = hub.tokens.write().unwrap_or_else(|p| p.into_inner());
    for t in &change.remove {
        tokens.remove(t);
    }
    tokens.extend(change.add);
    ok(json!({"tokens": tokens.len()}))
}

async fn request_log(hub: &Hub, query: &HashMap<String, String>) -> Reply {
    let number = |k: &str, default: i64| -> Result<i64, (u16, String)> {
        query.get(k).map_or(Ok(default), |v| {
            v.parse().map_err(|_| (400, format!("{k} must be a number")))
        })
    };
    let q = read::RequestQuery {
        agent: query.get("agent").cloned(),
        endpoint: query.get("endpoint").cloned(),
        after: number("after", 0)?,
        bodies: query.get("bodies").is_some_and(|v| v == "true"),
        limit: number("limit", 1000)?.clamp(1, 10_000),
    };
    ok(json!(hub
        .store
        .call(move |c| read::requests(c, &q))
        .await
        .map_err(storage)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Search {
    needle: String,
}

async fn search(hub: &Hub, body: &[u8]) -> Reply {
    let Search { needle } = parse_body("the search", body)?;
    if needle.chars().count() < 4 {
        return fail(422, "the needle has at least 4 characters");
    }
    ok(hub
        .store
        .call(move |c| read::search(c, &needle))
        .await
        .map_err(storage)?)
}

async fn verify(hub: &Hub) -> Reply {
    let (requests, items, deletions) = hub.store.call(|c| read::verify_facts(c)).await.map_err(storage)?;
    let violations = crate::verify::verify(&requests, &items, &deletions);
    ok(json!({
        "ok": violations.is_empty(),
        "violations": violations,
        "checked": {"requests": requests.len(), "items": items.len(), "deletions": deletions.len()},
    }))
}
