//! The LoCoMo protocol on a small fixture in LoCoMo's layout.

use strata::{Config, Engine};
use strata_bench::{LocomoOptions, locomo};

fn fixture() -> serde_json::Value {
    serde_json::json!([
        {
            "sample_id": "conv-a",
            "conversation": {
                "speaker_a": "Ann", "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Pixel."},
                    {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! I started pottery classes.", "blip_caption": "a photo of a clay bowl"}
                ],
                "session_2_date_time": "9:00 am on 12 June, 2023",
                "session_2": [
                    {"speaker": "Ann", "dia_id": "D2:1", "text": "Pixel learned to fetch in the park."},
                    {"speaker": "Bob", "dia_id": "D2:2", "text": "My kiln broke during the heatwave."}
                ]
            },
            "qa": [
                {"question": "What is the name of Ann's greyhound?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
                {"question": "What did Bob's kiln do?", "answer": "broke", "evidence": ["D2:2; D9:9"], "category": 1},
                {"question": "Which clay bowl?", "adversarial_answer": "x", "evidence": ["D1:2"], "category": 5},
                {"question": "Unanswerable", "answer": "n/a", "evidence": [], "category": 3}
            ]
        },
        {
            "sample_id": "conv-b",
            "conversation": {
                "session_1_date_time": "3:15 pm on 1 January, 2024",
                "session_1": [
                    {"speaker": "Cy", "dia_id": "D1:1", "text": "We moved to Lisbon for the winter."},
                    {"speaker": "Di", "dia_id": "D1:2", "text": "Do you still paint watercolours?"}
                ]
            },
            "qa": [
                {"question": "Where did Cy move?", "answer": "Lisbon", "evidence": ["D1:1"], "category": 2}
            ]
        }
    ])
}

/// An in-memory engine without vectors (BM25 alone).
fn engine() -> Engine {
    Engine::open(Config {
        embedder: strata::EmbedderConfig::none(),
        ..Config::in_memory()
    })
    .unwrap()
}

#[test]
fn locomo_protocol_on_a_fixture() {
    let e = engine();
    let opts = LocomoOptions {
        ks: vec![1, 5],
        budgets: vec![60, 1000],
        ..LocomoOptions::default()
    };
    let r = locomo(&e, &fixture(), &opts).unwrap();
    assert_eq!(
        (r.conversations, r.turns, r.questions, r.no_evidence),
        (2, 6, 4, 1)
    );
    assert_eq!(r.unknown_evidence, vec!["conv-a:D9:9".to_string()]);
    // Questions stay inside their conversation: "Lisbon" exists only in conv-b.
    let single = &r.by_category[&4];
    assert_eq!(single.recall[&1], 1.0);
    assert_eq!(single.mrr, 1.0);
    // Half the evidence of the multi-hop question names no turn: at most 0.5.
    let multi = &r.by_category[&1];
    assert_eq!(multi.recall[&5], 0.5);
    assert_eq!(multi.recall_all[&5], 0.0);
    assert_eq!(multi.recall_any[&5], 1.0);
    assert_eq!(r.overall.questions, 4);
    assert_eq!(r.overall_1_4.questions, 3);
    // Memories carry the protocol's content, key and session time.
    let m = e
        .list(&strata::List::new(
            strata::View::parse(&["project/conv-a"]).unwrap(),
        ))
        .unwrap();
    let bowl = m.iter().find(|m| m.key.as_deref() == Some("D1:2")).unwrap();
    assert_eq!(
        bowl.content,
        "Bob said, \"Lovely! I started pottery classes.\" and shared a photo of a clay bowl"
    );
    assert_eq!(bowl.created_at.to_string(), "2023-05-08T13:56:00Z");
    // A big budget holds every turn; a tiny one holds fewer but stays within it.
    let big = r.context.iter().find(|c| c.budget == 1000).unwrap();
    assert_eq!(big.context_recall, big.topk_recall);
    assert!(big.context_any > 0.99, "{big:?}");
    let small = r.context.iter().find(|c| c.budget == 60).unwrap();
    assert!(small.tokens <= 60.0 && small.items < big.items, "{small:?}");
    // An agent's recall of 10 is timed beside each question's, and said.
    let t = &r.timing;
    assert!(
        t.top10_p50_ms > 0.0 && t.top10_p95_ms >= t.top10_p50_ms,
        "{t:?}"
    );
    assert!(t.whole10_p95_ms >= t.top10_p95_ms, "{t:?}");
    assert!(t.to_string().contains("a recall of 10 p50"), "{t}");
}

