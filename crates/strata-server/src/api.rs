//! Request bodies: the HTTP JSON bodies and, with the same names, the MCP
//! tools' arguments. Each derives `ToSchema` (the OpenAPI document) and
//! `JsonSchema` (the MCP tool schemas) so both describe what the handlers
//! parse. Unknown fields are errors.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /v1/memories` and the `remember` tool.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberBody {
    /// The text to remember.
    pub content: String,
    /// Scope to store it in: `project/acme`, `task/t-42`, `global`, …
    /// (MCP: defaults to the configured project, else the session's scope).
    #[serde(default)]
    pub scope: Option<String>,
    /// `decision`, `finding`, `preference`, `convention`, `failure`,
    /// `conversation`, `fact`, … or your own word.
    #[serde(default)]
    pub kind: Option<String>,
    /// 0.0–1.0 (default from the kind).
    #[serde(default)]
    pub importance: Option<f64>,
    /// Free labels.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Writing the same (scope, key) again supersedes the earlier value.
    #[serde(default)]
    pub key: Option<String>,
    /// Structured JSON (an object).
    #[serde(default)]
    pub payload: Option<Value>,
    /// `user`, `assistant`, `system`, `tool`.
    #[serde(default)]
    #[schema(value_type = Option<strata::Role>)]
    pub role: Option<String>,
    /// `conversation`, `learned`, `external`, `system`.
    #[serde(default)]
    #[schema(value_type = Option<strata::Source>)]
    pub source: Option<String>,
    /// Session to attach to (created on first use).
    #[serde(default)]
    pub session: Option<String>,
    /// Never evicted nor bulk-deleted.
    #[serde(default)]
    pub pinned: bool,
    /// Kept out of contexts and exports unless asked.
    #[serde(default)]
    pub sensitive: bool,
    /// Time to live: `90s`, `15m`, `12h`, `7d`, `2w`.
    #[serde(default)]
    pub ttl: Option<String>,
    /// Confirms a high-risk write (a global preference).
    #[serde(default)]
    pub confirm: bool,
}

/// `POST /v1/memories/batch`: many memories in one transaction.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The memories (at most `server.limits.max_batch`).
    pub items: Vec<RememberBody>,
    /// Confirms high-risk writes.
    #[serde(default)]
    pub confirm: bool,
}

/// `PATCH /v1/memories/{id}`: compare-and-swap on the version; unset fields
/// keep their value, `null` clears a clearable one.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    /// The version the change was based on; 409 when it is not current.
    pub expected_version: u64,
    /// New content.
    #[serde(default)]
    pub content: Option<String>,
    /// New payload (`null` clears it).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Option<Value>>,
    /// New tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// New importance.
    #[serde(default)]
    pub importance: Option<f64>,
    /// New kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// New key (`null` clears it).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub key: Option<Option<String>>,
    /// Pin or unpin.
    #[serde(default)]
    pub pinned: Option<bool>,
    /// Mark or unmark sensitive.
    #[serde(default)]
    pub sensitive: Option<bool>,
    /// New expiry, RFC 3339 (`null` clears it).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Option<String>>,
}

/// A field that is present (possibly `null`) becomes `Some(_)`; an absent
/// one stays `None` through `#[serde(default)]`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// `POST /v1/recall` and the `recall` tool.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallBody {
    /// What to look for (natural language or keywords; may be empty).
    #[serde(default)]
    pub query: String,
    /// Scopes the read may see (`project/acme`, `project/acme/**` for a
    /// subtree, `global`). MCP: defaults to the configured project's
    /// subtree, its session and `global`.
    #[serde(default)]
    pub view: Vec<String>,
    /// Conditions, e.g. `{"kind": "decision", "importance": {"$gte": 0.7}}`.
    #[serde(default)]
    pub filter: Option<Value>,
    /// `recency`, `importance`, `relevance` or `hybrid` (default).
    #[serde(default)]
    pub strategy: Option<String>,
    /// Most results (default 10).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Return each result's score parts.
    #[serde(default)]
    pub explain: bool,
    /// Record the access on returned memories (default true).
    #[serde(default)]
    pub touch: Option<bool>,
    /// Search the archive too: archived memories in the store and, with
    /// the cold tier on, those in cold segments (`include_cold` is another
    /// name for it).
    #[serde(default, alias = "include_cold")]
    pub archived: bool,
    /// Relevance floor, 0–1 (default `ranking.min_relevance`, 0.3): with a
    /// query, only memories whose text match (bm25 over the best) or vector
    /// similarity reaches it are returned; 0 returns every match.
    #[serde(default)]
    pub min_relevance: Option<f64>,
    /// What was true then (RFC 3339 or a date): later memories are left
    /// out, and a keyed memory superseded since comes back as the version
    /// in effect then, with `valid_to`.
    #[serde(default)]
    pub as_of: Option<String>,
}

