//! mem0's export: what `Memory.get_all()` (and the platform's export)
//! returns, `{"results": [ … ]}` or a plain array, each entry
//! `{"id", "memory", "hash", "metadata", "categories", "created_at",
//! "updated_at", "user_id", "agent_id", "run_id"}` (only `id` and `memory`
//! required).
//!
//! One memory per entry, kind `fact` (mem0 stores extracted facts),
//! tagged `mem0` and with its categories, created and updated when mem0
//! says. Unless told otherwise its scope follows whose memory it is:
//! `user/<user_id>`, `user/<user_id>/agent/<agent_id>`, `agent/<agent_id>`,
//! or `global` for neither (an id's characters outside `[A-Za-z0-9._-]`
//! become `-`). mem0's id, hash, metadata, user, agent and run stay in the
//! payload.

use jiff::Timestamp;
use serde_json::{Map, Value};

use super::{Draft, Read, bad, parse_json, parse_time, segment};
use crate::Result;
use crate::error::Error;
use crate::model::{Kind, NewMemory};
use crate::scope::Scope;

/// The tag every mem0 memory carries.
const TAG: &str = "mem0";

/// An optional string field.
fn opt_str<'a>(file: &str, entry: &str, v: &'a Value, field: &str) -> Result<Option<&'a str>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(file, entry, format!("`{field}` must be a string"))),
    }
}

/// The scope of an entry without a target: whose memory it is.
fn owner_scope(file: &str, entry: &str, user: Option<&str>, agent: Option<&str>) -> Result<Scope> {
    let seg = |field: &str, v: &str| {
        segment(v).ok_or_else(|| {
            bad(
                file,
                entry,
                format!("`{field}`: `{v}` has no usable characters"),
            )
        })
    };
    let path = match (user, agent) {
        (Some(u), Some(a)) => format!("user/{}/agent/{}", seg("user_id", u)?, seg("agent_id", a)?),
        (Some(u), None) => format!("user/{}", seg("user_id", u)?),
        (None, Some(a)) => format!("agent/{}", seg("agent_id", a)?),
        (None, None) => "global".into(),
    };
    Scope::parse(&path).map_err(|e| bad(file, entry, e))
}

pub(super) fn read(file: &str, body: &str, target: Option<&Scope>, now: Timestamp) -> Result<Read> {
    let doc = parse_json(file, body)?;
    let entries = match &doc {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("results") {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(Error::field(
                    file,
                    "expected `{\"results\": [...]}` or a JSON array of memories",
                ));
            }
        },
        _ => {
            return Err(Error::field(
                file,
                "expected `{\"results\": [...]}` or a JSON array of memories",
            ));
        }
    };
    let mut out = Read::default();
    for (i, v) in entries.iter().enumerate() {
        let entry = format!("memory {}", i + 1);
        if !v.is_object() {
            return Err(bad(file, &entry, "expected a JSON object"));
        }
        let Some(id) = opt_str(file, &entry, v, "id")? else {
            return Err(bad(file, &entry, "`id` is missing or empty"));
        };
        let Some(text) = opt_str(file, &entry, v, "memory")? else {
            return Err(bad(file, &entry, "`memory` is missing or empty"));
        };
        let user = opt_str(file, &entry, v, "user_id")?;
        let agent = opt_str(file, &entry, v, "agent_id")?;
        let scope = match target {
            Some(s) => s.clone(),
            None => owner_scope(file, &entry, user, agent)?,
        };
        let time = |field: &str| -> Result<Option<Timestamp>> {
            opt_str(file, &entry, v, field)?
                .map(|s| parse_time(field, s).map_err(|r| bad(file, &entry, r)))
                .transpose()
        };
        let created = time("created_at")?;
        let updated = time("updated_at")?;
        let mut payload = Map::new();
        payload.insert("mem0_id".into(), id.into());
        for f in ["hash", "user_id", "agent_id", "run_id"] {
            if let Some(s) = opt_str(file, &entry, v, f)? {
                payload.insert(f.into(), s.into());
            }
        }
        match v.get("metadata") {
            None | Some(Value::Null) => {}
            Some(m @ Value::Object(_)) => {
                payload.insert("metadata".into(), m.clone());
            }
            Some(_) => return Err(bad(file, &entry, "`metadata` must be an object")),
        }
        let mut tags = vec![TAG.to_string()];
        match v.get("categories") {
            None | Some(Value::Null) => {}
            Some(Value::Array(cs)) => {
                for c in cs {
                    let Some(c) = c.as_str() else {
                        return Err(bad(file, &entry, "`categories` must be a list of text"));
                    };
                    if !tags.iter().any(|t| t == c) {
                        tags.push(c.to_string());
                    }
                }
            }
            Some(_) => return Err(bad(file, &entry, "`categories` must be a list of text")),
        }
        out.drafts.push(Draft {
            source_id: id.to_string(),
            entry,
            new: NewMemory {
                scope: Some(scope),
                content: text.to_string(),
                kind: Some(Kind::Custom("fact".into())),
                payload: Some(Value::Object(payload)),
                tags,
                created_at: Some(created.or(updated).unwrap_or(now)),
                ..NewMemory::default()
            },
            updated_at: updated,
        });
    }
    Ok(out)
}
