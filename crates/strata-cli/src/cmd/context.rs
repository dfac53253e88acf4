//! `strata context --profile P --task T --project X --query "…"`

use std::io::Write;

use anyhow::Result;
use clap::Args;

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct ContextArgs {
    /// Profile: `none`, `global` (built in) or a configured id.
    #[arg(long, default_value = "global")]
    pub profile: String,
    /// Fills `{task}`.
    #[arg(long)]
    pub task: Option<String>,
    /// Fills `{project}`.
    #[arg(long)]
    pub project: Option<String>,
    /// Fills `{sprint}`.
    #[arg(long)]
    pub sprint: Option<String>,
    /// Fills `{stage}`.
    #[arg(long)]
    pub stage: Option<String>,
    /// Fills `{agent}`.
    #[arg(long)]
    pub agent: Option<String>,
    /// Fills `{session}`.
    #[arg(long)]
    pub session: Option<String>,
    /// Fills `{user}`.
    #[arg(long)]
    pub user: Option<String>,
    /// What the task is about (ranks items under relevance and hybrid).
    #[arg(long, default_value = "")]
    pub query: String,
    /// markdown, messages or json (default: the profile's).
    #[arg(long)]
    pub render: Option<String>,
    /// Overrides the profile's budget.
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<u32>,
    /// Explain the package on stderr (sources, items, scores, cuts, dropped).
    #[arg(long)]
    pub explain: bool,
    /// Do not log the package (logged packages can be replayed).
    #[arg(long)]
    pub no_log: bool,
    /// Rebuild a logged package from the memory versions it used.
    #[arg(long, value_name = "PACKAGE_ID", conflicts_with_all = ["task", "project", "sprint", "stage", "agent", "session", "user", "render", "max_tokens"])]
    pub replay: Option<String>,
}

pub fn run(g: &Global, a: ContextArgs) -> Result<()> {
    let e = app::open(g)?;
    if let Some(id) = &a.replay {
        let r = e.replay(id)?;
        if g.json {
            return output::json(&r);
        }
        let mut err = std::io::stderr().lock();
        if r.exact {
            writeln!(
                err,
                "replayed {id}: identical (every memory version is still available)"
            )?;
        } else {
            writeln!(err, "replayed {id}: rebuilt as {} (differs)", r.package.id)?;
        }
        for c in &r.changes {
            let how = if c.rebuilt {
                "rebuilt from its logged version"
            } else {
                "left out"
            };
            writeln!(err, "  {} (v{}): {}; {how}", c.id, c.logged_version, c.now)?;
        }
        for n in &r.notes {
            writeln!(err, "  note: {n}")?;
        }
        drop(err);
        return print(&r.package, r.package.render);
    }
    let mut req = strata::ContextRequest::new(a.profile.clone()).query(a.query.clone());
    let vars = [
        ("task", &a.task),
        ("project", &a.project),
        ("sprint", &a.sprint),
        ("stage", &a.stage),
        ("agent", &a.agent),
        ("session", &a.session),
        ("user", &a.user),
    ];
    for (name, v) in vars {
        if let Some(v) = v {
            req = req.var(name, v.clone());
        }
    }
    req.render = a.render.as_deref().map(str::parse).transpose()?;
    if g.json {
        req.render = Some(strata::Render::Json);
    }
    req.max_tokens = a.max_tokens;
    req.log = !a.no_log;
    let p = e.context(&req)?;
    app::audit(
        &e,
        "context",
        app::scopes(p.items.iter().map(|i| &i.scope)),
        p.items.len(),
        Vec::new(),
    )?;
    if a.explain {
        explain(&p)?;
    }
    print(&p, p.render)
}

fn print(p: &strata::ContextPackage, render: strata::Render) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(p.to_text(render).as_bytes())?;
    Ok(())
}

fn explain(p: &strata::ContextPackage) -> Result<()> {
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "package {}  profile {}  {} / {} tokens  compression {:.3}  dropped {}",
        p.id, p.profile, p.total_tokens, p.max_tokens, p.compression_ratio, p.dropped
    )?;
    for (i, s) in p.per_source.iter().enumerate() {
        let skipped = s
            .skipped
            .as_ref()
            .map(|r| format!("  skipped: {r}"))
            .unwrap_or_default();
        writeln!(
            err,
            "source {i} {:?} ({})  share {:.2}  {} tokens  {} items  {} dropped{skipped}",
            s.title, s.scope, s.share, s.tokens, s.items, s.dropped
        )?;
        for it in p.items.iter().filter(|it| it.source == i) {
            let cut = it
                .cut
                .map(|c| format!("  cut: kept {}+{}, {} elided", c.head, c.tail, c.elided))
                .unwrap_or_default();
            writeln!(
                err,
                "  {:<6} {:>10.4}  {:>5} tok  {} v{}{cut}",
                format!("{:?}", it.why).to_lowercase(),
                it.score,
                it.tokens,
                it.id,
                it.version
            )?;
        }
    }
    if let Some(s) = &p.summary {
        writeln!(
            err,
            "summary ({}) {} tokens, covers {} memories{}",
            s.method,
            s.tokens,
            s.ids.len(),
            s.note
                .as_ref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}
