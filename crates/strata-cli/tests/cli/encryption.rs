//! `STRATA_KEY`, `strata encrypt`, `decrypt` and `rekey` (feature
//! `encryption`): the key never on the command line, a missing or wrong key
//! a clear error that changes nothing.

use crate::util::{Env, archived_line, write};

const KEY: &str = "5d41402abc4b2a76b9719d911017c592aa3b7c6e1f0e5d4c3b2a190817263544";

fn with_key(e: &Env, key: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut c = e.cmd();
    c.env_remove("STRATA_KEY").env_remove("STRATA_NEW_KEY");
    if let Some(k) = key {
        c.env("STRATA_KEY", k);
    }
    c.args(args).output().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh store encrypted with `KEY`, holding one note about the vault.
fn vault_note() -> Env {
    let e = Env::new();
    let o = with_key(
        &e,
        Some(KEY),
        &[
            "remember",
            "the vault opens with tulip-42",
            "--scope",
            "project/acme",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    e
}

#[test]
fn encrypted_from_the_command_line() {
    let e = vault_note();
    assert!(!store_says(&e, "tulip"));

    let o = with_key(&e, None, &["list", "--view", "project/acme"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is encrypted") && stderr(&o).contains("STRATA_KEY"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("hmac"), "{}", stderr(&o));
    let o = with_key(&e, Some("wrong"), &["list", "--view", "project/acme"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o)
            .contains("cannot be read with the key from the environment variable `STRATA_KEY`"),
        "{}",
        stderr(&o)
    );

    // rekey takes the new key from STRATA_NEW_KEY or a file, never a flag.
    let o = with_key(&e, Some(KEY), &["rekey"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("STRATA_NEW_KEY"), "{}", stderr(&o));
    write(&e.path("new.key"), "a long new passphrase\n");
    let o = with_key(&e, Some(KEY), &["rekey", "--new-key-file", "new.key"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = with_key(&e, Some(KEY), &["list", "--view", "project/acme"]);
    assert_eq!(o.status.code(), Some(1));

    // A key file named in strata.toml.
    write(&e.path("strata.toml"), "[store]\nkey_file = \"new.key\"\n");
    let o = with_key(&e, None, &["list", "--view", "project/acme"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("tulip-42"),
        "{}",
        stderr(&o)
    );
    let o = with_key(&e, None, &["decrypt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_file(e.path("strata.toml")).unwrap();
    let o = with_key(&e, None, &["list", "--view", "project/acme"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("tulip-42"),
        "{}",
        stderr(&o)
    );

    // encrypt without a key is a usage error; with one, it encrypts again.
    let o = with_key(&e, None, &["encrypt"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = with_key(&e, Some(KEY), &["encrypt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!store_says(&e, "tulip"));
}

/// Whether any of the store's files (the database, its log) holds `text`.
fn store_says(e: &Env, text: &str) -> bool {
    std::fs::read_dir(e.dir.path()).unwrap().any(|f| {
        let f = f.unwrap();
        f.file_name().to_string_lossy().starts_with("strata.db")
            && String::from_utf8_lossy(&std::fs::read(f.path()).unwrap()).contains(text)
    })
}

/// An encrypted store's export is sealed with its key: no memory text in
/// the file, importable only with the key; `--plain` writes JSONL.
#[test]
fn exports_of_an_encrypted_store_are_sealed() {
    let e = vault_note();
    let o = with_key(&e, Some(KEY), &["export", "-o", "out.sealed"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sealed = std::fs::read(e.path("out.sealed")).unwrap();
    assert!(sealed.starts_with(b"STRATA-SEALED1\n"));
    assert!(!String::from_utf8_lossy(&sealed).contains("tulip"));

    // Into another store: without the key, refused; with it, imported.
    let other = Env::new();
    let file = e.path("out.sealed");
    let file = file.to_str().unwrap();
    let o = with_key(&other, None, &["import", file]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("sealed") && stderr(&o).contains("STRATA_KEY"),
        "{}",
        stderr(&o)
    );
    assert!(!other.db().exists(), "a refused import creates no store");
    let o = with_key(&other, Some(KEY), &["import", file]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = with_key(&other, Some(KEY), &["list", "--view", "project/acme"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("tulip-42"),
        "{}",
        stderr(&o)
    );
    // A changed byte: refused, nothing imported.
    let mut bad = sealed.clone();
    let at = bad.len() - 20;
    bad[at] ^= 1;
    write_bytes(&e.path("bad.sealed"), &bad);
    let third = Env::new();
    let o = with_key(
        &third,
        Some(KEY),
        &["import", e.path("bad.sealed").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = with_key(&third, Some(KEY), &["list", "--view", "project/acme"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("tulip"));

    let o = with_key(&e, Some(KEY), &["export", "--plain", "-o", "out.jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read_to_string(e.path("out.jsonl"))
            .unwrap()
            .contains("tulip-42")
    );
}

fn write_bytes(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

/// Bad keys and key settings: each an error naming what was wrong, and no
/// store file created or changed.
#[test]
fn bad_keys_are_named_and_change_nothing() {
    let e = Env::new();
    let remember = ["remember", "a note", "--scope", "project/acme"];
    let refused = |o: &std::process::Output, want: &str| {
        assert!(!o.status.success(), "{}", stderr(o));
        assert!(stderr(o).contains(want), "want {want:?}: {}", stderr(o));
        assert!(!e.db().exists(), "a refused key creates no store");
    };
    refused(
        &with_key(&e, Some(" \n"), &remember),
        "`STRATA_KEY` is empty",
    );
    write(&e.path("empty.key"), "\n");
    write(
        &e.path("strata.toml"),
        "[store]\nkey_file = \"empty.key\"\n",
    );
    refused(&with_key(&e, None, &remember), "empty.key is empty");
    write(
        &e.path("strata.toml"),
        "[store]\nkey_file = \"missing.key\"\n",
    );
    refused(&with_key(&e, None, &remember), "missing.key");
    write(
        &e.path("strata.toml"),
        "[store]\nkey_env = \"STRATA_TEST_UNSET_KEY\"\n",
    );
    refused(
        &with_key(&e, None, &remember),
        "`STRATA_TEST_UNSET_KEY` is not set",
    );
    write(&e.path("key.txt"), "a passphrase long enough\n");
    write(
        &e.path("strata.toml"),
        "[store]\nkey_env = \"STRATA_KEY\"\nkey_file = \"key.txt\"\n",
    );
    refused(&with_key(&e, Some(KEY), &remember), "give one of the two");
    std::fs::remove_file(e.path("strata.toml")).unwrap();

    // An encrypted store: a bad new key for rekey leaves it as it was.
    let o = with_key(&e, Some(KEY), &remember);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = std::fs::read(e.db()).unwrap();
    let o = with_key(&e, Some(KEY), &["rekey", "--new-key-file", "missing.key"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing.key"), "{}", stderr(&o));
    let o = with_key(&e, Some(KEY), &["rekey", "--new-key-file", "empty.key"]);
    assert!(stderr(&o).contains("empty.key is empty"), "{}", stderr(&o));
    let mut c = e.cmd();
    c.env("STRATA_KEY", KEY)
        .env("STRATA_NEW_KEY", KEY)
        .arg("rekey");
    let o = c.output().unwrap();
    assert!(
        stderr(&o).contains("the new key is the same as the current one"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(e.db()).unwrap(), before);
    let o = with_key(&e, Some(KEY), &["list", "--view", "project/acme"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("a note"),
        "{}",
        stderr(&o)
    );
}

/// The cold tier's segments are encrypted, rekeyed and decrypted with the
/// file, and read only with the key.
#[test]
fn the_cold_tier_goes_with_the_file() {
    let e = Env::new();
    write(
        &e.path("strata.toml"),
        "[cold]\nenabled = true\n\n[learning]\nenabled = false\n",
    );
    let line = archived_line(
        "01900000-0000-7000-8000-000000000001",
        "project/acme",
        "the vault opens with tulip-42",
    );
    write(&e.path("in.jsonl"), &format!("{line}\n"));
    for args in [&["import", "in.jsonl"][..], &["upkeep"]] {
        let o = with_key(&e, None, args);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let recall = [
        "recall",
        "vault tulip",
        "--view",
        "project/acme",
        "--include-cold",
    ];
    let finds = |key: Option<&str>| {
        let o = with_key(&e, key, &recall);
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("tulip-42")
    };
    assert!(finds(None));
    let o = with_key(&e, Some(KEY), &["encrypt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("and 1 cold segment"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(finds(Some(KEY)));
    assert!(!finds(None));
    write(&e.path("new.key"), "another passphrase\n");
    let o = with_key(
        &e,
        Some(KEY),
        &["--json", "rekey", "--new-key-file", "new.key"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cold_segments"], 1, "{v}");
    assert!(!finds(Some(KEY)));
    assert!(finds(Some("another passphrase")));
    let o = with_key(&e, Some("another passphrase"), &["decrypt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(finds(None));
}
