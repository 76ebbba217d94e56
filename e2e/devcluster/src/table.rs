//! `meta.k8s.io/v1 Table` rendering for `kubectl get` (spec §14): per-kind columns that mirror the real
//! printers, and CRD `additionalPrinterColumns` evaluated with a JSONPath subset.
//! OWNER: table helper. STUB — replace the bodies, keep the signatures.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

/// One CRD `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `type`: string, integer, number, boolean, date
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// `jsonPath`, e.g. `.status.sync.status`
    pub json_path: String,
}

/// `includeObject` of the Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// The printer columns of one CRD version object (`spec.versions[i]`), `None` when it declares none.
pub fn printer_columns_from_crd_version(version: &Value) -> Option<Vec<PrinterColumn>> {
    let _ = version;
    None
}

/// Build a Table of `objects` of `kind` (built-in columns by kind; `columns` for custom resources, where
/// `None` means Name + Age). `metadata` of the Table is left `{}` for the caller to fill.
pub fn build(kind: &str, columns: Option<&[PrinterColumn]>, objects: &[Value], include: IncludeObject, now: DateTime<Utc>) -> Value {
    let _ = (kind, columns, include, now);
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}],
        "rows": objects.iter().map(|o| json!({"cells": [o["metadata"]["name"].clone()], "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"].clone()}})).collect::<Vec<_>>(),
    })
}
