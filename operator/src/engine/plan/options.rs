//! Sync options: the Application's `spec.syncPolicy.syncOptions`, the operation's `syncOptions`, and a resource's
//! `argocd.argoproj.io/sync-options` / `capstan.dev/sync-options` annotation, merged the way Argo CD merges them
//! (`sync-options.md`): the operation's list is read after the Application's, and a resource annotation overrides
//! both for that resource.
//!
//! Pure: no I/O.

use serde_json::Value;

use crate::engine::object;

/// `PrunePropagationPolicy`: how a pruned object's dependents are deleted (default foreground, as in Argo CD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted before the object (`foreground`, the default).
    #[default]
    Foreground,
    /// The object is deleted at once and dependents in the background.
    Background,
    /// Dependents are left behind.
    Orphan,
}

impl Propagation {
    fn parse(raw: &str) -> Option<Self> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "foreground" => Some(Propagation::Foreground),
            "background" => Some(Propagation::Background),
            "orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }

    /// The Kubernetes `DeleteOptions.propagationPolicy` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Foreground => "Foreground",
            Propagation::Background => "Background",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// `Prune=true|false|confirm` for one resource (or the whole Application).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PruneOption {
    /// Pruned when the operation prunes (the default).
    #[default]
    Enabled,
    /// Never pruned: the result is `PruneSkipped` "ignored (no prune)".
    Disabled,
    /// Pruned only once the deletion is approved (`Prune=confirm`).
    Confirm,
}

impl PruneOption {
    fn parse(raw: &str) -> Option<Self> {
        match raw.trim() {
            "true" => Some(PruneOption::Enabled),
            "false" => Some(PruneOption::Disabled),
            "confirm" => Some(PruneOption::Confirm),
            _ => None,
        }
    }
}

/// Options that hold for the whole operation: the Application's list, then the operation's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppOptions {
    /// `CreateNamespace=true`: create the destination namespace (a PreSync task).
    pub create_namespace: bool,
    /// `ApplyOutOfSyncOnly=true`: apply only resources the diff found out of sync.
    pub apply_out_of_sync_only: bool,
    /// `PrunePropagationPolicy=foreground|background|orphan`.
    pub prune_propagation: Propagation,
    /// `FailOnSharedResource=true`: fail when a resource belongs to another Application.
    pub fail_on_shared_resource: bool,
    /// `SkipDryRunOnMissingResource=true` at app level.
    pub skip_dry_run_on_missing_resource: bool,
    /// The per-resource defaults (`PruneLast`, `Replace`, `Force`, `Prune`, `Validate`, ...).
    pub resource: ResourceOptions,
}

/// Options of one resource: the Application's defaults, overridden by the resource's annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceOptions {
    /// `Prune=true|false|confirm`.
    pub prune: PruneOption,
    /// `PruneLast=true`: prune after every other wave of the Sync phase.
    pub prune_last: bool,
    /// `Replace=true`: create/replace instead of apply (never for CRDs and Namespaces).
    pub replace: bool,
    /// `Force=true`: with `Replace`, delete and re-create.
    pub force: bool,
    /// `Validate=false`: apply without schema validation.
    pub validate: bool,
    /// `Validate=server`: validate with a server-side dry run before the first write instead of against the
    /// cluster's published schema on the client.
    pub server_validation: bool,
    /// `SkipDryRunOnMissingResource=true`: skip the dry run when the kind is not known yet.
    pub skip_dry_run_on_missing_resource: bool,
}

impl Default for ResourceOptions {
    fn default() -> Self {
        ResourceOptions {
            prune: PruneOption::Enabled,
            prune_last: false,
            replace: false,
            force: false,
            validate: true,
            server_validation: false,
            skip_dry_run_on_missing_resource: false,
        }
    }
}

