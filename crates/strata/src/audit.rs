//! The audit trail: who did what to which memories, and when — never what
//! the memories say.
//!
//! Each [`AuditEntry`] records one call: its time, the actor (a token's
//! name, or `local:<user>` for the CLI and the library), the operation, the
//! scopes (or view) it touched, how many memories it returned or changed,
//! the ids of what it wrote or forgot (at most [`MAX_IDS`], with the number
//! left out), and its outcome. Query text, content, payloads and keys are
//! never recorded: a forgotten memory leaves its id in the log and nothing
//! it said.
//!
//! The log is a hash chain. An entry's `hash` is SHA-256 over a canonical
//! encoding of its fields and the `hash` of the entry before it
//! (`prev_hash`), so changing a recorded field, removing an entry or
//! reordering entries breaks the chain at that entry ([`verify`]). Retention
//! removes entries from the oldest end only, and records the removed
//! prefix's last hash as the chain's anchor ([`AuditChain`]): the oldest kept
//! entry must follow the anchor, so verification still covers everything
//! kept. The chain's head (last sequence number and hash) is kept beside the
//! entries as well, so removing the newest entries is found too.
//!
//! What this module owns: the types, sealing (sequence number and hashes)
//! and verification. Where entries are kept is the store's
//! ([`crate::store::AuditLog`]: a table in SQLite and PostgreSQL appended
//! under the write lock or a row lock on the chain head, so processes
//! sharing a store never fork the chain); who records what is the front
//! ends'.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::error::Error;
use crate::scope::Scope;

/// Most ids one entry lists; the rest are counted in `ids_omitted`.
pub const MAX_IDS: usize = 100;

/// Most scopes one entry lists (a view holds at most 256 entries).
pub const MAX_SCOPES: usize = 256;

/// Most entries one query returns.
pub const MAX_QUERY_LIMIT: usize = 10_000;

/// The `prev_hash` of the first entry of a log that was never pruned.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `[audit]` of `strata.toml`.
///
/// Off by default: every audited read becomes a write (one row and a
/// transaction on the store's write path, and on PostgreSQL a row lock all
/// nodes take in turn), which a single person's local store gains little
/// from. A team or a server holding other people's data turns it on.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Whether calls are recorded.
    pub enabled: bool,
    /// Entries older than this many days are removed by upkeep (0: kept
    /// regardless of age).
    pub retention_days: u64,
    /// At most this many entries are kept; upkeep removes the oldest
    /// beyond (0: no bound).
    pub max_entries: u64,
}

impl Default for AuditConfig {
    fn default() -> AuditConfig {
        AuditConfig {
            enabled: false,
            retention_days: 365,
            max_entries: 1_000_000,
        }
    }
}

impl AuditConfig {
    /// Checks every value; errors name the key.
    pub fn validate(&self) -> Result<()> {
        if self.retention_days > 365 * 1000 {
            return Err(Error::InvalidConfig(format!(
                "audit.retention_days: {} is over 365000",
                self.retention_days
            )));
        }
        if self.max_entries > i64::MAX as u64 {
            return Err(Error::InvalidConfig(format!(
                "audit.max_entries: {} is over {}",
                self.max_entries,
                i64::MAX
            )));
        }
        Ok(())
    }
}

/// The actor of calls made by the local user: `local:<user>` from `$USER`
/// (or `$LOGNAME`, `$USERNAME`), else the name `/etc/passwd` gives the
/// process's user id, else `local:unknown`.
pub fn local_actor() -> String {
    let user = ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .or_else(passwd_name)
        .unwrap_or_else(|| "unknown".into());
    format!("local:{user}")
}

/// The login name of this process's user, from `/etc/passwd` (the owner of
/// `/proc/self` is the process's user id).
#[cfg(unix)]
fn passwd_name() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid().to_string();
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == uid)
        .map(|f| f[0].to_string())
}

#[cfg(not(unix))]
fn passwd_name() -> Option<String> {
    None
}

/// One call to record: what a front end knows about it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Who: a token's name, `anonymous` (a server without authentication),
    /// or `local:<user>`.
    pub actor: String,
    /// The operation (`remember`, `recall`, `forget`, …).
    pub op: String,
    /// The scopes or view entries the call named or touched.
    pub scopes: Vec<String>,
    /// Memories returned, written, moved or deleted.
    pub count: u64,
    /// Ids written, changed or deleted (reads leave this empty).
    pub ids: Vec<String>,
    /// `ok`, or the error code the caller was answered with.
    pub outcome: String,
}

