//! The assembly algorithm.
//!
//! 1. Each source's scope pattern is filled from the request; its
//!    candidates are gathered on [`Signals`] alone (no content loaded): the
//!    `always` keys, the oldest and newest `head_tail` items, and the ranked
//!    candidates (text matches for the query, plus the newest items so a
//!    source with few matches still fills its share).
//! 2. A plan gives each source `share × budget`; what a source leaves
//!    unused flows to the next, and a second round offers whatever is still
//!    free to every source in order. An item that does not fit is cut to its
//!    head and tail when at least [`MIN_CUT`] tokens of it would remain, and
//!    skipped otherwise. Costs come from stored token counts plus the exact
//!    cost of each line's prefix and each section's heading.
//! 3. When candidates were left out and the profile has a `summary_share`,
//!    the plan is redone within the rest of the budget and the summary fills
//!    what is left.
//! 4. Only the chosen memories are loaded; the package is rendered and
//!    counted exactly, and (should an estimate have been short) the
//!    lowest-ranked items are removed until it fits.

use std::collections::{BTreeMap, HashMap, HashSet};

use jiff::Timestamp;

use super::package::{Cand, apply_cut, marker, package_id};
use super::profile::{self, Profile, Render};
use super::render;
use super::render::finish;
use super::summary;
use super::{ContextItem, ContextPackage, ContextRequest, Cut, SourceUsage, Summary, Why};
use crate::Result;
use crate::engine::Engine;
use crate::engine::QueryVector;
use crate::error::Error;
use crate::filter::Filter;
use crate::model::Memory;
use crate::rank::{Relevance, ScoreParts, Signals, Strategy};
use crate::scope::View;
use crate::store::{Order, Query};
use crate::text;
use crate::tokens::TokenCounter;

/// Fewest content tokens worth keeping of a cut item.
pub const MIN_CUT: u32 = 32;

/// A source, filled and with its candidates in fill order (always, head,
/// tail, ranked).
pub(crate) struct Src {
    pub title: String,
    pub scope: String,
    pub share: f64,
    pub skipped: Option<String>,
    pub cands: Vec<Cand>,
    /// Heading plus the blank line before it.
    pub header: u32,
    /// Whether the source has candidates beyond `cands` (a window was hit).
    pub more: bool,
    /// Candidates asked for.
    pub window: usize,
}

/// One chosen candidate.
#[derive(Clone, Copy, Debug)]
struct Pick {
    src: usize,
    cand: usize,
    /// Content tokens allowed when the item is cut.
    room: Option<u32>,
}

/// A source's candidates and whether a window cut some off.
type Gathered = (Vec<Cand>, bool);

/// A selection within a budget.
struct Plan {
    picks: Vec<Pick>,
    used: Vec<u32>,
    taken: Vec<Vec<bool>>,
}

impl Plan {
    fn total(&self) -> u32 {
        self.used.iter().sum()
    }

    fn dropped(&self) -> usize {
        self.taken
            .iter()
            .map(|t| t.iter().filter(|x| !**x).count())
            .sum()
    }
}

/// Token costs of line prefixes, memoized per (kind, day).
pub(crate) struct Costs<'a> {
    counter: &'a TokenCounter,
    prefixes: HashMap<(String, i64), u32>,
}

