//! The finalizer patches of the cleanup, and the one made while the Application is alive: a deleted
//! object cannot gain finalizers, so the reconcile adds those its deletion hooks need as soon as a
//! render shows the hooks.

use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

use crate::api::Application;
use crate::controllers::status::patch_params;
use crate::engine::plan::delete_hooks::missing_finalizers;

/// Adds the finalizers for the deletion stages `desired` has hooks for (a JSON patch guarded by the
/// finalizers read, so a concurrent change is a conflict retried by the next reconcile).
pub async fn ensure_finalizers(
    api: &Api<Application>,
    app: &Application,
    desired: &[Value],
) -> Result<(), kube::Error> {
    let missing = missing_finalizers(desired, app.finalizers());
    if missing.is_empty() {
        return Ok(());
    }
    let mut wanted: Vec<String> = app.finalizers().to_vec();
    wanted.extend(missing.iter().map(|f| f.to_string()));
    patch_finalizers(api, app, &wanted).await
}

/// Sets `metadata.finalizers` to `wanted`, guarded by the finalizers `app` carries.
async fn patch_finalizers(api: &Api<Application>, app: &Application, wanted: &[String]) -> Result<(), kube::Error> {
    let current = app.finalizers();
    let ops = if current.is_empty() {
        json!([{"op": "add", "path": "/metadata/finalizers", "value": wanted}])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": wanted},
        ])
    };
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    match api
        .patch(&app.name_any(), &patch_params(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes `names` from `app`'s finalizers (a JSON patch guarded by the finalizers it read).
pub async fn remove_finalizers<S: AsRef<str>>(
    api: &Api<Application>,
    app: &Application,
    names: &[S],
) -> Result<(), kube::Error> {
    let remaining: Vec<String> = app
        .finalizers()
        .iter()
        .filter(|f| !names.iter().any(|n| n.as_ref() == f.as_str()))
        .cloned()
        .collect();
    if remaining.len() == app.finalizers().len() {
        return Ok(());
    }
    patch_finalizers(api, app, &remaining).await
}