#[test]
fn malformed_files_are_named() {
    let e = engine();
    let o = LocomoOptions::default();
    let err = |v: serde_json::Value| locomo(&e, &v, &o).unwrap_err().to_string();
    assert!(err(serde_json::json!({"a": 1})).contains("JSON list"));
    assert!(err(serde_json::json!([{"conversation": {}}])).contains("[0].sample_id"));
    let mut bad = fixture();
    bad[0]["conversation"]["session_2_date_time"] = "soon".into();
    assert!(err(bad).contains("session_2_date_time"));
    let o2 = LocomoOptions {
        ks: vec![0],
        ..LocomoOptions::default()
    };
    assert!(
        locomo(&e, &fixture(), &o2)
            .unwrap_err()
            .to_string()
            .contains("k")
    );
}

#[test]
fn per_question_lines_say_where_the_evidence_ranked() {
    let e = engine();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("questions.jsonl");
    let opts = LocomoOptions {
        ks: vec![1, 5],
        budgets: Vec::new(),
        per_question: Some(path.clone()),
        ..LocomoOptions::default()
    };
    let r = locomo(&e, &fixture(), &opts).unwrap();
    let lines: Vec<strata_bench::QuestionLine> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One line per question with evidence, in the file's order.
    assert_eq!(lines.len(), r.questions);
    let q: Vec<(usize, &str, u8)> = lines
        .iter()
        .map(|l| (l.conversation, l.question.as_str(), l.category))
        .collect();
    assert_eq!(
        q,
        vec![
            (0, "What is the name of Ann's greyhound?", 4),
            (0, "What did Bob's kiln do?", 1),
            (0, "Which clay bowl?", 5),
            (1, "Where did Cy move?", 2),
        ]
    );
    for l in &lines {
        // A rank points at its evidence in the results.
        for (ev, rank) in l.evidence.iter().zip(&l.ranks) {
            if let Some(k) = rank.filter(|&k| k <= l.top.len()) {
                assert_eq!(&l.top[k - 1], ev, "{l:?}");
            }
        }
        // Candidates come best first.
        assert!(
            l.candidates
                .windows(2)
                .all(|w| w[0].relevance >= w[1].relevance),
            "{l:?}"
        );
    }
    // The greyhound is first; the kiln's second evidence names no turn.
    assert_eq!(lines[0].ranks, vec![Some(1)]);
    assert_eq!(lines[0].top[0], "D1:1");
    let greyhound = &lines[0].candidates[0];
    assert!(greyhound.bm25.is_some_and(|b| b > 0.0) && greyhound.similarity.is_none());
    assert_eq!(greyhound.session.as_deref(), Some("conv-a-session-1"));
    assert_eq!(lines[1].evidence, vec!["D2:2", "D9:9"]);
    assert_eq!(lines[1].ranks[1], None);
    // Conv-b's two turns only: questions stay in their conversation.
    assert!(lines[3].candidates.len() <= 2);

    // A file that cannot be created is named.
    let bad = LocomoOptions {
        per_question: Some(dir.path().join("no/such/dir/q.jsonl")),
        ..opts
    };
    let err = locomo(&e, &fixture(), &bad).unwrap_err().to_string();
    assert!(
        err.contains("per_question") && err.contains("no/such/dir"),
        "{err}"
    );
}

