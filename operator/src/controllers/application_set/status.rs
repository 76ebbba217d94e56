//! The ApplicationSet status, computed as a whole (pure): Argo CD's conditions `ErrorOccurred`,
//! `ParametersGenerated`, `ResourcesUpToDate`, `RolloutProgressing` (RollingSync only) plus
//! `Ready`, in metav1 shape; `observedGeneration`; `applicationStatus[]` (RollingSync only);
//! `resources[]` (capped) and `resourcesCount` (the APPLICATIONS printer column).
//!
//! A failure keeps what the last good reconcile reported about the Applications (they were not
//! touched), only the conditions change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::application_set::{ApplicationSetApplicationStatus, ApplicationSetResource, ApplicationSetStatus};
use crate::api::conditions::{
    CONDITION_ERROR_OCCURRED, CONDITION_PARAMETERS_GENERATED, CONDITION_READY, CONDITION_RESOURCES_UP_TO_DATE,
    REASON_APPLICATION_SET_UP_TO_DATE, REASON_CREATE_APPLICATION_ERROR, REASON_PARAMETERS_GENERATED, REASON_SUCCEEDED,
    STATUS_FALSE, STATUS_TRUE,
};
use crate::controllers::status::{remove_condition, set_condition};

/// Argo CD's condition while a RollingSync is under way.
pub const CONDITION_ROLLOUT_PROGRESSING: &str = "RolloutProgressing";
/// Argo CD's reason while a RollingSync is under way.
pub const REASON_APPLICATION_SET_MODIFIED: &str = "ApplicationSetModified";
/// Argo CD's reason once every step is Healthy.
pub const REASON_ROLLOUT_COMPLETE: &str = "ApplicationSetRolloutComplete";
/// Most entries kept in `status.resources`.
pub const MAX_RESOURCES: usize = 500;
/// Most entries kept in `status.applicationStatus`.
pub const MAX_APPLICATION_STATUS: usize = 5000;

/// How a reconcile ended, for the conditions.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The generators (or templates) failed: nothing was written.
    GenerationFailed {
        /// `AppSetError::category()`.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Parameters were generated but the Applications are invalid (another namespace, a name
    /// owned by someone else): nothing was written.
    Invalid {
        /// Reason.
        reason: String,
        /// Message.
        message: String,
    },
    /// Some writes failed.
    ApplyFailed {
        /// Message.
        message: String,
    },
    /// Every Application is as generated (or as the policy allows).
    UpToDate,
}

/// Everything the status is computed from.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The outcome.
    pub outcome: Outcome,
    /// Owned Applications after the writes (`None`: unknown, keep the previous count and list).
    pub resources: Option<Vec<ApplicationSetResource>>,
    /// RollingSync: per-Application rollout status and whether it is progressing.
    pub rollout: Option<(Vec<ApplicationSetApplicationStatus>, bool)>,
    /// Warnings appended to the `ResourcesUpToDate` message (unsupported jq expressions, ...).
    pub warnings: &'a [String],
    /// Now.
    pub now: &'a Time,
}

/// A condition to set: type, status, reason, message.
type ConditionRow<'a> = (&'static str, &'static str, &'a str, &'a str);

/// The message of `ParametersGenerated=True`.
const PARAMETERS_GENERATED_MESSAGE: &str = "Successfully generated parameters for all Applications";

