//! The web inspector at `/ui`: server-rendered pages over the same
//! operations ([`crate::ops`]) and scoped tokens as the API.
//!
//! Sign-in exchanges a token (or a one-time code from `strata ui`) for a
//! session: a random id in an `HttpOnly`, `SameSite=Strict` cookie, mapped
//! here to the token's [`Grant`] and a CSRF token. The token itself never
//! travels again, and never in a URL. Every answer carries a strict
//! Content-Security-Policy (no inline script or style; the one script and
//! stylesheet are embedded in the binary), and every `POST` must carry the
//! session's CSRF token in its form, else it is refused before anything is
//! read from the store. Pages are in [`pages`], the HTML builder in
//! [`html`]; this module owns sessions, sign-in and the checks.

mod html;
mod pages;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};

use crate::Shared;
use crate::auth::Grant;
use crate::error::ApiError;

/// How long a session lives without a request.
const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// How long a one-time login code from `strata ui` stays valid.
const CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// At most this many sessions at once.
const MAX_SESSIONS: usize = 10_000;
/// The session cookie's name.
const COOKIE: &str = "strata_ui";
/// The policy of every `/ui` answer: nothing but this server's own script
/// and stylesheet, no frames, forms only to this server.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// Signed-in browsers and pending one-time login codes.
#[derive(Default)]
pub struct Inspector {
    sessions: Mutex<HashMap<String, Session>>,
    codes: Mutex<HashMap<String, (Grant, Instant)>>,
}

/// Counts only: the ids and codes are secrets.
impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("sessions", &self.sessions.lock().map_or(0, |m| m.len()))
            .field("codes", &self.codes.lock().map_or(0, |m| m.len()))
            .finish()
    }
}

/// One signed-in browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// What its token may see and do (as the token table says now: read
    /// again on every request).
    pub grant: Grant,
    /// The SHA-256 of the token it signed in with; `None` for a one-time
    /// code of `strata ui` or a server without tokens. A token revoked or
    /// expired since ends the session at its next request.
    token: Option<[u8; 32]>,
    /// The token every form of this session carries.
    pub csrf: String,
    last_seen: Instant,
}

impl Inspector {
    /// A one-time code that signs a browser in with `grant` at
    /// `/ui/login/{code}` (once, within ten minutes).
    pub fn login_code(&self, grant: Grant) -> String {
        let code = random();
        let mut codes = self.codes.lock().expect("codes lock");
        codes.retain(|_, (_, at)| at.elapsed() < CODE_TTL);
        codes.insert(code.clone(), (grant, Instant::now()));
        code
    }

    fn redeem(&self, code: &str) -> Option<Grant> {
        let (grant, at) = self.codes.lock().expect("codes lock").remove(code)?;
        (at.elapsed() < CODE_TTL).then_some(grant)
    }

    /// A new session for `grant` (of the token filed under `token`);
    /// returns its id.
    fn open(&self, grant: Grant, token: Option<[u8; 32]>) -> String {
        let id = random();
        let mut all = self.sessions.lock().expect("sessions lock");
        all.retain(|_, s| s.last_seen.elapsed() < SESSION_IDLE);
        // Bounded: past the cap, the least recently used session ends.
        if all.len() >= MAX_SESSIONS
            && let Some(oldest) = all
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(id, _)| id.clone())
        {
            all.remove(&oldest);
        }
        all.insert(
            id.clone(),
            Session {
                grant,
                token,
                csrf: random(),
                last_seen: Instant::now(),
            },
        );
        id
    }

    fn find(&self, id: &str) -> Option<Session> {
        let mut all = self.sessions.lock().expect("sessions lock");
        let s = all.get_mut(id)?;
        if s.last_seen.elapsed() >= SESSION_IDLE {
            all.remove(id);
            return None;
        }
        s.last_seen = Instant::now();
        Some(s.clone())
    }

    fn close(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(id);
    }
}

/// 244 random bits as 64 hex digits (two UUIDv4s).
fn random() -> String {
    crate::auth::new_token()
        .trim_start_matches("strata_")
        .to_string()
}

