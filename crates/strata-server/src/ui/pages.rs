//! The inspector's pages: scopes, search, a memory (edit, pin, promote,
//! forget), context preview, sessions, learned memories (confirm,
//! reject), export and import.
//!
//! Each handler runs one or two [`Ctx`] operations with the session's
//! grant, exactly as the API does, so a page shows and changes only what
//! the token may; a refusal becomes an error page with the API's status
//! and message. Write controls are shown only to read-write tokens, and
//! the operations refuse writes from read-only ones anyway.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use strata::Memory;

use super::html::{self, esc, url};
use super::{Fields, Session, error_page};
use crate::Shared;
use crate::api::{ContextBody, MemoryAnswer, PatchBody, PromoteBody, RecallBody};
use crate::error::ApiError;
use crate::ops::Ctx;

type St = State<Arc<Shared>>;
type Sess = Extension<Session>;

/// Query pairs, repeated keys kept.
fn pairs(q: Option<&str>) -> Vec<(String, String)> {
    q.map(|q| {
        form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    })
    .unwrap_or_default()
}

fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.trim().is_empty())
}

/// A serde enum's word (`decision`, `user`, …).
fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// The view a page reads when none is given: each of the token's prefixes
/// with everything below it; without a limit, every root in use.
fn default_view(c: &Ctx<'_>) -> Result<Vec<String>, ApiError> {
    if let Some(ps) = &c.grant.prefixes {
        return Ok(ps.iter().map(|p| format!("{p}/**")).collect());
    }
    let mut roots: Vec<String> = c
        .engine
        .list_scopes()?
        .iter()
        .filter_map(|s| s.scope.segments().next().map(|r| format!("{r}/**")))
        .collect();
    roots.sort();
    roots.dedup();
    Ok(roots)
}

