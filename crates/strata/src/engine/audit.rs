//! The engine's side of the audit trail: recording a call (when `[audit]`
//! is on), querying, verifying the chain, and retention (run by upkeep).
//! The engine records nothing by itself: the front ends know who called
//! and what the call touched, and record it with [`Engine::audit_record`].

use jiff::{SignedDuration, Timestamp};

use super::Engine;
use crate::Result;
use crate::audit::{
    self, AuditConfig, AuditEntry, AuditEvent, AuditPrune, AuditQuery, AuditVerify,
};

/// Entries read per round trip while verifying.
const VERIFY_PAGE: usize = 5_000;

impl Engine {
    /// The `[audit]` settings.
    pub fn audit_config(&self) -> &AuditConfig {
        &self.cfg.audit
    }

    /// Records `ev` when `[audit] enabled` (else does nothing and returns
    /// `None`). A front end calls it once per call it served, after the
    /// call: with the ids written or deleted, never content or query text.
    pub fn audit_record(&self, ev: &AuditEvent) -> Result<Option<AuditEntry>> {
        if !self.cfg.audit.enabled {
            return Ok(None);
        }
        self.store.audit_append(ev, self.now()).map(Some)
    }

    /// Recorded entries `q` selects, newest first (whether or not
    /// recording is on now).
    pub fn audit_query(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
        self.store.audit_query(q)
    }

    /// Checks the whole kept chain: every entry as recorded, none missing
    /// between the anchor and the head. Names the first entry found
    /// changed or missing.
    pub fn audit_verify(&self) -> Result<AuditVerify> {
        let chain = self.store.audit_chain()?;
        let store = &self.store;
        let mut after = chain.anchor_seq.saturating_sub(1);
        let mut page: std::vec::IntoIter<AuditEntry> = Vec::new().into_iter();
        let mut done = false;
        let mut entries = std::iter::from_fn(move || {
            loop {
                if let Some(e) = page.next() {
                    after = e.seq;
                    return Some(Ok(e));
                }
                if done {
                    return None;
                }
                match store.audit_range(after, VERIFY_PAGE) {
                    Ok(v) => {
                        done = v.len() < VERIFY_PAGE;
                        page = v.into_iter();
                    }
                    Err(e) => {
                        done = true;
                        return Some(Err(e));
                    }
                }
            }
        });
        audit::verify(&chain, &mut entries)
    }

    /// Applies `[audit] retention_days` and `max_entries`: removes the
    /// oldest entries beyond them, anchoring the chain at the oldest kept
    /// one, and records the removal (op `audit_prune`, as `actor`) when it
    /// removed anything and recording is on.
    pub fn audit_prune(&self, actor: &str) -> Result<AuditPrune> {
        let cfg = &self.cfg.audit;
        let cutoff = (cfg.retention_days > 0).then(|| {
            let age = SignedDuration::from_hours(cfg.retention_days as i64 * 24);
            self.now().checked_sub(age).unwrap_or(Timestamp::MIN)
        });
        let max = (cfg.max_entries > 0).then_some(cfg.max_entries);
        let pruned = self.store.audit_prune(cutoff, max)?;
        if pruned.removed > 0 {
            self.audit_record(&AuditEvent::new(actor, "audit_prune").count(pruned.removed))?;
        }
        Ok(pruned)
    }
}
