//! `strata`: the command-line front end of the strata memory engine.
//!
//! Flags, environment and `strata.toml` resolve into one `strata::Config`
//! (see `app.rs`); each verb lives in its own file under `cmd/` and calls
//! the library. Exit codes: 0 ok, 1 error, 2 usage.

mod app;
mod cmd;
mod output;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc: a server's buffers are often freed on another thread than
/// the one that allocated them, which made glibc's allocator lock its
/// arenas against each other under load.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match app::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap reads `STRATA_DB` as `--db` and calls an empty one a
            // missing `--db` value: name the variable instead.
            if e.kind() == clap::error::ErrorKind::InvalidValue
                && std::env::var_os("STRATA_DB").is_some_and(|v| v.is_empty())
                && !std::env::args_os().any(|a| a == "--db")
            {
                eprintln!(
                    "error: STRATA_DB is set but empty: unset it, or set it to a database file"
                );
                return ExitCode::from(2);
            }
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let json = cli.json_errors();
    match cmd::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (`strata list | head`) is success.
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            let usage = e.downcast_ref::<app::UsageError>().is_some() || bench_usage(&e);
            let mut err = std::io::stderr().lock();
            if json {
                // `code` is the word HTTP and MCP errors carry; `class`, the
                // same word, is kept for scripts written before `code`.
                let code = match e.downcast_ref::<strata::Error>() {
                    Some(s) => s.class().as_str(),
                    None if usage => "usage",
                    None => "error",
                };
                let body = serde_json::json!({"error": {"code": code, "message": message(&e), "class": code}});
                let _ = writeln!(err, "{body}");
            } else {
                let _ = writeln!(err, "strata: {}", message(&e));
            }
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

/// `e` and its causes, each once: `context: cause: its cause`. The
/// library's errors already end with their source's text (`reading FILE:
/// No such file or directory`), and so do PostgreSQL's, so a cause that
/// the text so far already holds is left out rather than said again, as
/// anyhow's `{:#}` would (issue 56).
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether `e` is a usage error of `strata bench` or `strata eval`.
fn bench_usage(e: &anyhow::Error) -> bool {
    #[cfg(feature = "bench")]
    return e.downcast_ref::<strata_bench::UsageError>().is_some();
    #[cfg(not(feature = "bench"))]
    return {
        let _ = e;
        false
    };
}
