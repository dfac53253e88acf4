//! The memory model: [`Memory`], its kinds, roles and sources, and
//! [`NewMemory`], the validated input of a write.
//!
//! Owns field validation and the checksum. Does not know how memories are
//! stored or ranked.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::scope::{Scope, validate_segment};

/// Largest number of tags on one memory.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 64;
/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// Longest id, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// What a memory is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// A turn of a conversation.
    Conversation,
    /// A decision with its options, choice and reasoning.
    Decision,
    /// Something found out.
    Finding,
    /// A stated preference (usually keyed).
    Preference,
    /// A project convention.
    Convention,
    /// Something that failed, with its signature.
    Failure,
    /// A recurring pattern.
    Pattern,
    /// A chain of reasoning.
    Reasoning,
    /// Output of a tool call.
    ToolOutput,
    /// Background context.
    Context,
    /// An error seen.
    Error,
    /// A summary of other memories.
    Summary,
    /// A memory stored without a kind: ranked as neutral (weight 1), since
    /// the writer said nothing about its value.
    Note,
    /// Any other lowercase word (`[a-z][a-z0-9_-]{0,31}`).
    Custom(String),
}

impl Kind {
    /// Every built-in kind.
    pub const BUILTIN: [Kind; 13] = [
        Kind::Conversation,
        Kind::Decision,
        Kind::Finding,
        Kind::Preference,
        Kind::Convention,
        Kind::Failure,
        Kind::Pattern,
        Kind::Reasoning,
        Kind::ToolOutput,
        Kind::Context,
        Kind::Error,
        Kind::Summary,
        Kind::Note,
    ];

    /// The kind's word.
    pub fn as_str(&self) -> &str {
        match self {
            Kind::Conversation => "conversation",
            Kind::Decision => "decision",
            Kind::Finding => "finding",
            Kind::Preference => "preference",
            Kind::Convention => "convention",
            Kind::Failure => "failure",
            Kind::Pattern => "pattern",
            Kind::Reasoning => "reasoning",
            Kind::ToolOutput => "tool_output",
            Kind::Context => "context",
            Kind::Error => "error",
            Kind::Summary => "summary",
            Kind::Note => "note",
            Kind::Custom(s) => s,
        }
    }

    /// Importance given to a memory of this kind when the writer sets none.
    pub fn default_importance(&self) -> f64 {
        match self {
            Kind::Decision | Kind::Preference => 0.9,
            Kind::Failure => 0.85,
            Kind::Convention => 0.8,
            Kind::Pattern | Kind::ToolOutput | Kind::Finding => 0.7,
            Kind::Error | Kind::Summary => 0.6,
            Kind::Reasoning | Kind::Conversation | Kind::Context | Kind::Note | Kind::Custom(_) => {
                0.5
            }
        }
    }
}

