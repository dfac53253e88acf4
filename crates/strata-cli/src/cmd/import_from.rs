//! `strata import --from FORMAT FILE`: another tool's memories (the MCP
//! memory server, ChatGPT, Claude, a Markdown folder, mem0), through
//! `Engine::import_foreign`.

use std::path::Path;

use anyhow::Result;

use crate::app::{self, Global};
use crate::output;

/// The names `--from` takes.
pub const FORMATS: [&str; 5] = ["mcp-memory", "chatgpt", "claude", "markdown", "mem0"];

pub fn run(g: &Global, from: &str, file: &Path, scope: Option<&str>, dry_run: bool) -> Result<()> {
    if file.as_os_str() == "-" {
        return app::usage(format!(
            "FILE: `--from {from}` reads a file (or a folder), not standard input"
        ));
    }
    let format: strata::ForeignFormat = from.parse()?;
    let scope = scope.map(strata::Scope::parse).transpose()?;
    let e = app::open(g)?;
    let r = e.import_foreign(&strata::ForeignImport {
        format,
        input: strata::ForeignInput::Path(file.to_path_buf()),
        scope,
        dry_run,
    })?;
    let op = if r.dry_run {
        "import_foreign_dry_run"
    } else {
        "import_foreign"
    };
    app::audit(&e, op, r.scopes.clone(), r.added, Vec::new())?;
    // What was stored gets its vectors now, as `sync` does.
    if !r.dry_run
        && r.added > 0
        && let Err(err) = e.embed_pending(None, usize::MAX)
    {
        eprintln!("strata: warning: imported without vectors ({err}); run `strata embed` later");
    }
    if g.json {
        return output::json(&r);
    }
    let verb = if r.dry_run { "would add" } else { "added" };
    let mut head = format!(
        "{}: {verb} {}",
        file.display(),
        output::plural(r.added, "memory", "memories")
    );
    if r.sessions > 0 {
        head += &format!(
            " in {}",
            output::plural(r.sessions, "new session", "new sessions")
        );
    }
    if !r.scopes.is_empty() {
        head += &format!(" ({})", r.scopes.join(", "));
    }
    output::line(format!(
        "{head}; {} unchanged, {} skipped",
        r.unchanged,
        r.skipped.len()
    ))?;
    for s in &r.skipped {
        output::line(format!("  skipped {}: {}", s.entry, s.reason))?;
    }
    Ok(())
}
