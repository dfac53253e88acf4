//! `strata pipeline run FILE --task T --project P`

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Subcommand)]
pub enum PipelineCmd {
    /// Run each node of FILE in order: build its context, pipe it (rendered)
    /// into the node's `command` (`sh -c`), and write what the command
    /// prints where the node's `write_to_memory` says.
    #[command(
        after_help = "Examples:\n  strata pipeline run nodes.toml --task t-42 --project acme\n  strata pipeline run nodes.yaml --task t-42 --project acme --var sprint=s12"
    )]
    Run(RunArgs),
    /// Check FILE's nodes (profiles, stores, tags) without running anything.
    #[command(
        after_help = "Examples:\n  strata pipeline check nodes.toml --task t-42 --project acme"
    )]
    Check(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Nodes as TOML, YAML or JSON: `nodes = [{name, context, query, command, write_to_memory}]`.
    pub file: PathBuf,
    /// Fills `{task}`.
    #[arg(long)]
    pub task: Option<String>,
    /// Fills `{project}`.
    #[arg(long)]
    pub project: Option<String>,
    /// Other placeholders, `name=value` (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NodesFile {
    nodes: Vec<strata::NodeSpec>,
}

fn read_nodes(path: &PathBuf) -> Result<Vec<strata::NodeSpec>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let parsed: NodesFile =
        match ext.as_str() {
            "yaml" | "yml" => serde_norway::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
            "json" => serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
            _ => toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        };
    if parsed.nodes.is_empty() {
        bail!("{}: no nodes", path.display());
    }
    Ok(parsed.nodes)
}

pub fn run(g: &Global, c: PipelineCmd) -> Result<()> {
    let (a, execute) = match c {
        PipelineCmd::Run(a) => (a, true),
        PipelineCmd::Check(a) => (a, false),
    };
    let nodes = read_nodes(&a.file)?;
    let e = app::open(g)?;
    let mut pipe = strata::Pipeline::new(&e);
    if let Some(t) = &a.task {
        pipe = pipe.with_var("task", t);
    }
    if let Some(p) = &a.project {
        pipe = pipe.with_var("project", p);
    }
    for v in &a.vars {
        let Some((k, val)) = v.split_once('=') else {
            return app::usage(format!("--var: `{v}` is not NAME=VALUE"));
        };
        pipe = pipe.with_var(k, val);
    }
    for n in &nodes {
        pipe.check(n)?;
        if execute && n.command.is_none() {
            bail!(
                "nodes.{}.command: missing (the shell command that runs the node)",
                n.name
            );
        }
    }
    if !execute {
        return output::line(format!("ok: {} nodes", nodes.len()));
    }
    let mut runs = Vec::new();
    for n in &nodes {
        let query = n.query.clone().unwrap_or_default();
        let package = pipe.context_for(n, &query)?;
        let cmd = n.command.as_deref().unwrap_or_default();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("STRATA_NODE", &n.name)
            .env("STRATA_QUERY", &query)
            .env("STRATA_CONTEXT_ID", &package.id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("nodes.{}: starting `{cmd}`", n.name))?;
        let text = package.to_text(package.render);
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input is fine.
            let _ = stdin.write_all(text.as_bytes());
        }
        let out = child
            .wait_with_output()
            .with_context(|| format!("nodes.{}: running `{cmd}`", n.name))?;
        if !out.status.success() {
            bail!(
                "nodes.{}: `{cmd}` failed ({}); earlier nodes' outputs are kept",
                n.name,
                out.status
            );
        }
        let stdout = String::from_utf8(out.stdout)
            .map_err(|_| anyhow::anyhow!("nodes.{}: output is not UTF-8", n.name))?;
        let memory = pipe.record(n, &package, &stdout)?;
        if !g.json {
            output::line(format!(
                "{}: context {} ({} tokens) → {} bytes{}",
                n.name,
                package.id,
                package.total_tokens,
                stdout.len(),
                memory
                    .as_ref()
                    .map(|m| format!(", written to {} ({})", m.scope, m.id))
                    .unwrap_or_default()
            ))?;
        }
        runs.push(strata::NodeRun {
            node: n.name.clone(),
            package,
            output: stdout,
            memory,
        });
    }
    if g.json {
        return output::json(&runs);
    }
    Ok(())
}