/// The inspector's routes; [`crate::router`] merges them.
pub(crate) fn routes(shared: Arc<Shared>) -> Router<Arc<Shared>> {
    let behind_sign_in = Router::new()
        .route("/ui", get(pages::scopes))
        .route("/ui/search", get(pages::search))
        .route("/ui/memory/{id}", get(pages::memory))
        .route("/ui/memory/{id}/edit", post(pages::edit))
        .route("/ui/memory/{id}/pin", post(pages::pin))
        .route("/ui/memory/{id}/promote", post(pages::promote))
        .route(
            "/ui/memory/{id}/forget",
            get(pages::confirm_forget).post(pages::forget),
        )
        .route("/ui/context", get(pages::context))
        .route("/ui/sessions", get(pages::sessions))
        .route("/ui/learned", get(pages::learned))
        .route("/ui/learned/{id}", get(pages::learned_one))
        .route("/ui/learned/{id}/confirm", post(pages::learned_confirm))
        .route("/ui/learned/{id}/reject", post(pages::learned_reject))
        .route("/ui/export", get(pages::export_form))
        .route("/ui/export.jsonl", get(pages::export))
        .route("/ui/import", get(pages::import_form).post(pages::import))
        .route("/ui/logout", post(logout))
        .layer(middleware::from_fn_with_state(shared.clone(), signed_in));
    Router::new()
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/login/{code}", get(login_code))
        .route("/ui/assets/ui.css", get(css))
        .route("/ui/assets/ui.js", get(js))
        .route("/ui/{*rest}", any(no_such_page))
        .merge(behind_sign_in)
        .layer(middleware::from_fn_with_state(shared, front))
}

/// A path under `/ui` that is no page: a page saying so, not the API's
/// JSON.
async fn no_such_page(uri: axum::http::Uri) -> Response {
    error_page(
        None,
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no page at {}", uri.path()),
        ),
    )
}

/// Every `/ui` answer: the `Host` (and `Origin`) checks of the API, then
/// the security headers.
async fn front(State(st): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let checked = crate::http::check_host(&st.allowed_hosts, &req)
        .and_then(|()| crate::http::check_origin(&st.allowed_hosts, &req));
    let mut resp = match checked {
        Ok(()) => next.run(req).await,
        Err(e) => error_page(None, e),
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it a browser sends `Origin: null` with the
    // page's own forms, which the origin check must refuse.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

/// The form fields of a `POST`, read and checked by [`signed_in`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Fields(Vec<(String, String)>);

impl Fields {
    /// The last value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Pages need a session: without one, a page redirects to sign-in and a
/// `POST` is refused. A `POST` must be a form carrying the session's CSRF
/// token; its fields are then handed on as [`Fields`].
async fn signed_in(State(st): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let id = cookie(req.headers());
    let mut sess = id.as_deref().and_then(|id| st.inspector.find(id));
    // The token's grant as configured now: revoked or expired, the session
    // ends; changed, the session follows.
    if let (Some(s), Some(table)) = (&mut sess, &st.tokens)
        && let Some(digest) = s.token
    {
        let tokens = table.current();
        match tokens.entry_by_digest(&digest) {
            Some(e) if e.expires_at.is_none_or(|at| at > jiff::Timestamp::now()) => {
                s.grant = e.grant.clone();
                // The token's rate, in the same bucket as its API calls:
                // signing in to the inspector is no way around it.
                let name = e.grant.name.as_deref().unwrap_or_default();
                if let Some(per_minute) = e.rate_limit_per_minute
                    && let Err(wait) = st.usage.admit(name, per_minute, std::time::Instant::now())
                {
                    return error_page(Some(s), ApiError::rate_limited(name, per_minute, wait));
                }
                st.usage.used(name, jiff::Timestamp::now());
            }
            _ => {
                if let Some(id) = &id {
                    st.inspector.close(id);
                }
                sess = None;
            }
        }
    }
    let Some(sess) = sess else {
        if req.method() == Method::GET {
            return redirect("/ui/login");
        }
        return error_page(
            None,
            ApiError::unauthorized("not signed in (or the session expired): sign in again"),
        );
    };
    let (mut parts, body) = req.into_parts();
    if parts.method == Method::POST {
        let fields = match read_form(&st, &parts.headers, body).await {
            Ok(f) => f,
            Err(e) => return error_page(Some(&sess), e),
        };
        let sent = fields.get("csrf").unwrap_or_default();
        if !same(sent.as_bytes(), sess.csrf.as_bytes()) {
            return error_page(
                Some(&sess),
                ApiError::forbidden(
                    "csrf: the form's CSRF token is missing or wrong; reload the page and try again",
                )
                .with_field("csrf"),
            );
        }
        parts.extensions.insert(fields);
        parts.extensions.insert(sess);
        return next.run(Request::from_parts(parts, Body::empty())).await;
    }
    parts.extensions.insert(sess);
    next.run(Request::from_parts(parts, body)).await
}

/// The fields of an `application/x-www-form-urlencoded` body within the
/// server's body limit.
async fn read_form(st: &Shared, headers: &HeaderMap, body: Body) -> Result<Fields, ApiError> {
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = ctype.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "content-type: `{ctype}` is not accepted here; the inspector's forms send `application/x-www-form-urlencoded`"
            ),
        )
        .with_field("content-type"));
    }
    let max = st.limits.max_body_bytes;
    let read = tokio::time::timeout(st.limits.body_timeout(), axum::body::to_bytes(body, max));
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            return Err(ApiError::too_large(
                Some("body"),
                format!(
                    "the form is over the server's limit of {max} bytes (`server.limits.max_body_bytes`)"
                ),
            ));
        }
        Err(_) => return Err(ApiError::invalid("body", "the form did not arrive in time")),
    };
    Ok(Fields(
        form_urlencoded::parse(&bytes)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    ))
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The session id in the request's cookie.
fn cookie(h: &HeaderMap) -> Option<String> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

