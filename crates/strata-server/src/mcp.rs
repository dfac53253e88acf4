//! The MCP server: tools over the same operations as the HTTP API, on stdio
//! (`strata mcp`) or streamable HTTP (`/mcp` in the `strata serve` app).
//!
//! Tool arguments are the HTTP bodies (same names, same JSON schemas), plus
//! `verbose`. Answers are compact text by default (`compact.rs`: about the
//! size of the memory content they carry); `verbose: true` gives the JSON
//! records the HTTP API answers with.
//! Scope defaults (`[server.mcp]`, or `strata mcp --project P --session S`)
//! fill what a call leaves out, so a client pointed at a project needs no
//! scope in its calls. Over HTTP the bearer token's grant applies; on stdio
//! the server runs as the local user and sees every scope.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Serialize;

use crate::Shared;
use crate::api::{
    ContextBody, ForgetBody, GetArgs, ListAnswer, ListArgs, MemoryAnswer, NoArgs, PromoteBody,
    RecallBody, RememberBody, SessionArgs, UpdateArgs, Verbose,
};
use crate::audit::AuditArgs;
use crate::auth::Grant;
use crate::compact;
use crate::error::ApiError;
use crate::foreign::{self, ImportFromBody};
use crate::learned::{self, LearnedArgs, LearnedListBody};
use crate::ops::Ctx;

const INSTRUCTIONS: &str = "strata is persistent, scoped memory. Call `recall` (or `context`) \
before answering questions about earlier work, decisions or preferences; call `remember` when \
a decision is made, something is learned, or the user states a preference; `update` corrects a \
memory (with the version you read), `list` shows recent activity. Scopes are paths: \
`project/<name>`, `task/<id>`, `session/<id>`, `global`. Answers are compact text; \
`verbose: true` gives the full JSON records.";

/// The MCP server handler.
#[derive(Clone)]
pub struct StrataMcp {
    shared: Arc<Shared>,
    /// `Some` on stdio (the local user's grant); over HTTP each request
    /// carries its token's grant.
    fixed_grant: Option<Grant>,
    tool_router: ToolRouter<StrataMcp>,
}

impl std::fmt::Debug for StrataMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrataMcp")
            .field("fixed_grant", &self.fixed_grant)
            .finish_non_exhaustive()
    }
}

