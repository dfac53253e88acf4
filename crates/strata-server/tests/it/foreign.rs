//! Imports from other memory tools over HTTP (`POST /v1/import/foreign`):
//! the client sends the file's text or a folder's files; what the input
//! makes must land inside the token's scopes and sessions, else nothing is
//! imported (dry runs too); bad input is a 400 naming what was wrong and
//! changes nothing.

use serde_json::{Value, json};
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, assert_error, token};

const CLAUDE: &str = r#"[{"uuid": "c-1", "name": "Deploys", "created_at": "2024-06-03T08:15:00Z",
  "chat_messages": [
    {"uuid": "m-1", "sender": "human", "text": "When do we deploy?", "created_at": "2024-06-03T08:15:02Z"},
    {"uuid": "m-2", "sender": "assistant", "text": "On Tuesdays, after the freeze lifts.", "created_at": "2024-06-03T08:15:09Z"}]}]"#;

struct Fleet {
    s: Server,
    /// `project/alpha` and every session.
    chats: String,
    /// `project/beta` only.
    beta: String,
    /// `project/beta`, read only.
    reader: String,
}

fn fleet() -> Fleet {
    let (chats, a) = token("chats", &["project/alpha", "session"], Access::ReadWrite);
    let (beta, b) = token("beta", &["project/beta"], Access::ReadWrite);
    let (reader, r) = token("reader", &["project/beta"], Access::Read);
    Fleet {
        s: Server::start(ServerConfig {
            tokens: vec![a, b, r],
            ..Default::default()
        }),
        chats,
        beta,
        reader,
    }
}

fn import(s: &Server, token: &str, body: Value) -> (u16, Value) {
    s.call(
        "POST",
        "/v1/import/foreign",
        Some(token),
        Some(&body.to_string()),
    )
}

