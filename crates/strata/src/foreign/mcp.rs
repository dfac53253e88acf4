//! The MCP reference memory server's `memory.json`
//! (`@modelcontextprotocol/server-memory`): JSON Lines, each an entity
//! (`{"type":"entity","name","entityType","observations":[…]}`) or a
//! relation (`{"type":"relation","from","to","relationType"}`).
//!
//! One memory per observation, not per entity: an observation is the unit
//! the server adds and deletes, so an entity that grew since the last
//! import adds only its new observations, and recall ranks each fact on
//! its own. The content names its entity (`Ana (person): prefers short
//! answers`) so it reads alone. A relation is a memory too (`Ana works_at
//! Acme`). Both are kind `fact`, tagged `mcp-memory`, in `global` unless
//! told otherwise (the server keeps what it learns about its user across
//! chats). The format has no times: memories take the import's.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{Draft, Read, bad};
use crate::Result;
use crate::model::{Kind, NewMemory};
use crate::scope::Scope;

/// The tag every memory from `memory.json` carries.
const TAG: &str = "mcp-memory";

/// A required string field of line `n`.
fn text<'a>(file: &str, entry: &str, obj: &'a Value, field: &str) -> Result<&'a str> {
    match obj.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(Value::String(_)) => Err(bad(file, entry, format!("`{field}` is empty"))),
        Some(other) => Err(bad(
            file,
            entry,
            format!("`{field}` must be a string, not {other}"),
        )),
        None => Err(bad(file, entry, format!("`{field}` is missing"))),
    }
}

pub(super) fn read(file: &str, body: &str, target: Option<&Scope>, now: Timestamp) -> Result<Read> {
    let scope = target.cloned().unwrap_or_else(Scope::global);
    let fact = Kind::Custom("fact".into());
    let mut out = Read::default();
    for (i, line) in body.lines().enumerate() {
        let entry = format!("line {}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| bad(file, &entry, format!("invalid JSON: {e}")))?;
        if !v.is_object() {
            return Err(bad(file, &entry, "expected a JSON object"));
        }
        let new = |content: String, payload: Value| NewMemory {
            scope: Some(scope.clone()),
            content,
            kind: Some(fact.clone()),
            payload: Some(payload),
            tags: vec![TAG.into()],
            created_at: Some(now),
            ..NewMemory::default()
        };
        match text(file, &entry, &v, "type")? {
            "entity" => {
                let name = text(file, &entry, &v, "name")?;
                let etype = text(file, &entry, &v, "entityType")?;
                let obs = match v.get("observations") {
                    Some(Value::Array(a)) => a,
                    Some(_) => {
                        return Err(bad(file, &entry, "`observations` must be an array"));
                    }
                    None => return Err(bad(file, &entry, "`observations` is missing")),
                };
                if obs.is_empty() {
                    out.skip(&entry, format!("entity `{name}` has no observations"));
                }
                for (j, o) in obs.iter().enumerate() {
                    let at = format!("{entry} observation {}", j + 1);
                    let Some(o) = o.as_str() else {
                        return Err(bad(file, &at, "must be a string"));
                    };
                    if o.trim().is_empty() {
                        out.skip(&at, "empty");
                        continue;
                    }
                    out.drafts.push(Draft {
                        source_id: format!("entity\0{name}\0{o}"),
                        entry: at,
                        new: new(
                            format!("{name} ({etype}): {o}"),
                            json!({"entity": name, "entity_type": etype}),
                        ),
                        updated_at: None,
                    });
                }
            }
            "relation" => {
                let from = text(file, &entry, &v, "from")?;
                let to = text(file, &entry, &v, "to")?;
                let rtype = text(file, &entry, &v, "relationType")?;
                out.drafts.push(Draft {
                    source_id: format!("relation\0{from}\0{rtype}\0{to}"),
                    entry,
                    new: new(
                        format!("{from} {rtype} {to}"),
                        json!({"from": from, "to": to, "relation_type": rtype}),
                    ),
                    updated_at: None,
                });
            }
            other => {
                return Err(bad(
                    file,
                    &entry,
                    format!("`type`: `{other}` is not `entity` or `relation`"),
                ));
            }
        }
    }
    Ok(out)
}
