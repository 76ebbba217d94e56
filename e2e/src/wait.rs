//! Bounded waiting. Tests synchronise on observable conditions, each with a deadline, so a broken
//! server makes a test fail with a message instead of hanging, and a slow machine only makes it slower.

use std::{fmt::Display, future::Future, time::Duration};

use tokio::time::{Instant, MissedTickBehavior};

/// Upper bound for anything a healthy control plane does "soon" (establish a CRD, collect garbage,
/// deliver a watch event). Generous on purpose: it bounds a failure, it is not a timing.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How often [`wait_until`] and [`wait_for`] re-check a condition.
pub const POLL: Duration = Duration::from_millis(100);

/// Polls `check` every `poll` until it yields `Some`, and returns that value.
///
/// Panics with `what` once `timeout` has passed. A single check that itself blocks past the deadline
/// is cut short too, so nothing here can hang.
pub async fn wait_for<T, F, Fut>(what: impl Display, timeout: Duration, poll: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut ticks = tokio::time::interval(poll);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Some(value)) => return value,
            Ok(None) if Instant::now() < deadline => continue,
            _ => panic!("timed out after {timeout:?} waiting until {what}"),
        }
    }
}

/// Polls `condition` every `poll` until it is true; panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: impl Display, timeout: Duration, poll: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let check = || {
        let fut = condition();
        async move { fut.await.then_some(()) }
    };
    wait_for(what, timeout, poll, check).await
}

/// Awaits `fut`, panicking with `what` if it takes longer than `timeout`. Use it for every await on
/// something the server must deliver (a watch event, a controller's progress).
pub async fn within<T>(what: impl Display, timeout: Duration, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, fut).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}