/// Serves MCP on stdin/stdout until the client disconnects. Logs go to
/// stderr: stdout carries only protocol messages.
pub async fn serve_stdio(shared: Arc<Shared>) -> std::io::Result<()> {
    let server = StrataMcp::new(shared, Some(Grant::local()));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("MCP initialize failed: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(format!("MCP server failed: {e}")))?;
    Ok(())
}

/// The streamable HTTP service mounted at `/mcp` (stateless, JSON responses).
pub fn http_service(shared: Arc<Shared>) -> StreamableHttpService<StrataMcp, LocalSessionManager> {
    let cfg = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(shared.allowed_hosts.clone())
        .with_max_request_body_bytes(shared.limits.max_body_bytes)
        .with_cancellation_token(shared.shutdown.child_token());
    StreamableHttpService::new(
        move || Ok(StrataMcp::new(shared.clone(), None)),
        Default::default(),
        cfg,
    )
}

impl StrataMcp {
    fn new(shared: Arc<Shared>, fixed_grant: Option<Grant>) -> StrataMcp {
        let mut tool_router = Self::tool_router();
        for route in tool_router.map.values_mut() {
            let mut schema = serde_json::Value::Object((*route.attr.input_schema).clone());
            lean_schema(&mut schema);
            field_docs(&route.attr.name, &mut schema);
            if let serde_json::Value::Object(o) = schema {
                route.attr.input_schema = Arc::new(o);
            }
        }
        StrataMcp {
            shared,
            fixed_grant,
            tool_router,
        }
    }

    fn grant(&self, ctx: &RequestContext<RoleServer>) -> Result<Grant, ErrorData> {
        if let Some(g) = &self.fixed_grant {
            return Ok(g.clone());
        }
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Grant>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("no credentials on this request", None))
    }

    async fn answer<F>(&self, grant: Grant, f: F) -> Result<CallToolResult, ErrorData>
    where
        F: FnOnce(Ctx<'_>) -> Result<Answer, ApiError> + Send + 'static,
    {
        Ok(answer_result(self.shared.run(grant, f).await))
    }

    /// The project calls default to: the configured one (`[server.mcp]
    /// project`, `strata mcp --project`), else the one project a token
    /// names (a token for `project/acme` and `global` works in `acme`).
    fn default_project(&self, grant: &Grant) -> Option<String> {
        if let Some(p) = &self.shared.mcp.project {
            return Some(p.clone());
        }
        let mut projects = grant
            .prefixes
            .iter()
            .flat_map(|p| p.iter())
            .filter_map(|s| s.as_str().strip_prefix("project/"));
        match (projects.next(), projects.next()) {
            (Some(p), None) => Some(p.to_string()),
            _ => None,
        }
    }

    /// The scope a write without one goes to: the default project, else
    /// the configured session, else the token's one scope besides
    /// `global`.
    fn default_scope(&self, grant: &Grant) -> Option<String> {
        if let Some(p) = self.default_project(grant) {
            return Some(format!("project/{p}"));
        }
        if let Some(s) = &self.shared.mcp.session {
            return Some(format!("session/{s}"));
        }
        let mut own = grant
            .prefixes
            .iter()
            .flat_map(|p| p.iter())
            .filter(|s| s.as_str() != "global");
        match (own.next(), own.next()) {
            (Some(s), None) => Some(s.to_string()),
            _ => None,
        }
    }

    /// The view reads without one see: the default project's subtree, the
    /// configured session and `global`; with neither configured nor a
    /// project in the token, every scope the token names (each with what
    /// is below it).
    fn default_view(&self, grant: &Grant) -> Vec<String> {
        let d = &self.shared.mcp;
        let mut v = Vec::new();
        if let Some(p) = self.default_project(grant) {
            v.push(format!("project/{p}/**"));
        }
        if let Some(s) = &d.session {
            v.push(format!("session/{s}"));
        }
        if !v.is_empty() {
            v.push("global".into());
            return v;
        }
        grant
            .prefixes
            .iter()
            .flat_map(|p| p.iter())
            .map(|s| format!("{s}/**"))
            .collect()
    }
}

/// What a model needs to know of a field, where the HTTP body's doc says
/// more (`(tool, field, doc)`; tool `*` for every tool, an empty doc for a
/// field whose name says it all). The HTTP API's reference keeps the rest.
const FIELD_DOCS: &[(&str, &str, &str)] = &[
    ("*", "verbose", ""),
    ("*", "id", "The memory's id, or a prefix naming only it"),
    ("*", "view", "Scopes; `p/**` is a subtree"),
    ("*", "filter", "Conditions, e.g. `{\"kind\": \"decision\"}`"),
    ("*", "confirm", "Needed to reach `global`"),
    ("*", "dry_run", "Write nothing"),
    ("*", "limit", ""),
    ("*", "offset", ""),
    ("*", "content", ""),
    ("*", "tags", ""),
    ("*", "pinned", "Never evicted"),
    ("*", "importance", "0–1"),
    ("*", "modified", ""),
    ("*", "path", "`people/ana.md`"),
    ("*", "text", ""),
    ("*", "history", ""),
    ("*", "role", "`user`, `assistant`, `system` or `tool`"),
    ("*", "source", ""),
    ("*", "payload", "A JSON object"),
    ("*", "ttl", "Time to live: `90s`, `12h`, `7d`"),
    (
        "remember",
        "scope",
        "`project/acme`, `task/t-42`, `global`, …",
    ),
    (
        "remember",
        "kind",
        "`decision`, `preference`, `fact`, … or any word",
    ),
    ("remember", "key", "The same (scope, key) again supersedes"),
    ("remember", "sensitive", "Kept out of contexts and exports"),
    ("remember", "session", ""),
    ("recall", "query", ""),
    (
        "recall",
        "min_relevance",
        "Relevance floor 0–1 (default 0.3; 0 keeps every match)",
    ),
    ("recall", "as_of", "What was true then (RFC 3339 or a date)"),
    ("recall", "archived", "Include archived and cold memories"),
    (
        "recall",
        "strategy",
        "`hybrid` (default), `relevance`, `recency` or `importance`",
    ),
    ("recall", "touch", ""),
    ("recall", "explain", ""),
    (
        "list",
        "order",
        "`recency` (default), `oldest` or `importance`",
    ),
    ("list", "archived", "List the archive"),
    ("update", "expected_version", "`v<n>` in lines, else 1"),
    ("update", "kind", ""),
    ("update", "sensitive", ""),
    ("context", "query", "What the task is about"),
    ("context", "profile", "Profile id (default `global`)"),
    ("context", "render", "`markdown`, `messages` or `json`"),
    ("context", "project", ""),
    ("context", "task", ""),
    ("context", "session", ""),
    ("context", "agent", ""),
    ("context", "sprint", ""),
    ("context", "stage", ""),
    ("context", "vars", "Other `{placeholders}`"),
    ("context", "log", "Keep the package for replay"),
    ("context", "max_tokens", ""),
    ("forget", "before", "A time (RFC 3339 or a date)"),
    ("forget", "scope", "This scope and all below it"),
    ("forget", "session", ""),
    ("forget", "ids", ""),
    ("forget", "force", "Pinned memories too"),
    ("promote", "to", "The scope to copy it into"),
    ("session", "limit", ""),
    ("session", "id", "Default: the configured session"),
    ("session", "action", "`turns` or `compact`"),
    (
        "learned",
        "action",
        "`list`, `show`, `confirm`, `reject` or `run`",
    ),
    ("learned", "id", ""),
    ("audit", "action", "`query` (default) or `verify`"),
    ("audit", "scope", "Only entries touching this scope"),
    ("audit", "since", "RFC 3339 or a date"),
    ("audit", "until", "RFC 3339 or a date"),
    ("audit", "actor", ""),
    ("audit", "op", ""),
    ("audit", "before_seq", ""),
    ("import_from", "name", ""),
    ("import_from", "scope", "Default: per format"),
    ("import_from", "files", "For `markdown`: `[{path, text}]`"),
    ("import_from", "from", ""),
];

/// Puts [`FIELD_DOCS`] into a tool's schema and the types it defines.
fn field_docs(tool: &str, schema: &mut serde_json::Value) {
    if let Some(defs) = schema
        .get_mut("$defs")
        .and_then(serde_json::Value::as_object_mut)
    {
        for def in defs.values_mut() {
            if let Some(d) = def.as_object_mut() {
                d.remove("description");
            }
            field_docs(tool, def);
        }
    }
    let Some(props) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    for (field, v) in props.iter_mut() {
        let Some(field_schema) = v.as_object_mut() else {
            continue;
        };
        let doc = FIELD_DOCS
            .iter()
            .find(|(t, f, _)| *t == tool && f == field)
            .or_else(|| FIELD_DOCS.iter().find(|(t, f, _)| *t == "*" && f == field));
        match doc {
            Some((_, _, "")) => {
                field_schema.remove("description");
            }
            Some((_, _, d)) => {
                field_schema.insert("description".into(), (*d).into());
            }
            None => {}
        }
    }
}

/// Leaves out of a tool's input schema what a model does not need and
/// every agent session pays for in tokens (the list is sent on every
/// call): titles, the schema dialect, number formats, defaults that mean
/// "absent", and `null` as an alternative type (a field that may be left
/// out is already not `required`). What a field means and which values it
/// takes stay.
fn lean_schema(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            o.remove("$schema");
            o.remove("title");
            o.remove("format");
            if o.get("minimum") == Some(&Value::from(0)) {
                o.remove("minimum");
            }
            if o.get("additionalProperties") == Some(&Value::Bool(false)) {
                o.remove("additionalProperties");
            }
            if let Some(Value::String(d)) = o.get_mut("description") {
                *d = d.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            // Defaults that mean "absent": null, false, "", [], {}.
            if o.get("default").is_some_and(|d| {
                matches!(d, Value::Null | Value::Bool(false))
                    || d.as_str() == Some("")
                    || d.as_array().is_some_and(Vec::is_empty)
                    || d.as_object().is_some_and(serde_json::Map::is_empty)
            }) {
                o.remove("default");
            }
            if let Some(Value::Array(types)) = o.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let one = types.remove(0);
                    o.insert("type".into(), one);
                }
            }
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(alts)) = o.get_mut(key) {
                    alts.retain(|a| a.get("type").is_none_or(|t| t != "null"));
                    if alts.len() == 1
                        && let Some(Value::Object(one)) = alts.pop()
                    {
                        o.remove(key);
                        for (k, val) in one {
                            o.entry(k).or_insert(val);
                        }
                    }
                }
            }
            for child in o.values_mut() {
                lean_schema(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(lean_schema),
        _ => {}
    }
}

