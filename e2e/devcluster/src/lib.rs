//! devcluster: a Kubernetes-API-compatible control plane for Capstan's development and tests.
//! See `../../../shared/reference/test-apiserver-spec.md` (the specification) and README.md.

pub mod crdschema;
pub mod defaults;
pub mod error;
pub mod patch;
pub mod protobuf;
pub mod schema;
pub mod selectors;
pub mod sim;
pub mod ssa;
pub mod table;
pub mod validation;
