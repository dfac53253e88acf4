//! `strata audit` through the binary: commands recorded as the local user,
//! filters, `verify` naming a changed or removed entry with a failing exit
//! status, bad filters refused with nothing recorded, and processes
//! appending to one file at once.

use crate::util::{Env, write};

fn audited() -> Env {
    let e = Env::new();
    write(&e.path("strata.toml"), "[audit]\nenabled = true\n");
    e
}

fn entries(e: &Env, args: &[&str]) -> Vec<serde_json::Value> {
    let mut a = vec!["audit", "--limit", "10000"];
    a.extend_from_slice(args);
    let v = e.json(&a);
    assert_eq!(v["enabled"], true, "{v}");
    v["entries"].as_array().unwrap().clone()
}

fn sql(e: &Env, stmt: &str) {
    rusqlite::Connection::open(e.db())
        .unwrap()
        .execute_batch(stmt)
        .unwrap();
}

#[test]
fn commands_are_recorded_and_verify_names_a_tampered_entry() {
    let e = audited();
    let id = e.remember("the vault code is zebra-quokka-7731", "project/acme", &[]);
    e.ok(&["recall", "marmoset question", "--view", "project/acme/**"]);
    e.ok(&["get", &id]);
    e.ok(&["forget", &id]);
    let es = entries(&e, &[]);
    let ops: Vec<&str> = es.iter().map(|x| x["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["forget", "get", "recall", "remember"]);
    assert!(
        es.iter()
            .all(|x| x["actor"].as_str().unwrap().starts_with("local:")),
        "{es:?}"
    );
    assert_eq!(es[0]["ids"], serde_json::json!([id]));
    assert_eq!(es[3]["ids"], serde_json::json!([id]));
    assert_eq!(es[2]["scopes"], serde_json::json!(["project/acme/**"]));
    let all = serde_json::Value::Array(es).to_string();
    assert!(!all.contains("zebra") && !all.contains("marmoset"), "{all}");
    // Filters.
    assert_eq!(entries(&e, &["--op", "forget"]).len(), 1);
    assert_eq!(
        entries(&e, &["--scope", "project/acme", "--op", "get"]).len(),
        1
    );
    assert!(entries(&e, &["--scope", "project/beta", "--op", "get"]).is_empty());
    // The table names what the JSON does.
    let table = e.ok(&["audit", "--op", "remember"]);
    assert!(table.contains("remember") && table.contains(&id), "{table}");

    let ok = e.ok(&["audit", "verify"]);
    assert!(ok.contains("audit trail intact"), "{ok}");
    sql(&e, "UPDATE audit SET op = 'list' WHERE seq = 2");
    let err = e.fails(&["audit", "verify"], 1);
    assert!(err.contains("broken at entry 2"), "{err}");
    let o = e.run(&["audit", "verify", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["first_bad"].as_u64()),
        (Some(false), Some(2))
    );
    sql(&e, "UPDATE audit SET op = 'recall' WHERE seq = 2");
    e.ok(&["audit", "verify"]);
    sql(&e, "DELETE FROM audit WHERE seq = 3");
    let err = e.fails(&["audit", "verify"], 1);
    assert!(err.contains("entry 3 is missing"), "{err}");
}

#[test]
fn bad_filters_are_refused_and_record_nothing() {
    let e = audited();
    e.remember("x", "project/acme", &[]);
    let before = entries(&e, &[]).len();
    for (args, field) in [
        (&["--limit", "0"][..], "limit"),
        (&["--since", "yesterday"][..], "since"),
        (&["--until", "2026-13-40"][..], "until"),
        (&["--scope", "project//acme"][..], "project//acme"),
        (
            &["--since", "2026-02-01", "--until", "2026-01-01"][..],
            "until",
        ),
    ] {
        let mut a = vec!["audit"];
        a.extend_from_slice(args);
        let o = e.run(&a);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(field), "{args:?}: {err}");
    }
    // One more: the read that counted `before`.
    assert_eq!(entries(&e, &[]).len(), before + 1);
}

#[test]
fn off_by_default_records_nothing() {
    let e = Env::new();
    e.remember("x", "project/acme", &[]);
    let v = e.json(&["audit"]);
    assert_eq!(v["enabled"], false);
    assert_eq!(v["entries"], serde_json::json!([]));
    e.ok(&["audit", "verify"]);
}

/// Processes writing one file at once append to one chain: no number taken
/// twice or skipped, and the chain verifies.
#[test]
fn processes_appending_at_once_keep_one_chain() {
    let e = audited();
    e.ok(&["init"]);
    std::thread::scope(|s| {
        for w in 0..4 {
            let e = &e;
            s.spawn(move || {
                for i in 0..8 {
                    e.remember(&format!("writer {w} note {i}"), "project/acme", &[]);
                }
            });
        }
    });
    let es = entries(&e, &["--op", "remember"]);
    assert_eq!(es.len(), 32);
    let mut seqs: Vec<u64> = es.iter().map(|x| x["seq"].as_u64().unwrap()).collect();
    seqs.sort();
    assert_eq!(seqs, (1..=32).collect::<Vec<_>>());
    let v = e.json(&["audit", "verify"]);
    assert_eq!(v["ok"], true, "{v}");
}

#[test]
fn retention_prunes_and_the_chain_still_verifies() {
    let e = Env::new();
    write(
        &e.path("strata.toml"),
        "[audit]\nenabled = true\nmax_entries = 5\n",
    );
    for i in 0..8 {
        e.remember(&format!("note {i}"), "project/acme", &[]);
    }
    let p = e.json(&["audit", "prune"]);
    assert_eq!(p["removed"], 3, "{p}");
    let v = e.json(&["audit", "verify"]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["first_seq"], 4, "{v}");
    let es = entries(&e, &["--op", "audit_prune"]);
    assert_eq!(es[0]["count"], 3);
    // Unknown keys in [audit] are errors naming the key.
    write(&e.path("strata.toml"), "[audit]\nenabeld = true\n");
    let err = e.fails(&["audit"], 1);
    assert!(err.contains("enabeld"), "{err}");
}