impl<'a> Costs<'a> {
    pub fn new(counter: &'a TokenCounter) -> Costs<'a> {
        Costs {
            counter,
            prefixes: HashMap::new(),
        }
    }

    /// Tokens of an item's line prefix (plus its newline).
    pub fn prefix(&mut self, kind: &str, at: Timestamp) -> u32 {
        let day = at.as_second().div_euclid(86_400);
        let counter = self.counter;
        *self
            .prefixes
            .entry((kind.to_string(), day))
            // Counted with a one-token stand-in for the content, so the
            // prefix's trailing space joins the first word as it will in
            // the line; the newline is counted apart (it can only merge
            // with what ends the content).
            .or_insert_with(|| counter.count(&format!("{}a\n", render::prefix(kind, at))) - 1)
    }
}

fn plan(srcs: &[Src], budget: u32) -> Plan {
    plan_excluding(srcs, budget, &HashSet::new())
}

/// [`plan`] leaving out the candidates in `exclude` (ids a summary cites).
fn plan_excluding(srcs: &[Src], budget: u32, exclude: &HashSet<&str>) -> Plan {
    let mut p = Plan {
        picks: Vec::new(),
        used: vec![0; srcs.len()],
        taken: srcs
            .iter()
            .map(|s| {
                s.cands
                    .iter()
                    .map(|c| exclude.contains(c.sig.id.as_str()))
                    .collect()
            })
            .collect(),
    };
    let mut carry = 0u32;
    for (i, s) in srcs.iter().enumerate() {
        let cap = (f64::from(budget) * s.share).floor() as u32 + carry;
        let cap = cap.min(budget - p.total());
        // An item that needs cutting takes at most half of what its source
        // has left here, so that one huge memory (in a scope many callers
        // share, say) cannot crowd out everything else of its source.
        let used = fill(&mut p, srcs, i, cap, true);
        carry = cap - used;
    }
    for i in 0..srcs.len() {
        let left = budget - p.total();
        if left == 0 {
            break;
        }
        fill(&mut p, srcs, i, left, false);
    }
    // What is still free goes to the items cut above, in the order they
    // were taken.
    for k in 0..p.picks.len() {
        let left = budget - p.total();
        if left == 0 {
            break;
        }
        let Pick { src, cand, room } = p.picks[k];
        let Some(room) = room else { continue };
        let tokens = srcs[src].cands[cand].sig.tokens;
        let extra = left.min(tokens - room);
        p.picks[k].room = (room + extra < tokens).then_some(room + extra);
        p.used[src] += extra;
    }
    p
}

/// Takes candidates of source `i` into the plan within `cap` tokens (an
/// item that does not fit whole cut to what is left, or with `halve` to
/// half of it); returns the tokens used.
fn fill(p: &mut Plan, srcs: &[Src], i: usize, cap: u32, halve: bool) -> u32 {
    let src = &srcs[i];
    let mut left = cap;
    for (j, c) in src.cands.iter().enumerate() {
        if p.taken[i][j] {
            continue;
        }
        let header = if p.used[i] == 0 { src.header } else { 0 };
        let fixed = header + c.fixed;
        let whole = fixed + c.sig.tokens;
        let limit = if halve {
            left.min((left / 2).max(fixed + MIN_CUT))
        } else {
            left
        };
        let room = if whole <= left {
            None
        } else if limit >= fixed + MIN_CUT && c.sig.tokens > MIN_CUT {
            Some(limit - fixed)
        } else {
            continue;
        };
        let cost = room.map_or(whole, |r| fixed + r);
        p.taken[i][j] = true;
        p.used[i] += cost;
        p.picks.push(Pick {
            src: i,
            cand: j,
            room,
        });
        left -= cost;
        if left < 4 {
            break;
        }
    }
    cap - left
}

/// `content` cut to about `room` tokens: its head and tail around a marker.
pub(crate) fn cut_content(counter: &TokenCounter, content: &str, room: u32) -> (String, Cut) {
    let total = counter.count(content);
    let mark = counter.count(&marker(total)) + 1;
    let keep = room.saturating_sub(mark);
    let head_n = keep / 2 + keep % 2;
    let tail_n = keep / 2;
    let cut = Cut {
        head: head_n,
        tail: tail_n,
        elided: total.saturating_sub(keep),
    };
    (apply_cut(counter, content, cut), cut)
}

impl Engine {
    /// The profile a request names: `"global"` is built in, `"none"` has no
    /// profile (`Ok(None)`), anything else must be configured.
    pub fn resolve_profile(&self, id: &str) -> Result<Option<Profile>> {
        match id {
            "none" => Ok(None),
            "global" => Ok(Some(Profile::builtin_global())),
            _ => self
                .config()
                .profiles
                .get(id)
                .cloned()
                .map(Some)
                .ok_or_else(|| {
                    let known: Vec<&str> = ["none", "global"]
                        .into_iter()
                        .chain(self.config().profiles.keys().map(String::as_str))
                        .collect();
                    Error::field(
                        "profile",
                        format!("unknown profile `{id}` (known: {})", known.join(", ")),
                    )
                }),
        }
    }

