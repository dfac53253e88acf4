//! The HTTP front end: JSON REST under `/v1`, `/openapi.json`, `/healthz`,
//! `/metrics`, and the MCP endpoint at `/mcp`, in one axum router.
//!
//! Each handler parses its body (errors name the field), takes the grant
//! the authentication layer attached, and runs one [`Ctx`] operation on the
//! blocking pool: the engine is synchronous and SQLite calls block.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Path, RawQuery, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use utoipa::OpenApi;

use crate::Shared;
use crate::api::*;
use crate::auth::Grant;
use crate::error::{ApiError, ErrorBody};
use crate::ops::{Ctx, Stats};

type Result<T, E = ApiError> = std::result::Result<T, E>;
type St = State<Arc<Shared>>;

/// The whole HTTP application over `shared`.
pub fn router(shared: Arc<Shared>) -> Router {
    let v1 = Router::new()
        .route("/v1/memories", post(remember))
        .route("/v1/memories/batch", post(remember_batch))
        .route(
            "/v1/memories/{id}",
            get(get_memory).patch(update).delete(delete),
        )
        .route("/v1/recall", post(recall))
        .route("/v1/list", post(list))
        .route("/v1/forget", post(forget))
        .route("/v1/promote", post(promote))
        .route("/v1/restore", post(restore))
        .route("/v1/tasks/{task}/complete", post(complete_task))
        .route("/v1/context", post(context))
        .route("/v1/export", get(export))
        .route("/v1/import", post(import))
        .route("/v1/stats", get(stats))
        .route("/v1/scopes", get(scopes))
        .route("/v1/sessions", get(sessions).post(create_session))
        .route("/v1/sessions/{id}", get(session))
        .route("/v1/sessions/{id}/archive", post(archive_session))
        .route("/metrics", get(metrics))
        .nest_service("/mcp", crate::mcp::http_service(shared.clone()))
        .layer(middleware::from_fn_with_state(shared.clone(), authenticate));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .merge(v1)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(shared.limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(shared.clone(), front))
        .with_state(shared)
}

/// The OpenAPI 3 document of the routes above.
pub fn openapi_doc() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "strata",
        description = "Layered persistent memory for AI agents. Every route but /healthz and /openapi.json needs `Authorization: Bearer <token>` unless the server runs with --no-auth. Errors are `{\"error\": {\"code\", \"message\", \"field\"?}}`."
    ),
    paths(
        remember, remember_batch, get_memory, update, delete, recall, list, forget, promote,
        restore, complete_task, context, export, import, stats, scopes, sessions, create_session,
        session, archive_session, healthz, metrics
    ),
    components(schemas(
        RememberBody, BatchBody, PatchBody, RecallBody, ListBody, ForgetBody, PromoteBody,
        RestoreBody, CompleteTaskBody, ContextBody, SessionBody, Stats, ErrorBody,
        RecallAnswer, BatchAnswer, ContextAnswer, MemoryAnswer, ListAnswer, ScopesAnswer, SessionsAnswer,
        RestoreAnswer, HealthAnswer, strata::Memory, strata::Recalled, strata::ForgetReport,
        strata::TaskReport, strata::Session, strata::Manifest, strata::store::ScopeCount,
        strata::store::ImportCounts
    )),
    modifiers(&Bearer)
)]
struct ApiDoc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let c = doc.components.get_or_insert_with(Default::default);
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

// ---- middleware ----

async fn authenticate(State(st): St, mut req: Request, next: Next) -> Response {
    let grant = match &st.tokens {
        None => Grant::all(),
        Some(tokens) => {
            let presented = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            let found = presented.map(|p| tokens.grant(p));
            match found {
                Some(Some(g)) => g.clone(),
                _ => {
                    return ApiError::unauthorized(if found.is_none() {
                        "missing token: send `Authorization: Bearer <token>` (see `strata token new`)"
                    } else {
                        "unknown token"
                    })
                    .into_response();
                }
            }
        }
    };
    req.extensions_mut().insert(grant);
    next.run(req).await
}