/// An operation's answer as a tool result. Errors are tool results, not
/// protocol errors, so the model reads what was wrong and can correct the
/// call.
fn tool_result<T: Serialize>(out: Result<T, ApiError>) -> CallToolResult {
    match out {
        Ok(v) => CallToolResult::success(vec![ContentBlock::text(
            serde_json::to_string(&v).unwrap_or_default(),
        )]),
        Err(e) => error_result(e),
    }
}

/// A compact answer (text, see `compact.rs`) as a tool result.
fn text_result(out: Result<String, ApiError>) -> CallToolResult {
    match out {
        Ok(t) => CallToolResult::success(vec![ContentBlock::text(t)]),
        Err(e) => error_result(e),
    }
}

fn error_result(e: ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(
        serde_json::to_string(&e.body()).unwrap_or_default(),
    )])
}

/// The compact text, or the full JSON under `verbose`.
enum Answer {
    Text(String),
    Json(serde_json::Value),
}

fn answer_result(out: Result<Answer, ApiError>) -> CallToolResult {
    match out {
        Ok(Answer::Text(t)) => text_result(Ok(t)),
        Ok(Answer::Json(v)) => tool_result(Ok(v)),
        Err(e) => error_result(e),
    }
}

fn json<T: Serialize>(v: T) -> Result<Answer, ApiError> {
    serde_json::to_value(v)
        .map(Answer::Json)
        .map_err(|e| ApiError::internal(format!("answer: {e}")))
}

