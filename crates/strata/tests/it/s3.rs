//! The cold tier in a bucket of a real S3-compatible server
//! (`STRATA_TEST_S3_URL`, its endpoint; `.ci/run` starts moto's server on
//! loopback): moves, search, restore, forget (no object holds the text
//! afterwards), damaged objects named, an endpoint that is down, an
//! encrypted tier, and configuration errors.
//!
//! strata signs every request (AWS Signature Version 4, checked against
//! AWS's published example in the unit tests). The tests' own side door,
//! which creates the bucket and reads and damages objects, sends requests
//! that moto accepts without checking their signature.

use jiff::{SignedDuration, Timestamp};
use strata::{ColdConfig, ColdDir, ColdLocation, Config, Forget, ForgetOptions, NewMemory, Recall};

use crate::harness::{TestEngine, config_error, scope, view};

const BUCKET: &str = "strata-test";
const SIDE_DOOR: &str = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
                         SignedHeaders=host, Signature=0";

/// The server's endpoint: `STRATA_TEST_S3_URL`. Without it the tests pass
/// without running, except in CI (`CI` set), where they fail.
fn endpoint() -> Option<String> {
    match std::env::var("STRATA_TEST_S3_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but STRATA_TEST_S3_URL is not: the S3 tests must run in CI")
        }
        _ => {
            eprintln!("STRATA_TEST_S3_URL is not set: S3 test not run");
            None
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// A fresh prefix in the test bucket (made if need be).
fn s3_config(endpoint: &str) -> strata::S3Config {
    let status = agent()
        .put(format!("{endpoint}/{BUCKET}"))
        .header("authorization", SIDE_DOOR)
        .send_empty()
        .unwrap()
        .status()
        .as_u16();
    assert!(matches!(status, 200 | 409), "creating the bucket: {status}");
    strata::S3Config {
        bucket: BUCKET.into(),
        prefix: format!("t-{}/cold", uuid::Uuid::now_v7().simple()),
        endpoint: Some(endpoint.into()),
        access_key_env: "STRATA_TEST_S3_ACCESS_KEY".into(),
        secret_key_env: "STRATA_TEST_S3_SECRET_KEY".into(),
        timeout_ms: 5_000,
        ..Default::default()
    }
}

fn cold_s3(s3: &strata::S3Config) -> impl Fn(&mut Config) + '_ {
    move |c: &mut Config| {
        c.cold = ColdConfig {
            enabled: true,
            s3: Some(s3.clone()),
            demote_after_days: 30,
            ..Default::default()
        };
        c.max_items = 0;
        c.learning.enabled = false;
    }
}

/// The objects under the prefix: name and bytes.
fn objects(endpoint: &str, s3: &strata::S3Config) -> Vec<(String, Vec<u8>)> {
    let mut resp = agent()
        .get(format!(
            "{endpoint}/{BUCKET}?list-type=2&prefix={}/",
            s3.prefix
        ))
        .header("authorization", SIDE_DOOR)
        .call()
        .unwrap();
    let xml = resp.body_mut().read_to_string().unwrap();
    let mut out = Vec::new();
    for part in xml.split("<Key>").skip(1) {
        let key = &part[..part.find("</Key>").unwrap()];
        let bytes = agent()
            .get(format!("{endpoint}/{BUCKET}/{key}"))
            .header("authorization", SIDE_DOOR)
            .call()
            .unwrap()
            .body_mut()
            .read_to_vec()
            .unwrap();
        let name = key.rsplit('/').next().unwrap().to_string();
        out.push((name, bytes));
    }
    out.sort();
    out
}

fn put_object(endpoint: &str, s3: &strata::S3Config, name: &str, bytes: &[u8]) {
    let status = agent()
        .put(format!("{endpoint}/{BUCKET}/{}/{name}", s3.prefix))
        .header("authorization", SIDE_DOOR)
        .header("content-type", "application/octet-stream")
        .send(bytes)
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 200);
}

fn archived_recall(e: &TestEngine, q: &str) -> strata::Result<Vec<String>> {
    let mut r = Recall::new(q, view(&["project/a"]));
    r.include_archived = true;
    Ok(e.recall(&r)?.into_iter().map(|h| h.memory.id).collect())
}

fn days_on(e: &mut TestEngine, days: i64) {
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * days));
}

