//! The audit trail in the file (schema version 5): `audit` rows and the
//! one `audit_chain` row, changed only inside the store's write
//! transaction, so appends from every process on the file take numbers one
//! at a time and the chain never forks.

use super::*;
use crate::audit::{AuditChain, AuditEntry, AuditEvent, AuditPrune, AuditQuery, prune_through};
use crate::store::AuditLog;

const AUDIT_COLS: &str =
    "seq, at, actor, op, scopes, count, ids, ids_omitted, outcome, prev_hash, hash";

/// A stored entry. A list column that is not a JSON list of strings reads
/// as `["<unreadable>"]`: the entry's hash then fails to match, and
/// verification names it, instead of the read failing as a whole.
fn read_entry(r: &Row<'_>) -> rusqlite::Result<AuditEntry> {
    let list = |i: usize| -> rusqlite::Result<Vec<String>> {
        let t: String = r.get(i)?;
        Ok(serde_json::from_str(&t).unwrap_or_else(|_| vec!["<unreadable>".into()]))
    };
    let us: i64 = r.get(1)?;
    Ok(AuditEntry {
        seq: r.get::<_, i64>(0)? as u64,
        at: Timestamp::from_microsecond(us).map_err(|e| conv_err(1, e))?,
        actor: r.get(2)?,
        op: r.get(3)?,
        scopes: list(4)?,
        count: r.get::<_, i64>(5)? as u64,
        ids: list(6)?,
        ids_omitted: r.get::<_, i64>(7)? as u64,
        outcome: r.get(8)?,
        prev_hash: r.get(9)?,
        hash: r.get(10)?,
    })
}

fn chain_in(c: &Connection) -> Result<AuditChain> {
    Ok(c.prepare_cached(
        "SELECT anchor_seq, anchor_hash, head_seq, head_hash FROM audit_chain WHERE id = 1",
    )?
    .query_row([], |r| {
        Ok(AuditChain {
            anchor_seq: r.get::<_, i64>(0)? as u64,
            anchor_hash: r.get(1)?,
            head_seq: r.get::<_, i64>(2)? as u64,
            head_hash: r.get(3)?,
        })
    })?)
}

fn json(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn insert(tx: &Connection, e: &AuditEntry) -> Result<()> {
    tx.prepare_cached(&format!(
        "INSERT INTO audit ({AUDIT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))?
    .execute(params![
        e.seq as i64,
        e.at.as_microsecond(),
        e.actor,
        e.op,
        json(&e.scopes),
        e.count as i64,
        json(&e.ids),
        e.ids_omitted as i64,
        e.outcome,
        e.prev_hash,
        e.hash
    ])?;
    Ok(())
}

impl AuditLog for SqliteStore {
    fn audit_append(&self, ev: &AuditEvent, at: Timestamp) -> Result<AuditEntry> {
        self.write(|tx| {
            let head = chain_in(tx)?;
            let e = AuditEntry::seal(ev, head.head_seq + 1, at, &head.head_hash);
            insert(tx, &e)?;
            tx.prepare_cached("UPDATE audit_chain SET head_seq = ?, head_hash = ? WHERE id = 1")?
                .execute(params![e.seq as i64, e.hash])?;
            Ok(e)
        })
    }

    fn audit_restore(&self, chain: &AuditChain, entries: &[AuditEntry]) -> Result<()> {
        self.write(|tx| {
            for e in entries {
                insert(tx, e)?;
            }
            tx.prepare_cached(
                "UPDATE audit_chain SET anchor_seq = ?, anchor_hash = ?, head_seq = ?, head_hash = ? WHERE id = 1",
            )?
            .execute(params![
                chain.anchor_seq as i64,
                chain.anchor_hash,
                chain.head_seq as i64,
                chain.head_hash
            ])?;
            Ok(())
        })
    }

    fn audit_query(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
        q.validate()?;
        let mut w = vec!["1 = 1".to_string()];
        let mut p: Vec<SqlValue> = Vec::new();
        if let Some(s) = q.since {
            w.push("at >= ?".into());
            p.push(SqlValue::Integer(s.as_microsecond()));
        }
        if let Some(u) = q.until {
            w.push("at < ?".into());
            p.push(SqlValue::Integer(u.as_microsecond()));
        }
        if let Some(a) = &q.actor {
            w.push("actor = ?".into());
            p.push(SqlValue::Text(a.clone()));
        }
        if let Some(o) = &q.op {
            w.push("op = ?".into());
            p.push(SqlValue::Text(o.clone()));
        }
        if let Some(b) = q.before_seq {
            w.push("seq < ?".into());
            p.push(SqlValue::Integer(b.min(i64::MAX as u64) as i64));
        }
        let pats = q.scope_patterns();
        if !pats.is_empty() {
            w.push(format!(
                "({})",
                vec!["scopes LIKE ? ESCAPE '\\'"; pats.len()].join(" OR ")
            ));
            p.extend(pats.into_iter().map(SqlValue::Text));
        }
        p.push(SqlValue::Integer(q.limit as i64));
        let c = self.conn()?;
        let mut st = c.prepare(&format!(
            "SELECT {AUDIT_COLS} FROM audit WHERE {} ORDER BY seq DESC LIMIT ?",
            w.join(" AND ")
        ))?;
        let rows = st
            .query_map(params_from_iter(p), read_entry)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn audit_range(&self, after: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        let c = self.conn()?;
        let mut st = c.prepare_cached(&format!(
            "SELECT {AUDIT_COLS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?"
        ))?;
        let rows = st
            .query_map(
                params![
                    after.min(i64::MAX as u64) as i64,
                    limit.min(i64::MAX as usize) as i64
                ],
                read_entry,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn audit_chain(&self) -> Result<AuditChain> {
        let c = self.conn()?;
        chain_in(&c)
    }

    fn audit_prune(
        &self,
        cutoff: Option<Timestamp>,
        max_entries: Option<u64>,
    ) -> Result<AuditPrune> {
        self.write(|tx| {
            let chain = chain_in(tx)?;
            let old: Option<i64> = match cutoff {
                Some(c) => tx
                    .prepare_cached("SELECT MAX(seq) FROM audit WHERE at < ?")?
                    .query_row([c.as_microsecond()], |r| r.get(0))?,
                None => None,
            };
            let Some(through) = prune_through(&chain, max_entries, old.map(|s| s as u64)) else {
                return Ok(AuditPrune {
                    removed: 0,
                    anchor_seq: chain.anchor_seq,
                });
            };
            let hash: String = tx
                .prepare_cached("SELECT hash FROM audit WHERE seq = ?")?
                .query_row([through as i64], |r| r.get(0))
                .optional()?
                .ok_or_else(|| crate::store::memory::missing_entry(through))?;
            let removed = tx
                .prepare_cached("DELETE FROM audit WHERE seq <= ?")?
                .execute([through as i64])?;
            tx.prepare_cached(
                "UPDATE audit_chain SET anchor_seq = ?, anchor_hash = ? WHERE id = 1",
            )?
            .execute(params![(through + 1) as i64, hash])?;
            Ok(AuditPrune {
                removed: removed as u64,
                anchor_seq: through + 1,
            })
        })
    }
}
