//! PolicySet controller: resolves each PolicySet's Rego (inline or ConfigMap keys), compiles it
//! through the shared cache, and reports `Ready` (every policy compiles), `compiledPolicies` and the
//! errors. Enforcement is the Application controller's (`policy_access`); this status is what a
//! user looks at to see why a `Deny` set blocks everything (fail closed) or a `Warn` set is ignored.
//!
//! Pipeline: resolve sources → compile (cached by content) → ONE status patch (none when only
//! timestamps would change) → an Event when `Ready` flips → requeue after the reconcile interval
//! (a ConfigMap source may change without the PolicySet changing).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{predicates, reflector, watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};

use super::error::{Error, KubeStep};
use super::status::{announce_ready_flip, mark_not_ready, mark_ready, write_status};
use super::{policy_access, run_controller, Context, Shutdown};
use crate::api::policy_set::PolicySetStatus;
use crate::api::PolicySet;
use crate::policy::PolicyError;

/// The controller's name in `--controllers`, metrics and logs.
pub const CONTROLLER: &str = "policyset";

/// Runs the PolicySet controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) -> anyhow::Result<()> {
    let (reader, writer) = reflector::store();
    let sets = ctx
        .watch::<PolicySet>(watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    crate::controllers::mark_ready_when_synced(Arc::clone(&ctx), CONTROLLER, reader.clone());
    let sets = ctx.queue(CONTROLLER).count(sets);
    let controller = Controller::for_stream(sets, reader).graceful_shutdown_on(shutdown.wait());
    run_controller(controller, CONTROLLER, ctx, |set, ctx| async move {
        reconcile(&set, &ctx).await
    })
    .await;
    Ok(())
}

/// What compiling a set came to: how many policies compiled, or why it cannot be used.
pub type Compiled = Result<usize, (&'static str, String)>;

/// The status for `compiled` (pure).
pub fn next_status(
    old: Option<&PolicySetStatus>,
    compiled: Compiled,
    generation: Option<i64>,
    now: &Time,
) -> PolicySetStatus {
    let mut status = old.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let conds = &mut status.conditions;
    match compiled {
        Ok(n) => {
            let message = format!("{n} polic{} compiled", if n == 1 { "y" } else { "ies" });
            mark_ready(conds, &message, generation, now);
            status.compiled_policies = Some(n as i64);
            status.message = None;
        }
        Err((reason, message)) => {
            mark_not_ready(conds, (reason, &message), true, generation, now);
            status.compiled_policies = Some(0);
            status.message = Some(message);
        }
    }
    status
}

async fn reconcile(set: &PolicySet, ctx: &Context) -> Result<Action, Error> {
    let ns = set
        .namespace()
        .ok_or_else(|| Error::InvalidSpec("a PolicySet must be namespaced".into()))?;
    let compiled: Compiled = match policy_access::sources(&ctx.client, set).await {
        Err(e) => Err(("SourceUnavailable", e)),
        Ok(sources) => match ctx.policies.get(&sources).as_ref() {
            Ok(c) => Ok(c.len()),
            Err(errors) => Err((
                "CompileFailed",
                errors.iter().map(PolicyError::to_string).collect::<Vec<_>>().join("; "),
            )),
        },
    };
    let now = super::status::now();
    let old = set.status.as_ref();
    let new = next_status(old, compiled, set.metadata.generation, &now);
    let api: Api<PolicySet> = Api::namespaced(ctx.client.clone(), &ns);
    write_status(&api, set, old, &new)
        .await
        .map_err(KubeStep::StatusWrite.err())?;
    let conditions = (old.map(|s| s.conditions.as_slice()), new.conditions.as_slice());
    let reasons = ("PoliciesCompiled", "PoliciesInvalid");
    announce_ready_flip(ctx, &set.object_ref(&()), conditions, reasons, "Compile").await;
    Ok(Action::requeue(ctx.settings.reconcile_interval))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::conditions::{CONDITION_READY, CONDITION_STALLED};
    use crate::controllers::status::find_condition;

    #[test]
    fn ready_follows_compilation_and_keeps_the_transition_time() {
        let t1 = Time(Timestamp::from_second(100).unwrap());
        let t2 = Time(Timestamp::from_second(200).unwrap());
        let ok = next_status(None, Ok(2), Some(1), &t1);
        let ready = find_condition(&ok.conditions, CONDITION_READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.message.as_str()),
            ("True", "2 policies compiled")
        );
        assert_eq!(ok.compiled_policies, Some(2));
        let again = next_status(Some(&ok), Ok(2), Some(1), &t2);
        assert_eq!(
            find_condition(&again.conditions, CONDITION_READY)
                .unwrap()
                .last_transition_time,
            t1
        );
        let bad = next_status(
            Some(&ok),
            Err(("CompileFailed", "policy x: does not compile".into())),
            Some(2),
            &t2,
        );
        let ready = find_condition(&bad.conditions, CONDITION_READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "CompileFailed")
        );
        assert_eq!(bad.message.as_deref(), Some("policy x: does not compile"));
        assert!(find_condition(&bad.conditions, CONDITION_STALLED).is_some());
        let fixed = next_status(Some(&bad), Ok(1), Some(3), &t2);
        assert!(find_condition(&fixed.conditions, CONDITION_STALLED).is_none());
        assert_eq!(fixed.message, None);
    }
}