/// View entries from a text field: separated by spaces or commas.
fn view_entries(text: &str) -> Vec<String> {
    text.split([' ', ',', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// An id as lists show it: its first 13 characters.
fn short(id: &str) -> String {
    id.chars().take(13).collect()
}

/// The first `n` characters of `s`, with `…` when cut.
fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

// ---- scopes ----

/// `/ui`: the scopes inside the token as a tree, each with its own and its
/// subtree's counts, and the totals per tier and per kind of what the token
/// sees.
pub async fn scopes(State(st): St, Extension(s): Sess) -> Response {
    let all = st.run(s.grant.clone(), |c| {
        let scopes = c.scopes()?;
        let kinds = match &c.grant.prefixes {
            None => c.engine.stats()?.by_kind,
            // The token's scopes, each with what lies below it.
            Some(ps) => {
                let view = strata::View::new(ps.iter().map(|p| strata::ViewEntry {
                    scope: p.clone(),
                    subtree: true,
                }));
                c.engine.count_by_kind(&view, &strata::Filter::all())?
            }
        };
        Ok((scopes, kinds))
    });
    let (scopes, kinds) = match all.await {
        Ok(v) => v,
        Err(e) => return error_page(Some(&s), e),
    };
    let mut tiers: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    // Every node of the tree (each prefix of a scope in use) with its own
    // counts and its subtree's active count.
    let mut nodes: std::collections::BTreeMap<&str, (u64, u64, u64)> = Default::default();
    for sc in &scopes {
        let t = tiers.entry(tier_label(&sc.scope)).or_default();
        t.0 += sc.memories;
        t.1 += sc.archived;
        for p in sc.scope.prefixes() {
            nodes.entry(p).or_default().2 += sc.memories;
        }
        let own = nodes.entry(sc.scope.as_str()).or_default();
        own.0 += sc.memories;
        own.1 += sc.archived;
    }
    let mut b = String::new();
    b.push_str("<h2>By tier</h2><table class=\"counts\" id=\"tiers\"><tr><th>tier</th><th>active</th><th>archived</th></tr>");
    for (tier, (a, r)) in &tiers {
        let _ = write!(b, "<tr><td>{}</td><td>{a}</td><td>{r}</td></tr>", esc(tier));
    }
    b.push_str("</table>");
    if tiers.keys().any(|t| !TIERS.contains(t)) {
        b.push_str(
            "<p class=\"note\">A scope outside task/, session/, project/ and global/ is counted under its own root; its memories last as a project's do.</p>",
        );
    }
    b.push_str("<h2>By kind</h2><table class=\"counts\" id=\"kinds\"><tr><th>kind</th><th>active</th></tr>");
    for (k, n) in kinds {
        let _ = write!(b, "<tr><td>{}</td><td>{n}</td></tr>", esc(&k));
    }
    b.push_str("</table>");
    b.push_str("<h2>Scopes</h2>");
    if nodes.is_empty() {
        b.push_str("<p>No memories inside this token's scopes yet.</p>");
    }
    b.push_str("<table class=\"tree\" id=\"scopes\"><tr><th>scope</th><th>active</th><th>archived</th><th>in subtree</th></tr>");
    for (path, (own, archived, subtree)) in &nodes {
        let depth = path.matches('/').count().min(8);
        let name = esc(path.rsplit('/').next().unwrap_or(path));
        // An ancestor outside the token (`project` above `project/acme`)
        // is shown for the tree's shape, without a search it may not run.
        let inside = strata::Scope::parse(path).is_ok_and(|sc| s.grant.allows_scope(&sc));
        let _ = write!(b, "<tr><td class=\"d{depth}\">");
        if inside {
            let _ = write!(
                b,
                "<a href=\"/ui/search?view={}\" title=\"{}\">{name}</a>",
                esc(&url(&format!("{path}/**"))),
                esc(path),
            );
        } else {
            let _ = write!(b, "{name}");
        }
        let _ = write!(
            b,
            "</td><td>{own}</td><td>{archived}</td><td>{subtree}</td></tr>"
        );
    }
    b.push_str("</table>");
    html::page(StatusCode::OK, "Scopes", Some(&s), &b)
}

/// The tiers' own names: `session/…` is of the task tier.
const TIERS: [&str; 3] = ["task", "project", "global"];

/// The tier a page shows for `scope`: its [`strata::Tier`] under `task/`,
/// `session/`, `project/` and `global/`; else its root (`user` for
/// `user/ana`), which [`strata::Scope::tier`] files under "project" only
/// for its lifetime, since `user/ana` is no project.
fn tier_label(scope: &strata::Scope) -> &str {
    let root = scope.as_str().split('/').next().unwrap_or_default();
    match root {
        "task" | "session" | "project" | "global" => scope.tier().as_str(),
        _ => root,
    }
}

// ---- search ----

const STRATEGIES: [&str; 5] = ["", "hybrid", "relevance", "recency", "importance"];

/// `/ui/search`: a recall with view, filter and strategy; every hit with
/// its score parts. Looking does not count as an access.
pub async fn search(State(st): St, Extension(s): Sess, RawQuery(q): RawQuery) -> Response {
    let p = pairs(q.as_deref());
    let query = param(&p, "q").unwrap_or_default().to_string();
    let view_text = param(&p, "view").map(str::to_string);
    let filter_text = param(&p, "filter").unwrap_or_default().to_string();
    let strategy = param(&p, "strategy").unwrap_or_default().to_string();
    let limit = param(&p, "limit").unwrap_or("20").to_string();
    let archived = param(&p, "archived").is_some();
    let run = {
        let (query, view_text, filter_text, strategy, limit) = (
            query.clone(),
            view_text.clone(),
            filter_text.clone(),
            strategy.clone(),
            limit.clone(),
        );
        st.run_recall(s.grant.clone(), move |c| {
            let view = match &view_text {
                Some(v) => view_entries(v),
                None => default_view(&c)?,
            };
            let filter = match filter_text.trim() {
                "" => None,
                f => Some(
                    serde_json::from_str::<Value>(f)
                        .map_err(|e| ApiError::invalid("filter", format!("not JSON: {e}")))?,
                ),
            };
            let limit = limit.trim().parse::<usize>().map_err(|_| {
                ApiError::invalid("limit", format!("`{limit}` is not a whole number"))
            })?;
            let body = RecallBody {
                query,
                view: view.clone(),
                filter,
                strategy: (!strategy.is_empty()).then_some(strategy),
                limit: Some(limit),
                explain: true,
                touch: Some(false),
                archived,
                ..RecallBody::default()
            };
            Ok((view, c.recall(&body)?))
        })
        .await
    };
    let mut b = String::new();
    let (view, hits) = match run {
        Ok((view, hits)) => (view.join(" "), Ok(hits)),
        Err(e) => {
            b.push_str(&html::notice("error", &e.message));
            (view_text.unwrap_or_default(), Err(e.status))
        }
    };
    let _ = write!(
        b,
        "<form method=\"get\" action=\"/ui/search\" class=\"search\">\
         <label>Query <input name=\"q\" id=\"q\" value=\"{}\"></label>\
         <label>View <input name=\"view\" id=\"view\" value=\"{}\" placeholder=\"project/acme/** global\"></label>\
         <label>Filter <input name=\"filter\" id=\"filter\" value=\"{}\" placeholder='{{\"kind\": \"decision\"}}'></label>\
         <label>Strategy <select name=\"strategy\" id=\"strategy\">",
        esc(&query),
        esc(&view),
        esc(&filter_text)
    );
    for name in STRATEGIES {
        let sel = if name == strategy { " selected" } else { "" };
        let label = if name.is_empty() { "default" } else { name };
        let _ = write!(b, "<option value=\"{name}\"{sel}>{label}</option>");
    }
    let _ = write!(
        b,
        "</select></label><label>Limit <input name=\"limit\" value=\"{}\" size=\"4\"></label>\
         <label><input type=\"checkbox\" name=\"archived\" value=\"1\"{}> archived too</label>\
         <button id=\"search\">Search</button></form>",
        esc(&limit),
        if archived { " checked" } else { "" }
    );
    let hits = match hits {
        Ok(hits) => hits,
        Err(status) => return html::page(status, "Search", Some(&s), &b),
    };
    let _ = write!(
        b,
        "<p id=\"count\">{} result(s)</p><ol class=\"hits\">",
        hits.len()
    );
    for h in &hits {
        let m = &h.memory;
        let _ = write!(
            b,
            "<li class=\"hit\"><div class=\"meta\"><span class=\"score\">{:.3}</span> \
             <a class=\"open\" href=\"/ui/memory/{}\">{}</a> <span class=\"scope\">{}</span> \
             <span class=\"kind\">{}</span>{}</div><div class=\"content\">{}</div>",
            h.score,
            esc(&url(&m.id)),
            esc(&short(&m.id)),
            esc(m.scope.as_str()),
            esc(&m.kind.to_string()),
            if h.archived.is_some() {
                " <span class=\"tag\">archived</span>"
            } else {
                ""
            },
            esc(&clip(&m.content, 400))
        );
        if let Some(parts) = &h.explain {
            b.push_str("<details><summary>score parts</summary><table class=\"parts\">");
            if let Ok(Value::Object(o)) = serde_json::to_value(parts) {
                for (k, v) in o {
                    let v = match v {
                        Value::String(s) => s,
                        Value::Number(n) => n
                            .as_f64()
                            .filter(|_| !n.is_u64())
                            .map_or(n.to_string(), |f| format!("{f:.4}")),
                        other => other.to_string(),
                    };
                    let _ = write!(b, "<tr><th>{}</th><td>{}</td></tr>", esc(&k), esc(&v));
                }
            }
            b.push_str("</table></details>");
        }
        b.push_str("</li>");
    }
    b.push_str("</ol>");
    html::page(StatusCode::OK, "Search", Some(&s), &b)
}

// ---- one memory ----

/// What a memory page shows above its fields.
enum Note {
    None,
    Saved,
    /// A compare-and-swap lost: the version the edit was based on, and the
    /// text it would have written.
    Conflict {
        based_on: u64,
        content: String,
    },
}

/// `/ui/memory/{id}`: fields, content, payload, history, provenance and
/// access counts; edit, pin, promote and forget for read-write tokens.
pub async fn memory(
    State(st): St,
    Extension(s): Sess,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let saved = param(&pairs(q.as_deref()), "saved").is_some();
    let note = if saved { Note::Saved } else { Note::None };
    memory_page(&st, &s, &id, StatusCode::OK, note).await
}

async fn memory_page(
    st: &Arc<Shared>,
    s: &Session,
    id: &str,
    status: StatusCode,
    note: Note,
) -> Response {
    let id = id.to_string();
    let got = st.run(s.grant.clone(), move |c| c.get(&id, true)).await;
    match got {
        Ok(a) => html::page(status, "Memory", Some(s), &memory_body(s, &a, note)),
        Err(e) => error_page(Some(s), e),
    }
}

fn memory_body(s: &Session, a: &MemoryAnswer, note: Note) -> String {
    let m = &a.memory;
    let mut b = String::new();
    let mut draft = None;
    match note {
        Note::None => {}
        Note::Saved => b.push_str(&html::notice(
            "ok",
            &format!("Saved: version {}.", m.version),
        )),
        Note::Conflict { based_on, content } => {
            b.push_str(&html::notice(
                "conflict",
                &format!(
                    "Conflict: your edit was based on version {based_on}, but the memory is at version {} now (changed {}). Nothing was saved. Your text is in the form below; the current text is shown above it.",
                    m.version, m.updated_at
                ),
            ));
            draft = Some(content);
        }
    }
    if let Some(mark) = &a.archived {
        b.push_str(&html::notice(
            "ok",
            &format!("Archived {} ({}).", mark.at, mark.reason),
        ));
    }
    let _ = write!(
        b,
        "<pre class=\"content\" id=\"content\">{}</pre>",
        esc(&m.content)
    );
    b.push_str("<table class=\"fields\" id=\"fields\">");
    let mut row = |k: &str, v: String| {
        let _ = write!(b, "<tr><th>{k}</th><td>{}</td></tr>", esc(&v));
    };
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    row("id", m.id.clone());
    row("scope", m.scope.to_string());
    row("tier", tier_label(&m.scope).into());
    row("kind", m.kind.to_string());
    row("role", or_dash(m.role.as_ref().map(word)));
    row("key", or_dash(m.key.clone()));
    row("tags", m.tags.join(", "));
    row("importance", format!("{:.2}", m.importance));
    row("source", word(&m.source));
    row("session", or_dash(m.session.clone()));
    row(
        "copied from",
        or_dash(
            m.provenance
                .as_ref()
                .map(|p| format!("{} in {}, {}", p.from_id, p.from_scope, p.at)),
        ),
    );
    row("created", m.created_at.to_string());
    row("updated", m.updated_at.to_string());
    row(
        "last accessed",
        or_dash(m.last_accessed_at.map(|t| t.to_string())),
    );
    row("access count", m.access_count.to_string());
    row("expires", or_dash(m.expires_at.map(|t| t.to_string())));
    row("pinned", m.pinned.to_string());
    row("sensitive", m.sensitive.to_string());
    row("tokens", m.tokens.to_string());
    row("checksum", m.checksum.clone());
    row("version", m.version.to_string());
    b.push_str("</table>");
    if let Some(p) = &m.payload {
        b.push_str("<h2>Payload</h2>");
        b.push_str(&html::json_block(p));
    }
    let history = a.history.as_deref().unwrap_or_default();
    let _ = write!(
        b,
        "<h2>History</h2><p>{} earlier version(s).</p>",
        history.len()
    );
    if !history.is_empty() {
        b.push_str("<table class=\"history\" id=\"history\"><tr><th>version</th><th>updated</th><th>content</th></tr>");
        for h in history.iter().rev() {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                h.version,
                esc(&h.updated_at.to_string()),
                esc(&clip(&h.content, 300))
            );
        }
        b.push_str("</table>");
    }
    if s.grant.can_write() && a.archived.is_none() {
        b.push_str(&controls(s, m, draft.as_deref()));
    }
    b
}

/// The edit, pin, promote and forget controls (read-write tokens only).
fn controls(s: &Session, m: &Memory, draft: Option<&str>) -> String {
    let id = esc(&url(&m.id)).to_string();
    let csrf = html::csrf_field(s);
    let mut b = String::new();
    let _ = write!(
        b,
        "<h2>Edit</h2><form method=\"post\" action=\"/ui/memory/{id}/edit\" id=\"edit\" class=\"edit\">{csrf}\
         <input type=\"hidden\" name=\"expected_version\" value=\"{}\">\
         <label>Content <textarea name=\"content\" id=\"edit-content\" rows=\"6\">\n{}</textarea></label>\
         <label>Tags <input name=\"tags\" value=\"{}\"></label>\
         <label>Importance <input name=\"importance\" value=\"{}\" size=\"5\"></label>\
         <button id=\"save\">Save (version {} → {})</button></form>",
        m.version,
        esc(draft.unwrap_or(&m.content)),
        esc(&m.tags.join(", ")),
        m.importance,
        m.version,
        m.version + 1
    );
    let _ = write!(
        b,
        "<div class=\"actions\"><form method=\"post\" action=\"/ui/memory/{id}/pin\">{csrf}\
         <input type=\"hidden\" name=\"expected_version\" value=\"{}\">\
         <input type=\"hidden\" name=\"pinned\" value=\"{}\"><button id=\"pin\">{}</button></form>\
         <form method=\"post\" action=\"/ui/memory/{id}/promote\">{csrf}\
         <input name=\"to\" placeholder=\"project/acme\" required>\
         <label><input type=\"checkbox\" name=\"confirm\" value=\"yes\"> confirm (global)</label>\
         <button id=\"promote\">Promote (copy)</button></form>\
         <a class=\"danger\" id=\"forget\" href=\"/ui/memory/{id}/forget\">Forget…</a></div>",
        m.version,
        !m.pinned,
        if m.pinned { "Unpin" } else { "Pin" },
    );
    b
}

/// `POST /ui/memory/{id}/edit`: content, tags and importance, as a
/// compare-and-swap on `expected_version`; a lost race is shown as a
/// conflict with the text kept.
pub async fn edit(
    State(st): St,
    Extension(s): Sess,
    Extension(f): Extension<Fields>,
    Path(id): Path<String>,
) -> Response {
    match edit_patch(&f) {
        Ok(p) => patch_then_show(&st, &s, &id, p).await,
        Err(e) => error_page(Some(&s), e),
    }
}

/// The change an edit form asks for; a field left out is kept.
fn edit_patch(f: &Fields) -> Result<PatchBody, ApiError> {
    let tags = f.get("tags").map(|t| {
        t.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    });
    let importance = match f.get("importance").map(str::trim) {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<f64>()
                .map_err(|_| ApiError::invalid("importance", format!("`{v}` is not a number")))?,
        ),
    };
    Ok(PatchBody {
        expected_version: version(f)?,
        content: f.get("content").map(|c| c.replace("\r\n", "\n")),
        tags,
        importance,
        ..PatchBody::default()
    })
}

/// `POST /ui/memory/{id}/pin`: pins or unpins (compare-and-swap too).
pub async fn pin(
    State(st): St,
    Extension(s): Sess,
    Extension(f): Extension<Fields>,
    Path(id): Path<String>,
) -> Response {
    let patch = version(&f).and_then(|v| {
        let pinned = match f.get("pinned") {
            Some("true") => true,
            Some("false") => false,
            other => {
                return Err(ApiError::invalid(
                    "pinned",
                    format!("`{}` is not true or false", other.unwrap_or_default()),
                ));
            }
        };
        Ok(PatchBody {
            expected_version: v,
            pinned: Some(pinned),
            ..PatchBody::default()
        })
    });
    match patch {
        Ok(p) => patch_then_show(&st, &s, &id, p).await,
        Err(e) => error_page(Some(&s), e),
    }
}

fn version(f: &Fields) -> Result<u64, ApiError> {
    let v = f.get("expected_version").unwrap_or_default();
    v.trim().parse().map_err(|_| {
        ApiError::invalid("expected_version", format!("`{v}` is not a version number"))
    })
}

async fn patch_then_show(st: &Arc<Shared>, s: &Session, id: &str, p: PatchBody) -> Response {
    let based_on = p.expected_version;
    let content = p.content.clone();
    let target = id.to_string();
    match st
        .run(s.grant.clone(), move |c| c.update(&target, &p))
        .await
    {
        Ok(m) => {
            let to = format!("/ui/memory/{}?saved=1", url(&m.id));
            see_other(&to)
        }
        // A lost compare-and-swap (the only error naming that field).
        Err(e)
            if e.field.as_deref() == Some("expected_version")
                && e.status == StatusCode::CONFLICT =>
        {
            let note = Note::Conflict {
                based_on,
                content: content.unwrap_or_default(),
            };
            memory_page(st, s, id, StatusCode::CONFLICT, note).await
        }
        Err(e) => error_page(Some(s), e),
    }
}

fn see_other(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(v) => (StatusCode::SEE_OTHER, [(header::LOCATION, v)]).into_response(),
        Err(_) => error_page(None, ApiError::internal("a redirect to an invalid path")),
    }
}

