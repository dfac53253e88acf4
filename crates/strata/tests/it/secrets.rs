//! `[[secrets]]` rules on every write path (remember, batches, updates,
//! JSONL imports): a redacted secret never reaches the store's files, a
//! refused write changes nothing and names the detector and the span, a
//! flagged memory is stored marked sensitive.

use strata::{
    Config, Confirm, Error, ErrorClass, Filter, NewMemory, OnConflict, Patch, SecretAction,
    SecretRule, View,
};

use crate::harness::{MakeEngine, TestEngine, scope};

const AWS: &str = "AKIAQX7RZ2M4K9WB3TFE";

fn rules(c: &mut Config) {
    let mut pay = SecretRule::new("project/pay", SecretAction::Refuse);
    pay.detectors.insert("email".into(), SecretAction::Flag);
    pay.detectors.insert("phone".into(), SecretAction::Off);
    c.secrets = vec![SecretRule::new("*", SecretAction::Redact), pay];
}

fn count(e: &strata::Engine, s: &str) -> u64 {
    e.count(&View::scope(scope(s)), &Filter::And(Vec::new()))
        .unwrap()
}

fn redacted_everywhere_it_is_written(make: MakeEngine) {
    let e = make(&rules);
    let acme = scope("project/acme");
    let m = e
        .remember(
            NewMemory::new(
                acme.clone(),
                format!("the deploy key is {AWS}, rotate it monthly"),
            )
            .payload(serde_json::json!({"env": {"AWS_ACCESS_KEY_ID": AWS}, "n": 3})),
        )
        .unwrap();
    assert_eq!(
        m.content,
        "the deploy key is [REDACTED:aws_key], rotate it monthly"
    );
    assert_eq!(
        m.payload.as_ref().unwrap()["env"]["AWS_ACCESS_KEY_ID"],
        "[REDACTED:aws_key]"
    );
    assert_eq!(m.payload.as_ref().unwrap()["n"], 3);
    // What the engine derives follows the stored text.
    assert_eq!(m.checksum, strata::checksum(&m.content, m.payload.as_ref()));
    assert_eq!(e.get(&m.id).unwrap().unwrap().content, m.content);
    assert!(!m.sensitive);

    // An update's new text, a batch, an import: the same.
    let patch = Patch {
        content: Some("now it is ghp_Zq81xLm2Nb7Vc4Xs9Ad3Fg6Hj1Kl5Po0Iu7Yt".into()),
        ..Patch::default()
    };
    let u = e.update(&m.id, patch, m.version).unwrap();
    assert_eq!(u.content, "now it is [REDACTED:provider_token]");
    let b = e
        .remember_batch(
            vec![
                NewMemory::new(acme.clone(), "nothing secret here"),
                NewMemory::new(
                    acme.clone(),
                    "mail ana@example.com or call +44 20 7946 0958",
                ),
            ],
            Confirm::No,
        )
        .unwrap();
    assert_eq!(b[0].content, "nothing secret here");
    assert_eq!(
        b[1].content,
        "mail [REDACTED:email] or call [REDACTED:phone]"
    );

    let plain = TestEngine::memory(|_| {});
    let src = plain
        .remember(NewMemory::new(acme.clone(), format!("old note: {AWS}")))
        .unwrap();
    let mut jsonl = Vec::new();
    plain
        .export(
            &strata::Export::user_data(None, None),
            &mut jsonl,
            &mut |_| {},
        )
        .unwrap();
    e.import(&mut jsonl.as_slice(), OnConflict::Error, &mut |_| {})
        .unwrap();
    let imported = e.get(&src.id).unwrap().unwrap();
    assert_eq!(imported.content, "old note: [REDACTED:aws_key]");
    assert_eq!(
        imported.checksum,
        strata::checksum(&imported.content, imported.payload.as_ref())
    );
}

