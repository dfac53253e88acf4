//! `strata ui` as a process: it prints a one-time login link on stdout,
//! the link signs one browser in (once) with every scope, and it refuses
//! to listen off loopback.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::util::Env;

#[test]
fn ui_prints_a_one_time_link_that_signs_in_once() {
    let e = Env::new();
    e.remember("billing uses PostgreSQL", "project/acme", &[]);
    let mut child = e
        .cmd()
        .args(["ui", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let link = line.trim().to_string();
    let base = link.split("/ui/login/").next().unwrap().to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{link}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let r = agent.get(&link).call().unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let cookie = cookie.split(';').next().unwrap().to_string();
    let mut page = agent
        .get(format!("{base}/ui/search?q=billing"))
        .header("cookie", &cookie)
        .call()
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let body = page.body_mut().read_to_string().unwrap();
    assert!(body.contains("billing uses PostgreSQL"), "{body}");
    assert!(body.contains("local user (read-write)"), "{body}");
    let again = agent.get(&link).call().unwrap();
    assert_eq!(again.status().as_u16(), 401);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn ui_refuses_to_listen_off_loopback() {
    let e = Env::new();
    let err = e.fails(&["ui", "--listen", "0.0.0.0:0"], 2);
    assert!(err.contains("not a loopback address"), "{err}");
    let err = e.fails(&["ui", "--listen", "nowhere"], 2);
    assert!(err.contains("listen: `nowhere`"), "{err}");
}
