//! The read-only page at `/`: every agent with its state and every Application across agents, rendered on
//! the server as plain HTML that refreshes itself every 5 seconds (a meta refresh, no script). Every string
//! comes from a cluster and is escaped.

use std::fmt::Write as _;

use crate::store::read::{AgentView, AppView};

/// Escapes text for an HTML element or a quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn cell(value: Option<&str>) -> String {
    value.map_or_else(
        || "<td class=\"none\">—</td>".to_owned(),
        |v| format!("<td>{}</td>", escape(v)),
    )
}

/// A CSS class for a status word (only known words; anything else gets none).
fn status_class(value: Option<&str>) -> &'static str {
    match value {
        Some("Healthy" | "Synced" | "Succeeded" | "connected") => "good",
        Some("Progressing" | "OutOfSync" | "Running" | "lagging" | "Suspended") => "warn",
        Some("Degraded" | "Missing" | "Failed" | "Error" | "lost") => "bad",
        _ => "",
    }
}

fn status_cell(value: Option<&str>) -> String {
    match value {
        Some(v) => format!("<td class=\"{}\">{}</td>", status_class(value), escape(v)),
        None => cell(None),
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin-bottom:2em}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}\
th{background:#f3f3f3}.good{color:#176c2f}.warn{color:#8a5a00}.bad{color:#b00020;font-weight:bold}\
.none{color:#999}small{color:#666}";

/// The whole page; `limit` Applications at most (`apps` may hold one more, to say the list was cut).
pub fn render(agents: &[AgentView], apps: &[AppView], limit: usize) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">\
         <title>capstan-hub</title><style>{STYLE}</style></head><body><h1>capstan-hub</h1>"
    );
    render_agents(&mut html, agents);
    render_apps(&mut html, apps, limit);
    html.push_str(
        "<p><small>Read-only; refreshes every 5 s. JSON: /api/agents, /api/applications.</small></p></body></html>",
    );
    html
}

fn render_agents(html: &mut String, agents: &[AgentView]) {
    let _ = write!(html, "<h2>Agents ({})</h2>", agents.len());
    html.push_str(
        "<table id=\"agents\"><thead><tr><th>agent</th><th>cluster</th><th>state</th><th>last heartbeat</th>\
         <th>backlog</th><th>epoch</th><th>objects</th><th>version</th><th>auth</th><th>last error</th>\
         <th>last snapshot</th></tr></thead><tbody>",
    );
    for a in agents {
        let hb = a.heartbeat.as_ref();
        let text = |k: &str| hb.and_then(|h| h.get(k)).and_then(|v| v.as_str()).map(str::to_owned);
        let age = a.heartbeat_age_seconds.map(|s| format!("{s:.0} s ago"));
        let backlog = hb.map(|h| {
            let dirty = h.get("dirty").and_then(|v| v.as_u64()).unwrap_or(0);
            format!("{dirty} dirty, oldest {:.0} s", a.oldest_dirty().unwrap_or(0.0))
        });
        let snapshot = a
            .last_snapshot
            .as_ref()
            .and_then(|s| s.get("outcome"))
            .and_then(|v| v.as_str());
        let _ = write!(
            html,
            "<tr data-agent=\"{}\">{}{}{}{}{}<td>{}</td><td>{}</td>{}{}{}{}</tr>",
            escape(&a.agent_id),
            cell(Some(&a.agent_id)),
            cell(a.cluster_name.as_deref()),
            status_cell(Some(a.state)),
            cell(age.as_deref()),
            cell(backlog.as_deref()),
            a.epoch,
            a.objects,
            cell(a.reporter_version.as_deref()),
            cell(text("auth").as_deref()),
            cell(text("lastError").as_deref()),
            cell(snapshot),
        );
    }
    html.push_str("</tbody></table>");
}

fn render_apps(html: &mut String, apps: &[AppView], limit: usize) {
    let _ = write!(
        html,
        "<h2>Applications ({}{})</h2>",
        apps.len().min(limit),
        if apps.len() > limit { "+" } else { "" }
    );
    html.push_str(
        "<table id=\"applications\"><thead><tr><th>agent</th><th>namespace</th><th>name</th><th>sync</th>\
         <th>health</th><th>revision</th><th>last operation</th><th>last task</th><th>observed</th></tr></thead><tbody>",
    );
    for app in apps.iter().take(limit) {
        let _ = write!(
            html,
            "<tr data-agent=\"{}\" data-app=\"{}/{}\">{}{}{}{}{}{}{}{}{}</tr>",
            escape(&app.agent_id),
            escape(&app.namespace),
            escape(&app.name),
            cell(Some(&app.agent_id)),
            cell(Some(&app.namespace)),
            cell(Some(&app.name)),
            status_cell(app.sync.as_deref()),
            status_cell(app.health.as_deref()),
            cell(app.revision.as_deref()),
            status_cell(app.operation.as_deref()),
            cell(app.last_task.as_deref()),
            cell(app.observed_at.as_deref()),
        );
    }
    html.push_str("</tbody></table>");
    if apps.len() > limit {
        let _ = write!(
            html,
            "<p>Only the first {limit} Applications are listed; /api/applications has all.</p>"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(health: &str, revision: &str) -> AppView {
        AppView {
            agent_id: "a1".into(),
            namespace: "team-a".into(),
            name: "web".into(),
            sync: Some("Synced".into()),
            health: Some(health.into()),
            revision: Some(revision.into()),
            operation: None,
            last_task: Some("sync: succeeded".into()),
            observed_at: None,
            truncated: false,
        }
    }

    #[test]
    fn every_string_is_escaped() {
        let html = render(
            &[],
            &[app("<script>alert(1)</script>", "\"><img src=x onerror=alert(2)>")],
            10,
        );
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("&quot;&gt;&lt;img src=x"));
    }

    #[test]
    fn the_list_is_bounded() {
        let apps: Vec<AppView> = (0..3).map(|_| app("Healthy", "r")).collect();
        let html = render(&[], &apps, 2);
        assert_eq!(html.matches("data-app=").count(), 2);
        assert!(html.contains("Applications (2+)"));
        assert!(html.contains("class=\"good\">Healthy"));
    }
}
