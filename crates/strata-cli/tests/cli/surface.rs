//! The command line's surface: every command's `--help` has an example,
//! usage lines show required flags, flags that mean nothing are refused,
//! tables line up, short ids work wherever an id is taken.

use crate::util::{Env, write};

/// The verbs `strata --help` lists (without `help`).
fn verbs(e: &Env) -> Vec<String> {
    let help = e.ok(&["--help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(String::from)
        .collect()
}

#[test]
fn every_command_has_an_example_and_usage_shows_required_flags() {
    let e = Env::new();
    let verbs = verbs(&e);
    assert!(verbs.len() >= 20, "{verbs:?}");
    for v in &verbs {
        let help = e.ok(&[v, "--help"]);
        let examples: Vec<&str> = help
            .lines()
            .skip_while(|l| *l != "Examples:")
            .skip(1)
            .collect();
        assert!(
            examples.first().is_some_and(
                |l| l.starts_with(&format!("  strata {v}")) || l.starts_with("  strata --")
            ),
            "`strata {v} --help` has no example of itself:\n{help}"
        );
    }
    for v in ["recall", "list"] {
        let help = e.ok(&[v, "--help"]);
        let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(usage.contains("--view <SCOPE>"), "{usage}");
        let err = e.fails(&[v, "q"], 2);
        assert!(err.contains("--view <SCOPE>"), "{err}");
    }
    // And every subcommand of a group (`session new`, `token revoke`, …).
    let mut subs = 0;
    for v in &verbs {
        let help = e.ok(&[v, "--help"]);
        for sub in help
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|s| *s != "help")
        {
            subs += 1;
            let help = e.ok(&[v, sub, "--help"]);
            let first = help
                .lines()
                .skip_while(|l| *l != "Examples:")
                .nth(1)
                .unwrap_or_default();
            assert!(
                first.starts_with(&format!("  strata {v} {sub}"))
                    || first.starts_with("  strata --"),
                "`strata {v} {sub} --help` has no example of itself:\n{help}"
            );
        }
    }
    assert!(subs >= 15, "{subs}");
}

#[test]
fn json_is_refused_by_the_servers_in_plain_words() {
    let e = Env::new();
    for v in ["serve", "mcp"] {
        let err = e.fails(&[v, "--json"], 2);
        assert!(
            err.starts_with("strata: --json:") && err.contains(&format!("`strata {v}`")),
            "{err}"
        );
    }
    assert!(!e.db().exists(), "nothing was opened");
}

/// The character columns at which each header word starts.
fn starts(header: &str, words: &[&str]) -> Vec<usize> {
    words.iter().map(|w| header.find(w).unwrap()).collect()
}

/// Every line has a cell starting at each column of `at` (a space before
/// it, text at it).
fn aligned(out: &str, at: &[usize]) {
    for l in out.lines() {
        let c: Vec<char> = l.chars().collect();
        for &i in at {
            assert!(
                c.get(i - 1) == Some(&' ') && c.get(i).is_some_and(|c| *c != ' '),
                "column {i} of `{l}`:\n{out}"
            );
        }
    }
}

#[test]
fn scopes_and_profile_list_line_up() {
    let e = Env::new();
    e.remember("a", "global", &[]);
    for i in 0..12 {
        e.remember(
            &format!("b {i}"),
            "project/a-rather-long-project-name/sprint",
            &[],
        );
    }
    let out = e.ok(&["scopes"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let widths: Vec<usize> = out.lines().map(|l| l.chars().count()).collect();
    assert!(
        widths.iter().all(|w| *w == widths[0]),
        "right-aligned numbers:\n{out}"
    );
    let header = out.lines().next().unwrap();
    let end = header.find("ACTIVE").unwrap() + "ACTIVE".len() - 1;
    for l in out.lines() {
        let c: Vec<char> = l.chars().collect();
        assert!(c[end] != ' ' && c[end + 1] == ' ', "`{l}`:\n{out}");
    }
    assert!(out.contains("  12"), "{out}");

    write(
        &e.path("strata.toml"),
        r#"
[profiles.a-profile-with-a-long-name]
max_tokens = 500
strategy = "importance"
[[profiles.a-profile-with-a-long-name.sources]]
scope = "global"
"#,
    );
    let out = e.ok(&["profile", "list"]);
    assert_eq!(out.lines().count(), 4, "{out}");
    let header = out.lines().next().unwrap();
    aligned(&out, &starts(header, &["STRATEGY", "RENDER", "SOURCES"]));
}

#[test]
fn short_ids_work_in_get_update_forget_and_promote() {
    let e = Env::new();
    let a = e.remember("first", "project/x", &[]);
    let b = e.remember("second", "project/x", &[]);
    // The shortest dash-cut prefix of `a` that `b` does not share.
    let short = [8, 13, 18, 23, 36]
        .into_iter()
        .map(|n| &a[..n])
        .find(|p| !b.starts_with(p))
        .unwrap();
    assert_eq!(e.json(&["get", short])["id"], a.as_str());
    let m = e.json(&["update", short, "--content", "first, changed"]);
    assert_eq!(
        (m["id"].as_str(), m["version"].as_u64()),
        (Some(a.as_str()), Some(2))
    );
    let p = e.json(&["promote", short, "--to", "global"]);
    assert_eq!(p["scope"], "global");

    // Errors name what was wrong and change nothing.
    let before = e.snapshot();
    let err = e.fails(&["get", &a[..4]], 1);
    assert!(err.contains("at least 8 characters"), "{err}");
    let err = e.fails(&["update", "ffffffff", "--content", "x"], 1);
    assert!(err.contains("ffffffff"), "{err}");
    if a[..8] == b[..8] {
        // Same millisecond-ish: UUIDv7s share their first 8 characters.
        let err = e.fails(&["forget", &a[..8], "--yes"], 1);
        assert!(err.contains("give more of the id"), "{err}");
    }
    assert_eq!(e.snapshot(), before);

    e.ok(&["forget", short, "--yes"]);
    assert!(e.run(&["get", &a]).status.code() == Some(1));
    assert_eq!(e.json(&["get", &b])["content"], "second");
}