#[test]
fn a_conversation_export_lands_once_in_its_session() {
    let f = fleet();
    let before = f.s.snapshot();
    let body = json!({"from": "claude", "text": CLAUDE, "dry_run": true});
    let (status, dry) = import(&f.s, &f.chats, body);
    assert_eq!(status, 200, "{dry}");
    assert_eq!(
        (&dry["added"], &dry["sessions"], &dry["dry_run"]),
        (&json!(2), &json!(1), &json!(true))
    );
    assert_eq!(f.s.snapshot(), before, "a dry run writes nothing");

    let (status, r) = import(&f.s, &f.chats, json!({"from": "claude", "text": CLAUDE}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["added"], 2);
    assert_eq!(r["scopes"], json!(["session/claude-c-1"]));
    let listed = f.s.expect(
        200,
        "POST",
        "/v1/list",
        Some(&f.chats),
        json!({"view": ["session/**"]}),
    );
    let texts: Vec<&str> = listed["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 2, "{listed}");
    assert!(texts.iter().any(|t| t.contains("after the freeze lifts")));
    f.s.expect(
        200,
        "GET",
        "/v1/sessions/claude-c-1",
        Some(&f.chats),
        Value::Null,
    );

    let after = f.s.snapshot();
    let (status, again) = import(&f.s, &f.chats, json!({"from": "claude", "text": CLAUDE}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["added"], &again["unchanged"]),
        (&json!(0), &json!(2))
    );
    assert_eq!(f.s.snapshot(), after, "a second import adds nothing");
}

#[test]
fn what_lands_outside_the_token_is_refused_whole() {
    let f = fleet();
    let before = f.s.snapshot();
    // beta holds no session: the conversation's session and scope are
    // outside it, for a dry run too.
    for dry_run in [true, false] {
        let body = json!({"from": "claude", "text": CLAUDE, "dry_run": dry_run});
        let (status, v) = import(&f.s, &f.beta, body);
        assert_eq!(status, 403, "{v}");
        assert_error(&v, "forbidden", "conversations.json: conversation 1");
    }
    // Into beta's project, the scopes are beta's, but the session name
    // `claude-c-1` is not beta's to create.
    let body = json!({"from": "claude", "text": CLAUDE, "scope": "project/beta"});
    let (status, v) = import(&f.s, &f.beta, body);
    assert_eq!(status, 403, "{v}");
    assert_error(&v, "forbidden", "claude-c-1");
    // A target scope outside the token is refused before anything is read.
    let mem0 = json!([{"id": "m-1", "memory": "Ana likes tea", "user_id": "ana"}]).to_string();
    let body = json!({"from": "mem0", "text": mem0, "scope": "project/alpha"});
    let (status, v) = import(&f.s, &f.beta, body);
    assert_eq!(status, 403, "{v}");
    assert_error(&v, "forbidden", "scope");
    // mem0's default scope (`user/ana`) is outside beta too.
    let (status, v) = import(&f.s, &f.beta, json!({"from": "mem0", "text": mem0}));
    assert_eq!(status, 403, "{v}");
    assert_error(&v, "forbidden", "user/ana");
    // A read-only token writes nothing.
    let body = json!({"from": "mem0", "text": mem0, "scope": "project/beta"});
    let (status, v) = import(&f.s, &f.reader, body.clone());
    assert_eq!(status, 403, "{v}");
    assert_error(&v, "forbidden", "read access only");
    assert_eq!(f.s.snapshot(), before);
    // Inside beta's project it lands.
    let (status, v) = import(&f.s, &f.beta, body);
    assert_eq!((status, &v["added"]), (200, &json!(1)), "{v}");
}

#[test]
fn a_markdown_folder_is_sent_as_its_files() {
    let f = fleet();
    let files = json!([
        {"path": "people/ana.md", "text": "---\ntitle: Ana\ntags: [team]\n---\nAna owns billing.\n"},
        {"path": "decisions/db.md", "text": "---\ntype: decision\n---\nWe use PostgreSQL for billing.\n", "modified": "2024-05-01T10:00:00Z"},
        {"path": "logo.png", "text": ""},
        {"path": ".obsidian/app.md", "text": "hidden"}
    ]);
    let (status, r) = import(
        &f.s,
        &f.beta,
        json!({"from": "markdown", "name": "beta", "files": files}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["added"], 2, "{r}");
    assert_eq!(r["scopes"], json!(["project/beta"]));
    assert_eq!(r["skipped"][0]["entry"], "logo.png", "{r}");
    let listed = f.s.expect(
        200,
        "POST",
        "/v1/list",
        Some(&f.beta),
        json!({"view": ["project/beta"], "filter": {"kind": "decision"}}),
    );
    let m = &listed["memories"][0];
    assert_eq!(m["content"], "We use PostgreSQL for billing.", "{listed}");
    assert!(
        m["updated_at"].as_str().unwrap().starts_with("2024-05-01"),
        "{m}"
    );
}

#[test]
fn bad_input_names_what_was_wrong_and_changes_nothing() {
    let f = fleet();
    let note = json!([{"path": "a.md", "text": "A note."}]);
    let cases = [
        (json!({"from": "evernote", "text": "x"}), "from", "evernote"),
        (
            json!({"from": "markdown", "text": "x"}),
            "files",
            "markdown",
        ),
        (json!({"from": "markdown", "files": note}), "name", "name"),
        (json!({"from": "chatgpt", "files": note}), "text", "chatgpt"),
        (json!({"from": "claude"}), "text", "claude"),
        (
            json!({"from": "mem0", "text": "[]", "files": note}),
            "files",
            "not both",
        ),
        (
            json!({"from": "claude", "text": "[{\"uuid\": 5"}),
            "conversations.json",
            "JSON",
        ),
        (
            json!({"from": "claude", "name": "mine.json", "text": "{}"}),
            "mine.json",
            "array",
        ),
        (
            json!({"from": "markdown", "name": "beta", "files": [{"path": "../etc/passwd.md", "text": "x"}]}),
            "files[0].path",
            "..",
        ),
        (
            json!({"from": "markdown", "name": "beta", "files": [{"path": "/abs.md", "text": "x"}]}),
            "files[0].path",
            "relative",
        ),
        (
            json!({"from": "markdown", "name": "beta", "files": [{"path": "a.md", "text": "x"}, {"path": "a.md", "text": "y"}]}),
            "files[1].path",
            "twice",
        ),
        (
            json!({"from": "markdown", "name": "beta", "files": [{"path": "a.md", "text": "x", "modified": "last week"}]}),
            "files[0].modified",
            "last week",
        ),
        (
            json!({"from": "markdown", "name": "beta", "files": [{"path": "a.md", "text": "---\ntitle: [\n---\nx"}]}),
            "a.md",
            "YAML",
        ),
        (
            json!({"from": "mem0", "text": "[]", "scope": "project//x"}),
            "scope",
            "project//x",
        ),
        (
            json!({"from": "mem0", "text": "[]", "colour": "red"}),
            "colour",
            "colour",
        ),
    ];
    let before = f.s.snapshot();
    for (body, field, what) in cases {
        let (status, v) = import(&f.s, &f.beta, body.clone());
        assert_eq!(status, 400, "{body}: {v}");
        let e = &v["error"];
        let text = format!("{} {}", e["field"], e["message"]);
        assert!(
            text.contains(field) && text.contains(what),
            "{body}: expected `{field}` and `{what}` in {v}"
        );
    }
    assert_eq!(f.s.snapshot(), before);
}
