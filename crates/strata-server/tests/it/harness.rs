//! The harness: a server on a random port, tokens, an HTTP client, and a
//! snapshot of the whole store for "nothing changed" checks.

use std::sync::Arc;

use serde_json::Value;
use strata_server::{Access, AuthMode, ServerConfig, Shared, TokenConfig};

pub struct Server {
    pub base: String,
    pub shared: Arc<Shared>,
    agent: ureq::Agent,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    rt: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

/// A token's secret and its config entry.
pub fn token(name: &str, scopes: &[&str], access: Access) -> (String, TokenConfig) {
    let secret = strata_server::new_token();
    let cfg = TokenConfig {
        name: name.into(),
        secret_sha256: strata_server::sha256_hex(&secret),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        access,
        ..Default::default()
    };
    (secret, cfg)
}

impl Server {
    /// A server with these tokens and limits.
    pub fn start(cfg: ServerConfig) -> Server {
        Server::start_with(cfg, AuthMode::Tokens)
    }

    pub fn start_with(cfg: ServerConfig, auth: AuthMode) -> Server {
        Server::start_prepared(cfg, auth, |_| {})
    }

    /// A server whose engine `prepare` sets up first (an embedder, …).
    pub fn start_prepared(
        cfg: ServerConfig,
        auth: AuthMode,
        prepare: impl FnOnce(&strata::Engine),
    ) -> Server {
        Server::start_configured(cfg, auth, |_| {}, prepare)
    }

    /// A server whose engine's configuration `configure` changes first
    /// (`[audit]`, `[[secrets]]` rules, bounds), and whose engine `prepare`
    /// then sets up.
    pub fn start_configured(
        cfg: ServerConfig,
        auth: AuthMode,
        configure: impl FnOnce(&mut strata::Config),
        prepare: impl FnOnce(&strata::Engine),
    ) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut engine_cfg = strata::Config::sqlite(dir.path().join("t.db"));
        // No embedder unless a test sets one: with the local model
        // installed where `auto` finds it, the server's embed worker would
        // add vectors between a test's snapshots of the store.
        engine_cfg.embedder = strata::EmbedderConfig::none();
        configure(&mut engine_cfg);
        let engine = strata::Engine::open(engine_cfg).unwrap();
        prepare(&engine);
        let shared = Shared::new(engine, &cfg, auth).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        rt.spawn(strata_server::serve(listener, shared.clone(), async {
            let _ = rx.await;
        }));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Server {
            base: format!("http://{addr}"),
            shared,
            agent,
            stop: Some(tx),
            rt: Some(rt),
            _dir: dir,
        }
    }

    /// Sends a request; returns the status and the body (JSON when it parses,
    /// else a string).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let (status, text) = self.raw(
            method,
            path,
            token,
            body.map(|b| b.as_bytes().to_vec()),
            &[],
        );
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let uri = format!("{}{path}", self.base);
        let mut b = ureq::http::Request::builder().method(method).uri(&uri);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let typed = headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if body.is_some() && !typed {
            b = b.header("content-type", "application/json");
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut resp = match body {
            Some(bytes) => self.agent.run(b.body(bytes).unwrap()),
            None => self.agent.run(b.body(()).unwrap()),
        }
        .unwrap();
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .unwrap();
        (status, text)
    }

    /// Status and body, asserting the status.
    pub fn expect(
        &self,
        status: u16,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Value,
    ) -> Value {
        let text = if body.is_null() {
            None
        } else {
            Some(body.to_string())
        };
        let (s, v) = self.call(method, path, token, text.as_deref());
        assert_eq!(s, status, "{method} {path}: {v}");
        v
    }

    /// Runs `f` on the server's runtime (a task that lives as long as the
    /// server, such as the configuration watcher).
    pub fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.rt.as_ref().unwrap().spawn(f);
    }

    /// The server's SQLite file.
    pub fn db_path(&self) -> std::path::PathBuf {
        self._dir.path().join("t.db")
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// A raw connection (reads give up after 10 s), for requests a client
    /// library will not send: half-sent, odd headers, odd methods.
    pub fn tcp(&self) -> std::net::TcpStream {
        let s = std::net::TcpStream::connect(self.addr()).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s
    }

    /// Sends `head` (request line and headers, `\r\n` line ends, without
    /// the blank line) with `Host` set to this server and the blank line
    /// added, then `body`; returns the answer.
    pub fn send_raw(&self, head: &str, body: &[u8]) -> Response {
        use std::io::Write;
        let mut s = self.tcp();
        let head = if head.to_ascii_lowercase().contains("\r\nhost:") {
            format!("{head}\r\n\r\n")
        } else {
            format!("{head}\r\nHost: {}\r\n\r\n", self.addr())
        };
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        read_response(&mut s)
    }

    /// Everything in the store (every scope, archive, history) and its stats.
    pub fn snapshot(&self) -> String {
        let mut out = Vec::new();
        let e = &self.shared.engine;
        e.export(
            &strata::Export::user_data(None, None),
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        let mut stats = e.stats().unwrap();
        stats.file_bytes = 0;
        format!("{}\n{stats:?}", String::from_utf8(out).unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
        }
    }
}

/// Asserts an error body: status, code, and that the message or field
/// mentions `what`.
pub fn assert_error(v: &Value, code: &str, what: &str) {
    let e = &v["error"];
    assert_eq!(e["code"], code, "{v}");
    let msg = e["message"].as_str().unwrap_or_default();
    let field = e["field"].as_str().unwrap_or_default();
    assert!(
        msg.contains(what) || field.contains(what),
        "expected `{what}` in {v}"
    );
}

/// A small deterministic generator (xorshift64*), enough for randomized tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// An answer read off a raw connection.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The head, lower-cased.
    #[allow(dead_code)]
    pub head: String,
    pub body: String,
}

impl Response {
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.status, self.body))
    }
}

/// Reads one HTTP/1.1 answer: the head, then a body of its Content-Length
/// (else up to the end of the stream).
pub fn read_response(s: &mut std::net::TcpStream) -> Response {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).expect("reading the answer's head");
        assert!(
            n > 0,
            "connection closed before an answer: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().unwrap());
    let mut body = buf[head_end..].to_vec();
    match len {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk).expect("reading the answer's body");
                assert!(n > 0, "connection closed inside the body");
                body.extend_from_slice(&chunk[..n]);
            }
        }
        None => {
            let _ = s.read_to_end(&mut body);
        }
    }
    Response {
        status,
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Whether the server closes `s` within `within`, reading (and dropping)
/// whatever it sends first.
pub fn closed_within(s: &mut std::net::TcpStream, within: std::time::Duration) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(within)).unwrap();
    let mut chunk = [0u8; 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            // A reset is closed too.
            Err(_) => return true,
        }
    }
}

/// `n` connections to `addr` from the loopback address `from`
/// (`127.0.0.2`: the whole of 127/8 is this host, so one test can be
/// several peers), each a blocking socket.
pub fn connect_from(from: &str, addr: &str, n: usize) -> Vec<std::net::TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let from: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    let to: std::net::SocketAddr = addr.parse().unwrap();
    rt.block_on(async {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(from).unwrap();
            let c = sock.connect(to).await.unwrap().into_std().unwrap();
            c.set_nonblocking(false).unwrap();
            out.push(c);
        }
        out
    })
}
