//! Imports from other memory tools for both front ends
//! (`POST /v1/import/foreign` and the `import_from` tool): the client sends
//! the file's text (or a Markdown folder's files), never a path on the
//! server. Every memory the input makes must land inside the grant, and
//! every session it makes must be one the token may create, else nothing
//! is imported (a dry run is refused the same way).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::ops::{Ctx, Touched};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// `POST /v1/import/foreign` and the `import_from` tool.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportFromBody {
    /// The format: `mcp-memory`, `chatgpt`, `claude`, `markdown` or `mem0`.
    pub from: String,
    /// The file's name (`conversations.json`), or the Markdown folder's
    /// (the default scope is `project/<name>`).
    #[serde(default)]
    pub name: Option<String>,
    /// The file's text, for every format but `markdown`.
    #[serde(default)]
    pub text: Option<String>,
    /// The folder's files, for `markdown`.
    #[serde(default)]
    pub files: Option<Vec<NoteFileBody>>,
    /// Where the memories go; each format has a default (docs/formats.md).
    #[serde(default)]
    pub scope: Option<String>,
    /// Report what would happen, write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A file of a Markdown folder.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteFileBody {
    /// Its path inside the folder, `/`-separated (`people/ana.md`).
    pub path: String,
    /// Its text.
    pub text: String,
    /// When it last changed (RFC 3339), for notes whose front matter has
    /// no times.
    #[serde(default)]
    pub modified: Option<String>,
}

impl Ctx<'_> {
    /// Imports another tool's memories from what the client sent.
    pub fn import_from(&self, b: &ImportFromBody) -> Result<strata::ForeignReport> {
        self.audited(
            if b.dry_run {
                "import_foreign_dry_run"
            } else {
                "import_foreign"
            },
            Vec::new,
            || {
                self.need_write()?;
                let format: strata::ForeignFormat = b.from.parse().map_err(|_| {
                    let names: Vec<&str> = strata::ForeignFormat::ALL
                        .iter()
                        .map(|f| f.as_str())
                        .collect();
                    ApiError::invalid(
                        "from",
                        format!("`{}` is not one of {}", b.from, names.join(", ")),
                    )
                })?;
                let scope = match &b.scope {
                    None => None,
                    Some(s) => {
                        let s =
                            strata::Scope::parse(s).map_err(|e| ApiError::invalid("scope", e))?;
                        if !self.grant.allows_scope(&s) {
                            return Err(ApiError::outside("scope", &s));
                        }
                        Some(s)
                    }
                };
                let input = match (format, &b.text, &b.files) {
                    (_, Some(_), Some(_)) => {
                        return Err(ApiError::invalid(
                            "files",
                            "give `text` or `files`, not both",
                        ));
                    }
                    (strata::ForeignFormat::Markdown, None, Some(files)) => {
                        let name = b.name.clone().ok_or_else(|| {
                    ApiError::invalid(
                        "name",
                        "the folder's name is missing (the default scope is `project/<name>`)",
                    )
                })?;
                        let mut out = Vec::with_capacity(files.len());
                        for (i, f) in files.iter().enumerate() {
                            let modified = match &f.modified {
                                None => None,
                                Some(t) => Some(t.parse::<jiff::Timestamp>().map_err(|e| {
                                    ApiError::invalid(
                                        &format!("files[{i}].modified"),
                                        format!("`{t}` is not an RFC 3339 time: {e}"),
                                    )
                                })?),
                            };
                            out.push(strata::NoteFile {
                                path: f.path.clone(),
                                text: f.text.clone(),
                                modified,
                            });
                        }
                        strata::ForeignInput::Files { name, files: out }
                    }
                    (strata::ForeignFormat::Markdown, _, None) => {
                        return Err(ApiError::invalid(
                            "files",
                            "the markdown format reads a folder: send its `files`",
                        ));
                    }
                    (f, Some(text), None) => strata::ForeignInput::Text {
                        name: b.name.clone().unwrap_or_else(|| default_name(f).into()),
                        text: text.clone(),
                    },
                    (f, None, _) => {
                        return Err(ApiError::invalid(
                            "text",
                            format!("the {f} format reads one file: send its `text`"),
                        ));
                    }
                };
                let req = strata::ForeignImport {
                    format,
                    input,
                    scope,
                    dry_run: b.dry_run,
                };
                self.engine
                    .import_foreign_within(&req, &mut |entry, m: &strata::Memory| {
                        if !self.grant.allows_scope(&m.scope) {
                            return Err(ApiError::outside(entry, &m.scope));
                        }
                        if let Some(s) = &m.session {
                            self.session_allowed(entry, s)?;
                        }
                        Ok(())
                    })
            },
            |r| Touched::read(r.added).scopes(r.scopes.iter()),
        )
    }
}

/// The file name each format's export has, for messages.
fn default_name(f: strata::ForeignFormat) -> &'static str {
    match f {
        strata::ForeignFormat::McpMemory => "memory.json",
        strata::ForeignFormat::Chatgpt | strata::ForeignFormat::Claude => "conversations.json",
        strata::ForeignFormat::Mem0 => "mem0.json",
        strata::ForeignFormat::Markdown => "notes",
    }
}

/// The `import_from` tool's answer: what was added, left alone and
/// skipped, in a few lines.
pub fn text(r: &strata::ForeignReport) -> String {
    let verb = if r.dry_run {
        "would import"
    } else {
        "imported"
    };
    let mut out = format!(
        "{verb} {} memories from {} ({} already there, {} skipped, {} new sessions)",
        r.added,
        r.format,
        r.unchanged,
        r.skipped.len(),
        r.sessions
    );
    if !r.scopes.is_empty() {
        out.push_str(&format!(" into {}", r.scopes.join(", ")));
    }
    for s in &r.skipped {
        out.push_str(&format!("\n  skipped {}: {}", s.entry, s.reason));
    }
    out
}
