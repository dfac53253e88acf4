//! Context assembly: profiles, budgets, HEAD/TAIL, cuts, summaries,
//! rendering, determinism and replay.

use jiff::Timestamp;
use proptest::prelude::*;
use strata::{
    Config, ContextRequest, Engine, Forget, ForgetOptions, Kind, NewMemory, Patch, Render, Role,
    Why,
};

use crate::harness::{MakeEngine, scope};

backends!(engine: sources_fill_sections_and_respect_filters, unused_share_flows_to_the_next_source,
    head_tail_keeps_oldest_and_newest, long_items_are_cut_or_skipped, summary_covers_what_did_not_fit,
    always_keys_come_first, same_state_same_bytes, replay_rebuilds_and_explains_changes,
    resolution_and_request_errors);

const PROFILES: &str = r#"
[profiles.coder]
max_tokens = 400
strategy = "hybrid"
[[profiles.coder.sources]]
scope = "task/{task}"
share = 0.5
[[profiles.coder.sources]]
scope = "project/{project}"
kinds = ["decision", "convention"]
share = 0.3
always = ["CLAUDE.md"]
[[profiles.coder.sources]]
scope = "global"
tags = ["preference"]
share = 0.2

[profiles.timeline]
max_tokens = 300
strategy = "relevance"
head_tail = 2
[[profiles.timeline.sources]]
layer = "session"

[profiles.summarized]
max_tokens = 300
strategy = "hybrid"
summary_share = 0.3
[[profiles.summarized.sources]]
scope = "project/{project}"

[profiles.secret]
max_tokens = 300
include_sensitive = true
[[profiles.secret.sources]]
scope = "project/{project}"
"#;

fn with_profiles(c: &mut Config) {
    c.apply_toml(PROFILES, None).unwrap();
}

fn fixed(e: &mut Engine) -> Timestamp {
    let at: Timestamp = "2026-11-01T12:00:00Z".parse().unwrap();
    e.set_clock(move || at);
    at
}

fn req(profile: &str) -> ContextRequest {
    ContextRequest::new(profile)
        .var("task", "t1")
        .var("project", "acme")
        .var("session", "s1")
}

fn check_budget(e: &Engine, p: &strata::ContextPackage) {
    for r in [Render::Markdown, Render::Messages, Render::Json] {
        if r == p.render || (p.render == Render::Json && r == Render::Markdown) {
            let exact = p.count_tokens(e.token_counter(), r);
            assert_eq!(exact, p.total_tokens, "{r:?}");
            assert!(exact <= p.max_tokens, "{r:?}: {exact} > {}", p.max_tokens);
        }
    }
}

fn sources_fill_sections_and_respect_filters(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    e.remember(NewMemory::new(scope("task/t1"), "Fix the flaky login test").kind(Kind::Finding))
        .unwrap();
    e.remember(
        NewMemory::new(scope("project/acme"), "We chose PostgreSQL for billing")
            .kind(Kind::Decision),
    )
    .unwrap();
    e.remember(NewMemory::new(scope("project/acme"), "lunch was pizza").kind(Kind::Context))
        .unwrap();
    e.remember(
        NewMemory::new(scope("project/acme"), "the deploy password is hunter2")
            .kind(Kind::Decision)
            .sensitive(true),
    )
    .unwrap();
    e.remember(
        NewMemory::new(scope("project/other"), "Other project decision").kind(Kind::Decision),
    )
    .unwrap();
    e.remember_with(
        NewMemory::new(scope("global"), "Prefers short answers")
            .kind(Kind::Preference)
            .tag("preference"),
        strata::Confirm::Yes,
    )
    .unwrap();
    e.remember(NewMemory::new(scope("global"), "untagged global note"))
        .unwrap();

    let p = e.context(&req("coder").query("billing database")).unwrap();
    check_budget(&e, &p);
    let md = p.markdown();
    assert!(md.starts_with("## Task context\n- [finding · "), "{md}");
    assert!(md.contains("## Project context\n"), "{md}");
    assert!(md.contains("## Global context\n"), "{md}");
    assert!(md.contains("We chose PostgreSQL"), "{md}");
    for absent in ["pizza", "hunter2", "Other project", "untagged"] {
        assert!(!md.contains(absent), "{absent} leaked: {md}");
    }
    assert_eq!(p.items.len(), 3);
    assert_eq!(p.per_source.len(), 3);
    assert!(p.per_source.iter().all(|u| u.items == 1));
    assert_eq!(p.dropped, 0);
    assert!((p.compression_ratio - 1.0).abs() < 1e-9);

    // Sensitive memories appear only when the profile allows them.
    let p = e.context(&req("secret")).unwrap();
    assert!(p.markdown().contains("hunter2"));

    // messages: a system message with the sections; turns are messages.
    e.remember(
        NewMemory::new(scope("session/s1"), "hello there")
            .role(Role::User)
            .kind(Kind::Conversation),
    )
    .unwrap();
    e.remember(
        NewMemory::new(scope("session/s1"), "hi, how can I help?")
            .role(Role::Assistant)
            .kind(Kind::Conversation),
    )
    .unwrap();
    let mut r = req("timeline");
    r.render = Some(Render::Messages);
    let p = e.context(&r).unwrap();
    check_budget(&e, &p);
    let msgs = p.messages();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!(msgs[0].role, "user");
    assert_eq!(msgs[1].role, "assistant");
}

