//! Remember a decision in one "session" of an agent and recall it in the
//! next, through the library: the second opens the file afresh, as a new
//! process would. The file defaults to the system's temporary folder; a
//! rerun finds the decision already there and only recalls.
//!
//! ```text
//! cargo run -p strata --example remember_recall -- /tmp/demo.db
//! ```

use strata::{Config, Engine, Kind, NewMemory, Recall, Scope, View};

fn main() -> Result<(), strata::Error> {
    let path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("strata-example.db"));
    let acme = Scope::parse("project/acme")?;

    // First session of the agent: it decides something and remembers why
    // (once: a rerun finds it there).
    {
        let engine = Engine::open(Config::sqlite(&path))?;
        if engine.count(&View::scope(acme.clone()), &strata::Filter::all())? > 0 {
            println!("(remembered in an earlier run: {})", path.display());
        } else {
            engine.store_decision(
                acme.clone(),
                "Which database for billing?",
                &["PostgreSQL".into(), "DynamoDB".into()],
                "PostgreSQL",
                "we need multi-row transactions for invoices",
            )?;
            engine.remember(
                NewMemory::new(acme.clone(), "Invoices are generated nightly at 02:00 UTC")
                    .kind(Kind::Convention),
            )?;
        }
    }

    // A later run: a fresh process opens the same file and asks.
    let engine = Engine::open(Config::sqlite(&path))?;
    let mut req = Recall::new(
        "what database do we use for billing and why?",
        View::scope(acme),
    );
    req.explain = true;
    for hit in engine.recall(&req)? {
        println!(
            "{:.3}  {}  {}",
            hit.score, hit.memory.kind, hit.memory.content
        );
    }
    Ok(())
}