/// Every request's first and last step, one layer rather than two (each
/// layer boxes its future and clones its service per request):
/// - reads the whole body (within `max_body_bytes`) before the handler.
///   Every request is then read to its end whatever the handler does with
///   it, so hyper keeps the connection alive for the client's next request
///   (a body left unread makes it close the connection, which pooled
///   clients see as a failed request), and an oversized body is a 413 on
///   every route;
/// - records the request in the metrics, by route template.
async fn front(State(st): St, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    // `MatchedPath` is a shared string: cloning it allocates nothing.
    let route = req.extensions().get::<MatchedPath>().cloned();
    let (parts, body) = req.into_parts();
    let resp = match axum::body::to_bytes(body, st.limits.max_body_bytes).await {
        Ok(bytes) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Err(e) if e.to_string().contains("length limit") => ApiError::too_large(
            Some("body"),
            format!(
                "request body is over the server's limit of {} bytes (`server.limits.max_body_bytes`)",
                st.limits.max_body_bytes
            ),
        )
        .into_response(),
        Err(e) => ApiError::invalid("body", format!("could not read the request body: {e}"))
            .into_response(),
    };
    st.metrics.record(
        method.as_str(),
        route.as_ref().map_or("unmatched", |p| p.as_str()),
        resp.status().as_u16(),
        started.elapsed(),
    );
    resp
}

async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {method} {} (see /openapi.json)", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method} (see /openapi.json)", uri.path()),
    )
}

// ---- extractors and helpers ----

/// A JSON body whose errors are JSON: 413 over the body limit, 400 naming
/// the field for wrong types, missing or unknown fields, malformed JSON.
struct JsonBody<T>(T);

impl<T: DeserializeOwned> FromRequest<Arc<Shared>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &Arc<Shared>) -> Result<Self> {
        let bytes = read_body(req, st).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

async fn read_body(req: Request, st: &Arc<Shared>) -> Result<Bytes> {
    Bytes::from_request(req, st).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(
                Some("body"),
                format!(
                    "request body is over the server's limit of {} bytes (`server.limits.max_body_bytes`)",
                    st.limits.max_body_bytes
                ),
            )
        } else {
            ApiError::invalid("body", e.body_text())
        }
    })
}

/// Parses JSON, naming the field at fault.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    // Most bodies are fine: parse them without tracking the path, and
    // parse again, tracking it, only to say what is wrong with one.
    if let Ok(v) = serde_json::from_slice(bytes) {
        return Ok(v);
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let parsed: std::result::Result<T, _> = serde_path_to_error::deserialize(&mut *de);
    let v = match parsed {
        Ok(v) => v,
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                return Err(ApiError::invalid(
                    "body",
                    format!("malformed JSON: {inner}"),
                ));
            }
            let msg = inner.to_string();
            // Missing and unknown fields are reported at the parent; name
            // the field itself.
            let named = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.starts_with("missing field") || msg.starts_with("unknown field"));
            let field = match (path.as_str(), named) {
                (".", Some(n)) => n.to_string(),
                (p, Some(n)) if p == n || p.ends_with(&format!(".{n}")) => p.to_string(),
                (p, Some(n)) => format!("{p}.{n}"),
                (".", None) => "body".into(),
                (p, None) => p.to_string(),
            };
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            return Err(ApiError::invalid(&field, msg));
        }
    };
    de.end()
        .map_err(|e| ApiError::invalid("body", format!("malformed JSON: {e}")))?;
    Ok(v)
}

async fn run<T, F>(st: &Arc<Shared>, grant: Grant, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(Ctx<'_>) -> Result<T> + Send + 'static,
{
    st.run(grant, f).await
}

fn ok<T: serde::Serialize>(status: StatusCode, v: T) -> Response {
    // Written into one buffer sized for a typical answer (a recall of ten
    // memories is about 5 KiB), rather than one grown by doubling.
    let mut buf = Vec::with_capacity(8 * 1024);
    match serde_json::to_writer(&mut buf, &v) {
        Ok(()) => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            Bytes::from(buf),
        )
            .into_response(),
        Err(e) => ApiError::internal(format!("writing the answer: {e}")).into_response(),
    }
}

type G = axum::Extension<Grant>;

/// Query pairs, repeated keys kept (`?view=a&view=b`).
fn query_pairs(q: Option<&str>) -> Vec<(String, String)> {
    q.map(|q| {
        form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    })
    .unwrap_or_default()
}

fn flag(pairs: &[(String, String)], name: &str) -> Result<bool> {
    match pairs.iter().rev().find(|(k, _)| k == name) {
        None => Ok(false),
        Some((_, v)) => match v.as_str() {
            "" | "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            other => Err(ApiError::invalid(
                name,
                format!("`{other}` is not true or false"),
            )),
        },
    }
}

