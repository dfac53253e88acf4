//! The web inspector in a real browser: Debian's Chromium, headless, driven
//! by its chromedriver over WebDriver (plain JSON over HTTP, a few calls
//! below). A person signs in, searches, opens a memory, edits it, meets a
//! conflict, forgets it, previews a context and exports; a memory holding
//! markup renders as text and runs nothing; a read-only token sees no
//! edit controls and a forged edit is refused.
//!
//! Without `chromedriver` and `chromium` on the PATH the test is skipped,
//! unless `CI` is set: then it fails. Screenshots of the main pages are
//! written to `target/ui-screenshots/`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_server::{Access, ServerConfig};

use crate::harness::{Server, token};
use crate::ui::{XSS, csrf_of, fetch};

/// A W3C WebDriver session on a chromedriver this test started.
struct Browser {
    driver: Child,
    base: String,
    agent: ureq::Agent,
}

/// The element reference key of the WebDriver protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    /// Starts chromedriver and a headless Chromium; `None` when they are
    /// not installed (and `CI` is not set).
    fn start() -> Option<Browser> {
        let found = |name: &str| {
            std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        };
        if !found("chromedriver") || !found("chromium") {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "CI is set but chromium and chromedriver are not installed: the browser tests must run in CI (apt-get install chromium chromium-driver)"
                );
            }
            eprintln!("chromium or chromedriver not found: browser test not run");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let root = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            let ready = agent
                .get(format!("{root}/status"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut b = Browser {
            driver,
            base: root,
            agent,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": which("chromium"),
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900"],
            },
        }}});
        let v = b.send("POST", "/session", Some(caps));
        let id = v["sessionId"].as_str().expect("a session id").to_string();
        b.base = format!("{}/session/{id}", b.base);
        Some(b)
    }

    /// One WebDriver command; returns its `value`, panicking on an error.
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let v = self.send(method, path, body);
        assert!(v.get("error").is_none(), "{method} {path}: {v}");
        v
    }

    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let uri = format!("{}{path}", self.base);
        let req = ureq::http::Request::builder().method(method).uri(&uri);
        let mut resp = match body {
            Some(b) => self.agent.run(
                req.header("content-type", "application/json")
                    .body(b.to_string().into_bytes())
                    .unwrap(),
            ),
            None => self.agent.run(req.body(()).unwrap()),
        }
        .unwrap();
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        v["value"].clone()
    }

    fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    fn url(&self) -> String {
        self.cmd("GET", "/url", None).as_str().unwrap().to_string()
    }

    /// Every element matching `css`.
    fn all(&self, css: &str) -> Vec<String> {
        let v = self.cmd(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let id = e[ELEMENT].as_str();
                id.unwrap_or_else(|| panic!("{css}: {v}")).to_string()
            })
            .collect()
    }

    /// The first element matching `css`, waiting up to 5 s for it (a page
    /// may still be loading after a click).
    fn find(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            if let Some(e) = self.all(css).into_iter().next() {
                return e;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no `{css}` on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn text(&self, css: &str) -> String {
        let e = self.find(css);
        let v = self.cmd("GET", &format!("/element/{e}/text"), None);
        v.as_str().unwrap().to_string()
    }

    fn property(&self, css: &str, name: &str) -> String {
        let e = self.find(css);
        let v = self.cmd("GET", &format!("/element/{e}/property/{name}"), None);
        v.as_str().unwrap_or_default().to_string()
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})));
    }

    /// Clicks what loads another page, and waits until the old one is gone
    /// (its root element stale), so the next lookup reads the new page.
    fn open(&self, css: &str) {
        let root = self.find("html");
        self.click(css);
        let started = Instant::now();
        while self
            .send("GET", &format!("/element/{root}/name"), None)
            .get("error")
            .is_none()
        {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "clicking `{css}` loaded no page"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Replaces the value of a field.
    fn fill(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/clear"), Some(json!({})));
        self.cmd(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Whether a JavaScript dialog (`alert`) is open.
    fn alert_open(&self) -> bool {
        self.send("GET", "/alert/text", None).get("error").is_none()
    }

    fn cookie(&self, name: &str) -> String {
        let v = self.cmd("GET", &format!("/cookie/{name}"), None);
        format!("{name}={}", v["value"].as_str().unwrap())
    }

    fn screenshot(&self, name: &str) {
        let v = self.cmd("GET", "/screenshot", None);
        let png = base64_decode(v.as_str().unwrap());
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/ui-screenshots");
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(format!("{dir}/{name}.png"), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.send("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn which(name: &str) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| name.to_string())
}

/// Standard base64 (RFC 4648 §4), as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, c)| n | u32::from(value(*c)) << (18 - 6 * i));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

#[strata_testenv::browser]
#[test]
fn browser_a_person_inspects_and_corrects_memory() {
    let Some(b) = Browser::start() else {
        return;
    };
    let (rw, a) = token(
        "editor",
        &["project/acme", "global", "task"],
        Access::ReadWrite,
    );
    let (ro, r) = token("viewer", &["project/acme"], Access::Read);
    let s = Server::start(ServerConfig {
        tokens: vec![a, r],
        ..Default::default()
    });
    let e = &s.shared.engine;
    let acme = strata::Scope::parse("project/acme").unwrap();
    let remember = |scope: &strata::Scope, kind: strata::Kind, text: &str| {
        e.remember_with(
            strata::NewMemory::new(scope.clone(), text).kind(kind),
            strata::Confirm::Yes,
        )
        .unwrap()
        .id
    };
    let billing = remember(
        &acme,
        strata::Kind::Decision,
        "We chose PostgreSQL for billing: invoices need multi-row transactions",
    );
    remember(
        &acme,
        strata::Kind::Convention,
        "Money is stored as integer cents, never floats",
    );
    remember(
        &acme,
        strata::Kind::Failure,
        "The nightly invoice export timed out on 2026-11-02",
    );
    let sprint = strata::Scope::parse("project/acme/sprint/s12").unwrap();
    remember(
        &sprint,
        strata::Kind::Finding,
        "Billing retries double-charge when the webhook is slow",
    );
    let xss = remember(&sprint, strata::Kind::Finding, XSS);
    remember(
        &strata::Scope::global(),
        strata::Kind::Preference,
        "Prefer small pull requests",
    );
    remember(
        &strata::Scope::parse("task/t-42").unwrap(),
        strata::Kind::Conversation,
        "user: fix the invoice rounding",
    );

    // Sign in: the token goes in a form, never in a URL.
    b.goto(&format!("{}/ui", s.base));
    assert!(b.url().ends_with("/ui/login"), "{}", b.url());
    b.screenshot("login");
    b.fill("#token", &rw);
    b.open("#sign-in");
    assert!(b.text("#scopes").contains("acme"));
    assert!(b.url().ends_with("/ui"), "{}", b.url());
    assert!(!b.url().contains(&rw));
    assert!(b.text("#who").contains("editor (read-write)"));
    b.screenshot("scopes");

    // Search, with the score parts.
    b.open("nav a[href='/ui/search']");
    b.fill("#q", "PostgreSQL billing invoices");
    b.open("#search");
    assert!(b.text("#count").contains("result(s)"));
    assert!(
        b.text(".hit .content")
            .contains("We chose PostgreSQL for billing")
    );
    b.click(".hit details summary");
    assert!(b.text(".hit .parts").contains("relevance"));
    b.screenshot("search");

    // Open the memory, edit it.
    b.open(".hit a.open");
    assert!(
        b.url().ends_with(&format!("/ui/memory/{billing}")),
        "{}",
        b.url()
    );
    assert!(b.text("#content").starts_with("We chose PostgreSQL"));
    b.screenshot("memory");
    b.fill("#edit-content", "We chose PostgreSQL 16 for billing");
    b.open("#save");
    assert!(b.text(".notice.ok").contains("version 2"));
    assert_eq!(b.text("#content"), "We chose PostgreSQL 16 for billing");
    assert_eq!(
        e.get(&billing).unwrap().unwrap().content,
        "We chose PostgreSQL 16 for billing"
    );

    // Someone else changes it while the page is open: the save is a conflict.
    let patch = strata::Patch {
        content: Some("We chose PostgreSQL 17 for billing".into()),
        ..Default::default()
    };
    e.update(&billing, patch, 2).unwrap();
    b.fill("#edit-content", "We chose MySQL for billing");
    b.open("#save");
    let conflict = b.text(".notice.conflict");
    assert!(
        conflict.contains("based on version 2") && conflict.contains("version 3 now"),
        "{conflict}"
    );
    assert_eq!(
        b.property("#edit-content", "value"),
        "We chose MySQL for billing"
    );
    assert_eq!(b.text("#content"), "We chose PostgreSQL 17 for billing");
    assert_eq!(e.get(&billing).unwrap().unwrap().version, 3);
    b.screenshot("conflict");

    // Markup in a memory is text: no element made from it, nothing run.
    b.goto(&format!("{}/ui/memory/{xss}", s.base));
    assert_eq!(b.text("#content"), XSS);
    assert!(b.all("main img").is_empty() && b.all("main script").is_empty());
    assert!(!b.alert_open());
    b.goto(&format!(
        "{}/ui/search?q=alert+onerror&view=project%2Facme%2F**",
        s.base
    ));
    assert!(
        b.text(".hit .content")
            .contains("<img src=x onerror=alert(1)>")
    );
    assert!(b.all("main img").is_empty());
    assert!(!b.alert_open());

    // Forget it, after a page that says what goes.
    b.goto(&format!("{}/ui/memory/{xss}", s.base));
    b.open("#forget");
    assert_eq!(b.text("#forget-id"), xss);
    b.screenshot("forget");
    b.open("#forget-yes");
    assert!(b.text("#forgotten").contains(&xss));
    assert!(e.get(&xss).unwrap().is_none());

    // Context preview: tokens per source against their shares.
    b.open("nav a[href='/ui/context']");
    b.fill("#ctx-task", "t-42");
    b.fill("#ctx-project", "acme");
    b.fill("#ctx-query", "billing");
    b.open("#preview");
    assert!(b.text("#ctx-total").contains("tokens used"));
    let sources = b.text("#sources");
    assert!(
        sources.contains("task/t-42") && sources.contains("project/acme"),
        "{sources}"
    );
    assert!(b.text("#rendered").contains("fix the invoice rounding"));
    assert!(b.text("#rendered").contains("Prefer small pull requests"));
    b.screenshot("context");

    // Export: the link downloads the view's JSONL.
    b.open("nav a[href='/ui/export']");
    b.fill("#export-view", "project/acme/**");
    b.screenshot("export");
    let cookie = b.cookie("strata_ui");
    let p = fetch(
        &s,
        "GET",
        "/ui/export.jsonl?view=project%2Facme%2F**&history=true",
        Some(&cookie),
        None,
        &[],
    );
    assert_eq!(p.status, 200);
    assert_eq!(p.body.lines().count(), 4, "{}", p.body);
    b.click("#export");
    assert!(
        b.url().contains("/ui/export"),
        "the download leaves the page: {}",
        b.url()
    );

    // Import that file back: the page's script reads it into the form, a
    // dry run says what it holds, then the import skips what exists.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("acme.jsonl");
    std::fs::write(&file, &p.body).unwrap();
    b.open("nav a[href='/ui/import']");
    let picker = b.find("#import-file");
    b.cmd(
        "POST",
        &format!("/element/{picker}/value"),
        Some(json!({ "text": file.display().to_string() })),
    );
    let started = Instant::now();
    while b.property("#import-jsonl", "value").lines().count() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the file was not read into the form"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.click("select[name=on_conflict] option:nth-child(2)");
    let before = s.snapshot();
    b.open("#import-check");
    let dry = b.text(".notice.ok");
    assert!(
        dry.contains("Dry run: 4 memory(ies)") && dry.contains("4 id(s) exist already"),
        "{dry}"
    );
    assert_eq!(s.snapshot(), before, "a dry run changes nothing");
    b.screenshot("import");
    b.open("#import-run");
    assert!(b.text("pre.json").contains("\"skipped\": 4"));

    // Learned: the failure seen twice is a pattern; its evidence, then
    // confirmed.
    e.remember_with(
        strata::NewMemory::new(
            acme.clone(),
            "The nightly invoice export timed out on 2026-11-09",
        )
        .kind(strata::Kind::Failure),
        strata::Confirm::Yes,
    )
    .unwrap();
    e.learn().unwrap();
    b.open("nav a[href='/ui/learned']");
    assert!(
        b.text("#learned").contains("Repeated failure"),
        "{}",
        b.text("#learned")
    );
    b.screenshot("learned");
    b.open("#learned a");
    assert!(
        b.text("#evidence").contains("timed out"),
        "{}",
        b.text("#evidence")
    );
    b.open("#confirm");
    assert_eq!(b.text("#status"), "confirmed");

    b.open(".whoami button");
    assert!(b.url().ends_with("/ui/login"));

    // A read-only token: no edit controls, and a forged edit is refused.
    b.fill("#token", &ro);
    b.open("#sign-in");
    assert!(b.text("#who").contains("viewer (read-only)"));
    b.goto(&format!("{}/ui/memory/{billing}", s.base));
    assert!(b.text("#content").contains("PostgreSQL 17"));
    for control in ["#edit", "#pin", "#promote", "#forget"] {
        assert!(
            b.all(control).is_empty(),
            "{control} shown to a read-only token"
        );
    }
    let csrf = b.property("input[name=csrf]", "value");
    let cookie = b.cookie("strata_ui");
    let before = s.snapshot();
    let p = fetch(
        &s,
        "POST",
        &format!("/ui/memory/{billing}/edit"),
        Some(&cookie),
        Some(&[
            ("csrf", &csrf),
            ("expected_version", "3"),
            ("content", "forged"),
        ]),
        &[],
    );
    assert_eq!(p.status, 403, "{}", p.body);
    assert_eq!(csrf, csrf_of(&p.body));
    assert_eq!(s.snapshot(), before);
}