impl AuditEvent {
    /// A successful `op` by `actor`.
    pub fn new(actor: impl Into<String>, op: impl Into<String>) -> AuditEvent {
        AuditEvent {
            actor: actor.into(),
            op: op.into(),
            outcome: "ok".into(),
            ..AuditEvent::default()
        }
    }

    /// With the scopes touched.
    pub fn scopes<I, S>(mut self, scopes: I) -> AuditEvent
    where
        I: IntoIterator<Item = S>,
        S: ToString,
    {
        self.scopes = scopes.into_iter().map(|s| s.to_string()).collect();
        self
    }

    /// With a count.
    pub fn count(mut self, n: u64) -> AuditEvent {
        self.count = n;
        self
    }

    /// With the ids written or deleted (the count becomes their number
    /// when it was not set).
    pub fn ids<I, S>(mut self, ids: I) -> AuditEvent
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ids = ids.into_iter().map(Into::into).collect();
        if self.count == 0 {
            self.count = self.ids.len() as u64;
        }
        self
    }

    /// With an outcome other than `ok`.
    pub fn outcome(mut self, outcome: impl Into<String>) -> AuditEvent {
        self.outcome = outcome.into();
        self
    }
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Position in the chain, from 1, without gaps.
    pub seq: u64,
    /// When it was recorded (microsecond precision).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// Who.
    pub actor: String,
    /// The operation.
    pub op: String,
    /// The scopes or view entries named or touched.
    pub scopes: Vec<String>,
    /// Memories returned, written, moved or deleted.
    pub count: u64,
    /// Ids written, changed or deleted, at most [`MAX_IDS`].
    pub ids: Vec<String>,
    /// Ids left out of `ids`.
    pub ids_omitted: u64,
    /// `ok`, or the error code the caller was answered with.
    pub outcome: String,
    /// The `hash` of the entry before (or the chain's anchor).
    pub prev_hash: String,
    /// SHA-256 (hex) of this entry's canonical encoding and `prev_hash`.
    pub hash: String,
}

impl AuditEntry {
    /// Makes the entry that follows `prev_hash` as number `seq`: the time
    /// cut to microseconds (what every store keeps), the lists capped, the
    /// hash computed.
    pub fn seal(ev: &AuditEvent, seq: u64, at: Timestamp, prev_hash: &str) -> AuditEntry {
        let at = Timestamp::from_microsecond(at.as_microsecond()).unwrap_or(at);
        let kept = ev.ids.len().min(MAX_IDS);
        let mut e = AuditEntry {
            seq,
            at,
            actor: ev.actor.clone(),
            op: ev.op.clone(),
            scopes: ev.scopes.iter().take(MAX_SCOPES).cloned().collect(),
            count: ev.count,
            ids: ev.ids[..kept].to_vec(),
            ids_omitted: (ev.ids.len() - kept) as u64,
            outcome: ev.outcome.clone(),
            prev_hash: prev_hash.to_string(),
            hash: String::new(),
        };
        e.hash = e.compute_hash();
        e
    }

