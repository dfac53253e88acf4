//! Errors of the front ends: a configuration error, and the JSON error every
//! HTTP response carries (`{"error": {"code", "message", "field"?}}`).
//!
//! Engine errors map by [`strata::ErrorClass`], so a new engine error lands
//! in the right status without a change here.
//!
//! A failure of the server or its storage never reaches the client in
//! detail: a backend's message can carry SQL, file paths or host names.
//! The answer is a generic message with a request id; the details go to the
//! server's log (stderr) under the same id.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// `[server]` (or a flag) has an invalid value; the message names the key.
#[derive(Debug, thiserror::Error)]
#[error("config: {0}")]
pub struct ConfigError(pub String);

/// An HTTP error: status, a stable code, a message naming what was wrong,
/// and the offending field when there is one.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (`invalid`, `not_found`, …).
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
    /// The request field at fault.
    pub field: Option<String>,
    /// The id under which the server logged a failure's details.
    pub request_id: Option<String>,
    /// Seconds a rate-limited client should wait (`Retry-After`).
    pub retry_after: Option<u64>,
}

/// The body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Code, message and field of an error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// `invalid`, `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `needs_confirmation`, `too_large`, `refused`, `unsupported_media_type`,
    /// `session_full`, `timeout`, `method_not_allowed`, `rate_limited`,
    /// `too_many_connections`, `storage`, `disk_full` (507),
    /// `unavailable`, `internal`: the same words as the CLI's `--json`
    /// errors and MCP tool errors.
    pub code: String,
    /// What was wrong, for a person.
    pub message: String,
    /// The request field at fault, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For a failure of the server or its storage: the id under which the
    /// server's log holds the details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            request_id: None,
            retry_after: None,
        }
    }

    /// A failure whose details must stay in the server: `detail` goes to
    /// the log under a fresh request id, the client gets `status`, `code`,
    /// a generic message and the id.
    pub fn hidden(
        status: StatusCode,
        code: &'static str,
        detail: impl std::fmt::Display,
    ) -> ApiError {
        let id = uuid::Uuid::new_v4().simple().to_string();
        eprintln!("strata serve: request {id}: {code}: {detail}");
        let what = if code == "unavailable" {
            "the storage backend is unavailable; retry later"
        } else if code == "disk_full" {
            "the disk the store writes to is full, so nothing was written; retry once space is freed"
        } else if code == "storage" {
            "the storage layer failed"
        } else {
            "the server failed"
        };
        ApiError {
            request_id: Some(id.clone()),
            ..ApiError::new(
                status,
                code,
                format!("{what} (request id {id}; the server log has the details)"),
            )
        }
    }

    /// The same error, naming the request field (or header) at fault.
    pub fn with_field(mut self, field: &str) -> ApiError {
        self.field = Some(field.into());
        self
    }

    /// 400 about one field.
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError {
            field: Some(field.into()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("{field}: {message}"),
            )
        }
    }

    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 403 for a token without write access.
    pub fn read_only() -> ApiError {
        ApiError::forbidden("this token has read access only; writes need access = \"read_write\"")
    }

    /// 403 naming the view entry (or scope) outside the token's scopes.
    pub fn outside(field: &str, what: impl std::fmt::Display) -> ApiError {
        ApiError {
            field: Some(field.into()),
            ..ApiError::forbidden(format!("{field}: `{what}` is outside this token's scopes"))
        }
    }

    /// 404 for a memory (also used when it exists outside the token's scopes).
    pub fn memory_not_found(id: &str) -> ApiError {
        ApiError::from(strata::Error::NotFound(id.into()))
    }

    /// 429 for a token over its rate limit: retry after `wait`.
    pub fn rate_limited(name: &str, per_minute: u32, wait: std::time::Duration) -> ApiError {
        // Whole seconds, rounded up, at least one (RFC 9110 §10.2.3).
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        ApiError {
            retry_after: Some(secs.max(1)),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "token `{name}` is over its limit of {per_minute} requests a minute (`rate_limit_per_minute`); retry in {} s",
                    secs.max(1)
                ),
            )
        }
    }

    /// 413.
    pub fn too_large(field: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            field: field.map(String::from),
            ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
        }
    }

    /// 500 for a failure of the server itself; `detail` is logged, not
    /// answered (see [`ApiError::hidden`]).
    pub fn internal(detail: impl std::fmt::Display) -> ApiError {
        ApiError::hidden(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }

    /// 503 while the server shuts down (nothing to hide).
    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the server is shutting down",
        )
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.into(),
                message: self.message.clone(),
                field: self.field.clone(),
                request_id: self.request_id.clone(),
            },
        }
    }
}

impl From<strata::Error> for ApiError {
    fn from(e: strata::Error) -> ApiError {
        use strata::ErrorClass as C;
        let class = e.class();
        let status = match class {
            C::Invalid => StatusCode::BAD_REQUEST,
            C::NotFound => StatusCode::NOT_FOUND,
            C::Conflict | C::NeedsConfirmation => StatusCode::CONFLICT,
            C::LimitExceeded | C::SessionFull => StatusCode::PAYLOAD_TOO_LARGE,
            C::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
            C::Refused => StatusCode::UNPROCESSABLE_ENTITY,
            C::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let code = class.as_str();
        if e.is_write_refusal() {
            // Dropped by `Shared::run_write`, which tries again: nothing
            // for the log.
            return ApiError::new(status, code, e.to_string());
        }
        if matches!(class, C::Storage | C::Unavailable | C::DiskFull) {
            return ApiError::hidden(status, code, &e);
        }
        let field = match &e {
            strata::Error::InvalidField { field, .. } => Some(field.clone()),
            strata::Error::InvalidFilter(_) => Some("filter".into()),
            strata::Error::ItemTooLarge { .. } => Some("content".into()),
            strata::Error::Refused { field, .. } => Some(field.clone()),
            strata::Error::VersionConflict { .. } => Some("expected_version".into()),
            _ => None,
        };
        // The CLI's hint (`pass --yes`) becomes the body's field.
        let message = match &e {
            strata::Error::NeedsConfirmation(what) => {
                format!("{what} needs confirmation: send \"confirm\": true")
            }
            _ => e.to_string(),
        };
        ApiError {
            status,
            code,
            message,
            field,
            request_id: None,
            retry_after: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}
