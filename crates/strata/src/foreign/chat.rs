//! ChatGPT's and Claude's data exports: `conversations.json`, a JSON array
//! of conversations.
//!
//! Each conversation becomes a session (`chatgpt-<id>`, `claude-<uuid>`)
//! whose turns are memories of kind `conversation` with their role
//! (ChatGPT's tool turns: role `tool`, kind `tool_output`), in the
//! scope `<target>/<session>` (target `session` unless told otherwise), each
//! created when the export says it was said, the conversation's id and title
//! in its payload. A message without text (an image, a hidden system
//! prompt) is skipped and named in the report.
//!
//! ChatGPT keeps a conversation as a tree (`mapping`), since an edited or
//! regenerated message starts a branch; the turns imported are the branch
//! shown, from `current_node` up to the root. Messages on other branches
//! are skipped. Without a `current_node`, every message is a turn, in time
//! order.

use jiff::Timestamp;
use serde_json::{Map, Value, json};
use std::collections::HashSet;

use super::{Draft, Read, bad, parse_json, parse_time, segment};
use crate::Result;
use crate::model::{Kind, NewMemory, Role, Source};
use crate::scope::Scope;

/// The conversations of an export: its top-level array.
fn conversations<'a>(file: &str, v: &'a Value) -> Result<&'a Vec<Value>> {
    v.as_array()
        .ok_or_else(|| crate::error::Error::field(file, "expected a JSON array of conversations"))
}

/// A field that must be an object.
fn object<'a>(
    file: &str,
    entry: &str,
    v: &'a Value,
    field: &str,
) -> Result<&'a Map<String, Value>> {
    match v.get(field) {
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(bad(file, entry, format!("`{field}` must be an object"))),
        None => Err(bad(file, entry, format!("`{field}` is missing"))),
    }
}

/// A field that must be a non-empty string.
fn string<'a>(file: &str, entry: &str, v: &'a Value, field: &str) -> Result<&'a str> {
    match v.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(bad(file, entry, format!("`{field}` is empty"))),
        Some(_) => Err(bad(file, entry, format!("`{field}` must be a string"))),
        None => Err(bad(file, entry, format!("`{field}` is missing"))),
    }
}

/// An optional time field: RFC 3339 text, or (ChatGPT) seconds since the
/// epoch as a number; `null` and absent are `None`.
fn time(file: &str, entry: &str, v: &Value, field: &str) -> Result<Option<Timestamp>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_time(field, s)
            .map(Some)
            .map_err(|r| bad(file, entry, r)),
        Some(Value::Number(n)) => n
            .as_f64()
            .and_then(|s| Timestamp::from_millisecond((s * 1000.0).round() as i64).ok())
            .map(Some)
            .ok_or_else(|| bad(file, entry, format!("`{field}`: {n} is not a time"))),
        Some(_) => Err(bad(
            file,
            entry,
            format!("`{field}` must be a time (text or seconds)"),
        )),
    }
}

/// The error for the other tool's export: both are a `conversations.json`
/// array, told apart by how a conversation holds its messages (ChatGPT's
/// `mapping`, a tree of nodes; Claude's `chat_messages`, a list).
fn other_export(file: &str, entry: &str, tool: &str, format: &str) -> crate::error::Error {
    let (has, lacks) = if format == "claude" {
        ("chat_messages", "mapping")
    } else {
        ("mapping", "chat_messages")
    };
    bad(
        file,
        entry,
        format!(
            "has `{has}`, not `{lacks}`: this is {tool}'s export; import it as `{format}` (`--from {format}`)"
        ),
    )
}

/// A conversation: where its turns go and what they carry.
struct Conv<'a> {
    tool: &'static str,
    id: &'a str,
    title: &'a str,
    session: String,
    scope: Scope,
}