fn is_true(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

impl ResourceOptions {
    /// Apply one `key=value` option; unknown keys and values are ignored (as Argo CD does).
    fn set(&mut self, key: &str, value: &str) {
        match key {
            "Prune" => {
                if let Some(p) = PruneOption::parse(value) {
                    self.prune = p;
                }
            }
            "PruneLast" => self.prune_last = is_true(value),
            "Replace" => self.replace = is_true(value),
            "Force" => self.force = is_true(value),
            "Validate" => {
                self.validate = !value.trim().eq_ignore_ascii_case("false");
                self.server_validation = value.trim().eq_ignore_ascii_case("server");
            }
            "SkipDryRunOnMissingResource" => self.skip_dry_run_on_missing_resource = is_true(value),
            _ => {}
        }
    }

    /// These options overridden by `obj`'s sync-options annotation (Argo CD: the annotation wins).
    pub fn for_object(&self, obj: &Value) -> ResourceOptions {
        let mut merged = self.clone();
        for (k, v) in object::sync_options(obj) {
            merged.set(&k, &v);
        }
        merged
    }
}

impl AppOptions {
    /// Parse the Application's `syncOptions` followed by the operation's; a later entry wins.
    pub fn parse<'a>(lists: impl IntoIterator<Item = &'a [String]>) -> AppOptions {
        let mut opts = AppOptions::default();
        for list in lists {
            for raw in list {
                for (k, v) in object::parse_options(raw) {
                    opts.set(&k, &v);
                }
            }
        }
        opts
    }

    fn set(&mut self, key: &str, value: &str) {
        match key {
            "CreateNamespace" => self.create_namespace = is_true(value),
            "ApplyOutOfSyncOnly" => self.apply_out_of_sync_only = is_true(value),
            "PrunePropagationPolicy" => {
                if let Some(p) = Propagation::parse(value) {
                    self.prune_propagation = p;
                }
            }
            "FailOnSharedResource" => self.fail_on_shared_resource = is_true(value),
            "SkipDryRunOnMissingResource" => {
                self.skip_dry_run_on_missing_resource = is_true(value);
                self.resource.set(key, value);
            }
            _ => self.resource.set(key, value),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn app_then_operation_then_annotation() {
        let app = list(&["PruneLast=true", "Replace=true", "PrunePropagationPolicy=background"]);
        let op = list(&["Replace=false", "ApplyOutOfSyncOnly=true"]);
        let opts = AppOptions::parse([app.as_slice(), op.as_slice()]);
        assert!(opts.resource.prune_last);
        assert!(!opts.resource.replace, "the operation's list is read last");
        assert!(opts.apply_out_of_sync_only);
        assert_eq!(opts.prune_propagation, Propagation::Background);

        let obj = json!({"metadata": {"annotations": {
            "argocd.argoproj.io/sync-options": "Prune=false,PruneLast=false,Replace=true"}}});
        let r = opts.resource.for_object(&obj);
        assert_eq!(r.prune, PruneOption::Disabled);
        assert!(!r.prune_last, "the annotation overrides the app-level value");
        assert!(r.replace);
        let confirm = json!({"metadata": {"annotations": {"capstan.dev/sync-options": "Prune=confirm"}}});
        assert_eq!(opts.resource.for_object(&confirm).prune, PruneOption::Confirm);
    }

    #[test]
    fn defaults_and_garbage() {
        let opts = AppOptions::parse([list(&["PrunePropagationPolicy=sideways", "Nonsense", ""]).as_slice()]);
        assert_eq!(opts, AppOptions::default());
        assert!(opts.resource.validate);
        assert_eq!(opts.prune_propagation.as_str(), "Foreground");
    }

    #[test]
    fn validate_server_false_and_true() {
        let opts = AppOptions::parse([list(&["Validate=server"]).as_slice()]);
        assert!(opts.resource.validate && opts.resource.server_validation);
        let off = json!({"metadata": {"annotations": {"argocd.argoproj.io/sync-options": "Validate=false"}}});
        let r = opts.resource.for_object(&off);
        assert!(!r.validate && !r.server_validation);
        let on = json!({"metadata": {"annotations": {"argocd.argoproj.io/sync-options": "Validate=true"}}});
        let r = opts.resource.for_object(&on);
        assert!(
            r.validate && !r.server_validation,
            "Validate=true is the client-side default"
        );
    }
}
