//! The pure GitOps core: object identity, diff and normalisation, sync planning (phases, waves, hooks,
//! prune), health per kind, and status computation. Nothing here does I/O: no `kube::Client`, no
//! processes, no git — everything is a function of its inputs, so it is tested from YAML fixtures alone.

pub mod diff;
pub mod health;
pub mod object;
pub mod plan;
pub mod protect;
pub mod schema;
pub mod shard;