/// The four conditions every outcome sets, in this order: `ErrorOccurred`, `ParametersGenerated`,
/// `ResourcesUpToDate`, `Ready`. `up_to_date` is the `ResourcesUpToDate` message of a success.
fn outcome_conditions<'a>(o: &'a Observed<'_>, up_to_date: &'a str) -> [ConditionRow<'a>; 4] {
    // Parameters were generated but the Applications could not be written (an invalid generated set,
    // or a failed create/update/delete).
    let not_applied = |reason: &'a str, message: &'a str| {
        [
            (CONDITION_ERROR_OCCURRED, STATUS_TRUE, reason, message),
            (
                CONDITION_PARAMETERS_GENERATED,
                STATUS_TRUE,
                REASON_PARAMETERS_GENERATED,
                PARAMETERS_GENERATED_MESSAGE,
            ),
            (CONDITION_RESOURCES_UP_TO_DATE, STATUS_FALSE, reason, message),
            (CONDITION_READY, STATUS_FALSE, reason, message),
        ]
    };
    match &o.outcome {
        Outcome::GenerationFailed { reason, message } => [
            (CONDITION_ERROR_OCCURRED, STATUS_TRUE, reason, message),
            (CONDITION_PARAMETERS_GENERATED, STATUS_FALSE, reason, message),
            (CONDITION_RESOURCES_UP_TO_DATE, STATUS_FALSE, reason, message),
            (CONDITION_READY, STATUS_FALSE, reason, message),
        ],
        Outcome::Invalid { reason, message } => not_applied(reason, message),
        Outcome::ApplyFailed { message } => not_applied(REASON_CREATE_APPLICATION_ERROR, message),
        Outcome::UpToDate => {
            let ready = match &o.rollout {
                Some((_, true)) => "Applications are up to date; the rollout is progressing",
                _ => "Applications are up to date",
            };
            [
                (
                    CONDITION_ERROR_OCCURRED,
                    STATUS_FALSE,
                    REASON_APPLICATION_SET_UP_TO_DATE,
                    "All applications have been generated successfully",
                ),
                (
                    CONDITION_PARAMETERS_GENERATED,
                    STATUS_TRUE,
                    REASON_PARAMETERS_GENERATED,
                    PARAMETERS_GENERATED_MESSAGE,
                ),
                (
                    CONDITION_RESOURCES_UP_TO_DATE,
                    STATUS_TRUE,
                    REASON_APPLICATION_SET_UP_TO_DATE,
                    up_to_date,
                ),
                (CONDITION_READY, STATUS_TRUE, REASON_SUCCEEDED, ready),
            ]
        }
    }
}

/// The new status.
pub fn compute(old: Option<&ApplicationSetStatus>, o: &Observed<'_>) -> ApplicationSetStatus {
    let mut status = old.cloned().unwrap_or_default();
    let (gen, now) = (o.generation, o.now);
    status.observed_generation = gen;
    let mut up_to_date = "ApplicationSet up to date".to_owned();
    for w in o.warnings {
        up_to_date.push_str("; ");
        up_to_date.push_str(w);
    }
    for (type_, s, reason, message) in outcome_conditions(o, &up_to_date) {
        set_condition(&mut status.conditions, type_, s, reason, message, gen, now);
    }
    set_rollout(&mut status, o);
    if let Some(resources) = &o.resources {
        status.resources_count = Some(resources.len() as i64);
        let mut kept = resources.clone();
        kept.sort_by(|a, b| a.name.cmp(&b.name));
        kept.truncate(MAX_RESOURCES);
        status.resources = kept;
    }
    status
}

