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
use crate::foreign::{ImportFromBody, NoteFileBody};
use crate::learned::{LearnedAnswer, LearnedListAnswer, LearnedListBody};
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
        .route("/v1/import/foreign", post(import_from))
        .route("/v1/stats", get(stats))
        .route("/v1/scopes", get(scopes))
        .route("/v1/sessions", get(sessions).post(create_session))
        .route("/v1/sessions/{id}", get(session))
        .route("/v1/sessions/{id}/archive", post(archive_session))
        .route("/v1/sessions/{id}/turns", get(session_turns))
        .route("/v1/sessions/{id}/compact", post(compact_session))
        .route("/v1/learned/list", post(learned_list))
        .route("/v1/learned/{id}", get(learned_show))
        .route("/v1/learned/{id}/confirm", post(learned_confirm))
        .route("/v1/learned/{id}/reject", post(learned_reject))
        .route("/v1/learned/run", post(learned_run))
        .route("/v1/audit", get(audit))
        .route("/v1/audit/verify", get(audit_verify))
        .route("/metrics", get(metrics))
        .nest_service("/mcp", crate::mcp::http_service(shared.clone()))
        .layer(middleware::from_fn_with_state(shared.clone(), guard));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .merge(v1)
        .merge(crate::ui::routes(shared.clone()))
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
        description = "Layered persistent memory for AI agents. Every route but /healthz and /openapi.json needs `Authorization: Bearer <token>` unless the server runs with --no-auth. Request bodies are sent as `Content-Type: application/json` (415 otherwise); `Host`, and `Origin` when sent, must name one of the server's `allowed_hosts` (403 otherwise). Errors are `{\"error\": {\"code\", \"message\", \"field\"?}}`."
    ),
    paths(
        remember, remember_batch, get_memory, update, delete, recall, list, forget, promote,
        restore, complete_task, context, export, import, stats, scopes, sessions, create_session,
        session, archive_session, session_turns, compact_session, healthz, metrics, learned_list, learned_show, learned_confirm,
        learned_reject, learned_run, import_from, audit, audit_verify
    ),
    components(schemas(
        RememberBody, BatchBody, PatchBody, RecallBody, ListBody, ForgetBody, PromoteBody,
        RestoreBody, CompleteTaskBody, ContextBody, SessionBody, Stats, ErrorBody,
        RecallAnswer, BatchAnswer, RememberAnswer, ContextAnswer, MemoryAnswer, ListAnswer, ScopesAnswer, SessionsAnswer,
        RestoreAnswer, HealthAnswer, strata::Memory, strata::Recalled, strata::ForgetReport,
        strata::TaskReport, strata::Session, strata::Manifest, strata::ScopeCount,
        strata::ImportCounts, LearnedListBody, LearnedListAnswer, LearnedAnswer, strata::Learned,
        strata::LearnedStatus, strata::LearnReport, strata::LlmRun, ImportFromBody, NoteFileBody, strata::ForeignReport, strata::Skipped,
        crate::audit::AuditAnswer, strata::AuditEntry, strata::AuditVerify
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

/// Every protected route's (`/v1`, `/metrics`, `/mcp`) checks, in order,
/// each before any of the body is read, so a stranger costs the server
/// the request's head and nothing more:
/// - `Host` among `allowed_hosts` and `Origin`, when sent, naming one of
///   them: a web page (DNS rebinding, a cross-site form or `fetch`) cannot
///   reach a server on loopback, `--no-auth` or not;
/// - the bearer token;
/// - on `/v1` and `/metrics`, a body is JSON (JSONL for `/v1/import`) by its
///   `Content-Type`: the types a page may send without asking first
///   (`text/plain`, forms) are refused;
/// - the body, read whole within `max_body_bytes` and
///   `body_timeout_secs`. Every request is then read to its end whatever
///   the handler does with it, so hyper keeps the connection alive for the
///   client's next request (a body left unread makes it close the
///   connection, which pooled clients see as a failed request).
async fn guard(State(st): St, req: Request, next: Next) -> Response {
    match admit(&st, &req) {
        Ok(grant) => read_then(st, req, grant, next).await,
        Err(e) => {
            let unread = content_length(&req).is_some_and(|n| n > 0)
                || req.headers().contains_key(header::TRANSFER_ENCODING);
            let mut resp = e.into_response();
            if unread {
                close(&mut resp);
            }
            resp
        }
    }
}

/// Marks an answer as the connection's last. A request whose body the
/// server did not read leaves it in the connection: hyper then closes it,
/// and a client that pooled it would send its next request into a closed
/// socket. Saying so lets the client open a new one.
fn close(resp: &mut Response) {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

fn admit(st: &Shared, req: &Request) -> Result<Grant> {
    check_host(&st.allowed_hosts, req)?;
    check_origin(&st.allowed_hosts, req)?;
    let grant = authenticate(st, req)?;
    // A chunked body may turn out empty: it is checked once read.
    if content_length(req).is_some_and(|n| n > 0) {
        check_content_type(req.extensions(), req.headers())?;
    }
    let max = st.limits.max_body_bytes;
    if content_length(req).is_some_and(|n| n > max as u64) {
        return Err(body_too_large(max));
    }
    Ok(grant)
}

async fn read_then(st: Arc<Shared>, req: Request, grant: Grant, next: Next) -> Response {
    let max = st.limits.max_body_bytes;
    let (mut parts, body) = req.into_parts();
    let read = tokio::time::timeout(st.limits.body_timeout(), axum::body::to_bytes(body, max));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) if e.to_string().contains("length limit") => {
            let mut resp = body_too_large(max).into_response();
            close(&mut resp);
            return resp;
        }
        Ok(Err(e)) => {
            return ApiError::invalid("body", format!("could not read the request body: {e}"))
                .into_response();
        }
        Err(_) => {
            let mut resp = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the request body did not arrive within {} s (`server.limits.body_timeout_secs`)",
                    st.limits.body_timeout_secs
                ),
            )
            .with_field("body")
            .into_response();
            // The rest of the body may still come: the connection cannot
            // carry another request.
            close(&mut resp);
            return resp;
        }
    };
    if !bytes.is_empty()
        && let Err(e) = check_content_type(&parts.extensions, &parts.headers)
    {
        return e.into_response();
    }
    parts.extensions.insert(grant);
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn body_too_large(max: usize) -> ApiError {
    ApiError::too_large(
        Some("body"),
        format!(
            "request body is over the server's limit of {max} bytes (`server.limits.max_body_bytes`)"
        ),
    )
}

