//! Rows to memories and back: parameters, reads (a value that cannot be
//! read back is `Error::Corrupt`, never a default).

use super::*;

/// A bound parameter.
pub(super) type P = Box<dyn ToSql + Sync + Send>;

/// Borrowed parameters, as the client takes them.
pub(super) fn refs(p: &[P]) -> Vec<&(dyn ToSql + Sync)> {
    p.iter().map(|b| &**b as &(dyn ToSql + Sync)).collect()
}

fn corrupt(col: &str, e: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        what: format!("column `{col}` of a stored row"),
        source: e.to_string().into(),
    }
}

fn get<'a, T: postgres::types::FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(|e| {
        let name = r.columns().get(i).map_or("?", |c| c.name()).to_string();
        corrupt(&name, e)
    })
}

fn ts(r: &Row, i: usize) -> Result<Timestamp> {
    let ms: i64 = get(r, i)?;
    Timestamp::from_millisecond(ms).map_err(|e| corrupt(r.columns()[i].name(), e))
}

fn opt_ts(r: &Row, i: usize) -> Result<Option<Timestamp>> {
    get::<Option<i64>>(r, i)?
        .map(|ms| Timestamp::from_millisecond(ms).map_err(|e| corrupt(r.columns()[i].name(), e)))
        .transpose()
}

fn u(r: &Row, i: usize) -> Result<u64> {
    let v: i64 = get(r, i)?;
    u64::try_from(v).map_err(|e| corrupt(r.columns()[i].name(), e))
}

/// The columns [`read_signals`] reads, in its order.
pub(super) const SIGNAL_COLS: &str = "m.id, m.kind, m.importance, m.created_at, m.updated_at, m.access_count, m.tokens, m.source = 'learned', m.session";
/// How many columns [`SIGNAL_COLS`] has: the first one after them.
pub(super) const SIGNAL_N: usize = 9;

/// Signals from the first [`SIGNAL_N`] columns.
pub(super) fn read_signals(r: &Row) -> Result<Signals> {
    Ok(Signals {
        id: get(r, 0)?,
        kind: get(r, 1)?,
        importance: get(r, 2)?,
        created_at: ts(r, 3)?,
        updated_at: ts(r, 4)?,
        access_count: u(r, 5)?,
        tokens: u32::try_from(get::<i64>(r, 6)?).map_err(|e| corrupt("tokens", e))?,
        learned: get(r, 7)?,
        session: get(r, 8)?,
    })
}

/// A memory from the first 24 columns ([`COLS`]).
pub(super) fn read_memory(r: &Row) -> Result<Memory> {
    let scope: String = get(r, 1)?;
    let kind: String = get(r, 2)?;
    let role: Option<String> = get(r, 3)?;
    let payload: Option<String> = get(r, 5)?;
    let source: String = get(r, 9)?;
    let emb_model: Option<String> = get(r, 21)?;
    let emb: Option<Vec<u8>> = get(r, 22)?;
    let prov: Option<String> = get(r, 23)?;
    Ok(Memory {
        id: get(r, 0)?,
        scope: Scope::parse(&scope).map_err(|e| corrupt("scope", e))?,
        kind: kind.parse::<Kind>().map_err(|e| corrupt("kind", e))?,
        role: role
            .map(|s| s.parse())
            .transpose()
            .map_err(|e| corrupt("role", e))?,
        content: get(r, 4)?,
        payload: payload
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(|e| corrupt("payload", e))?,
        key: get(r, 6)?,
        tags: get(r, 7)?,
        importance: get(r, 8)?,
        source: source.parse().map_err(|e| corrupt("source", e))?,
        session: get(r, 10)?,
        created_at: ts(r, 11)?,
        updated_at: ts(r, 12)?,
        last_accessed_at: opt_ts(r, 13)?,
        access_count: u(r, 14)?,
        expires_at: opt_ts(r, 15)?,
        pinned: get(r, 16)?,
        sensitive: get(r, 17)?,
        tokens: u32::try_from(get::<i64>(r, 18)?).map_err(|e| corrupt("tokens", e))?,
        checksum: get(r, 19)?,
        version: u(r, 20)?,
        embedding: match (emb_model, emb) {
            (Some(model), Some(bytes)) => {
                if bytes.len() % 4 != 0 {
                    return Err(corrupt(
                        "embedding",
                        format!("{} bytes is not a list of f32", bytes.len()),
                    ));
                }
                Some(Embedding {
                    model,
                    vector: bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                })
            }
            _ => None,
        },
        provenance: prov
            .map(|p| serde_json::from_str::<Provenance>(&p))
            .transpose()
            .map_err(|e| corrupt("provenance", e))?,
    })
}