fn redirect(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// Signs the browser in: the session cookie, then the scopes page.
fn signed_in_as(st: &Shared, grant: Grant, token: Option<[u8; 32]>) -> Response {
    let id = st.inspector.open(grant, token);
    let mut resp = redirect("/ui");
    let cookie = format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// An error as a page: its status, code and message, escaped.
pub(crate) fn error_page(sess: Option<&Session>, e: ApiError) -> Response {
    let body = format!(
        "<p class=\"notice error\" role=\"alert\"><strong>{}</strong> {}</p><p><a href=\"/ui\">Back to the scopes</a></p>",
        html::esc(e.code),
        html::esc(&e.message)
    );
    let title = e.status.canonical_reason().unwrap_or("Error");
    let mut resp = html::page(e.status, title, sess, &body);
    if let Some(secs) = e.retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    resp
}

async fn login_form(State(st): State<Arc<Shared>>) -> Response {
    login_page(&st, StatusCode::OK, "")
}

fn login_page(st: &Shared, status: StatusCode, note: &str) -> Response {
    let field = if st.tokens.is_some() {
        "<label>Token <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"off\" required></label>"
    } else {
        "<p>This server runs without authentication: signing in sees everything.</p>"
    };
    let body = format!(
        "{note}<form method=\"post\" action=\"/ui/login\" class=\"login\">{field}\
         <button id=\"sign-in\">Sign in</button></form>\
         <p class=\"hint\">Use a token from <code>strata token new</code>; the inspector shows and changes only what it may.</p>"
    );
    html::page(status, "Sign in", None, &body)
}

/// `POST /ui/login`: a token for a session. A cross-site page cannot sign
/// a browser in: `front` refuses a foreign `Origin`, and the cookie is
/// `SameSite=Strict`.
async fn login(State(st): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    let fields = match read_form(&st, &headers, body).await {
        Ok(f) => f,
        Err(e) => return error_page(None, e),
    };
    let grant = match &st.tokens {
        None => Some((Grant::all(), None)),
        Some(table) => {
            let tokens = table.current();
            let presented = fields.get("token").map(str::trim).unwrap_or_default();
            let digest = crate::auth::Tokens::digest(presented);
            match tokens.entry_by_digest(&digest) {
                Some(e) if e.expires_at.is_some_and(|at| at <= jiff::Timestamp::now()) => {
                    return login_page(
                        &st,
                        StatusCode::UNAUTHORIZED,
                        &html::notice("error", "this token has expired: ask for a new one"),
                    );
                }
                Some(e) => Some((e.grant.clone(), Some(digest))),
                None => None,
            }
        }
    };
    match grant {
        Some((g, token)) => signed_in_as(&st, g, token),
        None => login_page(
            &st,
            StatusCode::UNAUTHORIZED,
            &html::notice("error", "unknown token: check it and try again"),
        ),
    }
}

/// `GET /ui/login/{code}`: a one-time code from `strata ui`; it works once.
async fn login_code(State(st): State<Arc<Shared>>, Path(code): Path<String>) -> Response {
    match st.inspector.redeem(&code) {
        Some(g) => signed_in_as(&st, g, None),
        None => login_page(
            &st,
            StatusCode::UNAUTHORIZED,
            &html::notice(
                "error",
                "this login link was used already or has expired; run `strata ui` again or sign in with a token",
            ),
        ),
    }
}

async fn logout(State(st): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers) {
        st.inspector.close(&id);
    }
    let mut resp = redirect("/ui/login");
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("strata_ui=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    resp
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("assets/ui.css"))
}

async fn js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/ui.js"),
    )
}

fn asset(ctype: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, ctype),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_work_once() {
        let i = Inspector::default();
        let code = i.login_code(Grant::all());
        assert_eq!(code.len(), 64);
        assert!(i.redeem(&code).is_some());
        assert!(i.redeem(&code).is_none());
        assert!(i.redeem("nope").is_none());
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; strata_ui=abc; b=2"),
        );
        assert_eq!(cookie(&h).as_deref(), Some("abc"));
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