    /// Assembles the context a request asks for.
    pub fn context(&self, req: &ContextRequest) -> Result<ContextPackage> {
        for name in req.vars.keys() {
            if !profile::PLACEHOLDERS.contains(&name.as_str()) {
                return Err(Error::field(
                    "vars",
                    format!(
                        "unknown placeholder `{name}` (known: {})",
                        profile::PLACEHOLDERS.join(", ")
                    ),
                ));
            }
        }
        let Some(mut prof) = self.resolve_profile(&req.profile)? else {
            return Ok(empty_package(
                &req.profile,
                req.render.unwrap_or_default(),
                req.max_tokens.unwrap_or(0),
            ));
        };
        if req.profile == "global" && !text::query_terms(&req.query).is_empty() {
            // The built-in profile orders by recency when there is nothing
            // to rank by; a query given to it is what the caller wants
            // ranked by (a configured profile's strategy is its own).
            prof.strategy = Strategy::Hybrid;
        }
        self.context_with_profile(&prof, req)
    }

    /// Assembles a context with a profile built in code (an agent's, say)
    /// rather than one named in the configuration.
    pub fn context_with_profile(
        &self,
        prof: &Profile,
        req: &ContextRequest,
    ) -> Result<ContextPackage> {
        let mut prof = prof.clone();
        if prof.max_tokens == 0 {
            return Err(Error::field(
                format!("profiles.{}.max_tokens", prof.id),
                "must be positive",
            ));
        }
        if let Some(n) = req.max_tokens {
            if n == 0 {
                return Err(Error::field("max_tokens", "must be positive"));
            }
            prof.max_tokens = n;
        }
        let render = req.render.unwrap_or(prof.render);
        let now = req.now.map_or_else(|| self.now(), crate::model::ms);
        let pkg = self.assemble(&prof, req, render, now)?;
        if req.log {
            super::replay::log(self, &prof, req, render, now, &pkg)?;
        }
        Ok(pkg)
    }