fn known_params(pairs: &[(String, String)], known: &[&str]) -> Result<()> {
    match pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => Err(ApiError::invalid(
            k,
            format!("unknown query parameter (known: {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

// ---- handlers ----

/// Store a memory.
#[utoipa::path(post, path = "/v1/memories", request_body = RememberBody,
    responses((status = 201, description = "The stored memory", body = strata::Memory), (status = "4XX", body = ErrorBody)))]
async fn remember(State(st): St, g: G, JsonBody(b): JsonBody<RememberBody>) -> Result<Response> {
    let m = run(&st, g.0, move |c| c.remember(&b)).await?;
    Ok(ok(StatusCode::CREATED, m))
}

/// Store many memories in one transaction.
#[utoipa::path(post, path = "/v1/memories/batch", request_body = BatchBody,
    responses((status = 201, description = "The stored memories", body = BatchAnswer), (status = "4XX", body = ErrorBody)))]
async fn remember_batch(State(st): St, g: G, JsonBody(b): JsonBody<BatchBody>) -> Result<Response> {
    let memories = run(&st, g.0, move |c| c.remember_batch(&b)).await?;
    Ok(ok(StatusCode::CREATED, BatchAnswer { memories }))
}

/// One memory (active or archived); `?history=true` adds earlier versions.
#[utoipa::path(get, path = "/v1/memories/{id}", params(("id" = String, Path, description = "Memory id"), ("history" = Option<bool>, Query, description = "Include earlier versions")),
    responses((status = 200, description = "The memory", body = MemoryAnswer), (status = "4XX", body = ErrorBody)))]
async fn get_memory(
    State(st): St,
    g: G,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    known_params(&pairs, &["history"])?;
    let history = flag(&pairs, "history")?;
    let v = run(&st, g.0, move |c| c.get(&id, history)).await?;
    Ok(ok(StatusCode::OK, v))
}

/// Change a memory (compare-and-swap on `expected_version`; 409 on conflict).
#[utoipa::path(patch, path = "/v1/memories/{id}", request_body = PatchBody, params(("id" = String, Path, description = "Memory id")),
    responses((status = 200, description = "The memory after the change", body = strata::Memory), (status = "4XX", body = ErrorBody)))]
async fn update(
    State(st): St,
    g: G,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<PatchBody>,
) -> Result<Response> {
    let m = run(&st, g.0, move |c| c.update(&id, &b)).await?;
    Ok(ok(StatusCode::OK, m))
}

/// Delete a memory everywhere (row, index, archive, history).
#[utoipa::path(delete, path = "/v1/memories/{id}", params(("id" = String, Path, description = "Memory id"), ("confirm" = Option<bool>, Query, description = "Confirms deleting a global memory")),
    responses((status = 200, description = "What was deleted", body = strata::ForgetReport), (status = "4XX", body = ErrorBody)))]
async fn delete(
    State(st): St,
    g: G,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    known_params(&pairs, &["confirm"])?;
    let yes = flag(&pairs, "confirm")?;
    let r = run(&st, g.0, move |c| c.delete(&id, yes)).await?;
    Ok(ok(StatusCode::OK, r))
}

/// Ranked memories for a query within a view.
#[utoipa::path(post, path = "/v1/recall", request_body = RecallBody,
    responses((status = 200, description = "The ranked memories", body = RecallAnswer), (status = "4XX", body = ErrorBody)))]
async fn recall(State(st): St, g: G, JsonBody(b): JsonBody<RecallBody>) -> Result<Response> {
    let results = if b.is_light() {
        st.run_recall(g.0, move |c| c.recall(&b)).await?
    } else {
        run(&st, g.0, move |c| c.recall(&b)).await?
    };
    // Written straight from the results: no JSON tree built in between.
    Ok(ok(StatusCode::OK, RecallAnswer { results }))
}

/// Memories in a view, filtered and ordered.
#[utoipa::path(post, path = "/v1/list", request_body = ListBody,
    responses((status = 200, description = "The memories", body = ListAnswer), (status = "4XX", body = ErrorBody)))]
async fn list(State(st): St, g: G, JsonBody(b): JsonBody<ListBody>) -> Result<Response> {
    let v = run(&st, g.0, move |c| c.list(&b)).await?;
    Ok(ok(StatusCode::OK, v))
}