fn forty_days_on(e: &mut TestEngine) {
    days_on(e, 40);
}

#[strata_testenv::s3]
#[test]
fn an_s3_tier_moves_searches_restores_and_forgets() {
    let Some(url) = endpoint() else { return };
    let s3 = s3_config(&url);
    let mut e = TestEngine::sqlite(cold_s3(&s3));
    let secret = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the vault-quokka passphrase is 4417",
        ))
        .unwrap();
    let mut kept = Vec::new();
    for i in 0..30 {
        kept.push(
            e.remember(NewMemory::new(
                scope("project/a"),
                format!("deploy note {i}: the canary waits ten minutes"),
            ))
            .unwrap()
            .id,
        );
    }
    forty_days_on(&mut e);
    let r = e.upkeep().unwrap();
    assert_eq!(r.moved_to_cold, 31, "{r:?}");
    let stats = e.stats().unwrap();
    assert_eq!(stats.storage_tiers["cold"].memories, 31);
    assert_eq!(
        e.count(&view(&["project/a"]), &strata::Filter::all())
            .unwrap(),
        0,
        "none left warm"
    );
    // Segments are objects under the prefix; nothing else is there.
    let objs = objects(&url, &s3);
    assert!(!objs.is_empty());
    for (name, _) in &objs {
        assert!(
            name.starts_with("seg-") && name.ends_with(".cold"),
            "{name}"
        );
    }
    // Search, get, history, from the bucket.
    assert_eq!(
        archived_recall(&e, "quokka passphrase").unwrap(),
        std::slice::from_ref(&secret.id)
    );
    assert_eq!(archived_recall(&e, "canary").unwrap().len(), 10);
    assert!(e.get_archived(&kept[3]).unwrap().is_some());
    // Restore brings one back to warm, and out of the bucket.
    assert_eq!(e.restore(&[kept[3].clone()]).unwrap(), 1);
    assert_eq!(e.get(&kept[3]).unwrap().unwrap().id, kept[3]);
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 30);
    // Forget rewrites the objects without it: no object holds its text,
    // compressed or not.
    let report = e
        .forget(&Forget::Id(secret.id.clone()), ForgetOptions::default())
        .unwrap();
    assert_eq!(report.deleted, 1);
    let cold = ColdDir::open_at(&ColdLocation::S3(s3.clone()), None).unwrap();
    for (name, bytes) in objects(&url, &s3) {
        assert!(!contains(&bytes, b"quokka"), "{name}");
        if !name.starts_with("seg-") {
            // The reads log: ids of recalled cold memories, no text.
            continue;
        }
        let seg = cold.path().join(&name);
        let plain = cold.plain_bytes(&seg).unwrap();
        assert!(!contains(&plain, b"quokka"), "{name}, opened");
        assert!(!contains(&plain, secret.id.as_bytes()), "{name}, opened");
    }
    assert!(archived_recall(&e, "quokka").unwrap().is_empty());
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 29);
    // Upkeep again: idempotent, and the tier's reads log works in S3.
    let mut r = Recall::new("canary", view(&["project/a"]));
    r.include_archived = true;
    for _ in 0..3 {
        e.recall(&r).unwrap();
    }
    e.upkeep().unwrap();
    let stats = e.stats().unwrap();
    assert_eq!(
        stats.storage_tiers["cold"].memories
            + e.count(&view(&["project/a"]), &strata::Filter::all())
                .unwrap(),
        30,
        "every memory in one tier"
    );
}

#[strata_testenv::s3]
#[test]
fn a_damaged_object_is_named_never_skipped() {
    let Some(url) = endpoint() else { return };
    let s3 = s3_config(&url);
    let mut e = TestEngine::sqlite(cold_s3(&s3));
    e.remember(NewMemory::new(
        scope("project/a"),
        "the gantry bolts are m12",
    ))
    .unwrap();
    forty_days_on(&mut e);
    assert_eq!(e.upkeep().unwrap().moved_to_cold, 1);
    let (name, mut bytes) = objects(&url, &s3).remove(0);
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    put_object(&url, &s3, &name, &bytes);
    let err = archived_recall(&e, "gantry").unwrap_err().to_string();
    assert!(
        err.contains(&format!("s3://{BUCKET}/{}/{name}", s3.prefix)) && err.contains("checksum"),
        "{err}"
    );
    // Cut short.
    put_object(&url, &s3, &name, &bytes[..20]);
    let err = archived_recall(&e, "gantry").unwrap_err().to_string();
    assert!(err.contains(&name), "{err}");
}