/// `POST /ui/memory/{id}/promote`: a copy in another scope.
pub async fn promote(
    State(st): St,
    Extension(s): Sess,
    Extension(f): Extension<Fields>,
    Path(id): Path<String>,
) -> Response {
    let body = PromoteBody {
        id,
        to: f.get("to").unwrap_or_default().trim().to_string(),
        confirm: f.get("confirm") == Some("yes"),
    };
    match st.run(s.grant.clone(), move |c| c.promote(&body)).await {
        Ok(m) => see_other(&format!("/ui/memory/{}?saved=1", url(&m.id))),
        Err(e) => error_page(Some(&s), e),
    }
}

/// `GET /ui/memory/{id}/forget`: what forgetting will delete, and the
/// button that does it.
pub async fn confirm_forget(State(st): St, Extension(s): Sess, Path(id): Path<String>) -> Response {
    if !s.grant.can_write() {
        return error_page(Some(&s), ApiError::read_only());
    }
    let got = st.run(s.grant.clone(), move |c| c.get(&id, true)).await;
    let a = match got {
        Ok(a) => a,
        Err(e) => return error_page(Some(&s), e),
    };
    let m = &a.memory;
    let versions = a.history.as_ref().map_or(0, Vec::len);
    let mut b = String::new();
    let _ = write!(
        b,
        "<p class=\"notice conflict\">Forgetting deletes this memory everywhere, for good: \
         the memory (version {}{}), its {versions} earlier version(s) and its search index entries. \
         Nothing else is deleted; copies promoted elsewhere stay.</p>\
         <table class=\"fields\"><tr><th>id</th><td id=\"forget-id\">{}</td></tr>\
         <tr><th>scope</th><td>{}</td></tr><tr><th>kind</th><td>{}</td></tr></table>\
         <pre class=\"content\">{}</pre>\
         <form method=\"post\" action=\"/ui/memory/{}/forget\" id=\"forget-form\">{}",
        m.version,
        if a.archived.is_some() {
            ", archived"
        } else {
            ""
        },
        esc(&m.id),
        esc(m.scope.as_str()),
        esc(&m.kind.to_string()),
        esc(&m.content),
        esc(&url(&m.id)),
        html::csrf_field(&s)
    );
    if m.scope.tier() == strata::Tier::Global {
        b.push_str("<label><input type=\"checkbox\" name=\"confirm\" value=\"yes\" required> This is a global memory: I confirm</label>");
    }
    let _ = write!(
        b,
        "<button class=\"danger\" id=\"forget-yes\">Forget it</button> <a href=\"/ui/memory/{}\">Cancel</a></form>",
        esc(&url(&m.id))
    );
    html::page(StatusCode::OK, "Forget this memory?", Some(&s), &b)
}