impl<'a> Conv<'a> {
    fn new(
        file: &str,
        target: Option<&Scope>,
        tool: &'static str,
        id: &'a str,
        title: &'a str,
    ) -> Result<Conv<'a>> {
        let session = segment(&format!("{tool}-{id}"))
            .filter(|s| s.len() < crate::scope::MAX_SEGMENT_LEN)
            .unwrap_or_else(|| format!("{tool}-{}", super::digest_hex(id, 24)));
        let base = target.map_or("session", Scope::as_str);
        let scope = Scope::parse(&format!("{base}/{session}"))
            .map_err(|e| crate::error::Error::field(file, e))?;
        Ok(Conv {
            tool,
            id,
            title,
            session,
            scope,
        })
    }

    /// One turn's memory.
    fn turn(&self, message_id: &str, role: Role, content: String, at: Timestamp) -> NewMemory {
        NewMemory {
            scope: Some(self.scope.clone()),
            content,
            kind: Some(Kind::Conversation),
            role: Some(role),
            payload: Some(json!({
                "conversation": {"id": self.id, "title": self.title},
                "message_id": message_id,
            })),
            tags: vec![self.tool.into()],
            session: Some(self.session.clone()),
            created_at: Some(at),
            ..NewMemory::default()
        }
    }
}