fn unused_share_flows_to_the_next_source(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    // The task is empty; the project has far more than its 30 % share.
    for i in 0..60 {
        e.remember(
            NewMemory::new(
                scope("project/acme"),
                format!("decision number {i} about the schema"),
            )
            .kind(Kind::Decision),
        )
        .unwrap();
    }
    let p = e.context(&req("coder")).unwrap();
    check_budget(&e, &p);
    assert_eq!(p.per_source[0].items, 0);
    // Far beyond 30 % of 400 tokens: the unused shares flowed over.
    assert!(p.per_source[1].tokens > 300, "{:?}", p.per_source);
    assert!(p.total_tokens > 350, "{}", p.total_tokens);
    assert!(p.dropped > 0);
    assert!(p.compression_ratio < 1.0);
}

fn head_tail_keeps_oldest_and_newest(make: MakeEngine) {
    let mut e = make(&with_profiles);
    let t0: Timestamp = "2026-10-01T00:00:00Z".parse().unwrap();
    fixed(&mut e);
    let mut ids = Vec::new();
    for i in 0..40 {
        let text = if i == 20 {
            "the middle turn mentions kubernetes".to_string()
        } else {
            format!("turn {i} says something ordinary and unrelated to anything")
        };
        let m = e
            .remember(
                NewMemory::new(scope("session/s1"), text)
                    .kind(Kind::Conversation)
                    .created_at(t0 + jiff::SignedDuration::from_mins(i)),
            )
            .unwrap();
        ids.push(m.id);
    }
    let p = e.context(&req("timeline").query("kubernetes")).unwrap();
    check_budget(&e, &p);
    let got: Vec<(&str, Why)> = p.items.iter().map(|it| (it.id.as_str(), it.why)).collect();
    // Oldest two first, the best match, … , newest two last.
    assert_eq!(got[0], (ids[0].as_str(), Why::Head));
    assert_eq!(got[1], (ids[1].as_str(), Why::Head));
    assert_eq!(got[2], (ids[20].as_str(), Why::Rank));
    let n = got.len();
    assert_eq!(got[n - 2], (ids[38].as_str(), Why::Tail));
    assert_eq!(got[n - 1], (ids[39].as_str(), Why::Tail));
    assert!(n < 40);
}

fn long_items_are_cut_or_skipped(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    let long: String = (0..600)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let m = e
        .remember(
            NewMemory::new(scope("project/acme"), format!("START {long} END")).kind(Kind::Decision),
        )
        .unwrap();
    let p = e.context(&req("coder")).unwrap();
    check_budget(&e, &p);
    let it = p
        .items
        .iter()
        .find(|it| it.id == m.id)
        .expect("cut item included");
    let cut = it.cut.expect("cut");
    assert!(it.content.starts_with("START"), "{}", it.content);
    assert!(it.content.ends_with("END"), "{}", it.content);
    assert!(it.content.contains("tokens cut…"), "{}", it.content);
    assert!(cut.elided > 0 && cut.head > 0 && cut.tail > 0);

    // With too little room even for a cut, the item is skipped.
    let mut r = req("coder");
    r.max_tokens = Some(30);
    let p = e.context(&r).unwrap();
    check_budget(&e, &p);
    assert!(p.items.is_empty());
    assert_eq!(p.dropped, 1);
}