impl RecallBody {
    /// Whether the recall is small enough to run on the event loop's
    /// thread ([`crate::Shared::run_recall`]): a few scopes, a question
    /// rather than a document, a small filter, a page of results. Anything
    /// larger may take milliseconds and goes to the blocking pool, so that
    /// no request stalls the others (`/healthz` included).
    pub fn is_light(&self) -> bool {
        fn nodes(v: &Value) -> usize {
            match v {
                Value::Array(a) => 1 + a.iter().map(nodes).sum::<usize>(),
                Value::Object(o) => 1 + o.values().map(nodes).sum::<usize>(),
                _ => 1,
            }
        }
        self.view.len() <= 16
            && self.query.len() <= 2048
            && self.filter.as_ref().is_none_or(|f| nodes(f) <= 64)
            && self.limit.unwrap_or(10) <= 100
            && !self.archived
    }
}

/// `POST /v1/list`: memories of a view, filtered and ordered, no query.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListBody {
    /// Scopes the read may see.
    #[serde(default)]
    pub view: Vec<String>,
    /// Conditions.
    #[serde(default)]
    pub filter: Option<Value>,
    /// `recency` (default), `oldest` or `importance`.
    #[serde(default)]
    pub order: Option<String>,
    /// Most results (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Skip this many.
    #[serde(default)]
    pub offset: Option<usize>,
    /// List the archive instead.
    #[serde(default)]
    pub archived: bool,
}

/// `POST /v1/forget` and the `forget` tool: exactly one of `ids`, `filter`
/// (with `view`), `session`, `scope`, `before` (with `view`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetBody {
    /// These memories (active or archived).
    #[serde(default)]
    pub ids: Option<Vec<String>>,
    /// Scopes for `filter` or `before`.
    #[serde(default)]
    pub view: Vec<String>,
    /// Everything in `view` matching this filter.
    #[serde(default)]
    pub filter: Option<Value>,
    /// Every memory of this session.
    #[serde(default)]
    pub session: Option<String>,
    /// This scope and everything below it.
    #[serde(default)]
    pub scope: Option<String>,
    /// Everything created before this time (RFC 3339 or a date), in `view`.
    #[serde(default)]
    pub before: Option<String>,
    /// Delete pinned memories too.
    #[serde(default)]
    pub force: bool,
    /// Report what would be deleted without deleting.
    #[serde(default)]
    pub dry_run: bool,
    /// Confirms a selection that reaches global memory.
    #[serde(default)]
    pub confirm: bool,
}

/// `POST /v1/promote` and the `promote` tool.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteBody {
    /// The memory to copy.
    pub id: String,
    /// The scope to copy it into (new id, provenance kept).
    pub to: String,
    /// Confirms a copy into global memory.
    #[serde(default)]
    pub confirm: bool,
}

/// `POST /v1/restore`: archived memories back into active memory.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// Archived memory ids.
    pub ids: Vec<String>,
}

/// `POST /v1/tasks/{task}/complete`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteTaskBody {
    /// The name of the project that keeps what survives (`acme` for
    /// `project/acme`).
    pub project: String,
    /// Task memories to promote.
    #[serde(default)]
    pub promote: Vec<String>,
    /// And every task memory at or above this importance.
    #[serde(default)]
    pub min_importance: Option<f64>,
}