fn content_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The grant of the request's token: configured now (the table may have
/// been reloaded since the last request), not expired, within its rate.
fn authenticate(st: &Shared, req: &Request) -> Result<Grant> {
    let Some(table) = &st.tokens else {
        return Ok(Grant::all());
    };
    let tokens = table.current();
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let Some(presented) = presented else {
        return Err(ApiError::unauthorized(
            "missing token: send `Authorization: Bearer <token>` (see `strata token new`)",
        ));
    };
    let Some(entry) = tokens.entry(presented) else {
        return Err(ApiError::unauthorized("unknown token"));
    };
    let name = entry.grant.name.as_deref().unwrap_or_default();
    let now = jiff::Timestamp::now();
    if let Some(at) = entry.expires_at
        && at <= now
    {
        return Err(ApiError::unauthorized(format!(
            "token `{name}` expired at {at}"
        )));
    }
    if let Some(per_minute) = entry.rate_limit_per_minute {
        st.usage
            .admit(name, per_minute, Instant::now())
            .map_err(|wait| ApiError::rate_limited(name, per_minute, wait))?;
    }
    st.usage.used(name, now);
    Ok(entry.grant.clone())
}

/// The token of an `Authorization: Bearer <token>` value; the scheme's
/// case does not matter (RFC 7235 §2.1).
fn bearer(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The host and port of `Host` (or of an absolute request target), each
/// of which must be allowed; neither is a 403.
pub(crate) fn check_host(allowed: &[String], req: &Request) -> Result<()> {
    let refuse = |what: &str| {
        ApiError::forbidden(format!(
            "host: {what} (`server.allowed_hosts` lists the names this server answers to)"
        ))
        .with_field("host")
    };
    let header = req.headers().get(header::HOST);
    if header.is_none() && req.uri().authority().is_none() {
        return Err(refuse("no Host header"));
    }
    if let Some(h) = header {
        let text = h.to_str().unwrap_or_default().trim();
        let a = text
            .parse::<axum::http::uri::Authority>()
            .map_err(|_| refuse(&format!("`{text}` is not a host")))?;
        if a.host().is_empty() {
            return Err(refuse("empty Host header"));
        }
        if !host_allowed(allowed, a.host(), a.port_u16()) {
            return Err(refuse(&format!("`{text}` is not an allowed host")));
        }
    }
    if let Some(a) = req.uri().authority()
        && !host_allowed(allowed, a.host(), a.port_u16())
    {
        return Err(refuse(&format!("`{a}` is not an allowed host")));
    }
    Ok(())
}

/// A browser names the page that sent a request in `Origin`; only pages
/// served from an allowed host may call the API.
pub(crate) fn check_origin(allowed: &[String], req: &Request) -> Result<()> {
    let Some(v) = req.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    let text = v.to_str().unwrap_or_default().trim();
    let uri = text.parse::<axum::http::Uri>().ok();
    let parts = uri
        .as_ref()
        .and_then(|u| Some((u.scheme_str()?, u.authority()?)));
    let ok = parts.is_some_and(|(scheme, a)| {
        let port = a.port_u16().or(match scheme {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        host_allowed(allowed, a.host(), port)
    });
    if ok || allowed.is_empty() {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "origin: requests from `{text}` are refused; only pages on `server.allowed_hosts` may call this server"
    ))
    .with_field("origin"))
}

/// Whether `host` (and `port`) is one of `allowed`: entries without a port
/// match any port. An empty list allows every host.
fn host_allowed(allowed: &[String], host: &str, port: Option<u16>) -> bool {
    fn bare(h: &str) -> &str {
        h.trim_start_matches('[').trim_end_matches(']')
    }
    let host = bare(host);
    allowed.is_empty()
        || allowed.iter().any(|entry| {
            let entry = entry.trim();
            let (h, p) = match entry.parse::<axum::http::uri::Authority>() {
                Ok(a) => (a.host().to_string(), a.port_u16()),
                // `::1` is not an authority (`[::1]` is).
                Err(_) => (entry.to_string(), None),
            };
            bare(&h).eq_ignore_ascii_case(host) && p.is_none_or(|p| Some(p) == port)
        })
}

/// A body on `/v1` or `/metrics` must say it is JSON (JSONL on
/// `/v1/import`); an empty body needs no type. `/mcp` checks its own.
fn check_content_type(ext: &axum::http::Extensions, h: &axum::http::HeaderMap) -> Result<()> {
    let Some(route) = ext.get::<MatchedPath>().map(MatchedPath::as_str) else {
        return Ok(());
    };
    if route.starts_with("/mcp") {
        return Ok(());
    }
    let accepted: &[&str] = if route == "/v1/import" {
        &[
            "application/x-ndjson",
            "application/jsonl",
            "application/json",
        ]
    } else {
        &["application/json"]
    };
    let sent = h
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not text)"));
    let essence = sent.map(|t| t.split(';').next().unwrap_or_default().trim());
    if essence.is_some_and(|e| accepted.iter().any(|a| a.eq_ignore_ascii_case(e))) {
        return Ok(());
    }
    let message = format!(
        "content-type: {} is not accepted here; send `Content-Type: {}`",
        sent.map_or("a body without a Content-Type".to_string(), |t| format!(
            "`{t}`"
        )),
        accepted.join("` or `"),
    );
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        message,
    )
    .with_field("content-type"))
}