    pub(crate) fn assemble(
        &self,
        prof: &Profile,
        req: &ContextRequest,
        render: Render,
        now: Timestamp,
    ) -> Result<ContextPackage> {
        let counter = self.token_counter();
        let terms = text::query_terms(&req.query);
        text::check_query_terms(&terms)?;
        let span = crate::when::named_span(&req.query, now);
        let qvec = match prof.strategy {
            Strategy::Relevance | Strategy::Hybrid => self.query_vector(&req.query)?,
            Strategy::Recency | Strategy::Importance => None,
        };
        let budget = prof.max_tokens;
        let shares = prof.shares();
        let mut costs = Costs::new(counter);
        let mut srcs: Vec<Src> = Vec::with_capacity(prof.sources.len());
        let mut resolved = Vec::with_capacity(prof.sources.len());
        for (i, s) in prof.sources.iter().enumerate() {
            let header = counter.count(&render::markdown_heading(&s.title)) + 1;
            let entry = profile::fill(&s.scope, &req.vars)?;
            let Some(entry) = entry else {
                let missing: Vec<String> = profile::placeholders(&s.scope)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|n| !req.vars.contains_key(n))
                    .collect();
                if !s.optional {
                    return Err(Error::field(
                        missing.first().cloned().unwrap_or_else(|| "vars".into()),
                        format!(
                            "profile `{}` source {i} (`{}`) needs {{{}}}; pass it with the request",
                            prof.id,
                            s.scope,
                            missing.join("}, {")
                        ),
                    ));
                }
                srcs.push(Src {
                    title: s.title.clone(),
                    scope: s.scope.clone(),
                    share: shares[i],
                    skipped: Some(format!("no {{{}}} in the request", missing.join("}, {"))),
                    cands: Vec::new(),
                    header,
                    more: false,
                    window: 0,
                });
                resolved.push(None);
                continue;
            };
            let filter = profile::source_filter(s, prof.include_sensitive)?;
            let view = View::new([entry.clone()]);
            // Enough candidates for the source's own share of short items;
            // widened below if it runs out while budget is left.
            let window = ((f64::from(budget) * shares[i]) as usize / 24).clamp(32, 4000);
            srcs.push(Src {
                title: s.title.clone(),
                scope: entry.to_string(),
                share: shares[i],
                skipped: None,
                cands: Vec::new(),
                header,
                more: false,
                window,
            });
            resolved.push(Some((view, filter)));
        }
        // Sources are independent: gather their candidates in parallel.
        let gathered: Vec<Option<Result<Gathered>>> = std::thread::scope(|sc| {
            let jobs: Vec<_> = resolved
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (view, filter) = r.as_ref()?;
                    let window = srcs[i].window;
                    let terms = &terms;
                    let qvec = qvec.as_ref();
                    let job = move || {
                        let mut costs = Costs::new(counter);
                        self.candidates(
                            prof,
                            &prof.sources[i],
                            view,
                            filter,
                            terms,
                            qvec,
                            span,
                            window,
                            now,
                            &mut costs,
                        )
                    };
                    Some(if resolved.iter().flatten().count() > 1 {
                        Ok(sc.spawn(job))
                    } else {
                        Err(job())
                    })
                })
                .collect();
            jobs.into_iter()
                .map(|j| {
                    j.map(|j| match j {
                        Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                        Err(done) => done,
                    })
                })
                .collect()
        });
        for (src, g) in srcs.iter_mut().zip(gathered) {
            if let Some(g) = g {
                let (cands, more) = g?;
                src.cands = cands;
                src.more = more;
            }
        }

        let mut full = plan(&srcs, budget);
        // A source that used every candidate while budget is left may have
        // more: widen its window and plan again.
        for _ in 0..3 {
            if budget - full.total() < 16 {
                break;
            }
            let mut widened = false;
            for (i, src) in srcs.iter_mut().enumerate() {
                if src.more && full.taken[i].iter().all(|t| *t) {
                    let Some((view, filter)) = &resolved[i] else {
                        continue;
                    };
                    src.window = src.window.saturating_mul(4).min(1_000_000);
                    let (cands, more) = self.candidates(
                        prof,
                        &prof.sources[i],
                        view,
                        filter,
                        &terms,
                        qvec.as_ref(),
                        span,
                        src.window,
                        now,
                        &mut costs,
                    )?;
                    src.cands = cands;
                    src.more = more;
                    widened = true;
                }
            }
            if !widened {
                break;
            }
            full = plan(&srcs, budget);
        }
        let mut chosen = full;
        let mut items_budget = budget;
        let mut summary: Option<Summary> = None;
        if prof.summary_share > 0.0 && chosen.dropped() > 0 {
            let reserve = (f64::from(budget) * prof.summary_share).floor() as u32;
            let smaller = plan(&srcs, budget - reserve);
            let room = budget - smaller.total();
            let header = counter.count(&render::markdown_heading(render::SUMMARY_TITLE)) + 1;
            if room > header + 8 {
                let dropped =
                    dropped_in_order(&srcs, &smaller, summary::max_summarized(room - header));
                let s =
                    summary::summarize(self, prof.summarizer, &dropped, &req.query, room - header)?;
                if let Some(mut s) = s {
                    s.tokens += header;
                    summary = Some(s);
                    chosen = smaller;
                    items_budget = budget - reserve;
                }
            }
        }

        let mut loaded = HashMap::new();
        let mut pkg =
            self.build_package(prof, render, &srcs, &chosen, summary.clone(), &mut loaded)?;
        // Planning counts each line's prefix and content apart, which can
        // only overestimate: give what the exact count left over to more
        // items.
        let slack = budget.saturating_sub(pkg.total_tokens);
        if slack >= 8 && chosen.dropped() > 0 {
            let cited: HashSet<&str> = summary
                .as_ref()
                .map(|s| s.ids.iter().map(String::as_str).collect())
                .unwrap_or_default();
            let wider = plan_excluding(&srcs, (items_budget + slack).min(budget), &cited);
            if wider.picks.len() > chosen.picks.len() {
                let more = self.build_package(prof, render, &srcs, &wider, summary, &mut loaded)?;
                let tokens = |p: &ContextPackage| p.items.iter().map(|i| i.tokens).sum::<u32>();
                if tokens(&more) > tokens(&pkg) {
                    pkg = more;
                }
            }
        }
        Ok(pkg)
    }

    /// Loads what a plan chose and builds the package.
    fn build_package(
        &self,
        prof: &Profile,
        render: Render,
        srcs: &[Src],
        chosen: &Plan,
        summary: Option<Summary>,
        loaded: &mut HashMap<String, Memory>,
    ) -> Result<ContextPackage> {
        let counter = self.token_counter();
        let budget = prof.max_tokens;
        // Load what was chosen (and not loaded by an earlier build).
        let ids: Vec<String> = chosen
            .picks
            .iter()
            .map(|p| &srcs[p.src].cands[p.cand].sig.id)
            .filter(|id| !loaded.contains_key(*id))
            .cloned()
            .collect();
        for m in self.store().get_many(&ids)? {
            loaded.insert(m.id.clone(), m);
        }
        for m in self.hot_get_many(&ids) {
            loaded.insert(m.id.clone(), m);
        }
        let mut picks = chosen.picks.clone();
        picks.sort_by_key(|p| {
            let why = srcs[p.src].cands[p.cand].why;
            (p.src, if why == Why::Tail { 1 } else { 0 }, p.cand)
        });
        let mut items = Vec::with_capacity(picks.len());
        for p in &picks {
            let c = &srcs[p.src].cands[p.cand];
            // Gone when forgotten between ranking and loading.
            let Some(m) = loaded.get(&c.sig.id).cloned() else {
                continue;
            };
            let cut = p.room.map(|room| {
                let (text, cut) = cut_content(counter, &m.content, room);
                let t = counter.count(&text);
                (cut, text, t)
            });
            items.push(ContextItem::of(m, p.src, c.why, c.parts.total, cut));
        }

        let available: u64 = srcs
            .iter()
            .flat_map(|s| s.cands.iter())
            .map(|c| u64::from(c.sig.tokens))
            .sum();
        let per_source: Vec<SourceUsage> = srcs
            .iter()
            .enumerate()
            .map(|(i, s)| SourceUsage {
                title: s.title.clone(),
                scope: s.scope.clone(),
                share: s.share,
                tokens: chosen.used[i],
                items: 0,
                dropped: 0,
                skipped: s.skipped.clone(),
            })
            .collect();
        let mut pkg = ContextPackage {
            id: String::new(),
            profile: prof.id.clone(),
            render,
            max_tokens: budget,
            total_tokens: 0,
            available_tokens: available,
            compression_ratio: 0.0,
            dropped: 0,
            per_source,
            items,
            summary,
        };
        let counts: Vec<usize> = srcs.iter().map(|s| s.cands.len()).collect();
        finish(counter, self.count_cache(), &mut pkg, &counts);
        Ok(pkg)
    }

    /// A source's candidates in fill order (always keys, head, tail,
    /// ranked), and whether a window cut some off.
    #[allow(clippy::too_many_arguments)]
    fn candidates(
        &self,
        prof: &Profile,
        src: &profile::ProfileSource,
        view: &View,
        filter: &Filter,
        terms: &[String],
        qvec: Option<&QueryVector>,
        span: Option<crate::when::Span>,
        window: usize,
        now: Timestamp,
        costs: &mut Costs<'_>,
    ) -> Result<(Vec<Cand>, bool)> {
        let store = self.store();
        let base = Query::view(view.clone(), now).filter(filter.clone());
        let mut more = false;
        let mut pool: BTreeMap<String, (Signals, Relevance)> = BTreeMap::new();
        let strategy = prof.strategy;
        if (!terms.is_empty() || qvec.is_some())
            && matches!(strategy, Strategy::Relevance | Strategy::Hybrid)
        {
            let hits = self.relevant(&base, terms, qvec, window)?;
            more |= hits.iter().filter(|(_, r)| r.bm25.is_some()).count() >= window;
            for (s, r) in hits {
                pool.insert(s.id.clone(), (s, r));
            }
        }
        let rest = match strategy {
            // Exact importance ranking reads every candidate's signals.
            Strategy::Importance => store.query_signals(&base)?,
            Strategy::Hybrid if terms.is_empty() => store.query_signals(&base)?,
            _ => crate::engine::said_first(
                window,
                |s| s,
                |n| store.query_signals(&base.clone().limit(n)),
            )?,
        };
        more |= rest.len() >= window;
        for s in rest {
            pool.entry(s.id.clone())
                .or_insert((s, Relevance::default()));
        }
        // Ephemeral sessions' memories (the hot tier): those that match the
        // query with their text match, then every other the source selects.
        if matches!(strategy, Strategy::Relevance | Strategy::Hybrid) && !terms.is_empty() {
            for (m, r) in self.hot_candidates(&base, terms) {
                pool.insert(m.id.clone(), (Signals::of(&m), r));
            }
        }
        for (m, r) in self.hot_candidates(&base, &[]) {
            pool.entry(m.id.clone()).or_insert((Signals::of(&m), r));
        }
        let mut head: Vec<String> = Vec::new();
        let mut tail: Vec<String> = Vec::new();
        if prof.head_tail > 0 {
            let q = base.clone().order(Order::Oldest).limit(prof.head_tail);
            for s in store.query_signals(&q)? {
                head.push(s.id.clone());
                pool.entry(s.id.clone())
                    .or_insert((s, Relevance::default()));
            }
            let q = base.clone().order(Order::Newest).limit(prof.head_tail);
            let mut newest: Vec<Signals> = store.query_signals(&q)?;
            newest.reverse();
            for s in newest {
                if !head.contains(&s.id) {
                    tail.push(s.id.clone());
                    pool.entry(s.id.clone())
                        .or_insert((s, Relevance::default()));
                }
            }
        }
        let mut always: Vec<String> = Vec::new();
        if !src.always.is_empty() {
            let keyed = Filter::parse(&serde_json::json!({
                "$and": [ { "key": { "$in": src.always } } ]
            }))?;
            let q = base
                .clone()
                .filter(Filter::And(vec![filter.clone(), keyed]));
            let mut found = store.query(&q)?;
            found.sort_by_key(|m| {
                src.always
                    .iter()
                    .position(|k| m.key.as_deref() == Some(k.as_str()))
                    .unwrap_or(usize::MAX)
            });
            for m in found {
                always.push(m.id.clone());
                pool.entry(m.id.clone())
                    .or_insert((Signals::of(&m), Relevance::default()));
            }
        }
        let ranked = self.rank(pool.into_values().collect(), strategy, now, span);
        let mut by_id: HashMap<String, (Signals, ScoreParts)> = HashMap::new();
        let mut order: Vec<String> = Vec::with_capacity(ranked.len());
        for (s, parts) in ranked {
            order.push(s.id.clone());
            by_id.insert(s.id.clone(), (s, parts));
        }
        let order = learned_last(order, &by_id);
        let mut out = Vec::with_capacity(order.len());
        let mut seen: HashSet<String> = HashSet::new();
        let groups: [(&[String], Why); 3] = [
            (&always, Why::Always),
            (&head, Why::Head),
            (&tail, Why::Tail),
        ];
        for (ids, why) in groups {
            for id in ids {
                if seen.insert(id.clone())
                    && let Some((s, p)) = by_id.get(id)
                {
                    out.push(Cand {
                        fixed: costs.prefix(&s.kind, s.created_at),
                        sig: s.clone(),
                        parts: p.clone(),
                        why,
                    });
                }
            }
        }
        for id in order {
            if seen.insert(id.clone())
                && let Some((s, p)) = by_id.remove(&id)
            {
                out.push(Cand {
                    fixed: costs.prefix(&s.kind, s.created_at),
                    sig: s,
                    parts: p,
                    why: Why::Rank,
                });
            }
        }
        Ok((out, more))
    }
}