/// A ChatGPT message's text: its string `parts`, or its `text`.
fn chatgpt_text(content: Option<&Value>) -> String {
    let Some(c) = content else {
        return String::new();
    };
    if let Some(parts) = c.get("parts").and_then(Value::as_array) {
        let texts: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
        return texts.join("\n");
    }
    c.get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

pub(super) fn read_chatgpt(
    file: &str,
    body: &str,
    target: Option<&Scope>,
    now: Timestamp,
) -> Result<Read> {
    let doc = parse_json(file, body)?;
    let mut out = Read::default();
    for (i, c) in conversations(file, &doc)?.iter().enumerate() {
        let entry = format!("conversation {}", i + 1);
        if c.get("mapping").is_none() && c.get("chat_messages").is_some() {
            return Err(other_export(file, &entry, "Claude", "claude"));
        }
        let mapping = object(file, &entry, c, "mapping")?;
        let id = match c.get("conversation_id") {
            Some(Value::String(_)) => string(file, &entry, c, "conversation_id")?,
            _ => string(file, &entry, c, "id")?,
        };
        let title = c.get("title").and_then(Value::as_str).unwrap_or("");
        let started = time(file, &entry, c, "create_time")?.unwrap_or(now);
        let conv = Conv::new(file, target, "chatgpt", id, title)?;
        // The branch shown: from `current_node` up through `parent`.
        let mut branch: Vec<&str> = Vec::new();
        if let Some(cur) = c.get("current_node").and_then(Value::as_str) {
            let mut at = Some(cur);
            let mut seen = HashSet::new();
            while let Some(node) = at.filter(|n| seen.insert(*n)) {
                let Some(n) = mapping.get(node) else {
                    return Err(bad(
                        file,
                        &entry,
                        format!(
                            "`mapping` has no node `{node}` (named by `current_node` or a `parent`)"
                        ),
                    ));
                };
                branch.push(node);
                at = n.get("parent").and_then(Value::as_str);
            }
            branch.reverse();
        } else {
            let mut all: Vec<(Timestamp, &str)> = Vec::new();
            for (k, n) in mapping {
                let t = match n.get("message") {
                    Some(m @ Value::Object(_)) => time(file, &entry, m, "create_time")?,
                    _ => None,
                };
                all.push((t.unwrap_or(started), k.as_str()));
            }
            all.sort();
            branch = all.into_iter().map(|(_, k)| k).collect();
        }
        let on_branch: HashSet<&str> = branch.iter().copied().collect();
        for (k, n) in mapping {
            if !on_branch.contains(k.as_str()) && n.get("message").is_some_and(Value::is_object) {
                out.skip(
                    format!("{entry} message {k}"),
                    "not on the branch shown (an edited or regenerated message)",
                );
            }
        }
        for node in branch {
            let at = format!("{entry} message {node}");
            let m = match mapping[node].get("message") {
                Some(m @ Value::Object(_)) => m,
                _ => continue,
            };
            let author = object(file, &at, m, "author")?;
            let role = match author.get("role").and_then(Value::as_str) {
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                Some("system") => Role::System,
                Some("tool") => Role::Tool,
                Some(other) => {
                    out.skip(
                        &at,
                        format!("author role `{other}` is not user, assistant, system or tool"),
                    );
                    continue;
                }
                None => return Err(bad(file, &at, "`author.role` is missing")),
            };
            let text = chatgpt_text(m.get("content"));
            if text.trim().is_empty() {
                out.skip(&at, format!("no text ({role} message)"));
                continue;
            }
            let said = time(file, &at, m, "create_time")?.unwrap_or(started);
            let mid = m.get("id").and_then(Value::as_str).unwrap_or(node);
            let updated_at = time(file, &at, m, "update_time")?;
            let mut new = conv.turn(mid, role, text, said);
            // What a tool answered (a search, code run, a file read) is the
            // tool's output, not something the user or assistant said.
            // It still came in the conversation, as the other turns did.
            if role == Role::Tool {
                new.kind = Some(Kind::ToolOutput);
                new.source = Some(Source::Conversation);
            }
            out.drafts.push(Draft {
                source_id: format!("{id}\0{mid}"),
                entry: at,
                new,
                updated_at,
            });
        }
    }
    Ok(out)
}

/// A Claude message's text: its `text`, or the text blocks of `content`.
fn claude_text(m: &Value) -> String {
    if let Some(t) = m.get("text").and_then(Value::as_str)
        && !t.trim().is_empty()
    {
        return t.to_string();
    }
    let blocks = m.get("content").and_then(Value::as_array);
    let texts: Vec<&str> = blocks
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    texts.join("\n")
}

pub(super) fn read_claude(
    file: &str,
    body: &str,
    target: Option<&Scope>,
    now: Timestamp,
) -> Result<Read> {
    let doc = parse_json(file, body)?;
    let mut out = Read::default();
    for (i, c) in conversations(file, &doc)?.iter().enumerate() {
        let entry = format!("conversation {}", i + 1);
        if c.get("chat_messages").is_none() && c.get("mapping").is_some() {
            return Err(other_export(file, &entry, "ChatGPT", "chatgpt"));
        }
        let id = string(file, &entry, c, "uuid")?;
        let title = c.get("name").and_then(Value::as_str).unwrap_or("");
        let started = time(file, &entry, c, "created_at")?.unwrap_or(now);
        let messages = match c.get("chat_messages") {
            Some(Value::Array(a)) => a,
            Some(_) => return Err(bad(file, &entry, "`chat_messages` must be an array")),
            None => return Err(bad(file, &entry, "`chat_messages` is missing")),
        };
        let conv = Conv::new(file, target, "claude", id, title)?;
        for (j, m) in messages.iter().enumerate() {
            let at = format!("{entry} message {}", j + 1);
            let mid = string(file, &at, m, "uuid")?;
            let role = match string(file, &at, m, "sender")? {
                "human" => Role::User,
                "assistant" => Role::Assistant,
                other => {
                    out.skip(&at, format!("sender `{other}` is not human or assistant"));
                    continue;
                }
            };
            let text = claude_text(m);
            if text.trim().is_empty() {
                out.skip(&at, format!("no text ({role} message)"));
                continue;
            }
            let said = time(file, &at, m, "created_at")?.unwrap_or(started);
            out.drafts.push(Draft {
                source_id: format!("{id}\0{mid}"),
                entry: at.clone(),
                new: conv.turn(mid, role, text, said),
                updated_at: time(file, &at, m, "updated_at")?,
            });
        }
    }
    Ok(out)
}