#[strata_testenv::s3]
#[test]
fn an_endpoint_that_is_down_keeps_warm_and_moves_later() {
    let Some(url) = endpoint() else { return };
    let s3 = s3_config(&url);
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = strata::S3Config {
        endpoint: Some(format!("http://{}", closed.local_addr().unwrap())),
        timeout_ms: 1_000,
        ..s3.clone()
    };
    drop(closed);
    let mut e = TestEngine::sqlite(cold_s3(&down));
    let m = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the ferry leaves at dawn",
        ))
        .unwrap();
    forty_days_on(&mut e);
    let err = e.upkeep().unwrap_err();
    assert_eq!(err.class(), strata::ErrorClass::Unavailable, "{err}");
    assert!(err.to_string().contains("s3"), "{err}");
    // Nothing moved, nothing lost: the memory is still in the store, and
    // recall of the warm tier works; a search that must read the cold tier
    // says it cannot.
    assert_eq!(e.get(&m.id).unwrap().unwrap().id, m.id);
    assert_eq!(
        archived_recall(&e, "ferry").unwrap_err().class(),
        strata::ErrorClass::Unavailable
    );
    let fresh = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the ferry is late today",
        ))
        .unwrap();
    let mut warm: Vec<String> = e
        .recall(&Recall::new("ferry", view(&["project/a"])))
        .unwrap()
        .into_iter()
        .map(|h| h.memory.id)
        .collect();
    warm.sort();
    let mut both = vec![m.id.clone(), fresh.id];
    both.sort();
    assert_eq!(warm, both);
    // The same store with the endpoint up: the next upkeep moves it.
    let db = e.db_path();
    let mut c = Config::sqlite(&db);
    c.embedder = strata::EmbedderConfig::none();
    cold_s3(&s3)(&mut c);
    let dir = e.dir.take();
    drop(e);
    let mut up = TestEngine {
        engine: strata::Engine::open(c).unwrap(),
        dir,
        _pg: None,
    };
    days_on(&mut up, 80);
    assert_eq!(up.upkeep().unwrap().moved_to_cold, 2);
    assert_eq!(archived_recall(&up, "ferry").unwrap().len(), 2);
}