/// Delete a selection everywhere.
#[utoipa::path(post, path = "/v1/forget", request_body = ForgetBody,
    responses((status = 200, description = "What was (or would be) deleted", body = strata::ForgetReport), (status = "4XX", body = ErrorBody)))]
async fn forget(State(st): St, g: G, JsonBody(b): JsonBody<ForgetBody>) -> Result<Response> {
    let r = run(&st, g.0, move |c| c.forget(&b)).await?;
    Ok(ok(StatusCode::OK, r))
}

/// Copy a memory into another scope (new id, provenance kept).
#[utoipa::path(post, path = "/v1/promote", request_body = PromoteBody,
    responses((status = 201, description = "The copy", body = strata::Memory), (status = "4XX", body = ErrorBody)))]
async fn promote(State(st): St, g: G, JsonBody(b): JsonBody<PromoteBody>) -> Result<Response> {
    let m = run(&st, g.0, move |c| c.promote(&b)).await?;
    Ok(ok(StatusCode::CREATED, m))
}

/// Move archived memories back into active memory.
#[utoipa::path(post, path = "/v1/restore", request_body = RestoreBody,
    responses((status = 200, description = "How many moved back", body = RestoreAnswer), (status = "4XX", body = ErrorBody)))]
async fn restore(State(st): St, g: G, JsonBody(b): JsonBody<RestoreBody>) -> Result<Response> {
    let n = run(&st, g.0, move |c| c.restore(&b.ids)).await?;
    Ok(ok(StatusCode::OK, RestoreAnswer { restored: n }))
}

/// Complete a task: promote what should survive into the project, archive the rest.
#[utoipa::path(post, path = "/v1/tasks/{task}/complete", request_body = CompleteTaskBody, params(("task" = String, Path, description = "Task name (`task/<task>`)")),
    responses((status = 200, description = "What was promoted and archived", body = strata::TaskReport), (status = "4XX", body = ErrorBody)))]
async fn complete_task(
    State(st): St,
    g: G,
    Path(task): Path<String>,
    JsonBody(b): JsonBody<CompleteTaskBody>,
) -> Result<Response> {
    let r = run(&st, g.0, move |c| c.complete_task(&task, &b)).await?;
    Ok(ok(StatusCode::OK, r))
}

/// The context for a task within a token budget: the package and its rendering as `text`.
#[utoipa::path(post, path = "/v1/context", request_body = ContextBody,
    responses((status = 200, description = "The package and its rendering as `text`", body = ContextAnswer), (status = "4XX", body = ErrorBody)))]
async fn context(State(st): St, g: G, JsonBody(b): JsonBody<ContextBody>) -> Result<Response> {
    let v = run(&st, g.0, move |c| c.context(&b)).await?;
    Ok(ok(StatusCode::OK, v))
}

/// Memories as JSONL, streamed.
#[utoipa::path(get, path = "/v1/export", params(
        ("view" = Option<Vec<String>>, Query, description = "Scopes to export (repeatable); required for tokens limited to scopes"),
        ("session" = Option<String>, Query, description = "Only this session's memories"),
        ("user_data" = Option<bool>, Query, description = "Sensitive, archived and history included")),
    responses((status = 200, description = "JSONL, one memory per line", content_type = "application/x-ndjson", body = String), (status = "4XX", body = ErrorBody)))]
async fn export(State(st): St, g: G, RawQuery(q): RawQuery) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    known_params(&pairs, &["view", "session", "user_data"])?;
    let view: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "view")
        .map(|(_, v)| v.clone())
        .collect();
    let session = pairs
        .iter()
        .rev()
        .find(|(k, _)| k == "session")
        .map(|(_, v)| v.clone());
    let user_data = flag(&pairs, "user_data")?;
    let grant = g.0;
    let req = Ctx {
        engine: &st.engine,
        grant: &grant,
        limits: &st.limits,
    }
    .export_request(&view, session, user_data)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    let engine = st.engine.clone();
    tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        if let Err(e) = engine.export(&req, &mut w, &mut |_| {}) {
            // Headers are sent: the stream ends early and the client sees a
            // truncated body.
            eprintln!("strata serve: export failed: {e}");
            let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let mut resp = Body::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(resp)
}

const CHUNK: usize = 64 << 10;

