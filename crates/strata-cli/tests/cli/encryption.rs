//! `STRATA_KEY`, `strata encrypt`, `decrypt` and `rekey` (feature
//! `encryption`): the key never on the command line, a missing or wrong key
//! a clear error that changes nothing.

use crate::util::{Env, write};

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

#[test]
fn encrypted_from_the_command_line() {
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