/// Every request's first and last step: records it in the metrics, by
/// route template and method (one of the standard methods, or `other`, so
/// the label set stays bounded), and in the access log when it is on.
async fn front(State(st): St, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = crate::metrics::method_label(req.method());
    // `MatchedPath` is a shared string: cloning it allocates nothing.
    let route = req.extensions().get::<MatchedPath>().cloned();
    let resp = next.run(req).await;
    let took = started.elapsed();
    let route = route.as_ref().map_or("unmatched", |p| p.as_str());
    st.metrics
        .record(method, route, resp.status().as_u16(), took);
    if st.access_log {
        access_line(method, route, &resp, took);
    }
    resp
}

/// Writes one access-log line to stderr: time, method, route template (not
/// the path, so no id or query), status, duration, body bytes (`-` for a
/// streamed answer, whose length is not known when it starts). Never a
/// header or a body.
fn access_line(method: &str, route: &str, resp: &Response, took: std::time::Duration) {
    use http_body::Body as _;
    use std::io::Write as _;
    let bytes = resp
        .body()
        .size_hint()
        .exact()
        .map_or_else(|| "-".to_string(), |n| n.to_string());
    let now = jiff::Timestamp::now();
    let now = now.round(jiff::Unit::Millisecond).unwrap_or(now);
    let _ = writeln!(
        std::io::stderr().lock(),
        "access {now} {} {route} {} {:.1}ms {bytes}",
        method,
        resp.status().as_u16(),
        took.as_secs_f64() * 1000.0
    );
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
    responses((status = 201, description = "The stored memory", body = RememberAnswer), (status = "4XX", body = ErrorBody)))]