/// Sends what the engine writes to the response in 64 KiB chunks.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client went away"))
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Read JSONL (from export) into the store; all lines are checked first.
#[utoipa::path(post, path = "/v1/import", params(("on_conflict" = Option<String>, Query, description = "error (default), skip or replace")),
    request_body(content = String, content_type = "application/x-ndjson", description = "JSONL as `GET /v1/export` writes it"),
    responses((status = 200, description = "What was imported", body = strata::store::ImportCounts), (status = "4XX", body = ErrorBody)))]
async fn import(State(st): St, g: G, RawQuery(q): RawQuery, req: Request) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    known_params(&pairs, &["on_conflict"])?;
    let on_conflict = match pairs
        .iter()
        .rev()
        .find(|(k, _)| k == "on_conflict")
        .map(|(_, v)| v.as_str())
    {
        None | Some("error") => strata::OnConflict::Error,
        Some("skip") => strata::OnConflict::Skip,
        Some("replace") => strata::OnConflict::Replace,
        Some(other) => {
            return Err(ApiError::invalid(
                "on_conflict",
                format!("`{other}` is not one of error, skip, replace"),
            ));
        }
    };
    let body = read_body(req, &st).await?;
    let r = run(&st, g.0, move |c| c.import(&body, on_conflict)).await?;
    Ok(ok(StatusCode::OK, r))
}

/// Counts inside the caller's scopes (store-wide figures without auth).
#[utoipa::path(get, path = "/v1/stats",
    responses((status = 200, description = "Counts", body = Stats), (status = "4XX", body = ErrorBody)))]
async fn stats(State(st): St, g: G) -> Result<Response> {
    let s = run(&st, g.0, |c| c.stats()).await?;
    Ok(ok(StatusCode::OK, s))
}

/// Scopes in use inside the caller's scopes, with counts.
#[utoipa::path(get, path = "/v1/scopes",
    responses((status = 200, description = "Scopes with counts", body = ScopesAnswer), (status = "4XX", body = ErrorBody)))]
async fn scopes(State(st): St, g: G) -> Result<Response> {
    let s = run(&st, g.0, |c| c.scopes()).await?;
    Ok(ok(StatusCode::OK, ScopesAnswer { scopes: s }))
}

/// Sessions whose scope is inside the caller's scopes.
#[utoipa::path(get, path = "/v1/sessions",
    responses((status = 200, description = "The sessions", body = SessionsAnswer), (status = "4XX", body = ErrorBody)))]
async fn sessions(State(st): St, g: G) -> Result<Response> {
    let s = run(&st, g.0, |c| c.sessions()).await?;
    Ok(ok(StatusCode::OK, SessionsAnswer { sessions: s }))
}

/// Create a session.
#[utoipa::path(post, path = "/v1/sessions", request_body = SessionBody,
    responses((status = 201, description = "The session", body = strata::Session), (status = "4XX", body = ErrorBody)))]
async fn create_session(
    State(st): St,
    g: G,
    JsonBody(b): JsonBody<SessionBody>,
) -> Result<Response> {
    let s = run(&st, g.0, move |c| c.create_session(&b)).await?;
    Ok(ok(StatusCode::CREATED, s))
}

/// A session's manifest.
#[utoipa::path(get, path = "/v1/sessions/{id}", params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The manifest", body = strata::Manifest), (status = "4XX", body = ErrorBody)))]
async fn session(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let m = run(&st, g.0, move |c| c.session(&id)).await?;
    Ok(ok(StatusCode::OK, m))
}

/// Archive a session (no more writes; its memories move to the archive).
#[utoipa::path(post, path = "/v1/sessions/{id}/archive", params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The session", body = strata::Session), (status = "4XX", body = ErrorBody)))]
async fn archive_session(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let s = run(&st, g.0, move |c| c.archive_session(&id)).await?;
    Ok(ok(StatusCode::OK, s))
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", security(()),
    responses((status = 200, description = "`{status: \"ok\"}`", body = HealthAnswer)))]
async fn healthz() -> Response {
    ok(StatusCode::OK, HealthAnswer { status: "ok" })
}

/// Prometheus metrics: requests and latency per route, store size, memories per tier.
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String), (status = "4XX", body = ErrorBody)))]
async fn metrics(State(st): St) -> Result<Response> {
    let engine = st.engine.clone();
    let stats = tokio::task::spawn_blocking(move || engine.stats())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ok();
    let text = st.metrics.render(stats.as_ref());
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    Ok(resp)
}

async fn openapi() -> Response {
    ok(StatusCode::OK, openapi_doc())
}