/// `order` (candidate ids, best first) with the learned memories moved
/// after every other, each group in its order. A learned memory restates
/// what was said (its evidence); in a source that holds both, a context
/// spends its budget on what was said, and a pattern goes in with room to
/// spare. With text search scoring what was said against itself alone
/// (`store::search`), a context's memories that were said are then the
/// same with learning as without. A learning agent gets its learned
/// memories through a source of their own, with its own share of the
/// budget (`agent.rs`). docs/learning.md measures the alternatives.
fn learned_last(order: Vec<String>, by_id: &HashMap<String, (Signals, ScoreParts)>) -> Vec<String> {
    let (mut said, learned): (Vec<String>, Vec<String>) = order
        .into_iter()
        .partition(|id| by_id.get(id).is_none_or(|(s, _)| !s.learned));
    said.extend(learned);
    said
}

/// The first `n` candidates a plan left out, best first: sources take
/// turns, each giving its best remaining candidate.
fn dropped_in_order(srcs: &[Src], p: &Plan, n: usize) -> Vec<(usize, Cand)> {
    let mut left: Vec<Vec<&Cand>> = srcs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.cands
                .iter()
                .enumerate()
                .filter(|(j, _)| !p.taken[i][*j])
                .map(|(_, c)| c)
                .take(n)
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    let mut pos = 0;
    while out.len() < n && left.iter().any(|l| pos < l.len()) {
        for (i, l) in left.iter_mut().enumerate() {
            if let Some(c) = l.get(pos)
                && out.len() < n
            {
                out.push((i, (*c).clone()));
            }
        }
        pos += 1;
    }
    out
}

/// The package of profile `"none"`.
pub(crate) fn empty_package(profile: &str, render: Render, max_tokens: u32) -> ContextPackage {
    let mut pkg = ContextPackage {
        id: String::new(),
        profile: profile.to_string(),
        render,
        max_tokens,
        total_tokens: 0,
        available_tokens: 0,
        compression_ratio: 1.0,
        dropped: 0,
        per_source: Vec::new(),
        items: Vec::new(),
        summary: None,
    };
    pkg.id = package_id(&pkg);
    pkg
}