/// `POST /v1/context` and the `context` tool.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextBody {
    /// Profile id (`global` is built in; `none` gives an empty package).
    #[serde(default)]
    pub profile: Option<String>,
    /// Fills `{task}` in the profile's scope patterns.
    #[serde(default)]
    pub task: Option<String>,
    /// Fills `{project}` (MCP: defaults to the configured project).
    #[serde(default)]
    pub project: Option<String>,
    /// Fills `{sprint}`.
    #[serde(default)]
    pub sprint: Option<String>,
    /// Fills `{stage}`.
    #[serde(default)]
    pub stage: Option<String>,
    /// Fills `{agent}`.
    #[serde(default)]
    pub agent: Option<String>,
    /// Fills `{session}`.
    #[serde(default)]
    pub session: Option<String>,
    /// Other placeholders.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// What the task is about (ranks items under relevance and hybrid).
    #[serde(default)]
    pub query: String,
    /// `markdown`, `messages` or `json` (default: the profile's).
    #[serde(default)]
    pub render: Option<String>,
    /// Overrides the profile's token budget.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Record the package for replay.
    #[serde(default)]
    pub log: bool,
}

/// `POST /v1/sessions`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionBody {
    /// Session id (default: a fresh UUIDv7).
    #[serde(default)]
    pub id: Option<String>,
    /// Scope its memories go to (default `session/<id>`).
    #[serde(default)]
    pub scope: Option<String>,
    /// Size bound in bytes (default `memory.session_max_bytes`).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Held only in this server's hot tier: its memories never reach the
    /// store or any file, and vanish when it is archived, forgotten or the
    /// server stops (`[hot]`). It keeps its last `hot.turns` memories
    /// (a write that pushes older ones out names them in `dropped`) within
    /// `max_bytes`, and all ephemeral sessions together keep
    /// `hot.ephemeral_bytes`.
    #[serde(default)]
    pub ephemeral: bool,
}

/// `GET /v1/sessions/{id}/turns`: a session's last memories, oldest first.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TurnsAnswer {
    /// The memories.
    pub memories: Vec<strata::Memory>,
}

/// The `get` tool.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// Memory id (a unique prefix of 8 or more characters works).
    pub id: String,
    /// Include earlier versions.
    #[serde(default)]
    pub history: bool,
    /// The full record as JSON instead of the compact text.
    #[serde(default)]
    pub verbose: bool,
}

/// An MCP tool's arguments: the HTTP body of the same operation, and
/// `verbose`, which asks for the full JSON records (as the HTTP API
/// answers) instead of the compact text.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct Verbose<T> {
    /// The operation's arguments.
    #[serde(flatten)]
    pub body: T,
    /// Full JSON records instead of the compact text (larger: use it when
    /// a field the text leaves out is needed).
    #[serde(default)]
    pub verbose: bool,
}

/// Takes `verbose` out, then reads the rest as `T`, so `T`'s own
/// `deny_unknown_fields` still names a misspelt argument (serde's
/// `flatten` would let it through).
impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Verbose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Verbose<T>, D::Error> {
        use serde::de::Error as _;
        let mut map = serde_json::Map::<String, Value>::deserialize(d)?;
        let verbose = match map.remove("verbose") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "verbose: expected true or false, got {other}"
                )));
            }
        };
        let body = T::deserialize(Value::Object(map)).map_err(D::Error::custom)?;
        Ok(Verbose { body, verbose })
    }
}

/// The `update` tool: compare-and-swap on the version the caller read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateArgs {
    /// Memory id (a unique prefix of 8 or more characters works).
    pub id: String,
    /// The version the change is based on (`v<n>` in compact lines, 1 when
    /// none is shown): refused, changing nothing, when the memory changed
    /// since.
    pub expected_version: u64,
    /// New content.
    #[serde(default)]
    pub content: Option<String>,
    /// New importance, 0.0–1.0.
    #[serde(default)]
    pub importance: Option<f64>,
    /// New kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// New tags (replace the old ones).
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Pin or unpin.
    #[serde(default)]
    pub pinned: Option<bool>,
    /// Mark or unmark sensitive.
    #[serde(default)]
    pub sensitive: Option<bool>,
    /// The full record as JSON instead of the compact text.
    #[serde(default)]
    pub verbose: bool,
}

impl UpdateArgs {
    /// The HTTP body of the same change.
    pub fn patch(&self) -> PatchBody {
        PatchBody {
            expected_version: self.expected_version,
            content: self.content.clone(),
            importance: self.importance,
            kind: self.kind.clone(),
            tags: self.tags.clone(),
            pinned: self.pinned,
            sensitive: self.sensitive,
            ..PatchBody::default()
        }
    }
}

/// The `session` tool: a session's last memories, or compacting it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArgs {
    /// `turns` (the default) or `compact`.
    #[serde(default)]
    pub action: Option<String>,
    /// The session (default: the configured one).
    #[serde(default)]
    pub id: Option<String>,
    /// With `turns`: how many, the newest (default 20).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Full JSON records instead of the compact text.
    #[serde(default)]
    pub verbose: bool,
}

