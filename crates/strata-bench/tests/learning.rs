//! `strata eval learning` at a small scale: the detectors meet the issue's
//! bars on the generator's planted patterns, and the timing store runs.

use strata::{Config, EmbedderConfig, Engine};
use strata_bench::{LearningOptions, learning};

fn engine(dir: &tempfile::TempDir, name: &str) -> Engine {
    let mut c = Config::sqlite(dir.path().join(name));
    c.embedder = EmbedderConfig::none();
    c.max_items = 0;
    Engine::open(c).unwrap()
}

#[test]
fn detectors_find_planted_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let (labelled, timed) = (engine(&dir, "l.db"), engine(&dir, "t.db"));
    let o = LearningOptions {
        projects: 12,
        sessions: 8,
        turns: 4,
        memories: 3_000,
        seed: 7,
    };
    let r = learning(&labelled, Some(&timed), &o).unwrap();
    for (name, d) in [
        ("preference", &r.preference),
        ("failure", &r.failure),
        ("confusion", &r.confusion),
        ("topic", &r.topic),
        ("consolidation", &r.consolidation),
    ] {
        assert!(d.planted > 10, "{name}: {d:?}");
        assert!(d.precision >= 0.9, "{name}: {d:?}");
        assert!(d.recall >= 0.8, "{name}: {d:?}");
    }
    assert!(
        r.fixes_planted > 0 && r.fixes_named * 10 >= r.fixes_planted * 8,
        "{r:?}"
    );
    assert!(r.as_of_checks >= 24 && r.as_of_accuracy >= 0.95, "{r:?}");
    let t = r.timing.unwrap();
    assert!(t.memories >= 2_500, "{t:?}");
    assert_eq!(t.full_examined + t.added, t.memories, "{t:?}");
    // The incremental run examines what was written since, and the
    // memories consolidation changed (one per merged group, at most one
    // per merged memory).
    assert!(t.full_consolidated > 0, "{t:?}");
    assert!(
        t.incremental_examined >= t.added
            && t.incremental_examined <= t.added + t.full_consolidated,
        "{t:?}"
    );
    assert!(t.incremental_examined < t.memories / 5, "{t:?}");
}