    /// SHA-256 (lowercase hex) over the canonical encoding: a JSON array of
    /// a format number and every field but `hash`, in a fixed order, the
    /// time as microseconds since the epoch.
    pub fn compute_hash(&self) -> String {
        let canonical = serde_json::json!([
            1,
            self.seq,
            self.at.as_microsecond(),
            self.actor,
            self.op,
            self.scopes,
            self.count,
            self.ids,
            self.ids_omitted,
            self.outcome,
            self.prev_hash,
        ]);
        let digest = Sha256::digest(canonical.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Where the chain starts and ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditChain {
    /// The sequence number the oldest kept entry must have (1 until
    /// retention removed entries).
    pub anchor_seq: u64,
    /// The `prev_hash` the oldest kept entry must carry ([`GENESIS`] until
    /// retention removed entries).
    pub anchor_hash: String,
    /// The newest entry's sequence number (0 before the first).
    pub head_seq: u64,
    /// The newest entry's hash.
    pub head_hash: String,
}

impl Default for AuditChain {
    fn default() -> AuditChain {
        AuditChain {
            anchor_seq: 1,
            anchor_hash: GENESIS.into(),
            head_seq: 0,
            head_hash: GENESIS.into(),
        }
    }
}

/// Which entries a query returns: all conditions hold, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditQuery {
    /// Recorded at or after.
    pub since: Option<Timestamp>,
    /// Recorded before.
    pub until: Option<Timestamp>,
    /// This actor exactly.
    pub actor: Option<String>,
    /// This operation exactly.
    pub op: Option<String>,
    /// Touching this scope: a recorded scope at or below it, or a recorded
    /// subtree (`x/**`) that holds it.
    pub scope: Option<Scope>,
    /// Only entries numbered below this (paging back).
    pub before_seq: Option<u64>,
    /// At most this many (1 to [`MAX_QUERY_LIMIT`]).
    pub limit: usize,
}

impl Default for AuditQuery {
    fn default() -> AuditQuery {
        AuditQuery {
            since: None,
            until: None,
            actor: None,
            op: None,
            scope: None,
            before_seq: None,
            limit: 100,
        }
    }
}

/// An audit query as the CLI's flags and `GET /v1/audit`'s parameters give
/// it: times (RFC 3339 or relative, as [`crate::parse_time`] reads them)
/// and a scope as text.
#[derive(Clone, Debug, Default)]
pub struct AuditFilters<'a> {
    /// Recorded at or after.
    pub since: Option<&'a str>,
    /// Recorded before.
    pub until: Option<&'a str>,
    /// This actor exactly.
    pub actor: Option<&'a str>,
    /// This operation exactly.
    pub op: Option<&'a str>,
    /// Touching this scope.
    pub scope: Option<&'a str>,
    /// Only entries numbered below this.
    pub before_seq: Option<u64>,
    /// At most this many (default 100).
    pub limit: Option<usize>,
}

impl AuditFilters<'_> {
    /// The query, parsed and checked; errors name the field.
    pub fn query(&self) -> Result<AuditQuery> {
        let time =
            |field: &str, t: Option<&str>| t.map(|t| crate::parse_time(field, t)).transpose();
        let q = AuditQuery {
            since: time("since", self.since)?,
            until: time("until", self.until)?,
            actor: self.actor.map(str::to_string),
            op: self.op.map(str::to_string),
            scope: self
                .scope
                .map(|s| Scope::parse(s).map_err(|e| Error::field("scope", e)))
                .transpose()?,
            before_seq: self.before_seq,
            limit: self.limit.unwrap_or(100),
        };
        q.validate()?;
        Ok(q)
    }
}

impl AuditQuery {
    /// Checks the limit and the time range; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if self.limit == 0 || self.limit > MAX_QUERY_LIMIT {
            return Err(Error::field(
                "limit",
                format!("{} is not between 1 and {MAX_QUERY_LIMIT}", self.limit),
            ));
        }
        if let (Some(s), Some(u)) = (self.since, self.until)
            && s > u
        {
            return Err(Error::field("until", format!("{u} is before since {s}")));
        }
        Ok(())
    }

    /// Whether `e` is selected (the limit aside): the reference every
    /// store's SQL is tested against.
    pub fn matches(&self, e: &AuditEntry) -> bool {
        self.since.is_none_or(|s| e.at >= s)
            && self.until.is_none_or(|u| e.at < u)
            && self.actor.as_ref().is_none_or(|a| &e.actor == a)
            && self.op.as_ref().is_none_or(|o| &e.op == o)
            && self.before_seq.is_none_or(|b| e.seq < b)
            && self
                .scope
                .as_ref()
                .is_none_or(|s| e.scopes.iter().any(|r| touches(r, s.as_str())))
    }

    /// `LIKE` patterns (escape `\`) over the JSON array of an entry's
    /// scopes, any of which matching is the same as [`AuditQuery::matches`]'
    /// scope condition: scopes are ASCII letters, digits and `._-/`, so
    /// each sits in the JSON text between quotes as written.
    pub fn scope_patterns(&self) -> Vec<String> {
        let Some(s) = &self.scope else {
            return Vec::new();
        };
        let esc = |t: &str| {
            t.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        };
        let s = s.as_str();
        let mut out = vec![format!("%\"{}\"%", esc(s)), format!("%\"{}/%", esc(s))];
        for (i, _) in s.match_indices('/') {
            out.push(format!("%\"{}/**\"%", esc(&s[..i])));
        }
        out
    }
}

/// Whether recorded scope (or view entry) `r` touches scope `s`.
fn touches(r: &str, s: &str) -> bool {
    let within = |a: &str, b: &str| a == b || a.strip_prefix(b).is_some_and(|t| t.starts_with('/'));
    match r.strip_suffix("/**") {
        Some(base) => within(base, s) || within(s, base),
        None => within(r, s),
    }
}

/// What [`verify`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditVerify {
    /// Whether every kept entry is as recorded and none is missing.
    pub ok: bool,
    /// Entries checked.
    pub entries: u64,
    /// The oldest kept entry's number (the chain's anchor).
    pub first_seq: u64,
    /// The newest entry's number.
    pub last_seq: u64,
    /// The newest entry's hash: kept somewhere else, it lets a later
    /// verify show that the chain up to it was not rewritten as a whole.
    pub head_hash: String,
    /// The first entry found changed or missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<u64>,
    /// What is wrong with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Checks entries (ascending by `seq`, those up to `chain.head_seq`)