#[cfg(feature = "encryption")]
#[strata_testenv::s3]
#[test]
fn an_encrypted_store_seals_its_s3_segments() {
    let Some(url) = endpoint() else { return };
    let s3 = s3_config(&url);
    let key = strata::StoreKey::new("s3 words", "the test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::sqlite(dir.path().join("t.db"));
    c.embedder = strata::EmbedderConfig::none();
    if let strata::StoreConfig::Sqlite { options, .. } = &mut c.store {
        options.key = Some(key.clone());
    }
    cold_s3(&s3)(&mut c);
    let mut e = TestEngine {
        engine: strata::Engine::open(c).unwrap(),
        dir: Some(dir),
        _pg: None,
    };
    e.remember(NewMemory::new(
        scope("project/a"),
        "the lighthouse-orca code",
    ))
    .unwrap();
    forty_days_on(&mut e);
    assert_eq!(e.upkeep().unwrap().moved_to_cold, 1);
    assert_eq!(archived_recall(&e, "lighthouse").unwrap().len(), 1);
    let objs = objects(&url, &s3);
    assert!(objs.iter().any(|(n, _)| n == "key.check"), "{objs:?}");
    for (name, bytes) in &objs {
        assert!(!contains(bytes, b"lighthouse"), "{name}");
    }
    let no_key = ColdDir::open_at(&ColdLocation::S3(s3.clone()), None)
        .unwrap()
        .is_encrypted()
        .unwrap_err()
        .to_string();
    assert!(no_key.contains("encrypted"), "{no_key}");
}

/// `strata encrypt`, `rekey` and `decrypt` take a tier in a bucket along:
/// its segments rewritten sealed (no zstd frame, no text in any object),
/// then under another key, then plain again, the memories the same.
#[cfg(feature = "encryption")]
#[strata_testenv::s3]
#[test]
fn encrypt_rekey_and_decrypt_take_an_s3_tier_along() {
    let Some(url) = endpoint() else { return };
    let s3 = s3_config(&url);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let engine = |key: Option<&str>| {
        let mut c = Config::sqlite(&db);
        c.embedder = strata::EmbedderConfig::none();
        if let (Some(k), strata::StoreConfig::Sqlite { options, .. }) = (key, &mut c.store) {
            options.key = Some(strata::StoreKey::new(k, "the test").unwrap());
        }
        cold_s3(&s3)(&mut c);
        TestEngine {
            engine: strata::Engine::open(c).unwrap(),
            dir: None,
            _pg: None,
        }
    };
    {
        let mut e = engine(None);
        for i in 0..3 {
            e.remember(NewMemory::new(
                scope("project/a"),
                format!("the marmot-sextant note {i}"),
            ))
            .unwrap();
        }
        forty_days_on(&mut e);
        assert_eq!(e.upkeep().unwrap().moved_to_cold, 3);
    }
    let zstd = [0x28u8, 0xb5, 0x2f, 0xfd];
    let holds = |needle: &[u8]| objects(&url, &s3).iter().any(|(_, b)| contains(b, needle));
    assert!(holds(&zstd), "a plain tier holds zstd frames");
    let before = archived_recall(&engine(None), "marmot").unwrap();
    assert_eq!(before.len(), 3);
    let at = ColdLocation::S3(s3.clone());
    let key = |k: &str| strata::StoreKey::new(k, "the test").unwrap();
    let done = strata::convert_store(&db, Some(&at), None, Some(&key("one"))).unwrap();
    assert_eq!(done.segments, 1, "{done:?}");
    assert!(!holds(&zstd) && !holds(b"marmot"));
    assert_eq!(
        archived_recall(&engine(Some("one")), "marmot").unwrap(),
        before
    );
    strata::convert_store(&db, Some(&at), Some(&key("one")), Some(&key("two"))).unwrap();
    assert_eq!(
        archived_recall(&engine(Some("two")), "marmot").unwrap(),
        before
    );
    strata::convert_store(&db, Some(&at), Some(&key("two")), None).unwrap();
    assert!(holds(&zstd));
    assert!(
        !objects(&url, &s3)
            .iter()
            .any(|(n, _)| n.starts_with("key."))
    );
    assert_eq!(archived_recall(&engine(None), "marmot").unwrap(), before);
}

#[test]
fn s3_settings_are_checked() {
    let bad = [
        ("bucket = \"A_B\"", "cold.s3.bucket"),
        ("bucket = \"ok-bucket\"\nprefix = \"/x\"", "cold.s3.prefix"),
        (
            "bucket = \"ok-bucket\"\nendpoint = \"ftp://host\"",
            "cold.s3.endpoint",
        ),
        ("bucket = \"ok-bucket\"\nregion = \"\"", "cold.s3.region"),
        (
            "bucket = \"ok-bucket\"\ntimeout_ms = 0",
            "cold.s3.timeout_ms",
        ),
        (
            "bucket = \"ok-bucket\"\nsecret_key_env = \"\"",
            "cold.s3.secret_key_env",
        ),
    ];
    for (fields, field) in bad {
        let err = config_error(&format!("[cold]\nenabled = true\n[cold.s3]\n{fields}\n"));
        assert!(err.contains(field), "{fields}: {err}");
    }
    let both = config_error(
        "[cold]\nenabled = true\ndir = \"/tmp/x\"\n[cold.s3]\nbucket = \"ok-bucket\"\n",
    );
    assert!(both.contains("not both"), "{both}");
    let unknown = config_error("[cold]\nenabled = true\n[cold.s3]\nbuckett = \"x\"\n");
    assert!(unknown.contains("buckett"), "{unknown}");
    // Credentials are read from the environment when the tier opens.
    let s3 = strata::S3Config {
        bucket: "ok-bucket".into(),
        access_key_env: "STRATA_TEST_NO_SUCH_VARIABLE".into(),
        ..Default::default()
    };
    let err = ColdDir::open_at(&ColdLocation::S3(s3), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("STRATA_TEST_NO_SUCH_VARIABLE"), "{err}");
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
