use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::reporter::project::project;
use crate::reporter::wire::ItemResult;

fn app(uid: &str, health: &str) -> Projected {
    project(
        Kind::Application,
        &json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid},
                "status": {"health": {"status": health}}}),
    )
    .unwrap()
}

fn cache_with(n: usize, now: Instant) -> Cache {
    let mut cache = Cache::new(1000);
    for i in 0..n {
        cache.apply(app(&format!("u{i:04}"), "Healthy"), now);
    }
    cache
}

#[test]
fn same_hash_is_not_dirty_and_changes_coalesce() {
    let now = Instant::now();
    let mut cache = Cache::new(10);
    assert!(cache.apply(app("a", "Healthy"), now));
    cache.dirty.clear();
    assert!(!cache.apply(app("a", "Healthy"), now), "no change, not dirty");
    for h in ["Degraded", "Progressing", "Healthy", "Degraded"] {
        cache.apply(app("a", h), now);
    }
    assert_eq!(cache.dirty.len(), 1);
    cache.remove("a", now);
    let mut term = Term::new(3, Phase::Delta);
    let batch = term.next_batch(&mut cache, now, "t").unwrap();
    assert_eq!(batch.items.len(), 1);
    assert_eq!(batch.items[0].op, "delete");
    assert_eq!(batch.items[0].obj_ref.uid, "a");
    assert!(batch.items[0].content_hash.is_none());
}

#[test]
fn deltas_are_numbered_and_bounded_to_200() {
    let now = Instant::now();
    let mut cache = cache_with(450, now);
    let mut term = Term::new(2, Phase::Delta);
    let sizes: Vec<usize> = std::iter::from_fn(|| term.next_batch(&mut cache, now, "t"))
        .map(|b| {
            assert!(b.id.starts_with("2-"));
            b.items.len()
        })
        .collect();
    assert_eq!(sizes, vec![200, 200, 50]);
    assert_eq!(term.next_seq(), 451);
}

#[test]
fn a_batch_stays_under_one_mebibyte() {
    let now = Instant::now();
    let mut cache = Cache::new(1000);
    for i in 0..200 {
        let mut p = app(&format!("u{i}"), "Healthy");
        p.status = json!({"blob": "y".repeat(200 * 1024)});
        cache.apply(p, now);
    }
    let mut term = Term::new(1, Phase::Delta);
    let b = term.next_batch(&mut cache, now, "t").unwrap();
    assert!(b.items.len() < 6, "{}", b.items.len());
    let bytes = serde_json::to_vec(&b.items).unwrap().len();
    assert!(bytes <= MAX_BATCH_BYTES, "{bytes}");
    assert_eq!(cache.dirty.len(), 200 - b.items.len(), "the rest stays dirty");
}

#[test]
fn snapshot_parts_end_with_a_counted_final() {
    let now = Instant::now();
    let mut cache = cache_with(250, now);
    let mut term = Term::new(1, Phase::Delta);
    term.phase = term.snapshot(&mut cache);
    assert!(cache.dirty.is_empty(), "a snapshot sends everything");
    let first = term.next_batch(&mut cache, now, "t").unwrap();
    let s1 = first.snapshot.clone().unwrap();
    assert_eq!((s1.part, s1.final_, s1.total_objects), (1, false, None));
    cache.apply(app("u0000", "Degraded"), now); // a change during the snapshot is sent afterwards
    let second = term.next_batch(&mut cache, now, "t").unwrap();
    let s2 = second.snapshot.clone().unwrap();
    assert_eq!(
        (s2.part, s2.final_, s2.total_objects, s2.confirmed_empty),
        (2, true, Some(250), false)
    );
    assert_eq!(s1.id, s2.id);
    term.acked(&mut cache, first, &[]);
    assert!(matches!(term.phase, Phase::Snapshot { .. }));
    let outcome = term.acked(&mut cache, second, &[]);
    assert_eq!(outcome.snapshot_completed, Some(s2.id));
    assert_eq!(term.phase, Phase::Delta);
    let delta = term.next_batch(&mut cache, now, "t").unwrap();
    assert_eq!(delta.items.len(), 1);
    assert!(delta.snapshot.is_none());
    assert!(delta.items[0].seq > 250);
}

