//! Encryption at rest (feature `encryption`): an encrypted store's files
//! hold no memory text, it cannot be opened without its key or with a
//! wrong one (a clear error, never an empty store), and encrypt, rekey and
//! decrypt keep every memory.

use strata::{ColdDir, Config, Engine, NewMemory, Recall, StoreKey, View};

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

    let done = strata::convert_store(&db, None, None, Some(&key(RAW))).unwrap();
    assert_eq!(done.what, strata::Conversion::Encrypt);
    assert!(!files_contain(dir.path(), "pineapple"));
    assert_eq!(snapshot(Some(RAW)), plain);
    // Encrypting twice is refused; so is decrypting with a wrong key.
    assert!(strata::convert_store(&db, None, None, Some(&key(RAW))).is_err());
    let wrong = strata::convert_store(&db, None, Some(&key("nope")), None).unwrap_err();
    assert!(wrong.to_string().contains("cannot be read"), "{wrong}");

    strata::convert_store(&db, None, Some(&key(RAW)), Some(&key("a new passphrase"))).unwrap();
    assert!(Engine::open(config(&db, Some(RAW))).is_err());
    assert_eq!(snapshot(Some("a new passphrase")), plain);

    strata::convert_store(&db, None, Some(&key("a new passphrase")), None).unwrap();
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
    let err = strata::convert_store(&db, None, None, Some(&key(RAW))).unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    drop(c);
    // Nothing changed: the open engine still reads and writes.
    e.remember(NewMemory::new(scope("project/acme"), "after"))
        .unwrap();
    assert!(finds(&e));
}

/// An engine over `db` (keyed by `k`) with the cold tier on in `cold`.
fn cold_engine(
    db: &std::path::Path,
    cold: &std::path::Path,
    k: Option<&str>,
) -> strata::Result<Engine> {
    let mut c = config(db, k);
    c.cold = strata::ColdConfig {
        enabled: true,
        dir: Some(cold.to_path_buf()),
        demote_after_days: 30,
        ..Default::default()
    };
    c.max_items = 0;
    c.learning.enabled = false;
    Engine::open(c)
}

fn recall_cold(e: &Engine) -> Vec<String> {
    let mut r = Recall::new("launch code", View::scope(scope("project/acme")));
    r.include_archived = true;
    e.recall(&r)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.content)
        .collect()
}

/// A zstd frame's magic: where it shows, a segment's data is plain.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

fn dir_holds(dir: &std::path::Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|f| {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

/// Demotes everything in `project/acme` to the cold tier (40 days on).
fn demote_all(e: &mut Engine) -> usize {
    let start = jiff::Timestamp::now();
    e.set_clock(move || start + jiff::SignedDuration::from_hours(24 * 40));
    e.upkeep().unwrap().moved_to_cold
}

#[test]
fn the_cold_tier_of_an_encrypted_store_is_sealed_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cold) = (dir.path().join("t.db"), dir.path().join("cold"));
    {
        let mut e = cold_engine(&db, &cold, Some(RAW)).unwrap();
        e.remember(NewMemory::new(scope("project/acme"), TEXT))
            .unwrap();
        assert_eq!(demote_all(&mut e), 1);
        assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 1);
        // Read back from the sealed segment.
        assert_eq!(recall_cold(&e), vec![TEXT.to_string()]);
    }
    // No file of the tier holds a zstd frame in the clear (a plain
    // segment's index and blocks are zstd frames), nor the text.
    assert!(!dir_holds(&cold, &ZSTD_MAGIC));
    assert!(!dir_holds(&cold, b"pineapple"));
    // Without the key, or with a wrong one: a clear error, not an empty tier.
    let no_key = ColdDir::open(&cold).unwrap_err().to_string();
    assert!(no_key.contains("is encrypted"), "{no_key}");
    let wrong = ColdDir::open_keyed(&cold, Some(&key("not the key")))
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("cannot be read with the key"), "{wrong}");
    // The store's key opens it, and a fresh engine restores from it.
    let e = cold_engine(&db, &cold, Some(RAW)).unwrap();
    assert_eq!(recall_cold(&e), vec![TEXT.to_string()]);
}

