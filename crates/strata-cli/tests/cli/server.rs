//! `strata serve`, `strata mcp` and `strata token` as processes: the MCP
//! handshake over stdio, graceful shutdown with nothing acknowledged lost,
//! two servers and the CLI on one file, refusals.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::util::{Env, write};

/// A running `strata serve`, with the address it printed.
pub(crate) struct Serve {
    child: Child,
    pub(crate) base: String,
    /// Everything the server wrote to stderr after its address, so far.
    pub(crate) log: Arc<Mutex<String>>,
}

impl Serve {
    pub(crate) fn start(e: &Env, extra: &[&str]) -> Serve {
        let mut cmd = e.cmd();
        cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
        Serve::spawn(cmd)
    }

    /// Starts `cmd` (a `strata serve …`) and waits for its address.
    pub(crate) fn spawn(mut cmd: std::process::Command) -> Serve {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let base = loop {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "serve exited");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        // Keep draining stderr so the server never blocks on it.
        let log = Arc::new(Mutex::new(String::new()));
        let keep = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).is_ok_and(|n| n > 0) {
                keep.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Serve { child, base, log }
    }

    /// Waits (up to 10 s) until the log holds `n` lines starting with
    /// `prefix`; returns the log.
    pub(crate) fn wait_log(&self, prefix: &str, n: usize) -> String {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.log.lock().unwrap().clone();
            if log.lines().filter(|l| l.starts_with(prefix)).count() >= n
                || std::time::Instant::now() > until
            {
                return log;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Sends the server a signal (`HUP`, `TERM`, …).
    pub(crate) fn signal(&self, name: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Sends SIGTERM and waits for the exit.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        self.child.wait().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

pub(crate) fn post(
    a: &ureq::Agent,
    url: &str,
    token: &str,
    body: &Value,
) -> Result<(u16, Value), ureq::Error> {
    let mut r = a
        .post(url)
        .header("authorization", &format!("Bearer {token}"))
        .header("content-type", "application/json")
        .send(body.to_string())?;
    let status = r.status().as_u16();
    let v = serde_json::from_str(&r.body_mut().read_to_string()?).unwrap_or(Value::Null);
    Ok((status, v))
}

/// A config with one read-write token over `project`; returns the token.
fn config_with_token(e: &Env) -> String {
    let out = e.json(&[
        "token",
        "new",
        "--name",
        "agent",
        "--scope",
        "project",
        "--access",
        "read_write",
    ]);
    write(&e.path("strata.toml"), out["config"].as_str().unwrap());
    out["token"].as_str().unwrap().to_string()
}

#[test]
fn token_new_prints_the_token_once_and_config_lines() {
    let e = Env::new();
    let out = e.ok(&[
        "token",
        "new",
        "--name",
        "ci",
        "--scope",
        "project/acme",
        "--scope",
        "global",
        "--access",
        "read_write",
    ]);
    assert!(out.contains("strata_"), "{out}");
    assert!(
        out.contains("[[server.tokens]]")
            && out.contains("scopes = [\"project/acme\", \"global\"]"),
        "{out}"
    );
    assert!(out.contains("access = \"read_write\""), "{out}");
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("strata_"))
        .unwrap();
    assert!(!out.contains(&format!("secret_sha256 = \"{token}\"")));
    e.fails(&["token", "new", "--name", "x", "--scope", "Bad Scope"], 2);
    e.fails(
        &[
            "token", "new", "--name", "x", "--scope", "global", "--access", "root",
        ],
        2,
    );
}

#[test]
fn serve_refuses_no_auth_off_loopback_and_runs_without_tokens_only_with_no_auth() {
    let e = Env::new();
    let err = e.fails(&["serve", "--no-auth", "--listen", "0.0.0.0:0"], 2);
    assert!(err.contains("loopback"), "{err}");
    let err = e.fails(&["serve", "--listen", "127.0.0.1:0"], 2);
    assert!(err.contains("no tokens configured"), "{err}");
    let err = e.fails(&["serve", "--no-auth", "--listen", "nowhere"], 2);
    assert!(err.contains("HOST:PORT"), "{err}");
    write(&e.path("strata.toml"), "[server]\nlisten = 5\n");
    let err = e.fails(&["serve"], 1);
    assert!(err.contains("listen"), "{err}");
}

#[test]
fn sigterm_finishes_in_flight_requests_and_loses_nothing_acknowledged() {
    let e = Env::new();
    let token = config_with_token(&e);
    let mut s = Serve::start(&e, &[]);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (acked, stop, url, token) = (acked.clone(), stop.clone(), format!("{}/v1/memories", s.base), token.clone());
            std::thread::spawn(move || {
                let a = agent();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let body = json!({"content": format!("writer {w} note {i}"), "scope": format!("project/p{w}")});
                    match post(&a, &url, &token, &body) {
                        Ok((201, m)) => acked.lock().unwrap().push(m["id"].as_str().unwrap().to_string()),
                        Ok((status, v)) => panic!("{status} {v}"),
                        // The server stopped: nothing more is acknowledged.
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 200 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = s.terminate();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(status.success(), "serve exited with {status}");
    let acked = acked.lock().unwrap().clone();
    let all = e.ok(&["export"]);
    let stored: std::collections::HashSet<String> = all
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for id in &acked {
        assert!(stored.contains(id), "acknowledged write {id} is missing");
    }
    e.ok(&["debug", "integrity"]);
}

#[test]
fn two_servers_and_the_cli_share_one_file() {
    let e = Env::new();
    let token = config_with_token(&e);
    let a = Serve::start(&e, &[]);
    let b = Serve::start(&e, &[]);
    let threads: Vec<_> = [&a.base, &b.base]
        .into_iter()
        .enumerate()
        .map(|(i, base)| {
            let (url, token) = (format!("{base}/v1/memories"), token.clone());
            std::thread::spawn(move || {
                let ag = agent();
                for n in 0..150 {
                    let (st, v) = post(&ag, &url, &token, &json!({"content": format!("server {i} write {n}"), "scope": "project/shared"})).unwrap();
                    assert_eq!(st, 201, "{v}");
                }
            })
        })
        .collect();
    for n in 0..20 {
        e.remember(&format!("cli write {n}"), "project/shared", &[]);
    }
    for t in threads {
        t.join().unwrap();
    }
    // Each server sees every write, whoever made it.
    for base in [&a.base, &b.base] {
        let (st, v) = post(
            &agent(),
            &format!("{base}/v1/list"),
            &token,
            &json!({"view": ["project/shared"], "limit": 1000}),
        )
        .unwrap();
        assert_eq!(st, 200);
        assert_eq!(v["memories"].as_array().unwrap().len(), 320);
    }
}

/// `strata mcp` over stdio: newline-delimited JSON-RPC.
pub(crate) struct Stdio_ {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Stdio_ {
    pub(crate) fn start(e: &Env, args: &[&str]) -> Stdio_ {
        let mut child = e
            .cmd()
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Stdio_ {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            next: 0,
        }
    }

    pub(crate) fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "mcp closed stdout"
            );
            // Every line on stdout is a protocol message.
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON-RPC on stdout: {e}: {line}"));
            if v["id"] == self.next {
                return v;
            }
        }
    }

    /// A tool's answer as text (the compact form).
    pub(crate) fn text(&mut self, name: &str, args: Value) -> (bool, String) {
        let v = self.request("tools/call", json!({"name": name, "arguments": args}));
        let r = &v["result"];
        let text = r["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        (r["isError"] == json!(true), text.to_string())
    }

    /// A tool's JSON answer (errors, and `verbose` answers).
    pub(crate) fn tool(&mut self, name: &str, args: Value) -> (bool, Value) {
        let (err, text) = self.text(name, args);
        (err, serde_json::from_str(&text).unwrap())
    }
}

#[test]
fn mcp_over_stdio_remembers_in_one_session_and_recalls_in_the_next() {
    let e = Env::new();
    // Session one: an agent records a decision.
    let mut m = Stdio_::start(&e, &["--project", "acme"]);
    let init = m.request("initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "1"}}));
    assert_eq!(init["result"]["serverInfo"]["name"], "strata", "{init}");
    m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let tools = m.request("tools/list", json!({}));
    assert_eq!(
        tools["result"]["tools"].as_array().unwrap().len(),
        13,
        "{tools}"
    );
    let (err, mem) = m.tool("remember", json!({"content": "Use SQS with a dead-letter queue for billing retries", "kind": "decision", "tags": ["billing"], "verbose": true}));
    assert!(!err, "{mem}");
    assert_eq!(mem["scope"], "project/acme");
    let id = mem["id"].as_str().unwrap().to_string();
    let (err, g) = m.tool("get", json!({"id": id, "verbose": true}));
    assert!(!err && g["kind"] == "decision", "{g}");
    let (err, s) = m.tool("list_scopes", json!({"verbose": true}));
    assert!(!err && s["scopes"][0]["memories"] == 1, "{s}");
    let (err, s) = m.text("list_scopes", json!({}));
    assert!(!err && s == "project/acme 1\n", "{s}");
    let (err, p) = m.tool(
        "promote",
        json!({"id": id, "to": "project/acme/sprint/s1", "verbose": true}),
    );
    assert!(!err, "{p}");
    let (err, bad) = m.tool("remember", json!({"content": "x", "scope": "not a scope"}));
    assert!(err && bad["error"]["field"] == "scope", "{bad}");
    let v = m.request("tools/call", json!({"name": "nope", "arguments": {}}));
    assert!(v["error"].is_object(), "{v}");
    drop(m.stdin);
    let out = m.child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Session two, a new process: the decision is recalled.
    let mut m = Stdio_::start(&e, &["--project", "acme"]);
    m.request("initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "1"}}));
    m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (err, r) = m.tool(
        "recall",
        json!({"query": "how do we retry billing?", "verbose": true}),
    );
    assert!(!err, "{r}");
    assert!(
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["id"] == id.as_str()),
        "{r}"
    );
    // The default answer: compact lines with whole ids.
    let (err, r) = m.text("recall", json!({"query": "how do we retry billing?"}));
    assert!(!err && r.contains(&format!("- {id} ")), "{r}");
    assert!(
        r.contains("Use SQS with a dead-letter queue for billing retries"),
        "{r}"
    );
    let (err, c) = m.text("context", json!({"query": "billing retries"}));
    assert!(!err && c.contains("dead-letter"), "{c}");
    let (err, f) = m.text("forget", json!({"ids": [id, p["id"]]}));
    assert!(!err && f.starts_with("deleted 2 memories"), "{f}");
    drop(m.stdin);
    assert!(m.child.wait().unwrap().success());
}

#[test]
fn mcp_with_an_ephemeral_session_keeps_its_memories_in_the_process() {
    let e = Env::new();
    e.ok(&[
        "remember",
        "the staging deploy is on fridays",
        "--scope",
        "project/acme",
    ]);
    let mut m = Stdio_::start(
        &e,
        &["--project", "acme", "--session", "triage", "--ephemeral"],
    );
    m.request("initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "1"}}));
    m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (err, mem) = m.tool(
        "remember",
        json!({"content": "the patient in bed 7 reacts to latex during the deploy", "verbose": true}),
    );
    assert!(!err, "{mem}");
    assert_eq!(
        (mem["scope"].as_str(), mem["session"].as_str()),
        (Some("project/acme"), Some("triage"))
    );
    // Recall and context see it beside the store's memories.
    let (err, r) = m.text("recall", json!({"query": "deploy"}));
    assert!(!err && r.contains("bed 7") && r.contains("fridays"), "{r}");
    let (err, c) = m.text("context", json!({"query": "latex"}));
    assert!(!err && c.contains("bed 7"), "{c}");
    // The session tool: its last turns, from the ring; compacting an
    // ephemeral session and an unknown action are errors naming them.
    let (err, t) = m.text("session", json!({}));
    assert!(!err && t.contains("bed 7"), "{t}");
    let (err, t) = m.tool("session", json!({"verbose": true, "limit": 5}));
    assert!(!err && t.as_array().unwrap().len() == 1, "{t}");
    let (err, bad) = m.tool("session", json!({"action": "compact"}));
    assert!(
        err && bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ephemeral"),
        "{bad}"
    );
    let (err, bad) = m.tool("session", json!({"action": "shrink"}));
    assert!(err && bad["error"]["field"] == "action", "{bad}");
    // Another process sees only the store: nothing of the session.
    let other = e.ok(&["list", "--view", "project/acme/**"]);
    assert!(
        other.contains("fridays") && !other.contains("bed 7"),
        "{other}"
    );
    let sessions = e.ok(&["session", "list"]);
    assert!(!sessions.contains("triage"), "{sessions}");
    drop(m.stdin);
    let out = m.child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("ephemeral"));
    // Nothing of it in any file the process left.
    for f in std::fs::read_dir(e.dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.is_file() {
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(9).any(|w| w == b"bed 7 rea"),
                "{} holds it",
                p.display()
            );
        }
    }
    // The session id of a store session cannot be made ephemeral.
    e.ok(&["session", "new", "--id", "kept"]);
    let m = Stdio_::start(&e, &["--session", "kept", "--ephemeral"]);
    drop(m.stdin);
    let out = m.child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("kept"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn session_turns_reads_a_sessions_last_memories() {
    let e = Env::new();
    for t in ["first turn", "second turn", "third turn"] {
        e.ok(&[
            "remember",
            t,
            "--scope",
            "session/chat",
            "--session",
            "chat",
        ]);
    }
    let out = e.ok(&["session", "turns", "chat", "--limit", "2"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains("second turn") && lines[1].contains("third turn"),
        "{out}"
    );
    let v = e.json(&["session", "turns", "chat"]);
    assert_eq!(v.as_array().unwrap().len(), 3);
    let err = e.fails(&["session", "turns", "nobody"], 1);
    assert!(err.contains("nobody"), "{err}");
    let err = e.fails(&["session", "turns", "chat", "--limit", "0"], 2);
    assert!(err.contains("--limit"), "{err}");
}