fn summary_covers_what_did_not_fit(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    for i in 0..80 {
        e.remember(NewMemory::new(
            scope("project/acme"),
            format!("Fact {i} is about the billing service. It has detail {i}."),
        ))
        .unwrap();
    }
    let p = e.context(&req("summarized").query("billing")).unwrap();
    check_budget(&e, &p);
    let s = p.summary.as_ref().expect("summary");
    assert_eq!(s.method, "extractive");
    assert!(!s.ids.is_empty());
    let included: Vec<&str> = p.items.iter().map(|it| it.id.as_str()).collect();
    for id in &s.ids {
        assert!(
            !included.contains(&id.as_str()),
            "summary repeats an included item"
        );
        assert!(s.text.contains(id.as_str()));
    }
    assert!(p.markdown().contains("## Summary of what did not fit\n- "));
    assert!(s.tokens as f64 >= 300.0 * 0.2, "{}", s.tokens);
}

fn always_keys_come_first(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    for i in 0..30 {
        e.remember(
            NewMemory::new(scope("project/acme"), format!("decision {i} on the api"))
                .kind(Kind::Decision),
        )
        .unwrap();
    }
    let claude = e
        .remember(
            NewMemory::new(
                scope("project/acme"),
                "Use rustfmt. Never unwrap in libraries.",
            )
            .kind(Kind::Convention)
            .key("CLAUDE.md")
            .importance(0.1),
        )
        .unwrap();
    let p = e.context(&req("coder").query("api")).unwrap();
    let first = p.items.iter().find(|it| it.source == 1).unwrap();
    assert_eq!(first.id, claude.id);
    assert_eq!(first.why, Why::Always);
}

fn same_state_same_bytes(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    for i in 0..50 {
        e.remember(NewMemory::new(
            scope("project/acme"),
            format!("Note {i}: the cache layer sometimes drops writes. Retry helps."),
        ))
        .unwrap();
    }
    for render in [Render::Markdown, Render::Messages, Render::Json] {
        let mut r = req("summarized").query("cache writes");
        r.render = Some(render);
        let a = e.context(&r).unwrap();
        let b = e.context(&r).unwrap();
        assert_eq!(a.to_text(render), b.to_text(render));
        assert_eq!(a.id, b.id);
        check_budget(&e, &a);
    }
}

fn replay_rebuilds_and_explains_changes(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    let mut ids = Vec::new();
    for i in 0..40 {
        let m = e
            .remember(NewMemory::new(
                scope("project/acme"),
                format!("Record {i}: the queue backs off. Then it retries."),
            ))
            .unwrap();
        ids.push(m.id);
    }
    let mut r = req("summarized").query("queue");
    r.log = true;
    let p = e.context(&r).unwrap();
    let r1 = e.replay(&p.id).unwrap();
    assert!(r1.exact);
    assert!(r1.changes.is_empty());
    assert_eq!(r1.package.to_text(Render::Json), p.to_text(Render::Json));

    // Change one used memory and forget another: the replay says so and
    // rebuilds from the logged version where it still exists.
    let used: Vec<String> = p.items.iter().map(|it| it.id.clone()).collect();
    e.update(
        &used[0],
        Patch {
            content: Some("rewritten".into()),
            ..Patch::default()
        },
        1,
    )
    .unwrap();
    let r2 = e.replay(&p.id).unwrap();
    assert!(r2.exact, "history keeps version 1");
    assert_eq!(r2.changes.len(), 1);
    assert_eq!(r2.changes[0].now, "updated to version 2");
    assert!(r2.changes[0].rebuilt);
    e.forget(&Forget::Id(used[1].clone()), ForgetOptions::default())
        .unwrap();
    let r3 = e.replay(&p.id).unwrap();
    assert!(!r3.exact);
    assert!(
        r3.changes
            .iter()
            .any(|c| c.id == used[1] && c.now == "forgotten" && !c.rebuilt)
    );
    assert!(!r3.package.items.iter().any(|it| it.id == used[1]));

    let err = e
        .replay("ctx-000000000000000000000000")
        .unwrap_err()
        .to_string();
    assert!(err.contains("was never logged"), "{err}");
}

fn resolution_and_request_errors(make: MakeEngine) {
    let mut e = make(&with_profiles);
    fixed(&mut e);
    e.remember(NewMemory::new(scope("global"), "a global note"))
        .unwrap();
    let p = e.context(&ContextRequest::new("none")).unwrap();
    assert!(p.items.is_empty() && p.total_tokens == 0);
    assert_eq!(p.markdown(), "");
    // The built-in global profile skips the task and project it was not given.
    let p = e.context(&ContextRequest::new("global")).unwrap();
    assert_eq!(p.items.len(), 1);
    assert!(
        p.per_source[0]
            .skipped
            .as_deref()
            .unwrap()
            .contains("{task}")
    );

    let err = |r: ContextRequest| e.context(&r).unwrap_err().to_string();
    assert!(err(ContextRequest::new("nope")).contains("unknown profile `nope`"));
    assert!(err(ContextRequest::new("coder")).contains("needs {task}"));
    assert!(err(req("coder").var("sprnt", "x")).contains("unknown placeholder `sprnt`"));
    assert!(err(req("coder").var("task", "a/b")).contains("value of {task}"));
    let mut r = req("coder");
    r.max_tokens = Some(0);
    assert!(err(r).contains("max_tokens"));
}

