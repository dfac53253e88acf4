//! Decides, once per build, which outside services the tests have: a cfg
//! each (`strata_pg`, `strata_s3`, `strata_browser`) that the attributes
//! of `src/lib.rs` read. Under `CI` every cfg is on, so a missing service
//! is a test that runs and fails (each test checks again when it runs),
//! never one that is quietly ignored.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(strata_pg, strata_s3, strata_browser)");
    for var in ["CI", "STRATA_TEST_PG_URL", "STRATA_TEST_S3_URL", "PATH"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    let ci = env::var_os("CI").is_some();
    let set = |var: &str| env::var_os(var).is_some_and(|v| !v.is_empty());
    if ci || set("STRATA_TEST_PG_URL") {
        println!("cargo::rustc-cfg=strata_pg");
    }
    if ci || set("STRATA_TEST_S3_URL") {
        println!("cargo::rustc-cfg=strata_s3");
    }
    if ci || (on_path("chromium") && on_path("chromedriver")) {
        println!("cargo::rustc-cfg=strata_browser");
    }
}

/// Whether `PATH` holds an executable file named `name`.
fn on_path(name: &str) -> bool {
    env::var_os("PATH").is_some_and(|p| env::split_paths(&p).any(|d| is_executable(&d.join(name))))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}
