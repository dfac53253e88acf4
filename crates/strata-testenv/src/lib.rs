//! Attributes for the tests that need a service outside the workspace: a
//! PostgreSQL server (`STRATA_TEST_PG_URL`), an S3 endpoint
//! (`STRATA_TEST_S3_URL`) or Chromium and chromedriver on `PATH`.
//!
//! ```text
//! #[strata_testenv::pg]
//! #[test]
//! fn migrate_to_postgres() { /* … */ }
//! ```
//!
//! When the build had no such service (decided by `build.rs`, from the
//! environment at build time), the test gets `#[ignore = "set … to run"]`:
//! `cargo test` then counts it as ignored and says why, rather than
//! reporting `ok` for a test that returned at its first line (issue 56).
//! Under `CI` nothing is ignored, and each test's own check fails when its
//! service is missing. Setting the variable later rebuilds this crate and
//! the tests that use it, never the crates under test.
//!
//! The attribute must come before `#[test]`: it adds `#[ignore]` for
//! `#[test]` to see.
//!
//! Owns the decision "is this service here"; the tests own connecting.

use proc_macro::TokenStream;

/// A test of the PostgreSQL store: ignored unless `STRATA_TEST_PG_URL` (or
/// `CI`) was set when the tests were built.
#[proc_macro_attribute]
pub fn pg(_: TokenStream, item: TokenStream) -> TokenStream {
    ignore_unless(
        cfg!(strata_pg),
        "set STRATA_TEST_PG_URL to run the PostgreSQL tests",
        item,
    )
}

/// A test of the cold tier in S3: ignored unless `STRATA_TEST_S3_URL` (or
/// `CI`) was set when the tests were built.
#[proc_macro_attribute]
pub fn s3(_: TokenStream, item: TokenStream) -> TokenStream {
    ignore_unless(
        cfg!(strata_s3),
        "set STRATA_TEST_S3_URL to run the S3 tests",
        item,
    )
}

/// A test in a real browser: ignored unless `chromium` and `chromedriver`
/// were on `PATH` (or `CI` was set) when the tests were built.
#[proc_macro_attribute]
pub fn browser(_: TokenStream, item: TokenStream) -> TokenStream {
    ignore_unless(
        cfg!(strata_browser),
        "install chromium and chromedriver to run the browser tests",
        item,
    )
}

/// `item`, with `#[ignore = why]` in front unless `present`.
fn ignore_unless(present: bool, why: &str, item: TokenStream) -> TokenStream {
    if present {
        return item;
    }
    let mut out: TokenStream = format!("#[ignore = {why:?}]")
        .parse()
        .expect("an attribute parses");
    out.extend(item);
    out
}