/// `RolloutProgressing` and `applicationStatus` (RollingSync only; cleared once the set is up to date
/// without a rollout, kept as they were after a failure).
fn set_rollout(status: &mut ApplicationSetStatus, o: &Observed<'_>) {
    let (gen, now) = (o.generation, o.now);
    match &o.rollout {
        Some((apps, progressing)) => {
            let (s, reason, message) = if *progressing {
                (
                    STATUS_TRUE,
                    REASON_APPLICATION_SET_MODIFIED,
                    "ApplicationSet Rollout has started",
                )
            } else {
                (
                    STATUS_FALSE,
                    REASON_ROLLOUT_COMPLETE,
                    "ApplicationSet Rollout is complete",
                )
            };
            set_condition(
                &mut status.conditions,
                CONDITION_ROLLOUT_PROGRESSING,
                s,
                reason,
                message,
                gen,
                now,
            );
            let mut apps = apps.clone();
            apps.truncate(MAX_APPLICATION_STATUS);
            status.application_status = apps;
        }
        None if matches!(o.outcome, Outcome::UpToDate) => {
            remove_condition(&mut status.conditions, CONDITION_ROLLOUT_PROGRESSING);
            status.application_status.clear();
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application_set::RolloutStatus;
    use crate::controllers::status::{find_condition, is_condition};
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    fn resource(name: &str) -> ApplicationSetResource {
        ApplicationSetResource {
            name: name.into(),
            namespace: Some("apps".into()),
            ..Default::default()
        }
    }

    fn observed(outcome: Outcome, resources: Option<Vec<ApplicationSetResource>>, now: &Time) -> Observed<'_> {
        Observed {
            generation: Some(3),
            outcome,
            resources,
            rollout: None,
            warnings: &[],
            now,
        }
    }

    #[test]
    fn success_sets_every_condition_and_the_count() {
        let now = at(1);
        let s = compute(
            None,
            &observed(Outcome::UpToDate, Some(vec![resource("b"), resource("a")]), &now),
        );
        assert!(is_condition(&s.conditions, "ErrorOccurred", "False"));
        assert!(is_condition(&s.conditions, "ParametersGenerated", "True"));
        assert!(is_condition(&s.conditions, "ResourcesUpToDate", "True"));
        assert!(is_condition(&s.conditions, "Ready", "True"));
        assert!(find_condition(&s.conditions, "RolloutProgressing").is_none());
        assert_eq!(s.resources_count, Some(2));
        assert_eq!(s.resources[0].name, "a");
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(
            find_condition(&s.conditions, "ResourcesUpToDate").unwrap().reason,
            "ApplicationSetUpToDate"
        );
    }

    #[test]
    fn generation_failure_keeps_counts_and_reports_error() {
        let now = at(1);
        let ok = compute(None, &observed(Outcome::UpToDate, Some(vec![resource("a")]), &now));
        let later = at(50);
        let failed = compute(
            Some(&ok),
            &observed(
                Outcome::GenerationFailed {
                    reason: "GitError".into(),
                    message: "git generator: unreachable".into(),
                },
                None,
                &later,
            ),
        );
        assert!(is_condition(&failed.conditions, "ErrorOccurred", "True"));
        assert!(is_condition(&failed.conditions, "ParametersGenerated", "False"));
        assert!(is_condition(&failed.conditions, "Ready", "False"));
        let c = find_condition(&failed.conditions, "ErrorOccurred").unwrap();
        assert_eq!(c.reason, "GitError");
        assert_eq!(c.last_transition_time, later);
        assert_eq!(failed.resources_count, Some(1), "the Applications were not touched");
        assert_eq!(failed.resources.len(), 1);
    }

    #[test]
    fn invalid_and_apply_failures() {
        let now = at(1);
        let s = compute(
            None,
            &observed(
                Outcome::Invalid {
                    reason: "ApplicationValidationError".into(),
                    message: "namespace".into(),
                },
                None,
                &now,
            ),
        );
        assert!(is_condition(&s.conditions, "ParametersGenerated", "True"));
        assert!(is_condition(&s.conditions, "ErrorOccurred", "True"));
        assert_eq!(s.resources_count, None);
        let s = compute(
            None,
            &observed(Outcome::ApplyFailed { message: "x".into() }, None, &now),
        );
        assert_eq!(
            find_condition(&s.conditions, "ErrorOccurred").unwrap().reason,
            "CreateApplicationError"
        );
    }

    #[test]
    fn rollout_condition_and_application_status() {
        let now = at(1);
        let apps = vec![ApplicationSetApplicationStatus {
            application: "a".into(),
            status: RolloutStatus::Progressing,
            ..Default::default()
        }];
        let mut o = observed(Outcome::UpToDate, Some(vec![resource("a")]), &now);
        o.rollout = Some((apps.clone(), true));
        let s = compute(None, &o);
        assert!(is_condition(&s.conditions, "RolloutProgressing", "True"));
        assert_eq!(s.application_status, apps);
        o.rollout = Some((apps, false));
        let s = compute(Some(&s), &o);
        let c = find_condition(&s.conditions, "RolloutProgressing").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "ApplicationSetRolloutComplete")
        );
        // Strategy removed: the rollout status goes.
        o.rollout = None;
        let s = compute(Some(&s), &o);
        assert!(find_condition(&s.conditions, "RolloutProgressing").is_none());
        assert!(s.application_status.is_empty());
    }

    #[test]
    fn warnings_show_in_resources_up_to_date() {
        let now = at(1);
        let warnings = vec!["unsupported jqPathExpression".to_owned()];
        let mut o = observed(Outcome::UpToDate, Some(vec![]), &now);
        o.warnings = &warnings;
        let s = compute(None, &o);
        assert!(find_condition(&s.conditions, "ResourcesUpToDate")
            .unwrap()
            .message
            .contains("unsupported jqPathExpression"));
    }
}