/// against the chain: numbers without gaps from the anchor, each
/// `prev_hash` the hash before it, each hash recomputed, and the last entry
/// the head. Stops at the first problem.
pub fn verify(
    chain: &AuditChain,
    entries: &mut dyn Iterator<Item = Result<AuditEntry>>,
) -> Result<AuditVerify> {
    let mut v = AuditVerify {
        ok: true,
        entries: 0,
        first_seq: chain.anchor_seq,
        last_seq: chain.head_seq,
        head_hash: chain.head_hash.clone(),
        first_bad: None,
        problem: None,
    };
    let bad = |v: &mut AuditVerify, seq: u64, problem: String| {
        v.ok = false;
        v.first_bad = Some(seq);
        v.problem = Some(problem);
    };
    let mut next = chain.anchor_seq;
    let mut prev = chain.anchor_hash.clone();
    for e in entries {
        let e = e?;
        if e.seq > chain.head_seq {
            break;
        }
        if e.seq != next {
            if e.seq > next {
                bad(&mut v, next, format!("entry {next} is missing"));
            } else {
                bad(
                    &mut v,
                    e.seq,
                    format!("entry {} is out of order or repeated", e.seq),
                );
            }
            return Ok(v);
        }
        if e.prev_hash != prev {
            let after = if e.seq == chain.anchor_seq {
                "the chain's anchor".to_string()
            } else {
                format!("entry {}", e.seq - 1)
            };
            bad(
                &mut v,
                e.seq,
                format!(
                    "entry {} does not follow {after} (its prev_hash differs)",
                    e.seq
                ),
            );
            return Ok(v);
        }
        if e.compute_hash() != e.hash {
            bad(
                &mut v,
                e.seq,
                format!(
                    "entry {} was changed (its hash does not match its fields)",
                    e.seq
                ),
            );
            return Ok(v);
        }
        v.entries += 1;
        prev = e.hash;
        next += 1;
    }
    if next <= chain.head_seq {
        bad(&mut v, next, format!("entry {next} is missing"));
    } else if chain.head_seq >= chain.anchor_seq && prev != chain.head_hash {
        bad(
            &mut v,
            chain.head_seq,
            format!("entry {} is not the chain's recorded head", chain.head_seq),
        );
    }
    Ok(v)
}

/// What a retention pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPrune {
    /// Entries removed.
    pub removed: u64,
    /// The oldest kept entry's number afterwards.
    pub anchor_seq: u64,
}