/// The `list` tool: recent activity (or any order) in a view, no query.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Scopes to list (`project/acme/**` for a subtree); defaults to the
    /// configured project, its session and `global`.
    #[serde(default)]
    pub view: Vec<String>,
    /// Conditions, e.g. `{"kind": "decision"}`.
    #[serde(default)]
    pub filter: Option<Value>,
    /// `recency` (newest first, the default), `oldest` or `importance`.
    #[serde(default)]
    pub order: Option<String>,
    /// Most results (default 20).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Skip this many.
    #[serde(default)]
    pub offset: Option<usize>,
    /// List the archive instead.
    #[serde(default)]
    pub archived: bool,
    /// Full JSON records instead of the compact text.
    #[serde(default)]
    pub verbose: bool,
}

impl ListArgs {
    /// The HTTP body of the same listing.
    pub fn body(&self) -> ListBody {
        ListBody {
            view: self.view.clone(),
            filter: self.filter.clone(),
            order: self.order.clone(),
            limit: Some(self.limit.unwrap_or(20)),
            offset: self.offset,
            archived: self.archived,
        }
    }
}

/// The `list_scopes` tool (no arguments).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

// ---- answers ----

/// `POST /v1/recall`: the ranked memories, best first (each a memory with
/// its `score`, `explain` when asked, `archived` when it came from the
/// archive).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RecallAnswer {
    pub results: Vec<strata::Recalled>,
}

/// `POST /v1/memories/batch`: the stored memories, in the request's order.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BatchAnswer {
    pub memories: Vec<strata::Memory>,
    /// Ids of the oldest turns ephemeral sessions let go to hold these
    /// (`hot.turns`); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// `POST /v1/memories`: the stored memory.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RememberAnswer {
    #[serde(flatten)]
    pub memory: strata::Memory,
    /// Ids of the oldest turns the memory's ephemeral session let go to
    /// hold it (`hot.turns`); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// `GET /v1/memories/{id}` (and `list` over the archive): a memory, with
/// `archived` when it sits in the archive and `history` (earlier versions,
/// oldest first) when asked for.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MemoryAnswer {
    #[serde(flatten)]
    pub memory: strata::Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived: Option<strata::ArchiveMark>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<strata::Memory>>,
}

/// `POST /v1/list`: memories in the requested order (each with `archived`
/// when listing the archive).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ListAnswer {
    pub memories: Vec<MemoryAnswer>,
}

/// `POST /v1/context`: the package and its rendering as `text` (markdown;
/// the chat messages as JSON under `render: messages`; the package as
/// JSON under `render: json`).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ContextAnswer {
    #[serde(flatten)]
    pub package: strata::ContextPackage,
    /// The package rendered for a model.
    pub text: String,
}

/// `GET /v1/scopes`: scopes in use inside the caller's scopes.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ScopesAnswer {
    pub scopes: Vec<strata::ScopeCount>,
}

/// `GET /v1/sessions`: sessions inside the caller's scopes.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SessionsAnswer {
    pub sessions: Vec<strata::Session>,
}

/// `POST /v1/restore`: how many memories moved back.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RestoreAnswer {
    pub restored: usize,
}

/// `GET /healthz`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct HealthAnswer {
    /// Always `ok`.
    pub status: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_recalls_are_light() {
        let small = RecallBody {
            query: "which database for billing?".into(),
            view: vec!["project/acme".into(), "global".into()],
            filter: Some(serde_json::json!({"kind": "decision"})),
            ..Default::default()
        };
        assert!(small.is_light());
        let heavy = [
            RecallBody {
                view: (0..17).map(|i| format!("project/p{i}")).collect(),
                ..small.clone()
            },
            RecallBody {
                query: "word ".repeat(500),
                ..small.clone()
            },
            RecallBody {
                filter: Some(serde_json::json!({"key": {"$in": (0..100).collect::<Vec<_>>()}})),
                ..small.clone()
            },
            RecallBody {
                limit: Some(101),
                ..small.clone()
            },
            RecallBody {
                archived: true,
                ..small.clone()
            },
        ];
        for h in heavy {
            assert!(!h.is_light(), "{h:?}");
        }
    }
}
