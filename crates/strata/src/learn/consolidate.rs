//! Consolidation: near-duplicate memories of one scope and kind become one.
//!
//! Agents restate what they know ("the user prefers dark mode", "User
//! prefers dark mode.") and every restatement is a memory that recall
//! ranks, context spends tokens on and a person reads again. Upkeep groups
//! memories whose texts share `consolidate_similarity` of their word
//! shingles (three words in a row, after folding case and punctuation;
//! the whole text for one shorter than that), each group within one exact
//! scope and one kind, so a view that separates scopes never sees two
//! scopes merged.
//!
//! The earliest memory of a group stays: it takes the longest text of the
//! group, the highest importance, every tag, and lists every merged id
//! under its payload's `consolidated.from`, so provenance survives. The
//! others move to the archive (reason `consolidated`), from which `restore`
//! brings them back: nothing is deleted. Pinned and keyed memories (a key
//! is a subject with its own history), events (conversation turns,
//! failures, errors and tool output: a repeated "thanks" is two turns, a
//! failure seen twice is a pattern the failure detector counts) and what
//! the system or a detector wrote are left alone.

use std::collections::{BTreeSet, HashMap};

use crate::model::{Kind, Memory, Source};
use crate::text;

/// Archive reason of a memory merged into another.
pub const CONSOLIDATED: &str = "consolidated";
/// A shingle shared by more memories than this is too common to find
/// duplicates by (a phrase every status update starts with); pairs are
/// still found through their rarer shingles.
const MAX_POSTING: usize = 500;

/// Whether consolidation may merge `m`.
pub(super) fn eligible(m: &Memory) -> bool {
    !m.pinned
        && m.key.is_none()
        && !matches!(
            m.kind,
            Kind::Conversation | Kind::Failure | Kind::Error | Kind::ToolOutput
        )
        && !matches!(m.source, Source::Learned | Source::System)
}

/// The word shingles of a text: hashes of every three folded words in a
/// row; for a text of fewer words, its whole word sequence.
fn shingles(content: &str) -> BTreeSet<u64> {
    use std::hash::{Hash, Hasher};
    let words: Vec<String> = text::words(content).collect();
    let hash = |ws: &[String]| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ws.hash(&mut h);
        h.finish()
    };
    if words.len() < 3 {
        return if words.is_empty() {
            BTreeSet::new()
        } else {
            [hash(&words)].into()
        };
    }
    words.windows(3).map(hash).collect()
}

fn jaccard(a: &BTreeSet<u64>, b: &BTreeSet<u64>) -> f64 {
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

/// A group to merge: the memory that stays, and those merged into it.
#[derive(Debug)]
pub(super) struct Group {
    pub keep: Memory,
    pub merged: Vec<Memory>,
}

/// Groups of near-duplicates among `peers` (every eligible memory of one
/// scope and kind) that hold at least one of `changed` (ids examined this
/// run): only what changed can have a new duplicate.
pub(super) fn groups(peers: Vec<Memory>, changed: &BTreeSet<&str>, threshold: f64) -> Vec<Group> {
    let sh: Vec<BTreeSet<u64>> = peers.iter().map(|m| shingles(&m.content)).collect();
    let mut postings: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, s) in sh.iter().enumerate() {
        for h in s {
            postings.entry(*h).or_default().push(i);
        }
    }
    // Union-find over the pairs that reach the threshold.
    let mut parent: Vec<usize> = (0..peers.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    for (i, m) in peers.iter().enumerate() {
        if !changed.contains(m.id.as_str()) || sh[i].is_empty() {
            continue;
        }
        let mut seen = BTreeSet::new();
        for h in &sh[i] {
            let list = &postings[h];
            if list.len() > MAX_POSTING {
                continue;
            }
            for &j in list {
                if j != i && seen.insert(j) && jaccard(&sh[i], &sh[j]) >= threshold {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    if a != b {
                        parent[a.max(b)] = a.min(b);
                    }
                }
            }
        }
    }
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..peers.len() {
        let r = root(&mut parent, i);
        members.entry(r).or_default().push(i);
    }
    let mut slots: Vec<Option<Memory>> = peers.into_iter().map(Some).collect();
    let mut out: Vec<Group> = members
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|g| {
            let mut ms: Vec<Memory> = g.into_iter().filter_map(|i| slots[i].take()).collect();
            ms.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
            let keep = ms.remove(0);
            Group { keep, merged: ms }
        })
        .collect();
    out.sort_by(|a, b| a.keep.id.cmp(&b.keep.id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(id: &str, text: &str, at_ms: i64) -> Memory {
        let at = jiff::Timestamp::from_millisecond(at_ms).unwrap();
        let mut m = crate::testutil::memory("global", text, at);
        m.id = id.into();
        m.kind = Kind::Finding;
        m
    }

    #[test]
    fn restatements_group_and_the_earliest_stays() {
        let peers = vec![
            memory("b", "The user prefers dark mode in the editor.", 2),
            memory("a", "the user prefers dark mode in the editor", 1),
            memory("c", "The user prefers light mode in the terminal.", 3),
            memory("d", "The USER prefers dark-mode in the editor!", 4),
        ];
        let changed: BTreeSet<&str> = ["d"].into();
        let g = groups(peers, &changed, 0.8);
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!(g[0].keep.id, "a");
        let merged: Vec<&str> = g[0].merged.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(merged, ["b", "d"]);
    }

    #[test]
    fn only_what_changed_is_looked_for_and_short_texts_match_whole() {
        let peers = vec![
            memory("a", "Ship it", 1),
            memory("b", "ship it!", 2),
            memory("c", "Ship it now", 3),
        ];
        assert!(groups(peers.clone(), &BTreeSet::new(), 0.8).is_empty());
        let g = groups(peers, &["b"].into(), 0.8);
        assert_eq!(g.len(), 1);
        let merged: Vec<&str> = g[0].merged.iter().map(|m| m.id.as_str()).collect();
        assert_eq!((g[0].keep.id.as_str(), merged), ("a", vec!["b"]));
    }

    #[test]
    fn what_is_not_eligible() {
        let base = memory("a", "x y z", 1);
        assert!(eligible(&base));
        let mut m = base.clone();
        m.pinned = true;
        assert!(!eligible(&m));
        let mut m = base.clone();
        m.key = Some("k".into());
        assert!(!eligible(&m));
        let mut m = base.clone();
        m.kind = Kind::Conversation;
        assert!(!eligible(&m));
        let mut m = base.clone();
        m.kind = Kind::Failure;
        assert!(!eligible(&m), "a failure seen twice is two events");
        let mut m = base;
        m.source = Source::Learned;
        assert!(!eligible(&m));
    }
}