#[test]
fn encrypt_rekey_and_decrypt_take_the_cold_tier_along() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cold) = (dir.path().join("t.db"), dir.path().join("cold"));
    {
        let mut e = cold_engine(&db, &cold, None).unwrap();
        for i in 0..3 {
            e.remember(NewMemory::new(scope("project/acme"), format!("{TEXT} {i}")))
                .unwrap();
        }
        assert_eq!(demote_all(&mut e), 3);
    }
    assert!(
        dir_holds(&cold, &ZSTD_MAGIC),
        "a plain tier holds zstd frames"
    );
    let before = recall_cold(&cold_engine(&db, &cold, None).unwrap());
    assert_eq!(before.len(), 3);

    let done =
        strata::convert_store(&db, Some(&cold.clone().into()), None, Some(&key(RAW))).unwrap();
    assert_eq!(done.what, strata::Conversion::Encrypt);
    assert!(done.segments >= 1, "{done:?}");
    assert!(!dir_holds(&cold, &ZSTD_MAGIC));
    assert_eq!(
        recall_cold(&cold_engine(&db, &cold, Some(RAW)).unwrap()),
        before
    );
    // A plain engine is refused by the file first; the tier alone too.
    assert!(ColdDir::open(&cold).is_err());

    strata::convert_store(
        &db,
        Some(&cold.clone().into()),
        Some(&key(RAW)),
        Some(&key("new words")),
    )
    .unwrap();
    let old = ColdDir::open_keyed(&cold, Some(&key(RAW)))
        .unwrap_err()
        .to_string();
    assert!(old.contains("cannot be read with the key"), "{old}");
    assert_eq!(
        recall_cold(&cold_engine(&db, &cold, Some("new words")).unwrap()),
        before
    );

    strata::convert_store(
        &db,
        Some(&cold.clone().into()),
        Some(&key("new words")),
        None,
    )
    .unwrap();
    assert!(dir_holds(&cold, &ZSTD_MAGIC));
    assert_eq!(recall_cold(&cold_engine(&db, &cold, None).unwrap()), before);
    // Only segments are left in the tier (and the log of cold reads the
    // recalls above noted: ids, never text): no key file, no temp file.
    for f in std::fs::read_dir(&cold).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        assert!(name.ends_with(".cold") || name == "reads.log", "{name}");
    }
}

#[test]
fn plain_segments_beside_an_encrypted_store_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cold) = (dir.path().join("t.db"), dir.path().join("cold"));
    {
        let mut e = cold_engine(&db, &cold, None).unwrap();
        e.remember(NewMemory::new(scope("project/acme"), TEXT))
            .unwrap();
        assert_eq!(demote_all(&mut e), 1);
    }
    // The file alone is encrypted (an older strata's encrypt): the tier is
    // refused by name, not read in the clear nor mixed with sealed ones.
    strata::convert_store(&db, None, None, Some(&key(RAW))).unwrap();
    let e = cold_engine(&db, &cold, Some(RAW)).unwrap_err().to_string();
    assert!(
        e.contains("holds plain segments") && e.contains("strata encrypt"),
        "{e}"
    );
    assert!(!cold.join("key.check").exists());
    // `strata encrypt` again encrypts the tier alone.
    let done =
        strata::convert_store(&db, Some(&cold.clone().into()), None, Some(&key(RAW))).unwrap();
    assert_eq!(done.segments, 1);
    assert!(!dir_holds(&cold, &ZSTD_MAGIC));
    assert_eq!(
        recall_cold(&cold_engine(&db, &cold, Some(RAW)).unwrap()),
        vec![TEXT.to_string()]
    );
    // Once done, a third time is refused as before.
    assert!(strata::convert_store(&db, Some(&cold.clone().into()), None, Some(&key(RAW))).is_err());
}
