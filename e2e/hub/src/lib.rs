//! `capstan-hub`: the reference receiver of the reporter protocol `capstan.reporter/v1`
//! (docs/reporter-protocol.md), for Capstan's tests and demo. Like devcluster, it is a real server: the
//! reporter's end-to-end tests talk to it over HTTP(S) exactly as they would to a SaaS.
//!
//! - [`wire`]: the request bodies and their strict validation (pure);
//! - [`rules`]: the receiver rules — the `(epoch, seq)` apply rule, epoch fencing, digest `need`, deletion by
//!   absence with the mass-delete guard, agent state from heartbeats (pure);
//! - [`verify`]: the invariants `GET /_hub/verify` checks over the journals (pure);
//! - [`faults`]: the fault switches of `POST /_hub/faults`;
//! - [`store`]: SQLite storage; a 2xx is answered only after the request's transaction committed;
//! - [`server`]: the listener (HTTP or TLS) and routing; [`agent`]: the agent endpoints; [`ops`]: the hub's
//!   own surface (`/api/*`, `/_hub/*`); [`page`]: the HTML page at `/`; [`http`]: shared plumbing.
//!
//! The flags, endpoints and faults are described in `e2e/hub/README.md`.

pub mod agent;
pub mod faults;
pub mod http;
pub mod ops;
pub mod page;
pub mod rules;
pub mod server;
pub mod store;
pub mod verify;
pub mod wire;

pub use server::{serve, Config};