/// `POST /ui/memory/{id}/forget`: deletes it, and says what was deleted.
pub async fn forget(
    State(st): St,
    Extension(s): Sess,
    Extension(f): Extension<Fields>,
    Path(id): Path<String>,
) -> Response {
    let yes = f.get("confirm") == Some("yes");
    match st.run(s.grant.clone(), move |c| c.delete(&id, yes)).await {
        Ok(r) => {
            let mut b = html::notice("ok", &format!("Forgot {} memory(ies).", r.deleted));
            b.push_str("<ul id=\"forgotten\">");
            for id in &r.ids {
                let _ = write!(b, "<li>{}</li>", esc(id));
            }
            b.push_str("</ul><p><a href=\"/ui/search\">Back to search</a></p>");
            html::page(StatusCode::OK, "Forgotten", Some(&s), &b)
        }
        Err(e) => error_page(Some(&s), e),
    }
}

// ---- context preview ----

/// `/ui/context`: a profile filled from task, project and query; the
/// rendered package, tokens per source against their shares, and what
/// was cut, dropped or summarised.
pub async fn context(State(st): St, Extension(s): Sess, RawQuery(q): RawQuery) -> Response {
    let p = pairs(q.as_deref());
    let get = |k: &str| param(&p, k).map(str::to_string);
    let profile = get("profile");
    let mut names: Vec<String> = vec!["global".into()];
    names.extend(st.engine.config().profiles.keys().cloned());
    let mut b = String::from(
        "<form method=\"get\" action=\"/ui/context\" class=\"search\"><label>Profile <select name=\"profile\" id=\"profile\">",
    );
    for n in &names {
        let sel = if profile.as_deref() == Some(n) {
            " selected"
        } else {
            ""
        };
        let _ = write!(b, "<option{sel}>{}</option>", esc(n));
    }
    b.push_str("</select></label>");
    for (k, label) in [
        ("task", "Task"),
        ("project", "Project"),
        ("query", "Query"),
        ("max_tokens", "Max tokens"),
    ] {
        let _ = write!(
            b,
            "<label>{label} <input name=\"{k}\" id=\"ctx-{k}\" value=\"{}\"></label>",
            esc(&get(k).unwrap_or_default())
        );
    }
    b.push_str("<button id=\"preview\">Preview</button></form>");
    let Some(profile) = profile else {
        return html::page(StatusCode::OK, "Context preview", Some(&s), &b);
    };
    let max_tokens = match get("max_tokens").map(|v| v.trim().parse::<u32>().map_err(|_| v)) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(v)) => {
            let e = ApiError::invalid("max_tokens", format!("`{v}` is not a whole number"));
            b.push_str(&html::notice("error", &e.message));
            return html::page(e.status, "Context preview", Some(&s), &b);
        }
    };
    let body = ContextBody {
        profile: Some(profile),
        task: get("task"),
        project: get("project"),
        query: get("query").unwrap_or_default(),
        max_tokens,
        ..ContextBody::default()
    };
    let pkg = match st.run(s.grant.clone(), move |c| c.context(&body)).await {
        Ok(a) => a,
        Err(e) => {
            b.push_str(&html::notice("error", &e.message));
            return html::page(e.status, "Context preview", Some(&s), &b);
        }
    };
    let k = &pkg.package;
    // `available_tokens` is what every candidate the sources gathered
    // (`always` keys, head and tail, the query's matches and the newest
    // items; context/assemble.rs) holds before any is cut or left out: a
    // package under its budget holds all there was to give.
    let candidates: usize = k.items.len() + k.dropped;
    let _ = write!(
        b,
        "<p id=\"ctx-total\"><strong>{}</strong> of the budget's {} tokens used by {} item(s). \
         The profile's sources gave {} candidate(s) holding {} tokens in all (their `always` keys, the query's matches and their newest memories); \
         {} of them were left out.</p>",
        k.total_tokens,
        k.max_tokens,
        k.items.len(),
        candidates,
        k.available_tokens,
        k.dropped,
    );
    b.push_str("<h2>Per source</h2><table class=\"counts\" id=\"sources\"><tr><th>source</th><th>scope</th><th>share</th><th>budget</th><th>used</th><th>items</th><th>left out</th><th>note</th></tr>");
    for u in &k.per_source {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{:.0} %</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&u.title),
            esc(&u.scope),
            u.share * 100.0,
            u.share * f64::from(k.max_tokens),
            u.tokens,
            u.items,
            u.dropped,
            esc(u.skipped.as_deref().unwrap_or_default())
        );
    }
    b.push_str("</table><h2>Items</h2><table class=\"counts\" id=\"items\"><tr><th>source</th><th>memory</th><th>scope</th><th>why</th><th>score</th><th>tokens</th><th>cut</th></tr>");
    for i in &k.items {
        let source = k.per_source.get(i.source).map_or("", |u| u.title.as_str());
        let cut = i.cut.map_or(String::new(), |c| {
            format!("kept {} + {} tokens, {} cut", c.head, c.tail, c.elided)
        });
        let _ = write!(
            b,
            "<tr><td>{}</td><td><a href=\"/ui/memory/{}\">{}</a></td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
            esc(source),
            esc(&url(&i.id)),
            esc(&short(&i.id)),
            esc(i.scope.as_str()),
            esc(&word(&i.why)),
            i.score,
            i.tokens,
            esc(&cut)
        );
    }
    b.push_str("</table>");
    if let Some(sum) = &k.summary {
        let _ = write!(
            b,
            "<h2>Summarised</h2><p id=\"ctx-summary\">{} memory(ies) that did not fit, summarised ({}) in {} tokens{}.</p>",
            sum.ids.len(),
            esc(&sum.method),
            sum.tokens,
            esc(&sum
                .note
                .as_deref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default())
        );
    }
    let _ = write!(
        b,
        "<h2>Rendered ({})</h2><pre class=\"content\" id=\"rendered\">{}</pre>",
        esc(&word(&k.render)),
        esc(&pkg.text)
    );
    html::page(StatusCode::OK, "Context preview", Some(&s), &b)
}

