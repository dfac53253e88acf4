//! The audit trail in PostgreSQL (schema version 3): `audit` rows and the
//! one `audit_chain` row. An append locks that row (`FOR UPDATE`) in its
//! own transaction, so the nodes sharing the schema take numbers one at a
//! time and the chain never forks, without waiting for the memories'
//! write lock (the schema's advisory lock).

use super::*;
use crate::audit::{AuditChain, AuditEntry, AuditEvent, AuditPrune, AuditQuery, prune_through};
use crate::store::AuditLog;

const AUDIT_COLS: &str =
    "seq, at, actor, op, scopes, count, ids, ids_omitted, outcome, prev_hash, hash";

/// A stored entry; a list column that is not a JSON list of strings reads
/// as `["<unreadable>"]`, so verification names the entry (its hash no
/// longer matches) instead of failing as a whole.
fn read_entry(r: &Row) -> Result<AuditEntry> {
    let list = |i: usize| -> Vec<String> {
        serde_json::from_str(r.get::<_, &str>(i)).unwrap_or_else(|_| vec!["<unreadable>".into()])
    };
    let seq: i64 = r.get(0);
    Ok(AuditEntry {
        seq: seq as u64,
        at: Timestamp::from_microsecond(r.get(1)).map_err(|e| Error::Corrupt {
            what: format!("column `at` of audit entry {seq}"),
            source: Box::new(e),
        })?,
        actor: r.get(2),
        op: r.get(3),
        scopes: list(4),
        count: r.get::<_, i64>(5) as u64,
        ids: list(6),
        ids_omitted: r.get::<_, i64>(7) as u64,
        outcome: r.get(8),
        prev_hash: r.get(9),
        hash: r.get(10),
    })
}

fn read_chain(r: &Row) -> AuditChain {
    AuditChain {
        anchor_seq: r.get::<_, i64>(0) as u64,
        anchor_hash: r.get(1),
        head_seq: r.get::<_, i64>(2) as u64,
        head_hash: r.get(3),
    }
}

