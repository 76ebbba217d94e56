//! capstan-hub's page in a real browser: headless Chromium (Debian's `chromium`, installed by `.ci/run`)
//! loads `/` and dumps the DOM it built; the test reads the agents' states and the Applications' sync and
//! health from it, and checks that a hostile string from a cluster stays text.

use std::time::Duration;

use capstan_e2e::hub::{application, batch, heartbeat, Hub, HubOptions, Reply};
use serde_json::json;
use tokio::process::Command;

/// Upper bound for Chromium to start, load the page and print its DOM on a loaded machine.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

fn ok(reply: Result<Reply, String>) {
    let reply = reply.unwrap_or_else(|e| panic!("the hub did not answer: {e}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// The DOM of `url` after Chromium loaded it.
async fn dump_dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("a profile directory");
    let browser = std::env::var("CAPSTAN_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let mut cmd = Command::new(&browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg("--dump-dom")
    .arg(url)
    .kill_on_drop(true);
    let output = capstan_e2e::within("Chromium to dump the page", BROWSER_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|e| panic!("cannot run {browser} ({e}): install Debian's chromium (.ci/run does)"));
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && dom.contains("</html>"),
        "{browser} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    dom
}

/// The text of each cell of the table row whose opening tag carries `marker`.
fn row(dom: &str, marker: &str) -> Vec<String> {
    let start = dom
        .find(marker)
        .unwrap_or_else(|| panic!("no row {marker} in the page:\n{dom}"));
    let rest = &dom[start..];
    let end = rest.find("</tr>").expect("the row ends");
    rest[..end]
        .split("<td")
        .skip(1)
        .map(|cell| {
            let text = cell.split_once('>').map_or("", |(_, t)| t);
            text.split("</td>").next().unwrap_or("").to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_each_agents_state_and_every_application_with_its_health() {
    let hub = Hub::start(HubOptions::default()).await;
    let eu = hub.agent("prod-eu-1");
    ok(eu.heartbeat(&heartbeat(1, 0.5)).await);
    let items = vec![
        application(1, "team-a", "web", Some("Healthy"), "Synced"),
        application(2, "team-a", "api", Some("Degraded"), "OutOfSync"),
    ];
    ok(eu.report(&batch("prod-eu-1", 1, "1-1", None, items)).await);
    let us = hub.agent("prod-us-2");
    ok(us.heartbeat(&heartbeat(4, 75.0)).await);
    let mut shop = application(1, "shop", "cart", Some("Progressing"), "Synced");
    shop["summary"]["revision"] = json!("<img src=x onerror=\"document.body.dataset.pwned=1\">");
    ok(us.report(&batch("prod-us-2", 4, "4-1", None, vec![shop])).await);
    let quiet = hub.agent("edge-3");
    ok(quiet
        .report(&batch(
            "edge-3",
            1,
            "1-1",
            None,
            vec![application(1, "edge", "cdn", Some("Missing"), "OutOfSync")],
        ))
        .await);
    let task = hub.enqueue_task("prod-eu-1", "sync", "team-a", "web", json!({})).await;
    ok(eu
        .result(&task, &json!({"state": "succeeded", "message": "synced"}))
        .await);

    let dom = dump_dom(hub.url()).await;

    // Agents: connected (fresh heartbeat, small backlog), lagging (backlog of 75 s), lost (no heartbeat).
    assert_eq!(row(&dom, "data-agent=\"prod-eu-1\">")[2], "connected");
    assert_eq!(row(&dom, "data-agent=\"prod-us-2\">")[2], "lagging");
    assert_eq!(row(&dom, "data-agent=\"edge-3\">")[2], "lost");
    // Applications of every agent: agent, namespace, name, sync, health, revision, last operation, last task.
    let web = row(&dom, "data-app=\"team-a/web\"");
    assert_eq!(web[..6], ["prod-eu-1", "team-a", "web", "Synced", "Healthy", "1a2b3c"]);
    assert_eq!(web[6..8], ["Succeeded", "sync: succeeded"]);
    assert_eq!(row(&dom, "data-app=\"team-a/api\"")[3..5], ["OutOfSync", "Degraded"]);
    let cart = row(&dom, "data-app=\"shop/cart\"");
    assert_eq!((cart[0].as_str(), cart[4].as_str()), ("prod-us-2", "Progressing"));
    assert_eq!(row(&dom, "data-app=\"edge/cdn\"")[4], "Missing");
    // The hostile revision is text, not an element, and its handler never ran.
    assert!(cart[5].starts_with("&lt;img src=x"), "{}", cart[5]);
    assert!(!dom.contains("<img") && !dom.contains("data-pwned"), "{dom}");
}
