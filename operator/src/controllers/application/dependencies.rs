//! `spec.dependsOn`: Applications in the same namespace that must be Synced and Healthy before this one
//! syncs. Pure: the caller hands in the namespace's dependency graph (from the controller's store).
//!
//! A cycle is reported (condition reason `DependencyCycle`, with the path) and never waited on forever:
//! an Application in a cycle does not sync until the cycle is broken, but it is `Stalled`, not hanging.
//! A missing dependency counts as not ready (it may be created later, e.g. by an ApplicationSet).

use std::collections::{BTreeMap, BTreeSet};

/// What this Application needs to know about another one in its namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// Its `spec.dependsOn`.
    pub depends_on: Vec<String>,
    /// `status.sync.status == Synced`.
    pub synced: bool,
    /// `status.health.status == Healthy`.
    pub healthy: bool,
    /// No sync operation running.
    pub idle: bool,
}

/// Whether this Application may sync now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No dependencies, or every one is Synced and Healthy.
    Ready,
    /// Some dependency is missing or not Synced and Healthy yet; the message names them.
    Waiting(String),
    /// `dependsOn` forms a cycle through this Application; the message shows it (`a -> b -> a`).
    Cycle(String),
}

/// The verdict for `app` among `peers` (every Application of the namespace, `app` included).
pub fn check(app: &str, peers: &BTreeMap<String, Peer>) -> Verdict {
    let Some(me) = peers.get(app) else {
        return Verdict::Ready;
    };
    if me.depends_on.is_empty() {
        return Verdict::Ready;
    }
    if let Some(cycle) = find_cycle(app, peers) {
        return Verdict::Cycle(format!("dependsOn forms a cycle: {}", cycle.join(" -> ")));
    }
    let waiting: Vec<String> = dedup(&me.depends_on)
        .into_iter()
        .filter_map(|dep| match peers.get(dep) {
            None => Some(format!("{dep} (not found)")),
            Some(p) if !(p.synced && p.healthy && p.idle) => Some(format!(
                "{dep} ({}, {})",
                if p.synced { "Synced" } else { "not Synced" },
                if p.healthy { "Healthy" } else { "not Healthy" }
            )),
            Some(_) => None,
        })
        .collect();
    if waiting.is_empty() {
        Verdict::Ready
    } else {
        Verdict::Waiting(format!("waiting for dependencies: {}", waiting.join(", ")))
    }
}

fn dedup(names: &[String]) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    names.iter().map(String::as_str).filter(|n| seen.insert(*n)).collect()
}

/// A cycle through `start` (`[start, .., start]`), found by depth-first search with an explicit
/// stack (no recursion: the graph comes from user input). Self-dependencies are cycles too.
pub fn find_cycle(start: &str, peers: &BTreeMap<String, Peer>) -> Option<Vec<String>> {
    // Stack of (node, index of the next edge to follow); `path` mirrors the stack's nodes.
    let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
    let mut visited: BTreeSet<&str> = BTreeSet::new();
    while let Some((node, edge)) = stack.last_mut() {
        let deps = peers.get(*node).map(|p| p.depends_on.as_slice()).unwrap_or_default();
        let Some(next) = deps.get(*edge).map(String::as_str) else {
            stack.pop();
            continue;
        };
        *edge += 1;
        if next == start {
            let mut path: Vec<String> = stack.iter().map(|(n, _)| n.to_string()).collect();
            path.push(start.to_string());
            return Some(path);
        }
        if visited.insert(next) {
            stack.push((next, 0));
        }
    }
    None
}

/// The Applications that depend on `name` (directly), for triggering them when it changes.
pub fn dependents<'a>(name: &str, peers: &'a BTreeMap<String, Peer>) -> Vec<&'a str> {
    peers
        .iter()
        .filter(|(_, p)| p.depends_on.iter().any(|d| d == name))
        .map(|(n, _)| n.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(deps: &[&str], synced: bool, healthy: bool) -> Peer {
        Peer {
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            synced,
            healthy,
            idle: true,
        }
    }

    fn graph(entries: &[(&str, Peer)]) -> BTreeMap<String, Peer> {
        entries.iter().map(|(n, p)| (n.to_string(), p.clone())).collect()
    }

    #[test]
    fn ready_waiting_and_missing() {
        let g = graph(&[
            ("app", peer(&["db", "cache"], false, false)),
            ("db", peer(&[], true, true)),
            ("cache", peer(&[], true, false)),
        ]);
        assert_eq!(
            check("app", &g),
            Verdict::Waiting("waiting for dependencies: cache (Synced, not Healthy)".into())
        );
        assert_eq!(check("db", &g), Verdict::Ready);
        let g = graph(&[("app", peer(&["ghost"], false, false))]);
        assert_eq!(
            check("app", &g),
            Verdict::Waiting("waiting for dependencies: ghost (not found)".into())
        );
        let mut running = graph(&[("app", peer(&["db"], false, false)), ("db", peer(&[], true, true))]);
        assert_eq!(check("app", &running), Verdict::Ready);
        running.get_mut("db").unwrap().idle = false;
        assert!(matches!(check("app", &running), Verdict::Waiting(_)));
    }

    #[test]
    fn cycles_are_reported_not_waited_on() {
        let g = graph(&[
            ("a", peer(&["b"], true, true)),
            ("b", peer(&["c"], true, true)),
            ("c", peer(&["a"], true, true)),
            ("d", peer(&["a"], true, true)),
        ]);
        assert_eq!(
            check("a", &g),
            Verdict::Cycle("dependsOn forms a cycle: a -> b -> c -> a".into())
        );
        assert!(matches!(check("b", &g), Verdict::Cycle(_)));
        // d depends on the cycle but is not part of it: it waits? No: its dependency is Synced/Healthy.
        assert_eq!(check("d", &g), Verdict::Ready);
        let selfish = graph(&[("s", peer(&["s"], true, true))]);
        assert_eq!(
            check("s", &selfish),
            Verdict::Cycle("dependsOn forms a cycle: s -> s".into())
        );
        assert_eq!(dependents("a", &g), vec!["c", "d"]);
    }

    #[test]
    fn deep_and_diamond_graphs_terminate() {
        let mut entries: Vec<(String, Peer)> = (0..5000)
            .map(|i| (format!("n{i}"), peer(&[&format!("n{}", i + 1)], true, true)))
            .collect();
        entries.push(("n5000".into(), peer(&[], true, true)));
        let g: BTreeMap<String, Peer> = entries.into_iter().collect();
        assert_eq!(find_cycle("n0", &g), None);
        let diamond = graph(&[
            ("top", peer(&["l", "r"], true, true)),
            ("l", peer(&["bottom"], true, true)),
            ("r", peer(&["bottom"], true, true)),
            ("bottom", peer(&[], true, true)),
        ]);
        assert_eq!(check("top", &diamond), Verdict::Ready);
    }
}
