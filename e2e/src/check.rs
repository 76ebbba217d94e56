//! Reading what clients return: kubectl's tables and lists, kube-rs API errors.

use std::{collections::BTreeSet, fmt::Debug};

use kube::core::Status;
use serde_json::Value;

/// kubectl's human-readable table as rows of whitespace-separated cells (header first).
///
/// Good enough for the columns tests check; cells with spaces (none in these tests) would split.
pub fn table(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// The header row of a kubectl table.
pub fn header(stdout: &str) -> Vec<String> {
    table(stdout).into_iter().next().unwrap_or_default()
}

/// The row whose first cell is `first`; panics with the whole table if there is none.
pub fn row(stdout: &str, first: &str) -> Vec<String> {
    table(stdout)
        .into_iter()
        .find(|cells| cells.first().map(String::as_str) == Some(first))
        .unwrap_or_else(|| panic!("no row starting with {first:?} in:\n{stdout}"))
}

/// Asserts that some row of the table equals `expected` cell by cell.
pub fn assert_has_row(stdout: &str, expected: &[&str]) {
    let found = table(stdout)
        .iter()
        .any(|cells| cells.iter().map(String::as_str).eq(expected.iter().copied()));
    assert!(found, "no row {expected:?} in:\n{stdout}");
}

/// The set of lines printed by `-o name` or `--no-headers` output.
pub fn lines(stdout: &str) -> BTreeSet<String> {
    stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// kubectl's `-o json` output, parsed.
pub fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("kubectl did not print JSON ({e}):\n{stdout}"))
}

/// The `Status` of a kube-rs call that must have failed with an API error.
pub fn api_error<T: Debug>(result: Result<T, kube::Error>) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

/// The managedFields entry of `manager` with `operation` in an object's JSON, if any.
pub fn managed_entry<'a>(object: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

/// Whether the managedFields entry of `manager` owns the field at `path` (FieldsV1 keys such as
/// `["f:data", "f:key"]`).
pub fn owns(object: &Value, manager: &str, path: &[&str]) -> bool {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == manager)
        .any(|e| {
            path.iter()
                .try_fold(&e["fieldsV1"], |node, key| node.get(*key))
                .is_some()
        })
}