#[tool_router]
impl StrataMcp {
    #[tool(
        description = "Store a memory (a decision, finding, preference, fact…). `scope` defaults to the configured project, else the token's one scope. Answers with its id."
    )]
    async fn remember(
        &self,
        Parameters(args): Parameters<Verbose<RememberBody>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let (mut b, verbose) = (args.body, args.verbose);
        if b.scope.is_none() {
            b.scope = self.default_scope(&grant);
        }
        if b.session.is_none() {
            b.session = self.shared.mcp.session.clone();
        }
        let write = move |c: Ctx<'_>| {
            let m = c.remember(&b)?;
            if verbose {
                json(m)
            } else {
                Ok(Answer::Text(compact::written("remembered", &m)))
            }
        };
        Ok(answer_result(self.shared.run_write(grant, write).await))
    }

    #[tool(
        description = "Find memories relevant to `query`, best first; only those reaching `min_relevance` come back. `view` defaults to the configured project (or the token's scopes) and global. Lines: `- <id> <kind> <date> <score> [v<n>]: <content>`."
    )]
    async fn recall(
        &self,
        Parameters(args): Parameters<Verbose<RecallBody>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let (mut b, verbose) = (args.body, args.verbose);
        if b.view.is_empty() {
            b.view = self.default_view(&grant);
        }
        let light = b.is_light();
        let timed = self.shared.clone();
        let recall = move |c: crate::ops::Ctx<'_>| {
            let hits = timed.metrics.time_recall(|| c.recall(&b))?;
            if verbose {
                return json(serde_json::json!({ "results": hits }));
            }
            let floor = b
                .min_relevance
                .unwrap_or(c.engine.config().ranking.min_relevance);
            compact::recall(&c, &hits, &b.view, &b.query, floor).map(Answer::Text)
        };
        let out = if light {
            self.shared.run_recall(grant, recall).await
        } else {
            self.shared.run(grant, recall).await
        };
        Ok(answer_result(out))
    }

    #[tool(description = "Recent memories of a view, newest first; `view` defaults as for recall.")]
    async fn list(
        &self,
        Parameters(mut a): Parameters<ListArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        if a.view.is_empty() {
            a.view = self.default_view(&grant);
        }
        self.answer(grant, move |c| {
            let listed = c.list(&a.body())?;
            if a.verbose {
                json(listed)
            } else {
                Ok(Answer::Text(compact::list(&listed, &a.view)))
            }
        })
        .await
    }

    #[tool(
        description = "A session's last memories (`turns`, the default), or `compact`: its oldest summarised into one memory and archived."
    )]
    async fn session(
        &self,
        Parameters(a): Parameters<SessionArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let id = a.id.clone().or_else(|| self.shared.mcp.session.clone());
        self.answer(grant, move |c| {
            let id = id.ok_or_else(|| {
                ApiError::invalid(
                    "id",
                    "no session named, and none configured (`strata mcp --session S`)",
                )
            })?;
            match a.action.as_deref().unwrap_or("turns") {
                "turns" => {
                    let turns = c.last_turns(&id, a.limit.unwrap_or(20))?;
                    if a.verbose {
                        return json(turns);
                    }
                    let scope = c
                        .engine
                        .get_session(&id)?
                        .map(|s| s.scope.to_string())
                        .unwrap_or_default();
                    let listed = ListAnswer {
                        memories: turns
                            .into_iter()
                            .map(|memory| MemoryAnswer {
                                memory,
                                archived: None,
                                history: None,
                            })
                            .collect(),
                    };
                    Ok(Answer::Text(compact::list(&listed, &[scope])))
                }
                "compact" => {
                    let r = c.compact_session(&id)?;
                    if a.verbose {
                        return json(r);
                    }
                    Ok(Answer::Text(format!(
                        "compacted {} memories of session {} into {} summaries ({} → {} bytes)",
                        r.compacted,
                        r.session,
                        r.summaries.len(),
                        r.bytes_before,
                        r.bytes_after
                    )))
                }
                other => Err(ApiError::invalid(
                    "action",
                    format!("`{other}` is not one of turns, compact"),
                )),
            }
        })
        .await
    }

    #[tool(
        description = "The context for a task as markdown within a token budget: the profile's sources ranked by `query`. `project` defaults as for remember."
    )]
    async fn context(
        &self,
        Parameters(args): Parameters<Verbose<ContextBody>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let (mut b, verbose) = (args.body, args.verbose);
        if b.project.is_none() {
            b.project = self.default_project(&grant);
        }
        if b.session.is_none() {
            b.session = self.shared.mcp.session.clone();
        }
        self.answer(grant, move |c| {
            let a = c.context(&b)?;
            if verbose {
                json(a)
            } else {
                Ok(Answer::Text(compact::context(&a.package, &a.text, b.log)))
            }
        })
        .await
    }

    #[tool(
        description = "Change a memory read at `expected_version`; if it changed since, nothing changes and the answer says so."
    )]
    async fn update(
        &self,
        Parameters(a): Parameters<UpdateArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.answer(grant, move |c| {
            let m = c.update(&a.id, &a.patch())?;
            if a.verbose {
                json(m)
            } else {
                Ok(Answer::Text(compact::written("updated", &m)))
            }
        })
        .await
    }

    #[tool(
        description = "Delete memories everywhere: exactly one of `ids`, `filter` or `before` (with `view`), `session`, `scope`."
    )]
    async fn forget(
        &self,
        Parameters(args): Parameters<Verbose<ForgetBody>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let (b, verbose) = (args.body, args.verbose);
        self.answer(grant, move |c| {
            let r = c.forget(&b)?;
            if verbose {
                json(r)
            } else {
                Ok(Answer::Text(compact::forget(&r)))
            }
        })
        .await
    }

    #[tool(description = "Copy a memory into another scope (a new id that records its origin).")]
    async fn promote(
        &self,
        Parameters(args): Parameters<Verbose<PromoteBody>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let (b, verbose) = (args.body, args.verbose);
        self.answer(grant, move |c| {
            let m = c.promote(&b)?;
            if verbose {
                json(m)
            } else {
                Ok(Answer::Text(compact::written("promoted to", &m)))
            }
        })
        .await
    }

    #[tool(description = "The scopes that hold memories you may see, with counts.")]
    async fn list_scopes(
        &self,
        Parameters(args): Parameters<Verbose<NoArgs>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.answer(grant, move |c| {
            let s = c.scopes()?;
            if args.verbose {
                json(serde_json::json!({ "scopes": s }))
            } else {
                Ok(Answer::Text(compact::scopes(&s)))
            }
        })
        .await
    }

    #[tool(description = "One memory by id; `history` adds its earlier versions.")]
    async fn get(
        &self,
        Parameters(b): Parameters<GetArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.answer(grant, move |c| {
            let a = c.get(&b.id, b.history)?;
            if b.verbose {
                json(a)
            } else {
                Ok(Answer::Text(compact::memory(&a)))
            }
        })
        .await
    }

    #[tool(
        description = "What strata learned (preferences, facts, repeated failures, topics), to list, show, confirm or reject."
    )]
    async fn learned(
        &self,
        Parameters(mut a): Parameters<LearnedArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        if a.view.is_empty() {
            a.view = self.default_view(&grant);
        }
        self.answer(grant, move |c| {
            let id = || {
                a.id.clone().ok_or_else(|| {
                    ApiError::invalid("id", "show, confirm and reject name a learned memory")
                })
            };
            match a.action.as_deref().unwrap_or("list") {
                "list" => {
                    let l = c.learned_list(&LearnedListBody {
                        view: a.view.clone(),
                    })?;
                    Ok(Answer::Text(learned::text(&l.learned)))
                }
                "show" => {
                    let one = c.learned_show(&id()?)?;
                    Ok(Answer::Text(learned::text(&[one])))
                }
                "confirm" => {
                    let m = c.learned_confirm(&id()?)?;
                    Ok(Answer::Text(compact::written("confirmed", &m)))
                }
                "reject" => {
                    let m = c.learned_reject(&id()?)?;
                    Ok(Answer::Text(format!(
                        "rejected {} (archived; its evidence will not teach it again)",
                        m.id
                    )))
                }
                "run" => json(c.learned_run()?),
                other => Err(ApiError::invalid(
                    "action",
                    format!("`{other}` is not one of list, show, confirm, reject, run"),
                )),
            }
        })
        .await
    }

    #[tool(
        description = "The audit trail (admin): who called what, when, on which scopes; `verify` checks its hash chain."
    )]
    async fn audit(
        &self,
        Parameters(a): Parameters<AuditArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.answer(grant, move |c| {
            match a.action.as_deref().unwrap_or("query") {
                "query" => Ok(Answer::Text(crate::audit::text(&c.audit(&a)?))),
                "verify" => json(c.audit_verify()?),
                other => Err(ApiError::invalid(
                    "action",
                    format!("`{other}` is not one of query, verify"),
                )),
            }
        })
        .await
    }

    #[tool(
        description = "Import another tool's export: `from` `mcp-memory`, `chatgpt`, `claude`, `mem0` (with `text`) or `markdown` (with `files`)."
    )]
    async fn import_from(
        &self,
        Parameters(args): Parameters<Verbose<ImportFromBody>>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let verbose = args.verbose;
        self.answer(grant, move |c| {
            let r = c.import_from(&args.body)?;
            if verbose {
                json(r)
            } else {
                Ok(Answer::Text(foreign::text(&r)))
            }
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for StrataMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("strata", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}