/// Halves are the first and second half of the conversations; fresh notes
/// land in every conversation's scope, created now, and are never evidence.
#[test]
fn halves_and_fresh_notes() {
    let e = engine();
    let opts = LocomoOptions {
        ks: vec![1, 5],
        budgets: vec![],
        fresh_notes: 1,
        ..LocomoOptions::default()
    };
    let rep = locomo(&e, &fixture(), &opts).unwrap();
    assert_eq!(rep.halves.len(), 2);
    assert_eq!(rep.halves[0].questions, 3);
    assert_eq!(rep.halves[1].questions, 1);
    assert_eq!(rep.fresh_notes, 1);
    // conv-a holds conv-b's first turn, conv-b conv-a's.
    let mut r = strata::Recall::new(
        "Lisbon",
        strata::View::scope(strata::Scope::parse("project/conv-a").unwrap()),
    );
    r.touch = false;
    let hits = e.recall(&r).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].memory.kind, strata::Kind::Note);
    assert!(hits[0].memory.key.as_deref().unwrap().starts_with("fresh:"));
}

/// The relevance-floor evaluation on a small file: an answer found, a
/// question about nothing the notes hold answered "nothing relevant";
/// an answer past the project's notes is refused by name.
#[test]
fn relevance_floor_on_a_small_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(
        &good,
        serde_json::json!({"about": "test", "projects": [{
        "name": "bakery",
        "notes": ["Flour comes from Wessex Mill every Wednesday", "The oven runs hot on the left"],
        "questions": [
            {"q": "when does the flour come?", "answer": 0, "type": "plain"},
            {"q": "zebra quantum", "answer": null, "type": "off_topic"}
        ]}]})
        .to_string(),
    )
    .unwrap();
    let rep = strata_bench::relevance_floor(&engine(), &[good.as_path()], None).unwrap();
    assert_eq!((rep.projects, rep.notes), (1, 2));
    assert_eq!(rep.by_type["plain"].found, 1);
    assert_eq!(rep.by_type["off_topic"].nothing, 1);
    assert_eq!((rep.answered_found, rep.unanswerable_nothing), (1.0, 1.0));
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        serde_json::json!({"projects": [{"name": "bakery", "notes": ["x"],
            "questions": [{"q": "y", "answer": 3}]}]})
        .to_string(),
    )
    .unwrap();
    // The good file first: nothing of it is stored when the bad one fails.
    let e = engine();
    let err = strata_bench::relevance_floor(&e, &[good.as_path(), bad.as_path()], None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bakery") && err.contains("answer 3"), "{err}");
    let everything = strata::View::parse(&["project/**"]).unwrap();
    assert!(e.list(&strata::List::new(everything)).unwrap().is_empty());
    let err =
        strata_bench::relevance_floor(&engine(), &[dir.path().join("none.json").as_path()], None)
            .unwrap_err()
            .to_string();
    assert!(err.contains("none.json"), "{err}");
}

/// With context, each question is asked after the turns said just before
/// its evidence, and those turns never count among the results.
#[test]
fn context_turns_come_before_the_question_and_leave_the_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.jsonl");
    let opts = LocomoOptions {
        ks: vec![1, 5],
        budgets: vec![],
        context_turns: 1,
        per_question: Some(path.clone()),
        ..LocomoOptions::default()
    };
    let rep = locomo(&engine(), &fixture(), &opts).unwrap();
    assert_eq!(rep.context_turns, 1);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // "What did Bob's kiln do?" (evidence D2:2) comes after D2:1.
    let kiln = lines
        .iter()
        .find(|l| {
            l["question"]
                .as_str()
                .unwrap()
                .ends_with("What did Bob's kiln do?")
        })
        .unwrap();
    assert!(
        kiln["question"]
            .as_str()
            .unwrap()
            .starts_with("Ann: Pixel learned to fetch")
    );
    let top: Vec<&str> = kiln["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(!top.contains(&"D2:1"), "{top:?}");
    assert_eq!(top[0], "D2:2");
    // The first turn has no turn before it: the question alone.
    let pixel = lines.iter().find(|l| l["evidence"][0] == "D1:1").unwrap();
    assert_eq!(pixel["question"], "What is the name of Ann's greyhound?");
}
