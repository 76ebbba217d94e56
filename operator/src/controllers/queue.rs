//! `capstan_reconcile_queue_depth{controller}`: how many objects wait for their reconcile to start.
//!
//! kube-runtime's `Controller` keeps its queue (the scheduler) to itself, so the depth is counted from
//! the outside, at the two ends the controller code owns: every trigger that reaches the controller
//! — an event of the main watch, a related object mapped to the objects it concerns, a refresh request —
//! marks its object pending ([`QueueDepth::count`], [`QueueDepth::mapper`], [`QueueDepth::refs`]), and the
//! reconcile starting (or the controller finding the object gone) clears it ([`QueueDepth::started`]).
//! Pending objects are a set, as the scheduler's queue is: many triggers of one object before it runs
//! count once, and a trigger while the object is being reconciled keeps it pending until its next run.
//!
//! Not counted: timed requeues (`Action::requeue`, error backoff), which wait for their time rather than
//! for a worker; a trigger that arrives for an object already pending changes nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use prometheus::IntGauge;

use super::lock;

/// The pending objects of one controller, mirrored into its gauge.
#[derive(Debug)]
pub struct QueueDepth {
    pending: Mutex<HashSet<String>>,
    gauge: IntGauge,
}

impl QueueDepth {
    /// An empty queue reporting to `gauge`.
    pub fn new(gauge: IntGauge) -> Arc<Self> {
        gauge.set(0);
        Arc::new(QueueDepth {
            pending: Mutex::new(HashSet::new()),
            gauge,
        })
    }

    /// Object `namespace/name` was triggered.
    pub fn triggered(&self, key: String) {
        let mut pending = lock(&self.pending);
        pending.insert(key);
        self.gauge.set(pending.len() as i64);
    }

    /// The reconcile of `namespace/name` started (or it was found gone): it no longer waits.
    pub fn started(&self, key: &str) {
        let mut pending = lock(&self.pending);
        pending.remove(key);
        self.gauge.set(pending.len() as i64);
    }

    /// Whether `namespace/name` was triggered and its reconcile has not started yet.
    pub fn is_pending(&self, key: &str) -> bool {
        lock(&self.pending).contains(key)
    }

    /// Objects waiting now.
    pub fn depth(&self) -> usize {
        lock(&self.pending).len()
    }

    /// The controller's main stream, each object it yields marked pending.
    pub fn count<K, E, S>(self: &Arc<Self>, stream: S) -> impl Stream<Item = Result<K, E>> + Send + 'static
    where
        K: Resource + Send + 'static,
        E: Send + 'static,
        S: Stream<Item = Result<K, E>> + Send + 'static,
    {
        let queue = Arc::clone(self);
        stream.inspect(move |item| {
            if let Ok(obj) = item {
                queue.triggered(key_of(obj.namespace().as_deref(), &obj.name_any()));
            }
        })
    }

    /// A stream of references to reconcile (`Controller::reconcile_on`), each marked pending.
    pub fn refs<K, S>(self: &Arc<Self>, stream: S) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource + Send + 'static,
        K::DynamicType: Send,
        S: Stream<Item = ObjectRef<K>> + Send + 'static,
    {
        let queue = Arc::clone(self);
        stream.inspect(move |r| queue.triggered(ref_key(r)))
    }

    /// A `watches_stream` mapper whose results are marked pending.
    pub fn mapper<Other, K, I>(
        self: &Arc<Self>,
        map: impl Fn(Other) -> I + Send + Sync + 'static,
    ) -> impl Fn(Other) -> Vec<ObjectRef<K>> + Send + Sync + 'static
    where
        K: Resource,
        I: IntoIterator<Item = ObjectRef<K>>,
    {
        let queue = Arc::clone(self);
        move |other| {
            let refs: Vec<ObjectRef<K>> = map(other).into_iter().collect();
            for r in &refs {
                queue.triggered(ref_key(r));
            }
            refs
        }
    }
}

/// The key of an object reference: `namespace/name`, as [`super::ns_name`] makes for objects.
pub fn ref_key<K: Resource>(r: &ObjectRef<K>) -> String {
    key_of(r.namespace.as_deref(), &r.name)
}

fn key_of(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{}", namespace.unwrap_or_default(), name)
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::ObjectMeta;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[tokio::test]
    async fn counts_each_pending_object_once_until_it_starts() {
        let gauge = IntGauge::new("depth", "test").unwrap();
        let queue = QueueDepth::new(gauge.clone());
        let main = stream::iter(vec![Ok::<_, ()>(cm("a")), Ok(cm("b")), Err(()), Ok(cm("a"))]);
        let seen: Vec<_> = queue.count(main).collect().await;
        assert_eq!(seen.len(), 4, "the stream passes through unchanged");
        assert_eq!((queue.depth(), gauge.get()), (2, 2), "a twice, b once");

        let refresh = stream::iter(vec![ObjectRef::<ConfigMap>::new("c").within("ns")]);
        let _: Vec<_> = queue.refs(refresh).collect().await;
        let map = queue.mapper(|s: Secret| {
            let name = s.metadata.name.unwrap_or_default();
            vec![
                ObjectRef::<ConfigMap>::new(&name).within("ns"),
                ObjectRef::new("a").within("ns"),
            ]
        });
        let mapped = map(Secret {
            metadata: ObjectMeta {
                name: Some("d".into()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        });
        assert_eq!(mapped.len(), 2, "the mapper's answer is kept");
        assert_eq!(gauge.get(), 4, "a, b, c, d");

        queue.started("ns/a");
        queue.started("ns/b");
        queue.started("ns/unknown");
        assert_eq!(gauge.get(), 2);
        // Triggered again while running: waits for its next run.
        queue.triggered("ns/a".into());
        assert_eq!(gauge.get(), 3);
        for key in ["ns/a", "ns/c", "ns/d"] {
            queue.started(key);
        }
        assert_eq!((queue.depth(), gauge.get()), (0, 0));
    }
}