/// The highest sequence number retention removes: everything older than
/// `cutoff` (by the newest such entry, so the kept part stays a suffix) and
/// everything beyond the newest `max_entries`. `newest_before_cutoff` is
/// the store's answer to "the highest seq recorded before the cutoff".
pub fn prune_through(
    chain: &AuditChain,
    max_entries: Option<u64>,
    newest_before_cutoff: Option<u64>,
) -> Option<u64> {
    let by_count = max_entries
        .filter(|&m| {
            chain.head_seq >= chain.anchor_seq && chain.head_seq - chain.anchor_seq + 1 > m
        })
        .map(|m| chain.head_seq - m);
    let cut = by_count.max(newest_before_cutoff)?;
    (cut >= chain.anchor_seq).then_some(cut.min(chain.head_seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_of(n: u64) -> (AuditChain, Vec<AuditEntry>) {
        let mut prev = GENESIS.to_string();
        let mut v = Vec::new();
        for seq in 1..=n {
            let e = AuditEntry::seal(
                &AuditEvent::new("t", "recall")
                    .scopes(["project/a"])
                    .count(seq),
                seq,
                Timestamp::from_second(seq as i64).unwrap(),
                &prev,
            );
            prev = e.hash.clone();
            v.push(e);
        }
        let chain = AuditChain {
            head_seq: n,
            head_hash: prev,
            ..AuditChain::default()
        };
        (chain, v)
    }

    fn check(chain: &AuditChain, v: &[AuditEntry]) -> AuditVerify {
        verify(chain, &mut v.iter().cloned().map(Ok)).unwrap()
    }

    #[test]
    fn a_changed_removed_or_truncated_entry_is_named() {
        let (chain, v) = chain_of(5);
        assert!(check(&chain, &v).ok);
        let mut changed = v.clone();
        changed[2].actor = "someone-else".into();
        assert_eq!(check(&chain, &changed).first_bad, Some(3));
        let mut removed = v.clone();
        removed.remove(1);
        assert_eq!(check(&chain, &removed).first_bad, Some(2));
        let mut rehashed = v.clone();
        rehashed[1].count = 99;
        rehashed[1].hash = rehashed[1].compute_hash();
        assert_eq!(check(&chain, &rehashed).first_bad, Some(3));
        assert_eq!(check(&chain, &v[..4]).first_bad, Some(5));
        assert_eq!(check(&chain, &v[1..]).first_bad, Some(1));
    }

    #[test]
    fn ids_are_capped_and_counted() {
        let ids: Vec<String> = (0..MAX_IDS + 7).map(|i| format!("id-{i}")).collect();
        let e = AuditEntry::seal(
            &AuditEvent::new("a", "forget").ids(ids),
            1,
            Timestamp::now(),
            GENESIS,
        );
        assert_eq!(e.ids.len(), MAX_IDS);
        assert_eq!(e.ids_omitted, 7);
        assert_eq!(e.count, MAX_IDS as u64 + 7);
    }

    #[test]
    fn scope_filter_and_its_like_patterns_agree() {
        let q = AuditQuery {
            scope: Some(Scope::parse("project/a_b").unwrap()),
            ..AuditQuery::default()
        };
        let like = |pat: &str, text: &str| {
            // A small LIKE with `\` escapes, enough for these patterns.
            fn go(p: &[char], t: &[char]) -> bool {
                match p.first() {
                    None => t.is_empty(),
                    Some('%') => (0..=t.len()).any(|i| go(&p[1..], &t[i..])),
                    Some('\\') => t.first() == p.get(1) && go(&p[2..], &t[1..]),
                    Some('_') => !t.is_empty() && go(&p[1..], &t[1..]),
                    Some(c) => t.first() == Some(c) && go(&p[1..], &t[1..]),
                }
            }
            go(
                &pat.chars().collect::<Vec<_>>(),
                &text.chars().collect::<Vec<_>>(),
            )
        };
        for (recorded, expected) in [
            ("project/a_b", true),
            ("project/a_b/x", true),
            ("project/**", true),
            ("project/a_b/**", true),
            ("project/a_bc", false),
            ("project/aXb", false),
            ("project", false),
            ("global", false),
        ] {
            let e = AuditEntry::seal(
                &AuditEvent::new("a", "list").scopes([recorded]),
                1,
                Timestamp::now(),
                GENESIS,
            );
            assert_eq!(q.matches(&e), expected, "{recorded}");
            let json = serde_json::to_string(&e.scopes).unwrap();
            let by_like = q.scope_patterns().iter().any(|p| like(p, &json));
            assert_eq!(by_like, expected, "{recorded} by LIKE");
        }
    }

    #[test]
    fn retention_cuts_a_prefix() {
        let (chain, _) = chain_of(10);
        assert_eq!(prune_through(&chain, Some(4), None), Some(6));
        assert_eq!(prune_through(&chain, Some(40), None), None);
        assert_eq!(prune_through(&chain, Some(4), Some(8)), Some(8));
        assert_eq!(prune_through(&chain, None, Some(3)), Some(3));
        let later = AuditChain {
            anchor_seq: 7,
            ..chain
        };
        assert_eq!(prune_through(&later, None, Some(3)), None);
    }

    use proptest::prelude::*;

    proptest! {
        /// Over random chains, pruned or not: one field changed or one
        /// entry removed anywhere is named by its number, and an untouched
        /// chain verifies.
        #[test]
        fn verify_names_the_first_change(
            n in 1u64..40,
            keep in proptest::option::of(1u64..40),
            at in 0usize..40,
            how in 0u8..5,
        ) {
            let (mut chain, mut v) = chain_of(n);
            if let Some(k) = keep.filter(|&k| k < n) {
                let cut = n - k;
                chain.anchor_seq = cut + 1;
                chain.anchor_hash = v[cut as usize - 1].hash.clone();
                v.drain(..cut as usize);
            }
            prop_assert!(check(&chain, &v).ok);
            let i = at % v.len();
            let seq = v[i].seq;
            match how {
                0 => v[i].actor.push('x'),
                1 => v[i].count += 1,
                2 => v[i].ids.push("extra".into()),
                3 => v[i].at = Timestamp::from_second(v[i].at.as_second() + 1).unwrap(),
                _ => {
                    v.remove(i);
                }
            }
            let r = check(&chain, &v);
            prop_assert!(!r.ok);
            prop_assert_eq!(r.first_bad, Some(seq));
        }
    }
}
