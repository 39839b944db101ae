//! Runners on demand (docs/dynamic-runners.md): the demand read from Redis and Postgres
//! ([`demand`]), and the backends that start and release runners ([`backend`]). The
//! node's service that puts them together is `services::provisioner`; the rules it
//! follows are pure, in `baton_core::provision`.

pub(crate) mod backend;
mod command;
pub(crate) mod demand;
mod process;
mod sandbox;