async fn remember(State(st): St, g: G, JsonBody(b): JsonBody<RememberBody>) -> Result<Response> {
    let m = st.run_write(g.0, move |c| c.remember_reporting(&b)).await?;
    Ok(ok(StatusCode::CREATED, m))
}

/// Store many memories in one transaction.
#[utoipa::path(post, path = "/v1/memories/batch", request_body = BatchBody,
    responses((status = 201, description = "The stored memories", body = BatchAnswer), (status = "4XX", body = ErrorBody)))]
async fn remember_batch(State(st): St, g: G, JsonBody(b): JsonBody<BatchBody>) -> Result<Response> {
    let answer = run(&st, g.0, move |c| c.remember_batch(&b)).await?;
    Ok(ok(StatusCode::CREATED, answer))
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
    let m = st.run_write(g.0, move |c| c.update(&id, &b)).await?;
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
    let light = b.is_light();
    let timed = st.clone();
    let recall = move |c: Ctx<'_>| timed.metrics.time_recall(|| c.recall(&b));
    let results = if light {
        st.run_recall(g.0, recall).await?
    } else {
        st.metrics.record_recall(crate::RanOn::Pool);
        run(&st, g.0, recall).await?
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
        ("user_data" = Option<bool>, Query, description = "Everything about the view or session (the default: kept for callers that name it)"),
        ("sensitive" = Option<bool>, Query, description = "Include sensitive memories (default true: an export is a full backup)"),
        ("archived" = Option<bool>, Query, description = "Include archived memories (default true)"),
        ("history" = Option<bool>, Query, description = "Include earlier versions (default true)")),
    responses((status = 200, description = "JSONL, one memory per line", content_type = "application/x-ndjson", body = String), (status = "4XX", body = ErrorBody)))]
async fn export(State(st): St, g: G, RawQuery(q): RawQuery) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    known_params(
        &pairs,
        &[
            "view",
            "session",
            "user_data",
            "sensitive",
            "archived",
            "history",
        ],
    )?;
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
    flag(&pairs, "user_data")?;
    let part = |name: &str| -> Result<bool> {
        if pairs.iter().any(|(k, _)| k == name) {
            flag(&pairs, name)
        } else {
            Ok(true)
        }
    };
    let parts = crate::ops::ExportParts {
        sensitive: part("sensitive")?,
        archived: part("archived")?,
        history: part("history")?,
    };
    let grant = g.0;
    let ctx = Ctx {
        engine: &st.engine,
        grant: &grant,
        limits: &st.limits,
    };
    let ev = ctx.export_event(&view, session.as_deref());
    let req = ctx.export_request(&view, session, parts)?;
    Ok(export_stream(st.engine.clone(), req, ev))
}

/// The JSONL of `req`, streamed from the blocking pool as the engine
/// writes it (the API's and the inspector's export). When the export ends
/// it is recorded as `ev` (with the number of memories written, or the
/// error's code), if `[audit]` is on.
pub(crate) fn export_stream(
    engine: Arc<strata::Engine>,
    req: strata::Export,
    ev: strata::AuditEvent,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        let ev = match engine.export(&req, &mut w, &mut |_| {}) {
            Ok(report) => ev.count(report.memories as u64),
            Err(e) => {
                // Headers are sent: the stream ends early and the client
                // sees a truncated body.
                eprintln!("strata serve: export failed: {e}");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                ev.outcome(e.class().as_str())
            }
        };
        if let Err(e) = engine.audit_record(&ev) {
            eprintln!("strata serve: recording an export in the audit trail failed: {e}");
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
    resp
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
    responses((status = 200, description = "What was imported", body = strata::ImportCounts), (status = "4XX", body = ErrorBody)))]
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