impl FromStr for Kind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Kind, Error> {
        if let Some(k) = Kind::BUILTIN.iter().find(|k| k.as_str() == s) {
            return Ok(k.clone());
        }
        let mut chars = s.chars();
        let ok = s.len() <= 32
            && chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if ok {
            Ok(Kind::Custom(s.to_string()))
        } else {
            Err(Error::field(
                "kind",
                format!(
                    "`{s}` is not a kind; use one of {} or a lowercase word [a-z][a-z0-9_-]{{0,31}}",
                    Kind::BUILTIN
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

macro_rules! word_enum {
    ($(#[$m:meta])* $name:ident, $field:literal { $($(#[$vm:meta])* $v:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// The value's word.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<$name, Error> {
                match s {
                    $($s => Ok($name::$v),)+
                    _ => Err(Error::field($field, format!(
                        "`{s}` is not one of {}",
                        [$($s),+].join(", ")
                    ))),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

word_enum!(
    /// Who said a conversational memory.
    Role, "role" {
        /// The user.
        User => "user",
        /// The assistant.
        Assistant => "assistant",
        /// The system prompt.
        System => "system",
        /// A tool.
        Tool => "tool",
    }
);

word_enum!(
    /// Where a memory came from.
    Source, "source" {
        /// Said in a conversation.
        Conversation => "conversation",
        /// Derived by strata's own upkeep.
        Learned => "learned",
        /// Written by an agent or a person.
        External => "external",
        /// Written by the system (sync, promotion).
        System => "system",
    }
);

/// A vector for a memory, with the model that produced it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Embedding {
    /// The embedder's model id.
    pub model: String,
    /// The (normalised) vector.
    pub vector: Vec<f32>,
}

/// Where a memory was copied from (promotion, task completion).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Provenance {
    /// The id of the memory this was copied from.
    pub from_id: String,
    /// The scope it was copied from.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub from_scope: Scope,
    /// When the copy was made.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
}

/// One stored memory. Every field is public and serialisable; JSONL export
/// writes exactly this shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Memory {
    /// UUIDv7 assigned by the engine (imports may carry other ids).
    pub id: String,
    /// Where the memory lives.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "project/acme"))]
    pub scope: Scope,
    /// What it is.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "decision"))]
    pub kind: Kind,
    /// Who said it, for conversational memories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The text that is searched and rendered.
    pub content: String,
    /// Structured JSON (always an object when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub payload: Option<serde_json::Value>,
    /// Writing the same (scope, key) again supersedes this memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Free labels.
    #[serde(default)]
    pub tags: Vec<String>,
    /// 0.0–1.0.
    pub importance: f64,
    /// Where it came from.
    pub source: Source,
    /// The session it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// When it was first written.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When its content last changed.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
    /// When a read last returned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub last_accessed_at: Option<Timestamp>,
    /// How many reads returned it.
    #[serde(default)]
    pub access_count: u64,
    /// When it stops being visible (moved to the archive by upkeep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<Timestamp>,
    /// Never evicted nor bulk-deleted.
    #[serde(default)]
    pub pinned: bool,
    /// Never rendered into a context unless allowed; left out of exports unless asked.
    #[serde(default)]
    pub sensitive: bool,
    /// Token count of `content`, counted once with the configured tokenizer.
    pub tokens: u32,
    /// SHA-256 (hex) of content and payload.
    pub checksum: String,
    /// Starts at 1; every update adds one.
    pub version: u64,
    /// Optional vector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Embedding>,
    /// Where it was copied from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

impl Memory {
    /// Whether the memory has expired at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }

    /// Bytes the memory counts against a session bound: content plus payload.
    pub fn size_bytes(&self) -> u64 {
        (self.content.len() + self.payload.as_ref().map_or(0, |p| p.to_string().len())) as u64
    }

    /// Checks every field of a complete memory (used for imports, where the
    /// caller supplies all of them). The checksum must match the content.
    pub fn validate(&self) -> Result<(), Error> {
        validate_id(&self.id)?;
        validate_content(&self.content)?;
        validate_importance(self.importance)?;
        validate_tags(&self.tags)?;
        if let Some(k) = &self.key {
            validate_key(k)?;
        }
        if let Some(p) = &self.payload {
            validate_payload(p)?;
        }
        if let Some(s) = &self.session {
            validate_session_id(s)?;
        }
        if self.version == 0 {
            return Err(Error::field("version", "must be at least 1"));
        }
        let sum = checksum(&self.content, self.payload.as_ref());
        if sum != self.checksum {
            return Err(Error::field(
                "checksum",
                format!(
                    "`{}` does not match the content (expected `{sum}`)",
                    self.checksum
                ),
            ));
        }
        if let Some(e) = &self.embedding
            && (e.vector.is_empty() || e.vector.iter().any(|x| !x.is_finite()))
        {
            return Err(Error::field(
                "embedding",
                "vector must be non-empty and finite",
            ));
        }
        Ok(())
    }
}

/// SHA-256 (lowercase hex) of the content and the canonical payload JSON.
pub fn checksum(content: &str, payload: Option<&serde_json::Value>) -> String {
    let mut h = Sha256::new();
    h.update(content.as_bytes());
    h.update([0u8]);
    if let Some(p) = payload {
        // serde_json's Map is ordered by key, so this text is canonical.
        h.update(p.to_string().as_bytes());
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = h.finalize();
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// Truncates a timestamp to whole milliseconds, the precision stores keep.
pub fn ms(t: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond()).unwrap_or(t)
}

pub(crate) fn validate_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(Error::field("id", format!("must be 1–{MAX_ID_LEN} bytes")));
    }
    if id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Error::field(
            "id",
            format!(
                "`{}` contains whitespace or control characters",
                id.escape_default()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn validate_content(content: &str) -> Result<(), Error> {
    if content.trim().is_empty() {
        return Err(Error::field("content", "is empty"));
    }
    Ok(())
}

pub(crate) fn validate_importance(x: f64) -> Result<(), Error> {
    if !(0.0..=1.0).contains(&x) {
        return Err(Error::field(
            "importance",
            format!("{x} is outside 0.0–1.0"),
        ));
    }
    Ok(())
}

pub(crate) fn validate_tags(tags: &[String]) -> Result<(), Error> {
    if tags.len() > MAX_TAGS {
        return Err(Error::field(
            "tags",
            format!("{} tags, at most {MAX_TAGS}", tags.len()),
        ));
    }
    for t in tags {
        if t.is_empty() || t.len() > MAX_TAG_LEN || t.chars().any(|c| c.is_control()) {
            return Err(Error::field(
                "tags",
                format!(
                    "tag `{}` must be 1–{MAX_TAG_LEN} bytes without control characters",
                    t.escape_default()
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn validate_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.chars().any(|c| c.is_control()) {
        return Err(Error::field(
            "key",
            format!("must be 1–{MAX_KEY_LEN} bytes without control characters"),
        ));
    }
    Ok(())
}

pub(crate) fn validate_payload(p: &serde_json::Value) -> Result<(), Error> {
    if !p.is_object() {
        return Err(Error::field("payload", "must be a JSON object"));
    }
    Ok(())
}

pub(crate) fn validate_session_id(s: &str) -> Result<(), Error> {
    validate_segment(s).map_err(|r| Error::field("session", r))
}

/// The input of a write. Unset fields take the engine's defaults: importance
/// from the kind, source from the kind, no key, no tags.
#[derive(Clone, Debug, Default)]
pub struct NewMemory {
    /// Where the memory goes (required).
    pub scope: Option<Scope>,
    /// The text (required).
    pub content: String,
    /// Defaults to `note` (neutral kind weight 1, importance 0.5).
    pub kind: Option<Kind>,
    /// Optional role.
    pub role: Option<Role>,
    /// Optional JSON object.
    pub payload: Option<serde_json::Value>,
    /// Optional key: same (scope, key) supersedes.
    pub key: Option<String>,
    /// Labels.
    pub tags: Vec<String>,
    /// 0.0–1.0; defaults from the kind.
    pub importance: Option<f64>,
    /// Defaults to `conversation` for conversation turns, else `external`.
    pub source: Option<Source>,
    /// Session to attach to (created on first use).
    pub session: Option<String>,
    /// Time to live from now.
    pub ttl: Option<jiff::SignedDuration>,
    /// Never evicted nor bulk-deleted.
    pub pinned: bool,
    /// Kept out of contexts and exports unless asked.
    pub sensitive: bool,
    /// Set when copying (promotion).
    pub provenance: Option<Provenance>,
    /// When it happened, for memories recorded after the fact (imported
    /// conversation logs); defaults to now. Never in the future.
    pub created_at: Option<Timestamp>,
}

impl NewMemory {
    /// A memory of `content` in `scope`.
    pub fn new(scope: Scope, content: impl Into<String>) -> NewMemory {
        NewMemory {
            scope: Some(scope),
            content: content.into(),
            ..NewMemory::default()
        }
    }

    /// Sets when it happened (defaults to now).
    pub fn created_at(mut self, at: Timestamp) -> Self {
        self.created_at = Some(at);
        self
    }

    /// Sets the kind.
    pub fn kind(mut self, kind: Kind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// Sets the importance.
    pub fn importance(mut self, x: f64) -> Self {
        self.importance = Some(x);
        self
    }

    /// Adds a tag.
    pub fn tag(mut self, t: impl Into<String>) -> Self {
        self.tags.push(t.into());
        self
    }

    /// Sets the key.
    pub fn key(mut self, k: impl Into<String>) -> Self {
        self.key = Some(k.into());
        self
    }

    /// Sets the payload.
    pub fn payload(mut self, p: serde_json::Value) -> Self {
        self.payload = Some(p);
        self
    }

    /// Sets the role.
    pub fn role(mut self, r: Role) -> Self {
        self.role = Some(r);
        self
    }

    /// Attaches to a session.
    pub fn session(mut self, s: impl Into<String>) -> Self {
        self.session = Some(s.into());
        self
    }

    /// Pins the memory.
    pub fn pinned(mut self, yes: bool) -> Self {
        self.pinned = yes;
        self
    }

    /// Marks the memory sensitive.
    pub fn sensitive(mut self, yes: bool) -> Self {
        self.sensitive = yes;
        self
    }

    /// Sets a time to live.
    pub fn ttl(mut self, d: jiff::SignedDuration) -> Self {
        self.ttl = Some(d);
        self
    }

    /// Sets the source.
    pub fn source(mut self, s: Source) -> Self {
        self.source = Some(s);
        self
    }
}

/// Parses a duration such as `90s`, `15m`, `12h`, `7d`, `2w`.
pub fn parse_ttl(text: &str) -> Result<jiff::SignedDuration, Error> {
    let bad = || {
        Error::field(
            "ttl",
            format!("`{text}` is not a duration; use a number and a unit: 90s, 15m, 12h, 7d, 2w"),
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = text.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    if n <= 0 {
        return Err(Error::field("ttl", format!("`{text}` must be positive")));
    }
    let total = n.checked_mul(secs).ok_or_else(bad)?;
    Ok(jiff::SignedDuration::from_secs(total))
}

/// Parses a point in time: RFC 3339 (`2026-01-01T00:00:00Z`) or a date
/// (`2026-01-01`, midnight UTC).
pub fn parse_time(field: &str, text: &str) -> Result<Timestamp, Error> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    if let Ok(d) = text.parse::<jiff::civil::Date>()
        && let Ok(z) = d.to_zoned(jiff::tz::TimeZone::UTC)
    {
        return Ok(z.timestamp());
    }
    Err(Error::field(
        field,
        format!(
            "`{text}` is not a time; use RFC 3339 (2026-01-01T12:00:00Z) or a date (2026-01-01)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_reject() {
        assert_eq!("decision".parse::<Kind>().unwrap(), Kind::Decision);
        assert_eq!(
            "my_kind".parse::<Kind>().unwrap(),
            Kind::Custom("my_kind".into())
        );
        let e = "Bad Kind".parse::<Kind>().unwrap_err().to_string();
        assert!(e.starts_with("kind:"), "{e}");
        assert_eq!(Kind::Decision.default_importance(), 0.9);
        assert_eq!(Kind::Failure.default_importance(), 0.85);
    }

    #[test]
    fn ttl_and_time() {
        assert_eq!(parse_ttl("7d").unwrap().as_secs(), 7 * 86_400);
        assert!(parse_ttl("7").is_err());
        assert!(parse_ttl("0d").is_err());
        assert!(parse_ttl("7y").is_err());
        assert!(parse_time("before", "2026-01-01").is_ok());
        assert!(parse_time("before", "2026-01-01T00:00:00Z").is_ok());
        assert!(
            parse_time("before", "yesterday")
                .unwrap_err()
                .to_string()
                .contains("before")
        );
    }

    #[test]
    fn checksum_covers_payload() {
        let a = checksum("x", None);
        let b = checksum("x", Some(&serde_json::json!({"a": 1})));
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}