/// The 24 values of [`COLS`] for `m`.
pub(super) fn memory_params(m: &Memory) -> Vec<P> {
    vec![
        Box::new(m.id.clone()),
        Box::new(m.scope.to_string()),
        Box::new(m.kind.as_str().to_string()),
        Box::new(m.role.map(|r| r.as_str().to_string())),
        Box::new(m.content.clone()),
        Box::new(m.payload.as_ref().map(|p| p.to_string())),
        Box::new(m.key.clone()),
        Box::new(m.tags.clone()),
        Box::new(m.importance),
        Box::new(m.source.as_str().to_string()),
        Box::new(m.session.clone()),
        Box::new(m.created_at.as_millisecond()),
        Box::new(m.updated_at.as_millisecond()),
        Box::new(m.last_accessed_at.map(|t| t.as_millisecond())),
        Box::new(m.access_count as i64),
        Box::new(m.expires_at.map(|t| t.as_millisecond())),
        Box::new(m.pinned),
        Box::new(m.sensitive),
        Box::new(m.tokens as i64),
        Box::new(m.checksum.clone()),
        Box::new(m.version as i64),
        Box::new(m.embedding.as_ref().map(|e| e.model.clone())),
        Box::new(
            m.embedding
                .as_ref()
                .map(|e| crate::embed::to_bytes(&e.vector)),
        ),
        Box::new(
            m.provenance
                .as_ref()
                .and_then(|p| serde_json::to_string(p).ok()),
        ),
    ]
}

/// The column types of `seq` and then [`COLS`], for a binary COPY of rows
/// made by [`memory_params`] (behind the seq).
pub(super) fn memory_types() -> Vec<postgres::types::Type> {
    use postgres::types::Type;
    let (t, i, b) = (Type::TEXT, Type::INT8, Type::BOOL);
    vec![
        i.clone(),        // seq
        t.clone(),        // id
        t.clone(),        // scope
        t.clone(),        // kind
        t.clone(),        // role
        t.clone(),        // content
        t.clone(),        // payload
        t.clone(),        // key
        Type::TEXT_ARRAY, // tags
        Type::FLOAT8,     // importance
        t.clone(),        // source
        t.clone(),        // session
        i.clone(),        // created_at
        i.clone(),        // updated_at
        i.clone(),        // last_accessed_at
        i.clone(),        // access_count
        i.clone(),        // expires_at
        b.clone(),        // pinned
        b,                // sensitive
        i.clone(),        // tokens
        t.clone(),        // checksum
        i,                // version
        t.clone(),        // embedding_model
        Type::BYTEA,      // embedding
        t,                // provenance
    ]
}

/// The columns of a session, in [`read_session`]'s order.
pub(super) const SESSION_COLS: &str =
    "id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes";

pub(super) fn read_session(r: &Row) -> Result<Session> {
    let scope: String = get(r, 1)?;
    Ok(Session {
        id: get(r, 0)?,
        scope: Scope::parse(&scope).map_err(|e| corrupt("scope", e))?,
        created_at: ts(r, 2)?,
        last_activity_at: ts(r, 3)?,
        archived_at: opt_ts(r, 4)?,
        max_bytes: u(r, 5)?,
        bytes: u(r, 6)?,
        ephemeral: false,
    })
}
