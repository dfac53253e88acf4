//! Encryption at rest (feature `encryption`): an encrypted store's files
//! hold no memory text, it cannot be opened without its key or with a
//! wrong one (a clear error, never an empty store), and encrypt, rekey and
//! decrypt keep every memory.

use strata::{Config, Engine, NewMemory, Recall, StoreKey, View};

use crate::harness::scope;

const TEXT: &str = "the launch code is pineapple-omega";
const RAW: &str = "8f14e45fceea167a5a36dedd4bea2543c9f0f895fb98ab9159f51fd0297e236d";

fn key(k: &str) -> StoreKey {
    StoreKey::new(k, "the test").unwrap()
}

fn config(path: &std::path::Path, k: Option<&str>) -> Config {
    let mut c = Config::sqlite(path);
    c.embedder = strata::EmbedderConfig::none();
    if let strata::StoreConfig::Sqlite { options, .. } = &mut c.store {
        options.key = k.map(key);
    }
    c
}

fn files_contain(dir: &std::path::Path, needle: &str) -> bool {
    std::fs::read_dir(dir).unwrap().any(|f| {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    })
}

fn finds(e: &Engine) -> bool {
    let hits = e
        .recall(&Recall::new(
            "launch code",
            View::scope(scope("project/acme")),
        ))
        .unwrap();
    hits.iter().any(|h| h.memory.content == TEXT)
}

#[test]
fn unreadable_without_its_key_and_usable_with_it() {
    for k in [RAW, "correct horse battery staple"] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        {
            let e = Engine::open(config(&db, Some(k))).unwrap();
            for i in 0..20 {
                e.remember(NewMemory::new(scope("project/acme"), format!("{TEXT} {i}")))
                    .unwrap();
            }
            e.remember(NewMemory::new(scope("project/acme"), TEXT))
                .unwrap();
            // While the engine is open the write-ahead log holds pages too:
            // encrypted like the rest.
            assert!(!files_contain(dir.path(), "pineapple"));
            assert!(finds(&e));
        }
        assert!(!files_contain(dir.path(), "pineapple"));
        assert!(!files_contain(dir.path(), "SQLite format 3"));

        let no_key = Engine::open(config(&db, None)).unwrap_err().to_string();
        assert!(
            no_key.contains("is encrypted") && no_key.contains("STRATA_KEY"),
            "{no_key}"
        );
        let wrong = Engine::open(config(&db, Some("not the key")))
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("cannot be read with the key from the test"),
            "{wrong}"
        );
        let e = Engine::open(config(&db, Some(k))).unwrap();
        assert!(finds(&e));
    }
}

#[test]
fn encrypt_rekey_decrypt_keep_every_memory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let snapshot = |k: Option<&str>| {
        let e = Engine::open(config(&db, k)).unwrap();
        let mut out = Vec::new();
        e.export(
            &strata::Export::user_data(None, None),
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    };
    {
        let e = Engine::open(config(&db, None)).unwrap();
        for i in 0..50 {
            e.remember(NewMemory::new(
                scope("project/acme"),
                format!("{TEXT} #{i}"),
            ))
            .unwrap();
        }
    }
    let plain = snapshot(None);
    assert!(files_contain(dir.path(), "pineapple"));

    // A key given to a plain store is refused, naming what to do.
    let e = Engine::open(config(&db, Some(RAW)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is not encrypted") && e.contains("strata encrypt"),
        "{e}"
    );

    let done = strata::convert_store(&db, None, Some(&key(RAW))).unwrap();
    assert_eq!(done, strata::Conversion::Encrypt);
    assert!(!files_contain(dir.path(), "pineapple"));
    assert_eq!(snapshot(Some(RAW)), plain);
    // Encrypting twice is refused; so is decrypting with a wrong key.
    assert!(strata::convert_store(&db, None, Some(&key(RAW))).is_err());
    let wrong = strata::convert_store(&db, Some(&key("nope")), None).unwrap_err();
    assert!(wrong.to_string().contains("cannot be read"), "{wrong}");

    strata::convert_store(&db, Some(&key(RAW)), Some(&key("a new passphrase"))).unwrap();
    assert!(Engine::open(config(&db, Some(RAW))).is_err());
    assert_eq!(snapshot(Some("a new passphrase")), plain);

    strata::convert_store(&db, Some(&key("a new passphrase")), None).unwrap();
    assert_eq!(snapshot(None), plain);
    assert!(files_contain(dir.path(), "pineapple"));
    // Nothing left beside the store but its own files.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("t.db"))
        .collect();
    names.sort();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn a_store_open_elsewhere_is_not_converted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let e = Engine::open(config(&db, None)).unwrap();
    e.remember(NewMemory::new(scope("project/acme"), TEXT))
        .unwrap();
    // A reader in the middle of a transaction holds the file.
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute_batch("BEGIN; SELECT count(*) FROM memories;")
        .unwrap();
    let err = strata::convert_store(&db, None, Some(&key(RAW))).unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    drop(c);
    // Nothing changed: the open engine still reads and writes.
    e.remember(NewMemory::new(scope("project/acme"), "after"))
        .unwrap();
    assert!(finds(&e));
}

#[test]
fn the_cold_tier_is_refused_beside_an_encrypted_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&dir.path().join("t.db"), Some(RAW));
    c.cold.enabled = true;
    let e = Engine::open(c).unwrap_err().to_string();
    assert!(
        e.contains("cold.enabled") && e.contains("not encrypted"),
        "{e}"
    );
}