fn refused_writes_change_nothing(make: MakeEngine) {
    let e = make(&rules);
    let pay = scope("project/pay/task/t1");
    let err = e
        .remember(NewMemory::new(
            pay.clone(),
            format!("use {AWS} for the vault"),
        ))
        .unwrap_err();
    assert_eq!(err.class(), ErrorClass::Refused);
    assert_eq!(err.class().as_str(), "refused");
    match &err {
        Error::Refused {
            field,
            detector,
            start,
            end,
            rule,
        } => {
            assert_eq!((field.as_str(), detector.as_str()), ("content", "aws_key"));
            assert_eq!((*start, *end), (4, 24));
            assert_eq!(rule, "project/pay");
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("bytes 4..24") && !msg.contains(AWS), "{msg}");
    assert_eq!(count(&e, "project/pay/task/t1"), 0);

    // A batch is refused whole, naming the item.
    let err = e
        .remember_batch(
            vec![
                NewMemory::new(pay.clone(), "fine"),
                NewMemory::new(pay.clone(), "x")
                    .payload(serde_json::json!({"db": "postgres://app:Pa55word!@db:5432/pay"})),
            ],
            Confirm::No,
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("item 1: payload.db:"), "{err}");
    assert_eq!(count(&e, "project/pay/task/t1"), 0);

    // An update is refused and the memory keeps its version and text.
    let m = e
        .remember(NewMemory::new(pay.clone(), "card on file"))
        .unwrap();
    let patch = Patch {
        content: Some("card 4111 1111 1111 1111".into()),
        ..Patch::default()
    };
    let err = e.update(&m.id, patch, m.version).unwrap_err();
    assert!(matches!(&err, Error::Refused { detector, .. } if detector == "card_number"));
    let kept = e.get(&m.id).unwrap().unwrap();
    assert_eq!(
        (kept.version, kept.content.as_str()),
        (m.version, "card on file")
    );

    // An import is refused whole, naming the line.
    let plain = TestEngine::memory(|_| {});
    plain
        .remember(NewMemory::new(pay.clone(), "first"))
        .unwrap();
    plain
        .remember(NewMemory::new(pay.clone(), format!("second {AWS}")))
        .unwrap();
    let mut jsonl = Vec::new();
    plain
        .export(
            &strata::Export::user_data(None, None),
            &mut jsonl,
            &mut |_| {},
        )
        .unwrap();
    let err = e
        .import(&mut jsonl.as_slice(), OnConflict::Error, &mut |_| {})
        .unwrap_err();
    assert!(err.to_string().starts_with("line 2: content:"), "{err}");
    assert_eq!(count(&e, "project/pay/task/t1"), 1);
}

fn flagged_and_off_detectors(make: MakeEngine) {
    let e = make(&rules);
    let pay = scope("project/pay");
    let m = e
        .remember(NewMemory::new(pay.clone(), "the owner is ana@example.com"))
        .unwrap();
    assert!(m.sensitive);
    assert_eq!(m.content, "the owner is ana@example.com");
    // Phone numbers are off in this scope: stored as written, not flagged.
    let p = e
        .remember(NewMemory::new(pay.clone(), "support line (415) 555-2671"))
        .unwrap();
    assert!(!p.sensitive);
    assert_eq!(p.content, "support line (415) 555-2671");
    // A patch that changes neither text nor payload may clear the flag.
    let patch = Patch {
        sensitive: Some(false),
        ..Patch::default()
    };
    assert!(!e.update(&m.id, patch, m.version).unwrap().sensitive);
}

backends!(engine: redacted_everywhere_it_is_written, refused_writes_change_nothing, flagged_and_off_detectors);

/// The planted key is nowhere in the database's files, write-ahead log
/// included: it was redacted before the store saw it.
#[test]
fn a_redacted_key_never_reaches_the_files() {
    let e = TestEngine::sqlite(rules);
    let acme = scope("project/acme");
    for i in 0..50 {
        e.remember(NewMemory::new(
            acme.clone(),
            format!("turn {i}: the key is {AWS}"),
        ))
        .unwrap();
    }
    let dir = e.dir.as_ref().unwrap().path().to_path_buf();
    let mut scanned = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        scanned += bytes.len();
        assert!(!bytes.windows(AWS.len()).any(|w| w == AWS.as_bytes()));
    }
    assert!(scanned > 0);
    // Without a rule the same write does reach the file (the scan can fail).
    let plain = TestEngine::sqlite(|_| {});
    plain
        .remember(NewMemory::new(acme, format!("the key is {AWS}")))
        .unwrap();
    let found = std::fs::read_dir(plain.dir.as_ref().unwrap().path())
        .unwrap()
        .any(|f| {
            let bytes = std::fs::read(f.unwrap().path()).unwrap();
            bytes.windows(AWS.len()).any(|w| w == AWS.as_bytes())
        });
    assert!(found);
}

#[test]
fn rules_from_the_config_file_and_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strata.toml");
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    write(
        "[[secrets]]\nscope = \"*\"\n\n[[secrets]]\nscope = \"project/pay\"\naction = \"refuse\"\ndetectors = { email = \"flag\" }\n",
    );
    let c = Config::from_file(&path).unwrap();
    assert_eq!(c.secrets.len(), 2);
    assert_eq!(c.secrets[0].action, SecretAction::Redact);
    assert_eq!(c.secrets[1].action_for("email"), SecretAction::Flag);
    assert_eq!(c.secrets[1].action_for("aws_key"), SecretAction::Refuse);
    for (text, names) in [
        ("[[secrets]]\nscope = \"*\"\nactoin = \"flag\"\n", "actoin"),
        ("[[secrets]]\nscope = \"*\"\naction = \"hide\"\n", "hide"),
        (
            "[[secrets]]\nscope = \"*\"\ndetectors = { emial = \"flag\" }\n",
            "secrets[0].detectors.emial",
        ),
        ("[[secrets]]\nscope = \"Project//x\"\n", "secrets[0].scope"),
        (
            "[[secrets]]\nscope = \"*\"\n[[secrets]]\nscope = \"*\"\n",
            "secrets[1].scope",
        ),
    ] {
        write(text);
        let e = Config::from_file(&path).unwrap_err().to_string();
        assert!(e.contains(names), "{text}: {e}");
    }
}
