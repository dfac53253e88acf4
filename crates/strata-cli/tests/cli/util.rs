//! The harness: a temporary home for one test and a way to run `strata` in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary directory with a database path, isolated from the user's
/// config and data.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        Env { dir }
    }

    /// What the commands left in their temporary directory (`TMPDIR`).
    pub fn leftovers(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path("tmp"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("strata.db")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `strata` with this env's database, run in its directory.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
        c.current_dir(self.dir.path())
            .env("STRATA_DB", self.db())
            .env_remove("STRATA_CONFIG")
            .env_remove("STRATA_MODEL_DIR")
            .env_remove("STRATA_EMBEDDER")
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env("HOME", self.dir.path())
            .env("TMPDIR", self.path("tmp"));
        c
    }

    /// Runs `strata ARGS` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "strata {args:?} failed: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// Runs `--json` and parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    /// Runs and asserts failure with `code`; returns stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let o = self.run(args);
        assert_eq!(
            o.status.code(),
            Some(code),
            "strata {args:?}: stdout {}\nstderr {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stderr).unwrap()
    }

    /// Everything in the store, as JSONL, for "nothing changed" checks.
    pub fn snapshot(&self) -> String {
        if !self.db().exists() {
            return String::new();
        }
        // A full backup: the default export.
        let out = self.ok(&["export"]);
        let stats = self.ok(&["stats", "--json"]);
        format!("{out}\n{stats}")
    }

    /// Remembers TEXT in SCOPE and returns the new id.
    pub fn remember(&self, text: &str, scope: &str, extra: &[&str]) -> String {
        let mut a = vec!["remember", text, "--scope", scope];
        a.extend_from_slice(extra);
        self.json(&a)["id"].as_str().unwrap().to_string()
    }
}

pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// One archived memory as a JSONL export line holds it (`strata import`
/// puts it in the archive, where upkeep moves it to the cold tier).
pub fn archived_line(id: &str, scope: &str, content: &str) -> String {
    serde_json::json!({
        "id": id,
        "scope": scope,
        "kind": "note",
        "content": content,
        "tags": [],
        "importance": 0.5,
        "source": "external",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "access_count": 0,
        "pinned": false,
        "sensitive": false,
        "tokens": 8,
        "version": 1,
        "archived": {"at": "2026-01-02T00:00:00Z", "reason": "evicted"},
    })
    .to_string()
}
