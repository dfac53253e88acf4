//! Several processes writing one file at once.

use std::process::Stdio;

use crate::util::Env;

#[test]
fn four_processes_two_thousand_writes_each() {
    let e = Env::new();
    e.ok(&["init"]);
    let children: Vec<_> = (0..4)
        .map(|i| {
            e.cmd()
                .args([
                    "debug",
                    "write-stream",
                    "--scope",
                    &format!("project/p{i}"),
                    "--count",
                    "2000",
                    "--prefix",
                    &format!("writer {i}"),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut acked = 0;
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "a writer failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            o.stderr.is_empty(),
            "a writer reported: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        acked += String::from_utf8(o.stdout).unwrap().lines().count();
    }
    assert_eq!(acked, 8000);
    let stats = e.json(&["stats"]);
    assert_eq!(stats["memories"], 8000);
    for i in 0..4 {
        let n = e
            .json(&[
                "list",
                "--view",
                &format!("project/p{i}"),
                "--limit",
                "5000",
            ])
            .as_array()
            .unwrap()
            .len();
        assert_eq!(n, 2000);
    }
    assert_eq!(e.ok(&["debug", "integrity"]).trim(), "ok");
}