#[test]
fn an_empty_snapshot_is_confirmed_empty() {
    let now = Instant::now();
    let mut cache = Cache::new(10);
    let mut term = Term::new(1, Phase::Delta);
    term.phase = term.snapshot(&mut cache);
    let b = term.next_batch(&mut cache, now, "t").unwrap();
    let s = b.snapshot.unwrap();
    assert!(s.final_ && s.confirmed_empty && s.total_objects == Some(0));
}

#[test]
fn split_isolates_the_bad_item_and_halve_shrinks_batches() {
    let now = Instant::now();
    let mut cache = cache_with(4, now);
    let mut term = Term::new(1, Phase::Delta);
    let batch = term.next_batch(&mut cache, now, "t").unwrap();
    let seqs: Vec<u64> = batch.items.iter().map(|i| i.seq).collect();
    assert_eq!(term.split(batch.clone()), None);
    let a = term.next_batch(&mut cache, now, "t").unwrap();
    let b = term.next_batch(&mut cache, now, "t").unwrap();
    assert_eq!(a.items.len() + b.items.len(), 4);
    assert_ne!(a.id, batch.id);
    let again: Vec<u64> = a.items.iter().chain(&b.items).map(|i| i.seq).collect();
    assert_eq!(again, seqs, "halves keep their seqs");
    let single = Batch {
        items: a.items[..1].to_vec(),
        entries: a.entries[..1].to_vec(),
        ..a.clone()
    };
    assert_eq!(term.split(single), Some(("Application".to_string(), "upsert")));
    term.halve(b);
    assert_eq!(term.max_items, MAX_BATCH_ITEMS / 2);
    assert_eq!(term.pending.len(), 2);
}

#[test]
fn retryable_results_go_back_and_the_others_are_dropped() {
    let now = Instant::now();
    let mut cache = cache_with(3, now);
    let mut term = Term::new(1, Phase::Delta);
    let batch = term.next_batch(&mut cache, now, "t").unwrap();
    let results = [
        ItemResult {
            i: 0,
            code: "busy".into(),
            retryable: true,
        },
        ItemResult {
            i: 2,
            code: "invalid".into(),
            retryable: false,
        },
    ];
    let outcome = term.acked(&mut cache, batch, &results);
    assert_eq!(outcome.retried, 1);
    assert_eq!(outcome.dropped.len(), 1);
    assert_eq!(outcome.stored.len(), 1);
    let again = term.next_batch(&mut cache, now + Duration::from_secs(1), "t").unwrap();
    assert_eq!(again.items.len(), 1);
    assert_eq!(again.items[0].seq, 4, "sent again with a new seq");
}

#[test]
fn digest_chunks_and_needs() {
    let now = Instant::now();
    let mut cache = cache_with(1500, now);
    cache.dirty.clear();
    let mut term = Term::new(5, Phase::Delta);
    term.phase = term.digest(&cache);
    assert!(
        term.next_batch(&mut cache, now, "t").is_none(),
        "no batch while digesting"
    );
    let c1 = term.next_digest_chunk(&cache).unwrap();
    assert_eq!((c1.part, c1.final_, c1.items.len()), (1, false, MAX_DIGEST_ENTRIES));
    term.digest_answered(&mut cache, &c1, &["u0001".into()], now);
    let c2 = term.next_digest_chunk(&cache).unwrap();
    assert_eq!((c2.part, c2.final_, c2.items.len()), (2, true, 500));
    assert_eq!(c1.id, c2.id);
    term.digest_answered(&mut cache, &c2, &["gone-uid".into()], now);
    assert_eq!(term.phase, Phase::Delta);
    let b = term.next_batch(&mut cache, now, "t").unwrap();
    let mut ops: Vec<(&str, &str)> = b.items.iter().map(|i| (i.op, i.obj_ref.uid.as_str())).collect();
    ops.sort();
    assert_eq!(ops, vec![("delete", "gone-uid"), ("upsert", "u0001")]);
}

#[test]
fn a_removed_event_leaves_no_tombstone() {
    let now = Instant::now();
    let mut cache = Cache::new(10);
    let event = project(
        Kind::Event,
        &json!({"metadata": {"name": "e", "namespace": "ns", "uid": "e1"},
                "involvedObject": {"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "name": "a"}}),
    )
    .unwrap();
    cache.apply(event, now);
    cache.remove("e1", now);
    assert!(cache.dirty.is_empty() && cache.is_empty());
}
