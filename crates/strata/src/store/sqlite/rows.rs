//! Rows to memories and back: column lists, parameters, reads (a value
//! that cannot be read back is a conversion error, `Error::Corrupt`).

use super::*;

/// Column `i` as a time. A value out of range is a corrupt row, never a
/// silent 1970.
pub(super) fn ts(r: &Row<'_>, i: usize) -> rusqlite::Result<Timestamp> {
    let ms: i64 = r.get(i)?;
    Timestamp::from_millisecond(ms).map_err(|e| conv_err(i, e))
}

pub(super) fn opt_ts_at(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Timestamp>> {
    match r.get::<_, Option<i64>>(i)? {
        None => Ok(None),
        Some(ms) => Timestamp::from_millisecond(ms)
            .map(Some)
            .map_err(|e| conv_err(i, e)),
    }
}

pub(super) fn conv_err(
    i: usize,
    e: impl std::error::Error + Send + Sync + 'static,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
}

/// The columns [`read_signals`] reads, in its order.
pub(super) const SIGNAL_COLS: &str = "m.id, m.kind, m.importance, m.created_at, m.updated_at, m.access_count, m.tokens, m.source = 'learned', m.session";
/// How many columns [`SIGNAL_COLS`] has: the first one after them.
pub(super) const SIGNAL_N: usize = 9;

pub(super) fn read_signals(r: &Row<'_>) -> rusqlite::Result<Signals> {
    Ok(Signals {
        id: r.get(0)?,
        kind: r.get(1)?,
        importance: r.get(2)?,
        created_at: ts(r, 3)?,
        updated_at: ts(r, 4)?,
        access_count: r.get::<_, i64>(5)? as u64,
        tokens: r.get::<_, i64>(6)? as u32,
        learned: r.get(7)?,
        session: r.get(8)?,
    })
}

pub(super) fn read_memory(r: &Row<'_>) -> rusqlite::Result<Memory> {
    let scope: String = r.get(1)?;
    let kind: String = r.get(2)?;
    let role: Option<String> = r.get(3)?;
    let payload: Option<String> = r.get(5)?;
    let tags: String = r.get(7)?;
    let source: String = r.get(9)?;
    let emb_model: Option<String> = r.get(21)?;
    let emb: Option<Vec<u8>> = r.get(22)?;
    let prov: Option<String> = r.get(23)?;
    Ok(Memory {
        id: r.get(0)?,
        scope: Scope::parse(&scope).map_err(|e| conv_err(1, e))?,
        kind: kind.parse::<Kind>().map_err(|e| conv_err(2, e))?,
        role: role
            .map(|s| s.parse())
            .transpose()
            .map_err(|e| conv_err(3, e))?,
        content: r.get(4)?,
        payload: payload
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(|e| conv_err(5, e))?,
        key: r.get(6)?,
        tags: serde_json::from_str(&tags).map_err(|e| conv_err(7, e))?,
        importance: r.get(8)?,
        source: source.parse().map_err(|e| conv_err(9, e))?,
        session: r.get(10)?,
        created_at: ts(r, 11)?,
        updated_at: ts(r, 12)?,
        last_accessed_at: opt_ts_at(r, 13)?,
        access_count: r.get::<_, i64>(14)? as u64,
        expires_at: opt_ts_at(r, 15)?,
        pinned: r.get(16)?,
        sensitive: r.get(17)?,
        tokens: r.get::<_, i64>(18)? as u32,
        checksum: r.get(19)?,
        version: r.get::<_, i64>(20)? as u64,
        embedding: match (emb_model, emb) {
            (Some(model), Some(bytes)) => Some(Embedding {
                model,
                vector: bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            }),
            _ => None,
        },
        provenance: prov
            .map(|p| serde_json::from_str::<Provenance>(&p))
            .transpose()
            .map_err(|e| conv_err(23, e))?,
    })
}

pub(super) fn memory_params(m: &Memory) -> Vec<SqlValue> {
    let opt_text = |s: Option<String>| s.map_or(SqlValue::Null, SqlValue::Text);
    let opt_ts =
        |t: Option<Timestamp>| t.map_or(SqlValue::Null, |t| SqlValue::Integer(t.as_millisecond()));
    vec![
        SqlValue::Text(m.id.clone()),
        SqlValue::Text(m.scope.to_string()),
        SqlValue::Text(m.kind.to_string()),
        opt_text(m.role.map(|r| r.to_string())),
        SqlValue::Text(m.content.clone()),
        opt_text(m.payload.as_ref().map(|p| p.to_string())),
        opt_text(m.key.clone()),
        SqlValue::Text(serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into())),
        SqlValue::Real(m.importance),
        SqlValue::Text(m.source.to_string()),
        opt_text(m.session.clone()),
        SqlValue::Integer(m.created_at.as_millisecond()),
        SqlValue::Integer(m.updated_at.as_millisecond()),
        opt_ts(m.last_accessed_at),
        SqlValue::Integer(m.access_count as i64),
        opt_ts(m.expires_at),
        SqlValue::Integer(m.pinned as i64),
        SqlValue::Integer(m.sensitive as i64),
        SqlValue::Integer(m.tokens as i64),
        SqlValue::Text(m.checksum.clone()),
        SqlValue::Integer(m.version as i64),
        opt_text(m.embedding.as_ref().map(|e| e.model.clone())),
        m.embedding.as_ref().map_or(SqlValue::Null, |e| {
            SqlValue::Blob(e.vector.iter().flat_map(|x| x.to_le_bytes()).collect())
        }),
        opt_text(
            m.provenance
                .as_ref()
                .and_then(|p| serde_json::to_string(p).ok()),
        ),
    ]
}

pub(super) const PLACEHOLDERS: &str = "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?";

/// Inserts a memory row, binding fields by reference.
pub(super) fn insert_row(tx: &Connection, m: &Memory) -> rusqlite::Result<usize> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("INSERT INTO memories ({COLS}) VALUES ({PLACEHOLDERS})")
    });
    let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
    let payload = m.payload.as_ref().map(|p| p.to_string());
    let emb: Option<Vec<u8>> = m
        .embedding
        .as_ref()
        .map(|e| e.vector.iter().flat_map(|x| x.to_le_bytes()).collect());
    let prov = m
        .provenance
        .as_ref()
        .and_then(|p| serde_json::to_string(p).ok());
    tx.prepare_cached(&SQL)?.execute(params![
        m.id,
        m.scope.as_str(),
        m.kind.as_str(),
        m.role.map(|r| r.as_str()),
        m.content,
        payload,
        m.key,
        tags,
        m.importance,
        m.source.as_str(),
        m.session,
        m.created_at.as_millisecond(),
        m.updated_at.as_millisecond(),
        m.last_accessed_at.map(|t| t.as_millisecond()),
        m.access_count as i64,
        m.expires_at.map(|t| t.as_millisecond()),
        m.pinned,
        m.sensitive,
        m.tokens as i64,
        m.checksum,
        m.version as i64,
        m.embedding.as_ref().map(|e| e.model.as_str()),
        emb,
        prov,
    ])
}

pub(super) fn read_session(r: &Row<'_>) -> rusqlite::Result<Session> {
    let scope: String = r.get(1)?;
    Ok(Session {
        id: r.get(0)?,
        scope: Scope::parse(&scope).map_err(|e| conv_err(1, e))?,
        created_at: ts(r, 2)?,
        last_activity_at: ts(r, 3)?,
        archived_at: opt_ts_at(r, 4)?,
        max_bytes: r.get::<_, i64>(5)? as u64,
        bytes: r.get::<_, i64>(6)? as u64,
        ephemeral: false,
    })
}