// ---- sessions ----

/// `/ui/sessions`: the sessions inside the token's scopes.
pub async fn sessions(State(st): St, Extension(s): Sess) -> Response {
    let all = match st.run(s.grant.clone(), |c| c.sessions()).await {
        Ok(v) => v,
        Err(e) => return error_page(Some(&s), e),
    };
    let mut b = format!("<p>{} session(s).</p>", all.len());
    b.push_str("<table class=\"counts\" id=\"sessions\"><tr><th>id</th><th>scope</th><th>created</th><th>last activity</th><th>archived</th><th>bytes</th></tr>");
    for x in &all {
        let _ = write!(
            b,
            "<tr><td>{}</td><td><a href=\"/ui/search?view={}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td></tr>",
            esc(&x.id),
            esc(&url(x.scope.as_str())),
            esc(x.scope.as_str()),
            esc(&x.created_at.to_string()),
            esc(&x.last_activity_at.to_string()),
            esc(&x.archived_at.map_or("—".into(), |t| t.to_string())),
            x.bytes,
            x.max_bytes
        );
    }
    b.push_str("</table>");
    html::page(StatusCode::OK, "Sessions", Some(&s), &b)
}

// ---- learned ----

/// `/ui/learned`: what upkeep learned in a view (the token's scopes when
/// none is given), most confident first.
pub async fn learned(State(st): St, Extension(s): Sess, RawQuery(q): RawQuery) -> Response {
    let p = pairs(q.as_deref());
    let asked = param(&p, "view").map(view_entries);
    let all = st.run(s.grant.clone(), move |c| {
        let view = match asked {
            Some(v) => v,
            None => default_view(&c)?,
        };
        let list = c.learned_list(&crate::learned::LearnedListBody { view: view.clone() })?;
        Ok((view, list))
    });
    let (view, list) = match all.await {
        Ok(v) => v,
        Err(e) => return error_page(Some(&s), e),
    };
    let mut b = format!(
        "<form method=\"get\" action=\"/ui/learned\" class=\"search\">\
         <label>View <input name=\"view\" id=\"learned-view\" value=\"{}\"></label>\
         <button>Show</button></form>\
         <p>{} learned memor{} (preferences, facts, topics, failures, confusion that upkeep found \
         in what was said; a person confirms or rejects each).</p>",
        esc(&view.join(" ")),
        list.learned.len(),
        if list.learned.len() == 1 { "y" } else { "ies" }
    );
    b.push_str("<table class=\"counts\" id=\"learned\"><tr><th>id</th><th>detector</th><th>confidence</th><th>status</th><th>evidence</th><th>scope</th><th>what was learned</th></tr>");
    for a in &list.learned {
        let _ = write!(
            b,
            "<tr><td><a href=\"/ui/learned/{}\">{}</a></td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&url(&a.memory.id)),
            esc(&short(&a.memory.id)),
            esc(&a.learned.detector),
            a.learned.confidence,
            esc(&word(&a.learned.status)),
            a.learned.evidence.len(),
            esc(a.memory.scope.as_str()),
            esc(&a.memory.content)
        );
    }
    b.push_str("</table>");
    html::page(StatusCode::OK, "Learned", Some(&s), &b)
}

