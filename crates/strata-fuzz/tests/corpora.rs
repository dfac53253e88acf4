//! The CI smoke of the fuzz targets, on stable: every committed corpus
//! file (`fuzz/corpus/<target>/`, crashes once found included) goes
//! through its target again. A file that panics names itself.

use std::path::PathBuf;

#[test]
fn every_corpus_file_replays_without_a_panic() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (name, target) in strata_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no corpus", dir.display());
        let started = std::time::Instant::now();
        for f in &files {
            let data = std::fs::read(f).unwrap();
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                panic!(
                    "{name}: {} panicked (replay it with `cargo +nightly fuzz run {name} {}`)",
                    f.display(),
                    f.display()
                );
            }
        }
        eprintln!("{name}: {} files in {:.2?}", files.len(), started.elapsed());
    }
}