/// Import another tool's memories (the MCP memory server, ChatGPT, Claude, a Markdown folder, mem0) from the file's text, or a folder's files; a second import adds nothing.
#[utoipa::path(post, path = "/v1/import/foreign", request_body = ImportFromBody,
    responses((status = 200, description = "What was imported (or would be, under `dry_run`)", body = strata::ForeignReport), (status = "4XX", body = ErrorBody)))]
async fn import_from(
    State(st): St,
    g: G,
    JsonBody(b): JsonBody<ImportFromBody>,
) -> Result<Response> {
    let r = run(&st, g.0, move |c| c.import_from(&b)).await?;
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

/// A session's last memories, oldest first: from the server's hot tier
/// when its ring is current (an ephemeral session's only copy).
#[utoipa::path(get, path = "/v1/sessions/{id}/turns", params(("id" = String, Path, description = "Session id"),
        ("limit" = Option<usize>, Query, description = "How many (default 20, at most 10000)")),
    responses((status = 200, description = "The memories", body = crate::api::TurnsAnswer), (status = "4XX", body = ErrorBody)))]
async fn session_turns(
    State(st): St,
    g: G,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    known_params(&pairs, &["limit"])?;
    let limit = match pairs.iter().find(|(k, _)| k == "limit") {
        Some((_, v)) => v
            .parse::<usize>()
            .map_err(|_| ApiError::invalid("limit", format!("`{v}` is not a whole number")))?,
        None => 20,
    };
    let memories = run(&st, g.0, move |c| c.last_turns(&id, limit)).await?;
    Ok(ok(StatusCode::OK, crate::api::TurnsAnswer { memories }))
}

/// Compact a session now: its oldest unpinned memories are summarised into
/// `summary` memories that name them and move to the archive (reason
/// `compacted`), until it holds at most `compaction.to` of its bound.
#[utoipa::path(post, path = "/v1/sessions/{id}/compact", params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "What was compacted", body = strata::Compaction), (status = "4XX", body = ErrorBody)))]
async fn compact_session(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let c = run(&st, g.0, move |c| c.compact_session(&id)).await?;
    Ok(ok(StatusCode::OK, c))
}

/// Archive a session (no more writes; its memories move to the archive).
#[utoipa::path(post, path = "/v1/sessions/{id}/archive", params(("id" = String, Path, description = "Session id")),
    responses((status = 200, description = "The session", body = strata::Session), (status = "4XX", body = ErrorBody)))]
async fn archive_session(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let s = run(&st, g.0, move |c| c.archive_session(&id)).await?;
    Ok(ok(StatusCode::OK, s))
}

/// Learned memories in a view, most confident first.
#[utoipa::path(post, path = "/v1/learned/list", request_body = LearnedListBody,
    responses((status = 200, description = "The learned memories with their records", body = LearnedListAnswer), (status = "4XX", body = ErrorBody)))]
async fn learned_list(
    State(st): St,
    g: G,
    JsonBody(b): JsonBody<LearnedListBody>,
) -> Result<Response> {
    let v = run(&st, g.0, move |c| c.learned_list(&b)).await?;
    Ok(ok(StatusCode::OK, v))
}

/// A learned memory with its record and the evidence the caller may see.
#[utoipa::path(get, path = "/v1/learned/{id}", params(("id" = String, Path, description = "Learned memory id")),
    responses((status = 200, description = "The memory, its record and evidence", body = LearnedAnswer), (status = "4XX", body = ErrorBody)))]
async fn learned_show(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let v = run(&st, g.0, move |c| c.learned_show(&id)).await?;
    Ok(ok(StatusCode::OK, v))
}