/// `/ui/learned/{id}`: a learned memory, its record and the evidence the
/// token may see, with confirm and reject for read-write tokens.
pub async fn learned_one(State(st): St, Extension(s): Sess, Path(id): Path<String>) -> Response {
    match st.run(s.grant.clone(), move |c| c.learned_show(&id)).await {
        Ok(a) => learned_page(&s, &a, None),
        Err(e) => error_page(Some(&s), e),
    }
}

fn learned_page(s: &Session, a: &crate::learned::LearnedAnswer, note: Option<&str>) -> Response {
    let l = &a.learned;
    let mut b = String::new();
    if let Some(n) = note {
        let _ = write!(b, "<p class=\"note\" id=\"note\">{}</p>", esc(n));
    }
    let _ = write!(
        b,
        "<p class=\"content\" id=\"learned-content\">{}</p>\
         <table class=\"counts\" id=\"record\">\
         <tr><th>detector</th><td>{}</td></tr><tr><th>status</th><td id=\"status\">{}</td></tr>\
         <tr><th>confidence</th><td>{:.3}</td></tr><tr><th>independent evidence</th><td>{}</td></tr>\
         <tr><th>first seen</th><td>{}</td></tr><tr><th>last seen</th><td>{}</td></tr>\
         <tr><th>scope</th><td>{}</td></tr><tr><th>memory</th><td><a href=\"/ui/memory/{}\">{}</a></td></tr></table>",
        esc(&a.memory.content),
        esc(&l.detector),
        esc(&word(&l.status)),
        l.confidence,
        l.independent,
        esc(&l.first_seen.to_string()),
        esc(&l.last_seen.to_string()),
        esc(a.memory.scope.as_str()),
        esc(&url(&a.memory.id)),
        esc(&a.memory.id)
    );
    if s.grant.can_write() {
        let csrf = html::csrf_field(s);
        let id = url(&a.memory.id);
        let id = esc(&id);
        let _ = write!(
            b,
            "<div class=\"actions\"><form method=\"post\" action=\"/ui/learned/{id}/confirm\">{csrf}\
             <button id=\"confirm\">Confirm</button></form>\
             <form method=\"post\" action=\"/ui/learned/{id}/reject\">{csrf}\
             <button id=\"reject\">Reject (to the archive; not learned again from this evidence)</button></form></div>"
        );
    }
    let evidence = a.evidence.as_deref().unwrap_or_default();
    let _ = write!(
        b,
        "<h2>Evidence ({} of {} you may see)</h2><table class=\"counts\" id=\"evidence\">\
         <tr><th>id</th><th>when</th><th>session</th><th>what was said</th></tr>",
        evidence.len(),
        l.evidence.len()
    );
    for m in evidence {
        let _ = write!(
            b,
            "<tr><td><a href=\"/ui/memory/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&url(&m.id)),
            esc(&short(&m.id)),
            esc(&m.created_at.to_string()),
            esc(m.session.as_deref().unwrap_or("—")),
            esc(&m.content)
        );
    }
    b.push_str("</table>");
    html::page(StatusCode::OK, "A learned memory", Some(s), &b)
}