fn json(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn insert<C: postgres::GenericClient>(tx: &mut pool::Cx<'_, C>, e: &AuditEntry) -> Result<()> {
    tx.execute(
        &format!(
            "INSERT INTO audit ({AUDIT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ),
        &[
            &(e.seq as i64),
            &e.at.as_microsecond(),
            &e.actor,
            &e.op,
            &json(&e.scopes),
            &(e.count as i64),
            &json(&e.ids),
            &(e.ids_omitted as i64),
            &e.outcome,
            &e.prev_hash,
            &e.hash,
        ],
    )?;
    Ok(())
}

impl AuditLog for PostgresStore {
    fn audit_append(&self, ev: &AuditEvent, at: Timestamp) -> Result<AuditEntry> {
        let mut c = self.conn()?;
        c.tx(|tx| {
            let head = read_chain(&tx.query_one(
                "SELECT anchor_seq, anchor_hash, head_seq, head_hash FROM audit_chain WHERE id = 1 FOR UPDATE",
                &[],
            )?);
            let e = AuditEntry::seal(ev, head.head_seq + 1, at, &head.head_hash);
            insert(tx, &e)?;
            tx.execute(
                "UPDATE audit_chain SET head_seq = $1, head_hash = $2 WHERE id = 1",
                &[&(e.seq as i64), &e.hash],
            )?;
            Ok(e)
        })
    }

    fn audit_restore(&self, chain: &AuditChain, entries: &[AuditEntry]) -> Result<()> {
        let mut c = self.conn()?;
        c.tx(|tx| {
            for e in entries {
                insert(tx, e)?;
            }
            tx.execute(
                "UPDATE audit_chain SET anchor_seq = $1, anchor_hash = $2, head_seq = $3, head_hash = $4 WHERE id = 1",
                &[
                    &(chain.anchor_seq as i64),
                    &chain.anchor_hash,
                    &(chain.head_seq as i64),
                    &chain.head_hash,
                ],
            )?;
            Ok(())
        })
    }

    fn audit_query(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
        q.validate()?;
        let mut w = vec!["TRUE".to_string()];
        let mut p: Vec<P> = Vec::new();
        let mut push = |w: &mut Vec<String>, cond: &str, v: P| {
            p.push(v);
            w.push(cond.replace('?', &format!("${}", p.len())));
        };
        if let Some(s) = q.since {
            push(&mut w, "at >= ?", Box::new(s.as_microsecond()));
        }
        if let Some(u) = q.until {
            push(&mut w, "at < ?", Box::new(u.as_microsecond()));
        }
        if let Some(a) = &q.actor {
            push(&mut w, "actor = ?", Box::new(a.clone()));
        }
        if let Some(o) = &q.op {
            push(&mut w, "op = ?", Box::new(o.clone()));
        }
        if let Some(b) = q.before_seq {
            push(&mut w, "seq < ?", Box::new(b.min(i64::MAX as u64) as i64));
        }
        let pats = q.scope_patterns();
        if !pats.is_empty() {
            let mut ors = Vec::new();
            for pat in pats {
                push(&mut ors, "scopes LIKE ? ESCAPE '\\'", Box::new(pat));
            }
            w.push(format!("({})", ors.join(" OR ")));
        }
        push(&mut Vec::new(), "?", Box::new(q.limit as i64));
        let sql = format!(
            "SELECT {AUDIT_COLS} FROM audit WHERE {} ORDER BY seq DESC LIMIT ${}",
            w.join(" AND "),
            p.len()
        );
        let mut c = self.conn()?;
        c.cx().query_p(&sql, &p)?.iter().map(read_entry).collect()
    }

    fn audit_range(&self, after: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        let mut c = self.conn()?;
        c.cx()
            .query(
                &format!("SELECT {AUDIT_COLS} FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2"),
                &[
                    &(after.min(i64::MAX as u64) as i64),
                    &(limit.min(i64::MAX as usize) as i64),
                ],
            )?
            .iter()
            .map(read_entry)
            .collect()
    }

    fn audit_chain(&self) -> Result<AuditChain> {
        let mut c = self.conn()?;
        Ok(read_chain(&c.cx().query_one(
            "SELECT anchor_seq, anchor_hash, head_seq, head_hash FROM audit_chain WHERE id = 1",
            &[],
        )?))
    }

    fn audit_prune(
        &self,
        cutoff: Option<Timestamp>,
        max_entries: Option<u64>,
    ) -> Result<AuditPrune> {
        let mut c = self.conn()?;
        c.tx(|tx| {
            let chain = read_chain(&tx.query_one(
                "SELECT anchor_seq, anchor_hash, head_seq, head_hash FROM audit_chain WHERE id = 1 FOR UPDATE",
                &[],
            )?);
            let old: Option<i64> = match cutoff {
                Some(c) => tx
                    .query_one(
                        "SELECT MAX(seq) FROM audit WHERE at < $1",
                        &[&c.as_microsecond()],
                    )?
                    .get(0),
                None => None,
            };
            let Some(through) = prune_through(&chain, max_entries, old.map(|s| s as u64)) else {
                return Ok(AuditPrune {
                    removed: 0,
                    anchor_seq: chain.anchor_seq,
                });
            };
            let hash: String = tx
                .query_opt(
                    "SELECT hash FROM audit WHERE seq = $1",
                    &[&(through as i64)],
                )?
                .map(|r| r.get(0))
                .ok_or_else(|| crate::store::memory::missing_entry(through))?;
            let removed = tx.execute(
                "DELETE FROM audit WHERE seq <= $1",
                &[&(through as i64)],
            )?;
            tx.execute(
                "UPDATE audit_chain SET anchor_seq = $1, anchor_hash = $2 WHERE id = 1",
                &[&((through + 1) as i64), &hash],
            )?;
            Ok(AuditPrune {
                removed,
                anchor_seq: through + 1,
            })
        })
    }
}
