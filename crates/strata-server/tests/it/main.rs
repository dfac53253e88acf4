//! Integration tests: a real server on 127.0.0.1 (port 0) over a temporary
//! SQLite file, driven over real HTTP. One binary, themed modules, a shared
//! harness.

mod harness;

mod audit;
mod auth;
mod browser;
mod errors;
mod foreign;
mod hostile;
mod isolation;
mod learned;
mod limits;
mod mcp_http;
mod openapi;
mod probes;
mod routes;
mod secrets;
mod threads;
mod tokens;
mod transport;
mod ui;
