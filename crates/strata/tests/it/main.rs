//! Integration tests of the strata engine: one binary, themed modules, a
//! shared harness. Tests that every backend must pass are written once over
//! `&dyn Store` or `&Engine` and instantiated per backend by the `backends!`
//! macro in `harness.rs`.

#[macro_use]
mod harness;

mod as_of;
mod audit;
mod cold;
mod compact;
mod conformance;
mod context;
#[cfg(feature = "encryption")]
mod encryption;
mod fences;
mod filters;
mod foreign;
mod forget;
mod group_commit;
mod hot;
mod isolation;
mod jsonl;
mod learning;
mod lifecycle;
mod model;
#[cfg(feature = "postgres")]
mod postgres;
mod ranking;
#[cfg(feature = "s3")]
mod s3;
mod schema;
mod secrets;
mod sync;
mod vectors;
