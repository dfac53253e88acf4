//! A three-node pipeline — planner, coder, reviewer — sharing one store.
//!
//! Each node reads a context assembled by its profile, "runs" (here a plain
//! function stands in for the LLM call, so the example works offline), and
//! writes its output where its `write_to_memory` spec says. The next node's
//! context contains what the previous node wrote.
//!
//! ```text
//! cargo run -p strata --example pipeline -- /tmp/pipeline.db
//! ```

use strata::{Config, ContextPackage, Engine, Kind, NewMemory, NodeSpec, Pipeline, Scope};

const PROFILES: &str = r#"
[profiles.planner]
max_tokens = 600
strategy = "hybrid"
[[profiles.planner.sources]]
scope = "project/{project}"
kinds = ["decision", "convention"]
share = 0.6
[[profiles.planner.sources]]
scope = "task/{task}"

[profiles.coder]
max_tokens = 800
strategy = "hybrid"
head_tail = 1
[[profiles.coder.sources]]
scope = "task/{task}"
share = 0.6
[[profiles.coder.sources]]
scope = "project/{project}"
kinds = ["decision", "convention"]

[profiles.reviewer]
max_tokens = 500
strategy = "recency"
[[profiles.reviewer.sources]]
scope = "task/{task}"
"#;

const NODES: &str = r#"
[[nodes]]
name = "planner"
context = "planner"
query = "add rate limiting to the public API"
write_to_memory = { store = "task", tags = ["plan"], kind = "decision" }

[[nodes]]
name = "coder"
context = "coder"
query = "implement the rate limiting plan"
write_to_memory = { store = "task", tags = ["patch"], kind = "tool_output" }

[[nodes]]
name = "reviewer"
context = "reviewer"
query = "review the rate limiting change"
write_to_memory = { store = "project", tags = ["review"], kind = "finding" }
"#;

#[derive(serde::Deserialize)]
struct Nodes {
    nodes: Vec<NodeSpec>,
}

/// Stands in for the model: each node answers from its context alone.
fn run(node: &str, ctx: &ContextPackage) -> String {
    let text = ctx.markdown();
    match node {
        "planner" => {
            let store = if text.contains("Redis") {
                "Redis"
            } else {
                "memory"
            };
            format!("Plan: a token bucket per API key, state in {store}, 429 with Retry-After.")
        }
        "coder" => {
            let plan = text
                .lines()
                .find_map(|l| l.find("Plan:").map(|i| &l[i + "Plan: ".len()..]))
                .unwrap_or("no plan found");
            format!("Patch: middleware implementing: {plan}")
        }
        _ => {
            let ok = text.contains("Patch:") && text.contains("Retry-After");
            format!(
                "Review: {}",
                if ok {
                    "approved, follows the plan"
                } else {
                    "changes requested"
                }
            )
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "strata-pipeline.db".into());
    let mut cfg = Config::sqlite(&path);
    cfg.apply_toml(PROFILES, None)?;
    let engine = Engine::open(cfg)?;
    let acme = Scope::parse("project/acme")?;
    engine.remember(
        NewMemory::new(
            acme.clone(),
            "Shared state lives in Redis (decided in March).",
        )
        .kind(Kind::Decision),
    )?;
    engine.remember(
        NewMemory::new(acme, "Every HTTP error carries a JSON body.").kind(Kind::Convention),
    )?;

    let nodes: Nodes = toml::from_str(NODES)?;
    let task = format!("rate-limit-{}", std::process::id());
    let pipe = Pipeline::new(&engine)
        .with_var("project", "acme")
        .with_var("task", &task);
    for n in &nodes.nodes {
        pipe.check(n)?;
    }
    for n in &nodes.nodes {
        let query = n.query.clone().unwrap_or_default();
        let out = pipe.run_node(n, &query, |ctx| run(&n.name, ctx))?;
        println!(
            "── {} (context {}, {} of {} tokens)",
            n.name, out.package.id, out.package.total_tokens, out.package.max_tokens
        );
        print!("{}", out.package.markdown());
        println!("→ {}", out.output);
        if let Some(m) = &out.memory {
            println!("  written to {} as {} ({})\n", m.scope, m.kind, m.id);
        }
    }
    Ok(())
}