fn arb_content() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z ]{0,40}",
        "[a-zA-Z0-9][a-zA-Z0-9 .,!?é中]{0,400}",
        Just("line one.\nline two! three? four".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    /// The package never exceeds `max_tokens`, in every render, for random
    /// stores, profiles and budgets.
    #[test]
    fn never_over_budget(
        contents in prop::collection::vec((0usize..3, arb_content(), any::<bool>()), 0..40),
        budget in 1u32..600,
        head_tail in 0usize..3,
        summary in prop_oneof![Just(0.0), Just(0.3), Just(0.6)],
        shares in prop_oneof![Just("share = 0.2"), Just("")],
        strategy in prop_oneof![Just("recency"), Just("importance"), Just("relevance"), Just("hybrid")],
        render in prop_oneof![Just(Render::Markdown), Just(Render::Messages), Just(Render::Json)],
        query in "[a-z ]{0,12}",
    ) {
        let toml = format!(r#"
[profiles.p]
max_tokens = {budget}
strategy = "{strategy}"
head_tail = {head_tail}
summary_share = {summary}
[[profiles.p.sources]]
scope = "task/{{task}}"
{shares}
[[profiles.p.sources]]
scope = "project/{{project}}/**"
[[profiles.p.sources]]
scope = "global"
"#);
        let mut c = Config::in_memory();
        c.embedder = strata::EmbedderConfig::none();
        c.apply_toml(&toml, None).unwrap();
        let e = Engine::open(c).unwrap();
        let scopes = ["task/t1", "project/acme/sprint/s1", "global"];
        for (s, text, turn) in &contents {
            let mut n = NewMemory::new(scope(scopes[*s]), text.clone());
            if *turn {
                n = n.kind(Kind::Conversation).role(Role::User);
            }
            e.remember(n).unwrap();
        }
        let mut r = req("p").query(query);
        r.render = Some(render);
        let p = e.context(&r).unwrap();
        let exact = p.count_tokens(e.token_counter(), render);
        prop_assert_eq!(exact, p.total_tokens);
        prop_assert!(exact <= budget, "{} > {}", exact, budget);
    }
}

/// Issue 22, L7: one huge memory in a shared scope (or a larger pinned one)
/// is cut to half its source's share while others compete, and takes what
/// is left only after them.
#[test]
fn one_huge_memory_does_not_crowd_out_its_source() {
    let e = crate::harness::TestEngine::sqlite(|_| {});
    for i in 0..10 {
        e.remember(strata::NewMemory::new(
            scope("project/acme"),
            format!("acme fact number {i} about the build"),
        ))
        .unwrap();
    }
    for i in 0..5 {
        e.remember(strata::NewMemory::new(
            scope("global"),
            format!("global preference {i}: short answers"),
        ))
        .unwrap();
    }
    let mut req = strata::ContextRequest::new("global");
    req.vars.insert("project".into(), "acme".into());
    let small = |pkg: &strata::ContextPackage| pkg.items.iter().filter(|i| i.cut.is_none()).count();
    let without = e.context(&req).unwrap();
    assert_eq!(small(&without), 15);
    e.remember(strata::NewMemory::new(
        scope("global"),
        "huge ".repeat(35_000),
    ))
    .unwrap();
    let with = e.context(&req).unwrap();
    assert_eq!(small(&with), 15, "the huge memory pushed others out");
    let huge = with.items.iter().find(|i| i.cut.is_some()).unwrap();
    // It still takes what the others leave: the budget is used up.
    assert!(
        with.total_tokens + 64 >= with.max_tokens,
        "{} of {}",
        with.total_tokens,
        with.max_tokens
    );
    assert!(huge.tokens > 7000, "{}", huge.tokens);
    let mut pinned = strata::NewMemory::new(scope("global"), "pinned ".repeat(60_000));
    pinned.pinned = true;
    e.remember(pinned).unwrap();
    let with = e.context(&req).unwrap();
    assert_eq!(small(&with), 15, "a larger pinned memory pushed others out");
    assert!(with.total_tokens <= with.max_tokens);
}
