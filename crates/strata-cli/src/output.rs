//! Human-readable and JSON output.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // Keep an I/O error an I/O error, so a closed pipe is recognised.
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

/// `n` with the singular or plural noun: "1 memory", "2 memories".
pub fn plural(n: impl TryInto<u64>, one: &str, many: &str) -> String {
    let n = n.try_into().unwrap_or(u64::MAX);
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Prints lines of text.
pub fn line(text: impl std::fmt::Display) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

/// Prints rows under a header, each column as wide as its widest cell
/// (counted in characters), two spaces apart. A header starting with `>`
/// right-aligns its column (numbers); the `>` is not printed.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for l in table_lines(header, rows) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// The lines [`table`] prints.
pub fn table_lines(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let right: Vec<bool> = header.iter().map(|h| h.starts_with('>')).collect();
    let head: Vec<String> = header
        .iter()
        .map(|h| h.trim_start_matches('>').to_string())
        .collect();
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    std::iter::once(&head)
        .chain(rows)
        .map(|r| {
            let last = r.len().saturating_sub(1);
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pad = " ".repeat(width[i].saturating_sub(c.chars().count()));
                    if right[i] {
                        format!("{pad}{c}")
                    } else if i == last {
                        c.clone()
                    } else {
                        format!("{c}{pad}")
                    }
                })
                .collect();
            cells.join("  ")
        })
        .collect()
}

/// One line for a memory: id, scope, kind, importance, a content preview.
pub fn memory_line(m: &strata::Memory) -> String {
    let preview: String = m.content.replace('\n', " ").chars().take(100).collect();
    let ell = if m.content.chars().count() > 100 {
        "…"
    } else {
        ""
    };
    let mut flags = String::new();
    if m.pinned {
        flags.push_str(" [pinned]");
    }
    if m.sensitive {
        flags.push_str(" [sensitive]");
    }
    format!(
        "{}  {}  {}  {:.2}{}  {}{}",
        m.id, m.scope, m.kind, m.importance, flags, preview, ell
    )
}

/// A memory in full, one field per line.
pub fn memory_full(m: &strata::Memory) -> String {
    let mut s = String::new();
    let mut f = |k: &str, v: String| s.push_str(&format!("{k:<17}{v}\n"));
    f("id", m.id.clone());
    f(
        "scope",
        format!("{} ({} tier)", m.scope, m.scope.tier().as_str()),
    );
    f("kind", m.kind.to_string());
    if let Some(r) = m.role {
        f("role", r.to_string());
    }
    if let Some(k) = &m.key {
        f("key", k.clone());
    }
    if !m.tags.is_empty() {
        f("tags", m.tags.join(", "));
    }
    f("importance", format!("{}", m.importance));
    f("source", m.source.to_string());
    if let Some(s) = &m.session {
        f("session", s.clone());
    }
    f("created_at", m.created_at.to_string());
    f("updated_at", m.updated_at.to_string());
    if let Some(t) = m.last_accessed_at {
        f(
            "last_accessed_at",
            format!("{t} ({} reads)", m.access_count),
        );
    }
    if let Some(t) = m.expires_at {
        f("expires_at", t.to_string());
    }
    if m.pinned {
        f("pinned", "yes".into());
    }
    if m.sensitive {
        f("sensitive", "yes".into());
    }
    f("tokens", m.tokens.to_string());
    f("version", m.version.to_string());
    f("checksum", m.checksum.clone());
    if let Some(p) = &m.provenance {
        f(
            "promoted_from",
            format!("{} ({}) at {}", p.from_id, p.from_scope, p.at),
        );
    }
    if let Some(p) = &m.payload {
        f("payload", p.to_string());
    }
    s.push('\n');
    s.push_str(&m.content);
    s
}

/// A progress bar over a known number of bytes, drawn on stderr.
pub fn bytes_bar(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// A spinner counting items, drawn on stderr.
pub fn count_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {pos} memories {per_sec}")
    {
        bar.set_style(style);
    }
    bar
}

/// `label: k1 v1, k2 v2` for a count map.
pub fn counts(label: &str, map: &std::collections::BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!("{label}: {}", parts.join(", "))
}

/// A progress bar over a known total.
pub fn total_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} memories {per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}