/// `POST /ui/learned/{id}/confirm`.
pub async fn learned_confirm(
    State(st): St,
    Extension(s): Sess,
    Path(id): Path<String>,
) -> Response {
    learned_decide(st, s, id, true).await
}

/// `POST /ui/learned/{id}/reject`.
pub async fn learned_reject(State(st): St, Extension(s): Sess, Path(id): Path<String>) -> Response {
    learned_decide(st, s, id, false).await
}

async fn learned_decide(st: Arc<Shared>, s: Session, id: String, confirm: bool) -> Response {
    let done = st
        .run(s.grant.clone(), move |c| {
            let m = if confirm {
                c.learned_confirm(&id)?
            } else {
                c.learned_reject(&id)?
            };
            if confirm {
                c.learned_show(&m.id).map(Some)
            } else {
                Ok(None)
            }
        })
        .await;
    match done {
        Ok(Some(a)) => learned_page(&s, &a, Some("Confirmed: it no longer fades.")),
        Ok(None) => html::page(
            StatusCode::OK,
            "Rejected",
            Some(&s),
            "<p class=\"note\" id=\"note\">Rejected: moved to the archive (reason <code>rejected</code>); \
             it is not learned again from the same evidence. <a href=\"/ui/learned\">Back to what was learned</a>.</p>",
        ),
        Err(e) => error_page(Some(&s), e),
    }
}

// ---- export and import ----

/// `/ui/export`: which view to download as JSONL.
pub async fn export_form(State(st): St, Extension(s): Sess) -> Response {
    let view = match st.run(s.grant.clone(), |c| default_view(&c)).await {
        Ok(v) => v.join(" "),
        Err(e) => return error_page(Some(&s), e),
    };
    let b = format!(
        "<form method=\"get\" action=\"/ui/export.jsonl\" class=\"search\">\
         <label>View <input name=\"view\" id=\"export-view\" value=\"{}\"></label>\
         <label><input type=\"checkbox\" name=\"sensitive\" value=\"true\" checked> sensitive</label>\
         <label><input type=\"checkbox\" name=\"archived\" value=\"true\" checked> archived</label>\
         <label><input type=\"checkbox\" name=\"history\" value=\"true\" checked> earlier versions</label>\
         <button id=\"export\">Download JSONL</button></form>\
         <p class=\"hint\">The same JSONL as <code>strata export</code>: a full backup of the view, for <a href=\"/ui/import\">import</a>.</p>",
        esc(&view)
    );
    html::page(StatusCode::OK, "Export", Some(&s), &b)
}

/// `/ui/export.jsonl`: the view as JSONL, streamed as a download. A part
/// (sensitive, archived, earlier versions) is included when its box was
/// ticked.
pub async fn export(State(st): St, Extension(s): Sess, RawQuery(q): RawQuery) -> Response {
    let p = pairs(q.as_deref());
    let view = param(&p, "view").map(view_entries).unwrap_or_default();
    let parts = crate::ops::ExportParts {
        sensitive: param(&p, "sensitive").is_some(),
        archived: param(&p, "archived").is_some(),
        history: param(&p, "history").is_some(),
    };
    let ctx = Ctx {
        engine: &st.engine,
        grant: &s.grant,
        limits: &st.limits,
    };
    let ev = ctx.export_event(&view, None);
    match ctx.export_request(&view, None, parts) {
        Ok(req) => {
            let mut resp = crate::http::export_stream(st.engine.clone(), req, ev);
            resp.headers_mut().insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"strata-export.jsonl\""),
            );
            resp
        }
        Err(e) => error_page(Some(&s), e),
    }
}

const CONFLICTS: [&str; 3] = ["error", "skip", "replace"];

