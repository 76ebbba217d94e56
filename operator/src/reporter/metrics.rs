//! `capstan_reporter_*` metrics, registered only by a process that runs the reporter.

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Every reporter metric. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ReporterMetrics {
    /// `leader`: 1 in the sending replica.
    pub leader: IntGauge,
    /// `connected`: 1 while the last request got an answer that was not an error.
    pub connected: IntGauge,
    /// `last_ack_timestamp_seconds`.
    pub last_ack_timestamp: Gauge,
    /// `dirty_objects{kind}`.
    pub dirty_objects: IntGaugeVec,
    /// `oldest_dirty_age_seconds`.
    pub oldest_dirty_age: Gauge,
    /// `batches_total{result}`.
    pub batches: IntCounterVec,
    /// `items_total{kind,op,result}`.
    pub items: IntCounterVec,
    /// `items_coalesced_total`.
    pub items_coalesced: IntCounter,
    /// `items_dropped_total{reason}`.
    pub items_dropped: IntCounterVec,
    /// `request_duration_seconds{endpoint,code}`.
    pub request_duration: HistogramVec,
    /// `retries_total{reason}`.
    pub retries: IntCounterVec,
    /// `resyncs_total{trigger}`.
    pub resyncs: IntCounterVec,
    /// `auth_failures_total`.
    pub auth_failures: IntCounter,
    /// `heartbeats_total{result}`.
    pub heartbeats: IntCounterVec,
    /// `tasks_total{type,state}`.
    pub tasks: IntCounterVec,
    /// `end_to_end_latency_seconds`: change seen → acknowledged.
    pub end_to_end_latency: Histogram,
}

impl ReporterMetrics {
    /// Creates and registers every metric.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let name = |n: &str| format!("capstan_reporter_{n}");
        macro_rules! reg {
            ($m:expr) => {{
                let m = $m;
                registry.register(Box::new(m.clone()))?;
                m
            }};
        }
        let counter = |n: &str, help: &str, labels: &[&str]| IntCounterVec::new(Opts::new(name(n), help), labels);
        let buckets = vec![0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0];
        Ok(ReporterMetrics {
            leader: reg!(IntGauge::new(name("leader"), "1 in the replica that sends.")?),
            connected: reg!(IntGauge::new(name("connected"), "1 while the receiver answers.")?),
            last_ack_timestamp: reg!(Gauge::new(
                name("last_ack_timestamp_seconds"),
                "Unix time of the last acknowledged batch."
            )?),
            dirty_objects: reg!(IntGaugeVec::new(
                Opts::new(name("dirty_objects"), "Objects waiting to be sent."),
                &["kind"]
            )?),
            oldest_dirty_age: reg!(Gauge::new(
                name("oldest_dirty_age_seconds"),
                "Age of the oldest change not yet acknowledged."
            )?),
            batches: reg!(counter("batches_total", "Batches sent, by result.", &["result"])?),
            items: reg!(counter(
                "items_total",
                "Items sent, by kind, op and result.",
                &["kind", "op", "result"]
            )?),
            items_coalesced: reg!(IntCounter::new(
                name("items_coalesced_total"),
                "Changes folded into an object already waiting to be sent."
            )?),
            items_dropped: reg!(counter(
                "items_dropped_total",
                "Items given up (refused for good by the receiver); should stay 0.",
                &["reason"]
            )?),
            request_duration: reg!(HistogramVec::new(
                HistogramOpts::new(name("request_duration_seconds"), "Requests to the receiver.")
                    .buckets(buckets.clone()),
                &["endpoint", "code"]
            )?),
            retries: reg!(counter(
                "retries_total",
                "Requests that will be tried again, by reason.",
                &["reason"]
            )?),
            resyncs: reg!(counter(
                "resyncs_total",
                "Digest rounds and snapshots, by trigger.",
                &["trigger"]
            )?),
            auth_failures: reg!(IntCounter::new(name("auth_failures_total"), "401 and 403 answers.")?),
            heartbeats: reg!(counter("heartbeats_total", "Heartbeats, by result.", &["result"])?),
            tasks: reg!(counter(
                "tasks_total",
                "Tasks, by type and final state.",
                &["type", "state"]
            )?),
            end_to_end_latency: reg!(Histogram::with_opts(
                HistogramOpts::new(
                    name("end_to_end_latency_seconds"),
                    "From a change seen in the cluster to its acknowledgement."
                )
                .buckets(buckets)
            )?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_of_the_contract_is_registered() {
        let registry = Registry::new();
        let m = ReporterMetrics::register(&registry).unwrap();
        m.dirty_objects.with_label_values(&["Application"]).set(1);
        m.batches.with_label_values(&["ok"]).inc();
        m.items.with_label_values(&["Application", "upsert", "stored"]).inc();
        m.items_dropped.with_label_values(&["invalid"]).inc();
        m.request_duration.with_label_values(&["reports", "200"]).observe(0.1);
        m.retries.with_label_values(&["timeout"]).inc();
        m.resyncs.with_label_values(&["start"]).inc();
        m.heartbeats.with_label_values(&["ok"]).inc();
        m.tasks.with_label_values(&["sync", "succeeded"]).inc();
        let names: Vec<String> = registry.gather().iter().map(|f| f.name().to_string()).collect();
        for want in [
            "leader",
            "connected",
            "last_ack_timestamp_seconds",
            "dirty_objects",
            "oldest_dirty_age_seconds",
            "batches_total",
            "items_total",
            "items_coalesced_total",
            "items_dropped_total",
            "request_duration_seconds",
            "retries_total",
            "resyncs_total",
            "auth_failures_total",
            "heartbeats_total",
            "tasks_total",
            "end_to_end_latency_seconds",
        ] {
            assert!(names.contains(&format!("capstan_reporter_{want}")), "{want}: {names:?}");
        }
    }
}
