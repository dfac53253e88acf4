//! Facts that change: a keyed memory superseded later is recalled `as_of`
//! a past time as the version true then; default recall gives what is true
//! now.

use jiff::{SignedDuration, Timestamp};
use strata::{Config, Kind, NewMemory, Recall, Scope, View};

use crate::harness::TestEngine;

type Make<'a> = &'a dyn Fn(&dyn Fn(&mut Config)) -> TestEngine;

backends!(engine: recall_as_of_returns_what_was_true_then);

fn recall_as_of_returns_what_was_true_then(make: Make) {
    let e = make(&|_| {});
    let acme = Scope::parse("project/acme").unwrap();
    let now = Timestamp::now();
    let days = |n: i64| now - SignedDuration::from_hours(24 * n);
    let fact = |text: &str, at: Timestamp| {
        e.remember(
            NewMemory::new(acme.clone(), text)
                .kind(Kind::Finding)
                .key("ann/home")
                .created_at(at),
        )
        .unwrap()
    };
    let paris = fact("Ann lives in Paris", days(300));
    let berlin = fact("Ann moved to Berlin and lives there now", days(100));
    assert_eq!(paris.id, berlin.id, "one fact, superseded");
    e.remember(
        NewMemory::new(acme.clone(), "Ann's cat Pixel lives with her")
            .kind(Kind::Finding)
            .created_at(days(10)),
    )
    .unwrap();
    let ask = |as_of: Option<Timestamp>| {
        let mut r = Recall::new("where does Ann live", View::scope(acme.clone()));
        r.as_of = as_of;
        r.filter = strata::Filter::parse(&serde_json::json!({"kind": "finding"})).unwrap();
        r.min_relevance = Some(0.0);
        r.touch = false;
        e.recall(&r).unwrap()
    };
    let today = ask(None);
    assert_eq!(today.len(), 2, "{today:?}");
    let fact = today.iter().find(|h| h.memory.id == paris.id).unwrap();
    assert_eq!(
        fact.memory.content,
        "Ann moved to Berlin and lives there now"
    );
    assert_eq!(fact.valid_to, None);
    let then = ask(Some(days(200)));
    assert_eq!(then.len(), 1, "the cat was not known then: {then:?}");
    assert_eq!(then[0].memory.content, "Ann lives in Paris");
    assert_eq!(then[0].memory.version, 1);
    assert_eq!(then[0].valid_to, Some(berlin.updated_at));
    let after = ask(Some(days(50)));
    assert_eq!(
        after[0].memory.content,
        "Ann moved to Berlin and lives there now"
    );
    assert_eq!(after[0].valid_to, None);
    assert!(ask(Some(days(400))).is_empty(), "nothing was known yet");
}