/// Confirm a learned memory: confidence 1, no decay.
#[utoipa::path(post, path = "/v1/learned/{id}/confirm", params(("id" = String, Path, description = "Learned memory id")),
    responses((status = 200, description = "The confirmed memory", body = strata::Memory), (status = "4XX", body = ErrorBody)))]
async fn learned_confirm(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let m = run(&st, g.0, move |c| c.learned_confirm(&id)).await?;
    Ok(ok(StatusCode::OK, m))
}

/// Run learning now, as upkeep does (an admin token: it reads and writes every scope).
#[utoipa::path(post, path = "/v1/learned/run",
    responses((status = 200, description = "What the run examined, learned, updated, removed, consolidated and faded", body = strata::LearnReport), (status = "4XX", body = ErrorBody)))]
async fn learned_run(State(st): St, g: G) -> Result<Response> {
    let r = run(&st, g.0, move |c| c.learned_run()).await?;
    Ok(ok(StatusCode::OK, r))
}

/// Reject a learned memory: it moves to the archive and its evidence does not teach it again.
#[utoipa::path(post, path = "/v1/learned/{id}/reject", params(("id" = String, Path, description = "Learned memory id")),
    responses((status = 200, description = "The rejected memory, as archived", body = strata::Memory), (status = "4XX", body = ErrorBody)))]
async fn learned_reject(State(st): St, g: G, Path(id): Path<String>) -> Result<Response> {
    let m = run(&st, g.0, move |c| c.learned_reject(&id)).await?;
    Ok(ok(StatusCode::OK, m))
}

/// Audit entries, newest first (an admin token): who called what, when, on which scopes, and the ids written or deleted; never content.
#[utoipa::path(get, path = "/v1/audit", params(
        ("since" = Option<String>, Query, description = "Recorded at or after (RFC 3339 or a date)"),
        ("until" = Option<String>, Query, description = "Recorded before (RFC 3339 or a date)"),
        ("actor" = Option<String>, Query, description = "A token's name, `anonymous` or `local:<user>`"),
        ("op" = Option<String>, Query, description = "An operation (`recall`, `forget`, …)"),
        ("scope" = Option<String>, Query, description = "Entries touching this scope (at or below it, or a subtree view holding it)"),
        ("before_seq" = Option<u64>, Query, description = "Entries numbered below this (paging back)"),
        ("limit" = Option<usize>, Query, description = "At most this many (default 100, at most 10000)")),
    responses((status = 200, description = "The entries", body = crate::audit::AuditAnswer), (status = "4XX", body = ErrorBody)))]
async fn audit(State(st): St, g: G, RawQuery(q): RawQuery) -> Result<Response> {
    let pairs = query_pairs(q.as_deref());
    let args = crate::audit::AuditArgs::from_pairs(&pairs)?;
    let v = run(&st, g.0, move |c| c.audit(&args)).await?;
    Ok(ok(StatusCode::OK, v))
}

/// Check the audit trail's hash chain (an admin token): the first entry changed or missing, if any.
#[utoipa::path(get, path = "/v1/audit/verify",
    responses((status = 200, description = "What the check found (`ok` false names `first_bad`)", body = strata::AuditVerify), (status = "4XX", body = ErrorBody)))]
async fn audit_verify(State(st): St, g: G, RawQuery(q): RawQuery) -> Result<Response> {
    known_params(&query_pairs(q.as_deref()), &[])?;
    let v = run(&st, g.0, |c| c.audit_verify()).await?;
    Ok(ok(StatusCode::OK, v))
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", security(()),
    responses((status = 200, description = "`{status: \"ok\"}`", body = HealthAnswer)))]
async fn healthz() -> Response {
    ok(StatusCode::OK, HealthAnswer { status: "ok" })
}

/// Prometheus metrics: requests and latency per route; store size and memories per tier only without auth or for an admin token (they count every scope).
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String), (status = "4XX", body = ErrorBody)))]
async fn metrics(State(st): St, g: G) -> Result<Response> {
    // The store's figures count every scope: a token limited to some
    // scopes sees only the request counters, unless it is an admin's.
    let stats = if g.0.is_unrestricted() || g.0.is_admin() {
        let engine = st.engine.clone();
        tokio::task::spawn_blocking(move || engine.stats())
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .ok()
    } else {
        None
    };
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
