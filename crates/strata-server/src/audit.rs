//! The audit trail for both front ends: `GET /v1/audit` and
//! `GET /v1/audit/verify`, and the MCP tool `audit`. Reading the trail
//! shows every token's calls in every scope, so it takes an admin token
//! (or a server without authentication, or the MCP server on stdio); each
//! read is itself recorded (`audit_query`, `audit_verify`).
//!
//! What is recorded, and by whom, is `ops::Ctx::audited`'s; the chain and
//! its checks are the engine's (`strata::AuditEntry`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::ops::{Ctx, Touched};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// The filters of an audit query: `GET /v1/audit`'s query parameters and
/// the MCP tool's arguments. Every condition must hold.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditArgs {
    /// `query` (default) or `verify` (MCP only; HTTP has `/v1/audit/verify`).
    #[serde(default)]
    pub action: Option<String>,
    /// Entries recorded at or after this time (RFC 3339 or a date).
    #[serde(default)]
    pub since: Option<String>,
    /// Entries recorded before this time (RFC 3339 or a date).
    #[serde(default)]
    pub until: Option<String>,
    /// Only this actor (a token's name, `anonymous` or `local:<user>`).
    #[serde(default)]
    pub actor: Option<String>,
    /// Only this operation (`recall`, `forget`, …).
    #[serde(default)]
    pub op: Option<String>,
    /// Only entries touching this scope (at or below it, or a subtree view
    /// holding it).
    #[serde(default)]
    pub scope: Option<String>,
    /// Only entries numbered below this (paging back).
    #[serde(default)]
    pub before_seq: Option<u64>,
    /// At most this many, newest first (default 100, at most 10,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

impl AuditArgs {
    /// From `GET /v1/audit`'s query pairs: unknown parameters and bad
    /// values are 400s naming the parameter.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<AuditArgs> {
        let mut a = AuditArgs::default();
        for (k, v) in pairs {
            let v = v.clone();
            match k.as_str() {
                "since" => a.since = Some(v),
                "until" => a.until = Some(v),
                "actor" => a.actor = Some(v),
                "op" => a.op = Some(v),
                "scope" => a.scope = Some(v),
                "before_seq" => {
                    a.before_seq = Some(v.parse().map_err(|_| {
                        ApiError::invalid("before_seq", format!("`{v}` is not a whole number"))
                    })?)
                }
                "limit" => {
                    a.limit = Some(v.parse().map_err(|_| {
                        ApiError::invalid("limit", format!("`{v}` is not a whole number"))
                    })?)
                }
                other => {
                    return Err(ApiError::invalid(
                        other,
                        "unknown query parameter (known: since, until, actor, op, scope, before_seq, limit)",
                    ));
                }
            }
        }
        Ok(a)
    }

    /// The engine's query; errors name the field.
    pub fn query(&self) -> Result<strata::AuditQuery> {
        Ok(strata::AuditFilters {
            since: self.since.as_deref(),
            until: self.until.as_deref(),
            actor: self.actor.as_deref(),
            op: self.op.as_deref(),
            scope: self.scope.as_deref(),
            before_seq: self.before_seq,
            limit: self.limit,
        }
        .query()?)
    }
}

/// `GET /v1/audit`: entries, newest first.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AuditAnswer {
    /// Whether calls are being recorded now (`[audit] enabled`).
    pub enabled: bool,
    /// The entries.
    pub entries: Vec<strata::AuditEntry>,
}

impl Ctx<'_> {
    fn need_admin(&self) -> Result<()> {
        if self.grant.is_admin() {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "the audit trail shows every token's calls in every scope: it needs an admin token",
            ))
        }
    }

    /// Audit entries the filters select (an admin token). A refused
    /// caller is recorded; bad filters are a 400 naming the parameter, and
    /// change nothing.
    pub fn audit(&self, a: &AuditArgs) -> Result<AuditAnswer> {
        let asked = crate::ops::asked(a.scope.iter());
        if let Err(e) = self.need_admin() {
            return Err(self.refused("audit_query", asked, e));
        }
        let q = a.query()?;
        self.audited(
            "audit_query",
            || asked,
            || {
                Ok(AuditAnswer {
                    enabled: self.engine.audit_config().enabled,
                    entries: self.engine.audit_query(&q)?,
                })
            },
            |r| Touched::read(r.entries.len()),
        )
    }

    /// Checks the chain (an admin token).
    pub fn audit_verify(&self) -> Result<strata::AuditVerify> {
        self.audited(
            "audit_verify",
            Vec::new,
            || {
                self.need_admin()?;
                Ok(self.engine.audit_verify()?)
            },
            |v| Touched::read(v.entries as usize),
        )
    }
}

/// The MCP tool's text: one line per entry.
pub fn text(a: &AuditAnswer) -> String {
    let mut out = String::new();
    if !a.enabled {
        out.push_str("(recording is off: [audit] enabled = false)\n");
    }
    if a.entries.is_empty() {
        out.push_str("no audit entries match");
    }
    for e in &a.entries {
        let ids = if e.ids.is_empty() {
            String::new()
        } else if e.ids_omitted > 0 {
            format!(" ids {} (+{} more)", e.ids.join(","), e.ids_omitted)
        } else {
            format!(" ids {}", e.ids.join(","))
        };
        out.push_str(&format!(
            "{} {} {} {} [{}] n={} {}{}\n",
            e.seq,
            e.at,
            e.actor,
            e.op,
            e.scopes.join(" "),
            e.count,
            e.outcome,
            ids
        ));
    }
    out.trim_end().to_string()
}
