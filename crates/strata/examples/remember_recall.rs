//! Remember a decision in one "session" of an agent and recall it in the
//! next, through the library.
//!
//! ```text
//! cargo run -p strata --example remember_recall -- /tmp/demo.db
//! ```

use strata::{Config, Engine, Kind, NewMemory, Recall, Scope, View};

fn main() -> Result<(), strata::Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "strata-example.db".into());
    let acme = Scope::parse("project/acme")?;

    // First run of the agent: it decides something and remembers why.
    {
        let engine = Engine::open(Config::sqlite(&path))?;
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
