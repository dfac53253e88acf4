//! kill -9 in the middle of a stream of writes: the file stays sound and
//! every acknowledged write is there.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::util::Env;

#[test]
fn kill_nine_twenty_times_loses_no_acknowledged_write() {
    let e = Env::new();
    e.ok(&["init"]);
    let mut acked: HashSet<String> = HashSet::new();
    for round in 0..20u64 {
        let mut child = e
            .cmd()
            .args([
                "debug",
                "write-stream",
                "--scope",
                "project/crash",
                "--prefix",
                &format!("round {round}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        // Kill after a varying number of acknowledgements.
        let target = 20 + (round * 37) % 180;
        let mut line = String::new();
        let mut got = 0;
        while got < target {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if line.ends_with('\n') {
                acked.insert(line.trim().to_string());
                got += 1;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Anything printed before the kill landed is acknowledged too.
        let mut rest = String::new();
        while out.read_line(&mut rest).unwrap_or(0) > 0 {
            if rest.ends_with('\n') {
                acked.insert(rest.trim().to_string());
            }
            rest.clear();
        }
        assert_eq!(e.ok(&["debug", "integrity"]).trim(), "ok", "round {round}");
    }
    let export = e.ok(&["export", "--view", "project/crash"]);
    let stored: HashSet<String> = export
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let missing: Vec<_> = acked.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost: {missing:?}",
        missing.len()
    );
    assert!(acked.len() >= 20 * 20);
}
