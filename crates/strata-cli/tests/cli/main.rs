//! End-to-end tests of the `strata` binary: one test binary, themed modules,
//! a shared harness (`util.rs`) that gives each test its own database,
//! working directory and config directory.

mod util;

mod audit;
mod bad_input;
mod cold;
mod commands;
mod compact;
mod concurrency;
mod context;
mod crash;
#[cfg(feature = "encryption")]
mod encryption;
mod first_hour;
mod formats;
mod import_from;
mod learned;
#[cfg(feature = "local-embed")]
mod model_fetch;
#[cfg(feature = "postgres")]
mod postgres;
mod rough_edges;
#[cfg(feature = "server")]
mod server;
#[cfg(feature = "server")]
mod server_admin;
mod surface;
#[cfg(feature = "server")]
mod ui;
mod vectors;