/// `/ui/import`: paste JSONL or pick a file (read into the form by the
/// page's script), then check it before importing.
pub async fn import_form(Extension(s): Sess) -> Response {
    if !s.grant.can_write() {
        return error_page(Some(&s), ApiError::read_only());
    }
    html::page(
        StatusCode::OK,
        "Import",
        Some(&s),
        &import_form_body(&s, ""),
    )
}

fn import_form_body(s: &Session, jsonl: &str) -> String {
    let mut b = format!(
        "<form method=\"post\" action=\"/ui/import\" class=\"import\">{}\
         <label>JSONL file <input type=\"file\" id=\"import-file\" accept=\".jsonl,.json,.ndjson,text/plain\"></label>\
         <label>or its lines <textarea name=\"jsonl\" id=\"import-jsonl\" rows=\"10\">\n{}</textarea></label>\
         <label>When an id exists <select name=\"on_conflict\">",
        html::csrf_field(s),
        esc(jsonl)
    );
    for c in CONFLICTS {
        let _ = write!(b, "<option>{c}</option>");
    }
    b.push_str("</select></label><button name=\"step\" value=\"check\" id=\"import-check\">Check (dry run)</button></form>");
    b
}

/// What a dry run found.
struct DryRun {
    lines: usize,
    versions: usize,
    existing: Vec<String>,
    scopes: std::collections::BTreeSet<String>,
}

/// Parses every line and checks its scopes against the grant; nothing is
/// written.
fn dry_run(c: &Ctx<'_>, text: &str) -> Result<DryRun, ApiError> {
    let mut d = DryRun {
        lines: 0,
        versions: 0,
        existing: Vec::new(),
        scopes: Default::default(),
    };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = strata::parse_line(line.trim()).map_err(|reason| {
            ApiError::from(strata::Error::InvalidImport {
                line: n + 1,
                reason,
            })
        })?;
        for m in std::iter::once(&item.memory).chain(&item.history) {
            if !c.grant.allows_scope(&m.scope) {
                return Err(ApiError::outside(&format!("line {}", n + 1), &m.scope));
            }
        }
        // Only the ids the grant sees: another tenant's id is one that
        // does not exist, as `POST /v1/import` treats it (stored under a
        // fresh id).
        let id = &item.memory.id;
        if c.visible_anywhere(id)?.is_some() {
            d.existing.push(id.clone());
        }
        d.scopes.insert(item.memory.scope.to_string());
        d.lines += 1;
        d.versions += item.history.len();
    }
    if d.lines == 0 {
        return Err(ApiError::invalid(
            "jsonl",
            "no lines: paste JSONL or pick a file",
        ));
    }
    Ok(d)
}

/// `POST /ui/import`: `step=check` is the dry run (what would be
/// imported, which ids exist already); `step=import` imports, all or
/// nothing.
pub async fn import(
    State(st): St,
    Extension(s): Sess,
    Extension(f): Extension<Fields>,
) -> Response {
    if !s.grant.can_write() {
        return error_page(Some(&s), ApiError::read_only());
    }
    let jsonl = f.get("jsonl").unwrap_or_default().replace("\r\n", "\n");
    let on_conflict = f.get("on_conflict").unwrap_or("error").to_string();
    let policy = match on_conflict.as_str() {
        "error" => strata::OnConflict::Error,
        "skip" => strata::OnConflict::Skip,
        "replace" => strata::OnConflict::Replace,
        other => {
            let e = ApiError::invalid(
                "on_conflict",
                format!("`{other}` is not one of error, skip, replace"),
            );
            return error_page(Some(&s), e);
        }
    };
    if f.get("step") == Some("import") {
        let text = jsonl.clone();
        let run = st.run(s.grant.clone(), move |c| c.import(text.as_bytes(), policy));
        return match run.await {
            Ok(counts) => {
                let mut b = html::notice("ok", "Imported.");
                b.push_str(&html::json_block(
                    &serde_json::to_value(counts).unwrap_or_default(),
                ));
                html::page(StatusCode::OK, "Import", Some(&s), &b)
            }
            Err(e) => {
                let mut b = html::notice("error", &format!("Nothing was imported: {}", e.message));
                b.push_str(&import_form_body(&s, &jsonl));
                html::page(e.status, "Import", Some(&s), &b)
            }
        };
    }
    let text = jsonl.clone();
    let checked = st.run(s.grant.clone(), move |c| dry_run(&c, &text)).await;
    let d = match checked {
        Ok(d) => d,
        Err(e) => {
            let mut b = html::notice("error", &format!("Dry run: {}", e.message));
            b.push_str(&import_form_body(&s, &jsonl));
            return html::page(e.status, "Import", Some(&s), &b);
        }
    };
    let mut b = html::notice(
        "ok",
        &format!(
            "Dry run: {} memory(ies) with {} earlier version(s) in {} scope(s); {} id(s) exist already (on conflict: {on_conflict}). Nothing is imported until you press Import.",
            d.lines,
            d.versions,
            d.scopes.len(),
            d.existing.len()
        ),
    );
    b.push_str("<ul id=\"import-scopes\">");
    for sc in &d.scopes {
        let _ = write!(b, "<li>{}</li>", esc(sc));
    }
    let _ = write!(
        b,
        "</ul><form method=\"post\" action=\"/ui/import\">{}\
         <input type=\"hidden\" name=\"on_conflict\" value=\"{}\">\
         <textarea name=\"jsonl\" hidden>\n{}</textarea>\
         <button name=\"step\" value=\"import\" id=\"import-run\">Import</button> <a href=\"/ui/import\">Cancel</a></form>",
        html::csrf_field(&s),
        esc(&on_conflict),
        esc(&jsonl)
    );
    html::page(StatusCode::OK, "Import: dry run", Some(&s), &b)
}
