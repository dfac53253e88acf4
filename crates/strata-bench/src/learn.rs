//! `strata eval learning`: synthetic agent histories with planted patterns,
//! and how well upkeep's detectors find them.
//!
//! The generator writes, per project, sessions spread over simulated
//! months: conversation turns that state standing instructions (each in
//! one to three sessions, with varied openings and wording), failures that
//! repeat with other values (numbers, hosts, paths), single failures, later
//! findings that fix some repeated ones, facts that change (a key written
//! again), notes restated in later sessions (in other case, punctuation,
//! or with a word before or after), and distractors: talk that opens like
//! an instruction ("don't worry", "always the same error"), questions,
//! reported speech, the assistant's own instructions, and notes that
//! differ from a restated one in a single word (another service). Each
//! project also has an area of confusion (a question, then "I still don't
//! get it" at once or the concept named as unclear in a later session,
//! sometimes the question again), beside a bare "Sorry, I don't
//! understand." opening a session and a one-off confusion about a build.
//! Each project also has one or two recurring topics, named in three to
//! five sessions in other words each time (24 sentences around five names
//! of each of 16 subjects), beside a topic named in two sessions only, one
//! named three to five times in one session, one word of a topic said with
//! other things in four sessions, and the project's codename in most
//! sessions. Every planted item is labelled, so the
//! report gives each detector's precision and recall, the fixes named
//! correctly, and `as_of` answers before and after each change.
//!
//! A second, larger store (`memories`) times a full learning run and an
//! incremental one after one more session in a tenth of the projects.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use strata::{Engine, Kind, NewMemory, Recall, Role, Scope, View};

use crate::rng::Rng;

/// What to generate.
#[derive(Clone, Debug)]
pub struct LearningOptions {
    /// Projects (each its own scope).
    pub projects: usize,
    /// Sessions per project.
    pub sessions: usize,
    /// Filler turns per session.
    pub turns: usize,
    /// Memories of the timing store (0 skips timing).
    pub memories: usize,
    /// Random seed.
    pub seed: u64,
}

/// One detector's score.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DetectorScore {
    /// Patterns planted.
    pub planted: usize,
    /// Learned memories written by the detector.
    pub learned: usize,
    /// Learned memories whose evidence is one planted pattern's.
    pub correct: usize,
    /// Planted patterns with at least one correct learned memory.
    pub found: usize,
    /// Planted patterns learned as more than one memory.
    pub split: usize,
    /// correct / learned.
    pub precision: f64,
    /// found / planted.
    pub recall: f64,
}

impl DetectorScore {
    fn finish(&mut self) {
        self.precision = ratio(self.correct, self.learned);
        self.recall = ratio(self.found, self.planted);
    }
}

/// Timing of learning over a large store.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LearningTiming {
    /// Memories in the store.
    pub memories: usize,
    /// Seconds of the first (full) run.
    pub full_secs: f64,
    /// Memories the full run examined.
    pub full_examined: usize,
    /// Seconds of the next run, after one more session in a tenth of the
    /// projects.
    pub incremental_secs: f64,
    /// Memories the incremental run examined: those written since, and
    /// those the full run's consolidation changed.
    pub incremental_examined: usize,
    /// Memories written between the two runs.
    pub added: usize,
    /// Memories the full run merged into another.
    pub full_consolidated: usize,
}

/// The report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LearningReport {
    /// Memories in the labelled store.
    pub memories: usize,
    /// Stated preferences and standing instructions.
    pub preference: DetectorScore,
    /// Repeated failures.
    pub failure: DetectorScore,
    /// Areas of confusion.
    pub confusion: DetectorScore,
    /// Recurring topics: `correct` learned topics whose evidence is all
    /// mentions of one planted topic.
    pub topic: DetectorScore,
    /// Facts that change without a key: `planted` changes, `learned` fact
    /// memories, `correct` those whose value now is the planted one.
    pub fact: DetectorScore,
    /// `as_of` checks of keyless changes (one before, one after each).
    pub fact_as_of_checks: usize,
    /// Of which answered with the value true then.
    pub fact_as_of_correct: usize,
    /// Consolidation: planted groups of restated notes; `learned` counts
    /// memories merged into another, `correct` those merged into a member
    /// of their own group, `found` groups merged whole into one memory.
    pub consolidation: DetectorScore,
    /// Planted fixes, and patterns that name the planted fix.
    pub fixes_planted: usize,
    /// Patterns whose `fixed_by` is the planted fix.
    pub fixes_named: usize,
    /// `as_of` checks (one before and one after each change).
    pub as_of_checks: usize,
    /// Of which answered with the version true then.
    pub as_of_correct: usize,
    /// as_of_correct / as_of_checks.
    pub as_of_accuracy: f64,
    /// Timing over a larger store, when asked for.
    pub timing: Option<LearningTiming>,
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 1.0 } else { a as f64 / b as f64 }
}

const DO: &[&str] = &[
    "I prefer to {}",
    "I'd rather you {}",
    "Please always {}",
    "Always {}",
    "From now on, {}",
    "Make sure to always {}",
    "I always want you to {}",
];
const AVOID: &[&str] = &[
    "Never {}",
    "Don't {}",
    "Please don't {}",
    "Do not {}",
    "I don't want you to {}",
];
const INSTRUCTIONS: &[&str] = &[
    "use tabs for indentation in the parser module",
    "run the formatter before committing",
    "write commit messages in the imperative mood",
    "explain changes to the launch files",
    "add type hints to new functions",
    "keep pull requests small",
    "deploy to staging before production",
    "use metric units in reports",
    "put the code first and the explanation after",
    "cite a source for every benchmark number",
    "squash commits before merging",
    "log timestamps in UTC",
    "pin dependency versions in the lockfile",
    "write docstrings for public functions",
    "use British spelling in documentation",
    "mention breaking changes in the changelog",
    "test migrations against a copy of production",
    "reply in short bullet points",
    "ask before deleting branches",
    "use snake case for database columns",
    "include a rollback plan with each release",
    "name feature flags after the ticket",
    "review dashboards before paging anyone",
    "store secrets in the vault",
];
const DISTRACTORS: &[&str] = &[
    "Don't worry about the deadline, we have time.",
    "Never mind, I found the config file.",
    "Do you prefer the first design or the second?",
    "Should we always run the full suite?",
    "My colleague prefers dark mode.",
    "It always crashes on the second start.",
    "Always the same error with this build.",
    "Never this slow before the upgrade!",
    "I never thought about that option.",
    "Don't know yet what the client wants.",
    "The docs say never to commit credentials.",
    "We don't have a staging cluster yet.",
    "I have always liked this library.",
];
const ASSISTANT: &[&str] = &[
    "Always back up the database before migrating.",
    "Never store passwords in plain text.",
    "I prefer to check the logs first.",
];
const FILLER: &[&str] = &[
    "Let's look at the {} module next.",
    "The {} tests pass on my machine now.",
    "Can you summarise what changed in {}?",
    "I pushed a draft of the {} refactor.",
    "What does the {} service return on a timeout?",
    "Thanks, that fixed the {} page.",
];
const THINGS: &[&str] = &[
    "billing",
    "search",
    "auth",
    "export",
    "payments",
    "reports",
    "gateway",
    "scheduler",
    "upload",
    "profile",
    "invoice",
    "webhook",
];
/// Failure templates: `{s}` a service (fixed per planted pattern), `{n}`
/// a varying number.
const FAILURES: &[&str] = &[
    "connection refused: could not reach {s} at 10.0.{n}.{n}:{n}",
    "timeout after {n}s waiting for the {s} health check",
    "test {s}_flow failed: assertion failed at line {n}",
    "out of memory while resizing image {n} in {s}",
    "permission denied writing /var/log/{s}/{n}.log",
    "TLS handshake with {s} failed: certificate expired on day {n}",
    "migration {n} failed in {s}: column already exists",
    "rate limit exceeded calling the {s} API after {n} requests",
];

/// People, places and employers of facts that change without a key.
const PEOPLE: &[&str] = &[
    "Dana", "Chidi", "Priya", "Tomasz", "Aiko", "Mateo", "Ingrid", "Kwame",
];
const CITIES: &[&str] = &[
    "Lisbon", "Porto", "Nairobi", "Osaka", "Denver", "Tallinn", "Montreal", "Valencia",
];
const EMPLOYERS: &[&str] = &[
    "Northwind",
    "Globex",
    "Initech",
    "Umbrella Labs",
    "Stark Freight",
    "Hooli",
];
/// A first statement (`{p}` the person, `{v}` the value), by attribute.
const STATED: [&[&str]; 2] = [
    &[
        "By the way, {p} lives in {v}.",
        "{p} is based in {v}.",
        "FYI {p} lives in {v} now.",
    ],
    &[
        "{p} works at {v}.",
        "{p} works for {v}, on the data team.",
        "Oh, {p} joined {v}.",
    ],
];
/// The change.
const CHANGED: [&[&str]; 2] = [
    &[
        "{p} moved to {v} last month.",
        "Big news: {p} relocated to {v}.",
        "{p} has moved to {v}.",
    ],
    &[
        "{p} joined {v} in the spring.",
        "{p} now works at {v}.",
        "{p} started at {v} this week.",
    ],
];
/// Talk about the same person that states nothing.
const NOT_STATED: &[&str] = &[
    "{p} might move to {v} next year.",
    "Does {p} still work with {v}?",
    "{p} wants to visit {v} soon.",
    "If {p} moves to {v} we should visit.",
];

/// Things a user can find hard to follow: `{}` a service.
const CONCEPTS: &[&str] = &[
    "the retry policy of the {} client",
    "the cache invalidation in the {} service",
    "the token refresh flow in {}",
    "the sharding scheme of the {} database",
    "the rate limiter in front of {}",
    "the event ordering in the {} queue",
    "the rollback procedure for {}",
    "the permission model of the {} admin panel",
];
/// Questions about a concept.
const ASK: &[&str] = &[
    "How does {} work?",
    "Can you walk me through {}?",
    "What exactly is {} doing?",
    "Why is {} set up this way?",
];
/// Said right after a question, in the same session.
const LOST: &[&str] = &[
    "Sorry, I still don't get it.",
    "Hmm, I'm confused.",
    "What do you mean?",
    "I don't follow.",
];
/// Said in a later session, naming the concept.
const STILL_LOST: &[&str] = &[
    "I still don't understand {}.",
    "I'm confused about {} again.",
    "Honestly {} still doesn't make sense to me.",
    "Sorry, {} is not clear to me yet.",
];

/// Notes worth writing down once, restated later: `{}` a service.
const NOTES: &[&str] = &[
    "The {} service reads its settings from the shared configuration bucket at startup",
    "Requests to the {} endpoint are retried three times with exponential backoff",
    "The {} team reviews every schema change before it reaches production",
    "Load tests for the {} service run every Friday against the staging cluster",
    "Alerts for the {} service go to the on-call channel, not to email",
    "The {} worker drains its queue before a deploy and resumes after the health check",
];

/// Subjects a user comes back to, each named in other words each time:
/// (a word of every name, the names). The first word is what the
/// shared-word distractor reuses with other things.
const TOPICS: &[(&str, &[&str])] = &[
    (
        "gRPC",
        &[
            "the gRPC streaming deadlines",
            "deadlines on our gRPC streams",
            "the gRPC stream deadline settings",
            "how long a gRPC stream may run before its deadline",
            "gRPC deadlines for streaming calls",
        ],
    ),
    (
        "Postgres",
        &[
            "the Postgres vacuum schedule",
            "autovacuum settings on Postgres",
            "when Postgres vacuums the big tables",
            "Postgres vacuum tuning",
            "the vacuum runs on our Postgres tables",
        ],
    ),
    (
        "Kubernetes",
        &[
            "the Kubernetes pod autoscaler",
            "autoscaling pods on Kubernetes",
            "the pod autoscaler thresholds in Kubernetes",
            "how Kubernetes autoscales our pods",
            "Kubernetes autoscaling for the worker pods",
        ],
    ),
    (
        "onboarding",
        &[
            "the mobile onboarding flow",
            "onboarding screens in the mobile app",
            "the mobile app onboarding",
            "how new users get onboarded on mobile",
            "drop-off during mobile onboarding",
        ],
    ),
    (
        "pricing",
        &[
            "the pricing experiment",
            "our pricing experiment for the annual plan",
            "results of the pricing experiment",
            "the experiment with annual pricing",
            "pricing tiers in the experiment",
        ],
    ),
    (
        "accessibility",
        &[
            "accessibility of the dashboard",
            "the dashboard accessibility audit",
            "screen reader accessibility on the dashboard",
            "dashboard contrast and accessibility",
            "accessibility fixes for the dashboard",
        ],
    ),
    (
        "Terraform",
        &[
            "the Terraform state locking",
            "state locks in Terraform",
            "Terraform state lock timeouts",
            "who holds the Terraform state lock",
            "locking of the shared Terraform state",
        ],
    ),
    (
        "flaky",
        &[
            "the flaky integration tests",
            "flaky tests in the integration suite",
            "integration tests that flake on CI",
            "the flaky integration suite",
            "quarantining flaky integration tests",
        ],
    ),
    (
        "GDPR",
        &[
            "GDPR data retention",
            "retention periods under GDPR",
            "the GDPR retention policy for logs",
            "how long we retain data for GDPR",
            "GDPR deletion and retention requests",
        ],
    ),
    (
        "Elasticsearch",
        &[
            "the Elasticsearch reindexing job",
            "reindexing Elasticsearch overnight",
            "Elasticsearch reindex duration",
            "the nightly reindex of Elasticsearch",
            "reindexing the Elasticsearch catalogue",
        ],
    ),
    (
        "latency",
        &[
            "p99 latency of the checkout API",
            "checkout API latency spikes",
            "latency on the checkout endpoint",
            "why checkout latency jumps at noon",
            "the checkout API's tail latency",
        ],
    ),
    (
        "webpack",
        &[
            "the webpack bundle size",
            "bundle size after the webpack upgrade",
            "shrinking the webpack bundle",
            "webpack bundles that keep growing",
            "the size of our webpack bundle",
        ],
    ),
    (
        "OAuth",
        &[
            "the OAuth consent screen",
            "consent screen wording for OAuth",
            "OAuth consent for the partner apps",
            "what the OAuth consent page asks for",
            "the partner OAuth consent flow",
        ],
    ),
    (
        "Snowflake",
        &[
            "Snowflake warehouse costs",
            "the cost of our Snowflake warehouse",
            "Snowflake credits the warehouse burns",
            "cutting Snowflake warehouse spend",
            "the Snowflake warehouse bill",
        ],
    ),
    (
        "localization",
        &[
            "the German localization",
            "localization strings for German",
            "German translations and localization",
            "missing German localization keys",
            "the localization backlog for German",
        ],
    ),
    (
        "Kafka",
        &[
            "Kafka consumer lag",
            "lag on the Kafka consumers",
            "consumer lag in Kafka after deploys",
            "the Kafka consumer group lagging",
            "Kafka lag alerts for the consumers",
        ],
    ),
];
/// Sentences a topic is mentioned in (`{}` the topic).
const MENTION: &[&str] = &[
    "Can we revisit {}?",
    "I was thinking about {} again.",
    "Any news on {}?",
    "Let's spend ten minutes on {} today.",
    "Quick update on {}: nothing decided yet.",
    "{} came up in the standup.",
    "I read a blog post about {} over the weekend.",
    "What's the status of {}?",
    "Remind me where we left {}.",
    "We should write down what we know about {}.",
    "Still worried about {}.",
    "Could you look into {} once more?",
    "Sarah asked me about {} yesterday.",
    "Before the demo, {} needs attention.",
    "Not urgent, but {} is bugging me.",
    "So, {}.",
    "Back to {}: any ideas?",
    "I sketched a plan for {}.",
    "Let's park {} until next sprint.",
    "Here are my notes on {}.",
    "The customer call touched on {}.",
    "Do we have a ticket for {}?",
    "My gut says {} will bite us.",
    "Thoughts on {}?",
];
/// Things the shared word of a topic is said with, each time another.
const OTHER_WITH: &[&str] = &[
    "budget",
    "licence renewal",
    "owner list",
    "naming rules",
    "training day",
    "vendor contract",
    "on-call rota",
    "office hours",
    "hiring plan",
    "newsletter",
];
/// A project's codename, said in many of its sessions: its background
/// vocabulary, not a topic.
const CODENAMES: &[&str] = &[
    "Falcon", "Juniper", "Halyard", "Quokka", "Tamarind", "Vesper", "Marlin", "Obsidian",
];

/// A restatement of `text`: other case, other punctuation, or a word
/// before or after.
fn restate(text: &str, r: &mut Rng) -> String {
    match r.below(5) {
        0 => format!("{}.", text.to_lowercase()),
        1 => format!("Note: {text}."),
        2 => format!("{text}!"),
        3 => format!("{text}, as agreed."),
        _ => format!("Reminder — {}", text.to_lowercase()),
    }
}

/// `text` with its first letter in upper case.
fn capitalise(text: &str) -> String {
    let mut c = text.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn fill(t: &str, s: &str, r: &mut Rng) -> String {
    let mut out = t.replace("{s}", s);
    while let Some(i) = out.find("{n}") {
        out.replace_range(i..i + 3, &(1 + r.below(900)).to_string());
    }
    out
}

/// A planted keyless fact: (project, person, attribute).
type FactKey = (usize, String, &'static str);

/// What was planted, for scoring.
#[derive(Default)]
struct Truth {
    /// Memory id → planted instruction (project, index).
    instruction_of: BTreeMap<String, (usize, usize)>,
    instructions: BTreeSet<(usize, usize)>,
    /// Memory id → planted failure signature (project, template, service).
    failure_of: BTreeMap<String, (usize, usize, usize)>,
    /// Signatures that occur at least twice.
    repeated: BTreeSet<(usize, usize, usize)>,
    /// Signature → its planted fix.
    fix_of: BTreeMap<(usize, usize, usize), String>,
    /// (scope, key, when the version was written, its content).
    as_of: Vec<(Scope, String, Timestamp, String)>,
    /// (project, person, attribute) → the planted statements, oldest
    /// first: (time, value).
    facts: BTreeMap<FactKey, Vec<(Timestamp, String)>>,
    /// Memory id → planted area of confusion (its project).
    confusion_of: BTreeMap<String, usize>,
    /// Projects with a planted area of confusion.
    confusions: BTreeSet<usize>,
    /// Memory id → planted group of restated notes (project, note).
    note_of: BTreeMap<String, (usize, usize)>,
    /// Every planted group, with its members.
    note_groups: BTreeMap<(usize, usize), Vec<String>>,
    /// Memory id → planted recurring topic (project, topic).
    topic_of: BTreeMap<String, (usize, usize)>,
    /// Planted recurring topics.
    topics: BTreeSet<(usize, usize)>,
}

/// Writes `o.projects` histories into `engine`; returns the labels and the
/// number of memories written.
fn generate(
    engine: &Engine,
    o: &LearningOptions,
    rng: &mut Rng,
    start: Timestamp,
) -> strata::Result<(Truth, usize)> {
    let mut truth = Truth::default();
    let mut written = 0;
    let span_days = 180i64;
    for p in 0..o.projects {
        let scope = Scope::parse(&format!("project/p{p}"))?;
        // This project's planted instructions and their sessions.
        let mut plan: Vec<(usize, BTreeSet<usize>)> = Vec::new();
        for _ in 0..3 {
            let i = rng.below(INSTRUCTIONS.len());
            if plan.iter().any(|(j, _)| *j == i) {
                continue;
            }
            let times = 1 + rng.below(3);
            let sessions = (0..times).map(|_| rng.below(o.sessions)).collect();
            plan.push((i, sessions));
        }
        let avoid: Vec<bool> = plan.iter().map(|_| rng.below(3) == 0).collect();
        // Failures: two repeated signatures, two single ones.
        let mut failures: Vec<(usize, usize, Vec<usize>)> = Vec::new();
        for k in 0..4 {
            let t = rng.below(FAILURES.len());
            let s = rng.below(THINGS.len());
            if failures.iter().any(|(a, b, _)| (*a, *b) == (t, s)) {
                continue;
            }
            let n = if k < 2 { 2 + rng.below(3) } else { 1 };
            failures.push((t, s, (0..n).map(|_| rng.below(o.sessions)).collect()));
        }
        // Two notes, each written once and restated in one or two later
        // sessions; a third note differs from the first in its service.
        let mut notes: Vec<(usize, usize, Vec<usize>)> = Vec::new();
        while notes.len() < 2 {
            let n = rng.below(NOTES.len());
            if notes.iter().any(|(m, _, _)| *m == n) {
                continue;
            }
            let thing = rng.below(THINGS.len());
            let times = 2 + rng.below(2);
            let sessions = (0..times).map(|_| rng.below(o.sessions)).collect();
            notes.push((n, thing, sessions));
        }
        let twin_thing = (notes[0].1 + 1 + rng.below(THINGS.len() - 1)) % THINGS.len();
        // One area of confusion: asked in one session, said to be unclear
        // then or in a later one, maybe asked again after; and, as
        // distractors, a bare "I don't understand" opening a session and
        // a one-off confusion about something else.
        let concept = CONCEPTS[rng.below(CONCEPTS.len())].replace("{}", rng.pick(THINGS));
        let asked_in = rng.below(o.sessions - 1);
        let lost_at_once = rng.below(2) == 0;
        let lost_later = if lost_at_once && rng.below(2) == 0 {
            None
        } else {
            Some(asked_in + 1 + rng.below(o.sessions - asked_in - 1))
        };
        let asked_again = (rng.below(2) == 0).then(|| rng.below(o.sessions));
        let bare_in = rng.below(o.sessions);
        // A fact about a person that changes later, without a key.
        let person = PEOPLE[p % PEOPLE.len()];
        let attr = rng.below(2);
        let values: &[&str] = if attr == 0 { CITIES } else { EMPLOYERS };
        let first_value = rng.below(values.len());
        let second_value = (first_value + 1 + rng.below(values.len() - 1)) % values.len();
        let stated_in = rng.below(o.sessions / 2);
        let changed_in = o.sessions / 2 + rng.below(o.sessions - o.sessions / 2);
        let talk_in = rng.below(o.sessions);
        let one_off_in = rng.below(o.sessions);
        let twin_session = rng.below(o.sessions);
        let fact_thing = THINGS[rng.below(THINGS.len())];
        let change_at = 1 + rng.below(o.sessions.saturating_sub(1).max(1));
        // Recurring topics: one or two, each named in 3–5 sessions;
        // beside them, as distractors, a topic named in two sessions only,
        // one named several times in one session, one word of a topic
        // said with other things in four sessions, and the project's
        // codename in many sessions.
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < 5 {
            let t = rng.below(TOPICS.len());
            if !picked.contains(&t) {
                picked.push(t);
            }
        }
        let planted_topics = 1 + rng.below(2);
        let spread = |n: usize, rng: &mut Rng| {
            let mut ss: BTreeSet<usize> = BTreeSet::new();
            while ss.len() < n.min(o.sessions) {
                ss.insert(rng.below(o.sessions));
            }
            ss
        };
        let topic_sessions: Vec<(usize, BTreeSet<usize>)> = (0..planted_topics)
            .map(|k| {
                let n = 3 + rng.below(3);
                (picked[k], spread(n, rng))
            })
            .collect();
        let near_topic = (picked[2], spread(2, rng));
        let burst = (picked[3], rng.below(o.sessions), 3 + rng.below(3));
        // The shared word: of a planted topic in half the projects.
        let shared_head = if rng.below(2) == 0 {
            TOPICS[picked[0]].0
        } else {
            TOPICS[picked[4]].0
        };
        let shared_in: Vec<usize> = spread(4, rng).into_iter().collect();
        let codename = CODENAMES[rng.below(CODENAMES.len())];
        let mention = |t: usize, rng: &mut Rng| {
            let name = rng.pick(TOPICS[t].1);
            let frame = rng.pick(MENTION);
            capitalise(&frame.replace("{}", name))
        };
        for sess in 0..o.sessions {
            let day = span_days * sess as i64 / o.sessions.max(1) as i64;
            let mut at = start + SignedDuration::from_hours(24 * day);
            let sid = format!("p{p}-s{sess}");
            let mut batch: Vec<(NewMemory, Option<Label>)> = Vec::new();
            let turn = |text: String, role: Role| {
                NewMemory::new(scope.clone(), text)
                    .kind(Kind::Conversation)
                    .role(role)
                    .session(sid.clone())
            };
            for t in 0..o.turns {
                let thing = rng.pick(THINGS);
                let text = rng.pick(FILLER).replace("{}", thing);
                batch.push((turn(text, Role::User), None));
                if t % 3 == 0 {
                    batch.push((
                        turn(
                            format!("Here is what I found about {thing}."),
                            Role::Assistant,
                        ),
                        None,
                    ));
                }
            }
            for (k, (i, sessions)) in plan.iter().enumerate() {
                if sessions.contains(&sess) {
                    let opening = rng.pick(if avoid[k] { AVOID } else { DO });
                    let lead = rng.pick(&["", "Thanks, that helped. ", "One more thing. ", "OK. "]);
                    let end = rng.pick(&[".", "!", ", please.", ""]);
                    let text = format!("{lead}{}{end}", opening.replace("{}", INSTRUCTIONS[*i]));
                    batch.push((turn(text, Role::User), Some(Label::Instruction(p, *i))));
                }
            }
            for (t, sessions) in &topic_sessions {
                if sessions.contains(&sess) {
                    let text = mention(*t, rng);
                    batch.push((turn(text, Role::User), Some(Label::Topic(p, *t))));
                }
            }
            if near_topic.1.contains(&sess) {
                let text = mention(near_topic.0, rng);
                batch.push((turn(text, Role::User), None));
            }
            if burst.1 == sess {
                for _ in 0..burst.2 {
                    let text = mention(burst.0, rng);
                    batch.push((turn(text, Role::User), None));
                }
            }
            if let Some(i) = shared_in.iter().position(|x| *x == sess) {
                let with = OTHER_WITH[(p + i) % OTHER_WITH.len()];
                let frame = MENTION[(p * 7 + i * 5) % MENTION.len()];
                let text = capitalise(&frame.replace("{}", &format!("the {shared_head} {with}")));
                batch.push((turn(text, Role::User), None));
            }
            if rng.below(3) != 0 {
                let text = rng.pick(&[
                    "For {}, the weekly sync moves to Thursday.",
                    "{} demo went fine.",
                    "Is {} still on track for the milestone?",
                    "Shared the {} roadmap with the team.",
                    "{} standup notes are in the wiki.",
                ]);
                batch.push((turn(text.replace("{}", codename), Role::User), None));
            }
            if rng.below(2) == 0 {
                batch.push((turn(rng.pick(DISTRACTORS).to_string(), Role::User), None));
            }
            if rng.below(4) == 0 {
                batch.push((turn(rng.pick(ASSISTANT).to_string(), Role::Assistant), None));
            }
            for (t, s, sessions) in &failures {
                for _ in sessions.iter().filter(|x| **x == sess) {
                    let text = fill(FAILURES[*t], THINGS[*s], rng);
                    let m = NewMemory::new(scope.clone(), text)
                        .kind(Kind::Failure)
                        .session(sid.clone());
                    batch.push((m, Some(Label::Failure(p, *t, *s))));
                }
            }
            for (k, (n, thing, sessions)) in notes.iter().enumerate() {
                let text = NOTES[*n].replace("{}", THINGS[*thing]);
                for (i, _) in sessions.iter().enumerate().filter(|(_, x)| **x == sess) {
                    let said = if i == 0 {
                        format!("{text}.")
                    } else {
                        restate(&text, rng)
                    };
                    let m = NewMemory::new(scope.clone(), said)
                        .kind(Kind::Finding)
                        .session(sid.clone());
                    batch.push((m, Some(Label::Note(p, k))));
                }
            }
            if sess == asked_in {
                let q = rng.pick(ASK).replace("{}", &concept);
                batch.push((turn(q, Role::User), Some(Label::Confusion(p))));
                if lost_at_once {
                    let l = rng.pick(LOST).to_string();
                    batch.push((turn(l, Role::User), Some(Label::Confusion(p))));
                }
            }
            if Some(sess) == lost_later {
                let l = rng.pick(STILL_LOST).replace("{}", &concept);
                batch.push((turn(l, Role::User), Some(Label::Confusion(p))));
            }
            if Some(sess) == asked_again && sess != asked_in {
                let q = rng.pick(ASK).replace("{}", &concept);
                batch.push((turn(q, Role::User), Some(Label::Confusion(p))));
            }
            let fill_fact = |t: &str, v: &str| t.replace("{p}", person).replace("{v}", v);
            if sess == stated_in {
                let t = rng.pick(STATED[attr]);
                let text = fill_fact(t, values[first_value]);
                batch.push((turn(text, Role::User), Some(Label::Fact(attr, first_value))));
            }
            if sess == changed_in {
                let t = rng.pick(CHANGED[attr]);
                let text = fill_fact(t, values[second_value]);
                batch.push((
                    turn(text, Role::User),
                    Some(Label::Fact(attr, second_value)),
                ));
            }
            if sess == talk_in {
                let other = values[rng.below(values.len())];
                let text = fill_fact(rng.pick(NOT_STATED), other);
                batch.push((turn(text, Role::User), None));
            }
            if sess == bare_in {
                let l = "Sorry, I don't understand.".to_string();
                batch.insert(0, (turn(l, Role::User), None));
            }
            if sess == one_off_in {
                let l = format!(
                    "I don't understand why the {} build is red today.",
                    rng.pick(THINGS)
                );
                batch.push((turn(l, Role::User), None));
            }
            if sess == twin_session {
                let text = NOTES[notes[0].0].replace("{}", THINGS[twin_thing]);
                let m = NewMemory::new(scope.clone(), format!("{text}."))
                    .kind(Kind::Finding)
                    .session(sid.clone());
                batch.push((m, None));
            }
            let mut ids = Vec::new();
            let mut labels = Vec::new();
            let mut items = Vec::new();
            for (m, l) in batch {
                at += SignedDuration::from_mins(1);
                items.push(m.created_at(at));
                if let Some(Label::Fact(attr, v)) = &l {
                    let (name, values) = if *attr == 0 {
                        ("location", CITIES)
                    } else {
                        ("employer", EMPLOYERS)
                    };
                    truth
                        .facts
                        .entry((p, person.to_lowercase(), name))
                        .or_default()
                        .push((at, values[*v].to_string()));
                }
                labels.push(l);
            }
            for m in engine.remember_batch(items, strata::Confirm::No)? {
                ids.push(m.id);
            }
            written += ids.len();
            for (id, l) in ids.into_iter().zip(labels) {
                match l {
                    Some(Label::Instruction(p, i)) => {
                        truth.instruction_of.insert(id, (p, i));
                        truth.instructions.insert((p, i));
                    }
                    Some(Label::Failure(p, t, s)) => {
                        truth.failure_of.insert(id, (p, t, s));
                    }
                    Some(Label::Fact(..)) => {}
                    Some(Label::Confusion(p)) => {
                        truth.confusion_of.insert(id, p);
                        truth.confusions.insert(p);
                    }
                    Some(Label::Note(p, k)) => {
                        truth.note_of.insert(id.clone(), (p, k));
                        truth.note_groups.entry((p, k)).or_default().push(id);
                    }
                    Some(Label::Topic(p, t)) => {
                        truth.topic_of.insert(id, (p, t));
                        truth.topics.insert((p, t));
                    }
                    None => {}
                }
            }
            // The fact, and its change.
            let key = format!("fact/{fact_thing}-owner");
            if sess == 0 || sess == change_at {
                at += SignedDuration::from_mins(1);
                let who = if sess == 0 { "Dana" } else { "Chidi" };
                let text = format!("The {fact_thing} service is owned by {who}");
                let m = NewMemory::new(scope.clone(), text.clone())
                    .kind(Kind::Finding)
                    .key(key.clone())
                    .created_at(at);
                engine.remember(m)?;
                // The change supersedes the first version: one memory.
                if sess == 0 {
                    written += 1;
                }
                truth.as_of.push((scope.clone(), key, at, text));
            }
        }
        // Fixes, after the last session, for the first repeated failure.
        let end = start + SignedDuration::from_hours(24 * (span_days + 1));
        for (k, (t, s, sessions)) in failures.iter().enumerate() {
            if sessions.len() >= 2 {
                truth.repeated.insert((p, *t, *s));
                if k == 0 {
                    let plain: String = fill(FAILURES[*t], THINGS[*s], rng)
                        .split_whitespace()
                        .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
                        .collect::<Vec<_>>()
                        .join(" ");
                    let text = format!("Fixed it: {plain} — the cause was a stale setting.");
                    let m = NewMemory::new(scope.clone(), text)
                        .kind(Kind::Finding)
                        .created_at(end + SignedDuration::from_mins(p as i64));
                    let fix = engine.remember(m)?;
                    written += 1;
                    truth.fix_of.insert((p, *t, *s), fix.id);
                }
            }
        }
    }
    Ok((truth, written))
}

enum Label {
    Instruction(usize, usize),
    Failure(usize, usize, usize),
    Note(usize, usize),
    Confusion(usize),
    /// A mention of a planted recurring topic: (project, topic).
    Topic(usize, usize),
    /// A statement of a fact: (attribute, value index).
    Fact(usize, usize),
}

/// Generates labelled histories in `engine`, runs learning, and scores
/// every detector; with `o.memories`, times learning over a second store
/// made by `timing_engine`.
pub fn learning(
    engine: &Engine,
    timing_engine: Option<&Engine>,
    o: &LearningOptions,
) -> strata::Result<LearningReport> {
    let mut rng = Rng(o.seed.max(1));
    let start = Timestamp::now() - SignedDuration::from_hours(24 * 400);
    let (truth, written) = generate(engine, o, &mut rng, start)?;
    engine.learn()?;
    let all = View::parse(&["project/**".to_string()])?;
    let learned = engine.learned(&all)?;
    let mut rep = LearningReport {
        memories: written,
        ..LearningReport::default()
    };
    // Preferences.
    let mut pref = DetectorScore {
        planted: truth.instructions.len(),
        ..DetectorScore::default()
    };
    let mut hits: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (_, l) in learned.iter().filter(|(_, l)| l.detector == "preference") {
        pref.learned += 1;
        let owners: BTreeSet<Option<&(usize, usize)>> = l
            .evidence
            .iter()
            .map(|id| truth.instruction_of.get(id))
            .collect();
        if owners.len() == 1
            && let Some(Some(who)) = owners.into_iter().next()
        {
            pref.correct += 1;
            *hits.entry(*who).or_default() += 1;
        }
    }
    pref.found = hits.len();
    pref.split = hits.values().filter(|n| **n > 1).count();
    pref.finish();
    rep.preference = pref;
    // Failures.
    let mut fail = DetectorScore {
        planted: truth.repeated.len(),
        ..DetectorScore::default()
    };
    let mut hits: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
    rep.fixes_planted = truth.fix_of.len();
    for (m, l) in learned.iter().filter(|(_, l)| l.detector == "failure") {
        fail.learned += 1;
        let owners: BTreeSet<Option<&(usize, usize, usize)>> = l
            .evidence
            .iter()
            .filter(|id| truth.failure_of.contains_key(*id))
            .map(|id| truth.failure_of.get(id))
            .collect();
        if owners.len() == 1
            && let Some(Some(sig)) = owners.into_iter().next()
            && truth.repeated.contains(sig)
        {
            fail.correct += 1;
            *hits.entry(*sig).or_default() += 1;
            let named = m
                .payload
                .as_ref()
                .and_then(|p| p.pointer("/failure/fixed_by"))
                .and_then(|v| v.as_str());
            if named.is_some() && named == truth.fix_of.get(sig).map(String::as_str) {
                rep.fixes_named += 1;
            }
        }
    }
    fail.found = hits.len();
    fail.split = hits.values().filter(|n| **n > 1).count();
    fail.finish();
    rep.failure = fail;
    // Areas of confusion.
    let mut conf = DetectorScore {
        planted: truth.confusions.len(),
        ..DetectorScore::default()
    };
    let mut hits: BTreeMap<usize, usize> = BTreeMap::new();
    for (_, l) in learned.iter().filter(|(_, l)| l.detector == "confusion") {
        conf.learned += 1;
        let owners: BTreeSet<Option<&usize>> = l
            .evidence
            .iter()
            .map(|id| truth.confusion_of.get(id))
            .collect();
        if owners.len() == 1
            && let Some(Some(p)) = owners.into_iter().next()
        {
            conf.correct += 1;
            *hits.entry(*p).or_default() += 1;
        }
    }
    conf.found = hits.len();
    conf.split = hits.values().filter(|n| **n > 1).count();
    conf.finish();
    rep.confusion = conf;
    rep.topic = topics(&truth, &learned);
    // Facts that change: just after each version was written, and just
    // before the next.
    let mut by_key: BTreeMap<(Scope, String), Vec<(Timestamp, String)>> = BTreeMap::new();
    for (scope, key, at, text) in &truth.as_of {
        by_key
            .entry((scope.clone(), key.clone()))
            .or_default()
            .push((*at, text.clone()));
    }
    for ((scope, key), versions) in by_key {
        for (i, (at, text)) in versions.iter().enumerate() {
            let probe = match versions.get(i + 1) {
                Some((next, _)) => *next - SignedDuration::from_mins(1),
                None => *at + SignedDuration::from_hours(24),
            };
            let mut r = Recall::new("who owns the service", View::scope(scope.clone()));
            r.as_of = Some(probe);
            r.min_relevance = Some(0.0);
            r.touch = false;
            // The key's versions alone: what is checked is which version
            // `as_of` answers with, not how the fact ranks against the
            // project's other findings under hybrid weights (a note that
            // consolidation rewrote just now outweighs it on importance).
            r.filter = strata::Filter::parse(&serde_json::json!({"kind": "finding", "key": key}))?;
            let got = engine.recall(&r)?;
            rep.as_of_checks += 1;
            if got.first().is_some_and(|h| &h.memory.content == text) {
                rep.as_of_correct += 1;
            }
        }
    }
    rep.as_of_accuracy = ratio(rep.as_of_correct, rep.as_of_checks);
    rep.consolidation = consolidation(engine, &truth)?;
    facts(engine, &truth, &learned, &mut rep)?;
    if let (Some(big), true) = (timing_engine, o.memories > 0) {
        rep.timing = Some(timing(big, o, start)?);
    }
    Ok(rep)
}

/// Scores the topic detector: a learned topic is correct when every piece
/// of its evidence is a mention of one planted topic (a mention of a
/// distractor, filler or another topic makes it wrong).
fn topics(truth: &Truth, learned: &[(strata::Memory, strata::Learned)]) -> DetectorScore {
    let mut d = DetectorScore {
        planted: truth.topics.len(),
        ..DetectorScore::default()
    };
    let mut hits: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (_, l) in learned.iter().filter(|(_, l)| l.detector == "topic") {
        d.learned += 1;
        let owners: BTreeSet<Option<&(usize, usize)>> =
            l.evidence.iter().map(|id| truth.topic_of.get(id)).collect();
        if owners.len() == 1
            && let Some(Some(t)) = owners.into_iter().next()
        {
            d.correct += 1;
            *hits.entry(*t).or_default() += 1;
        }
    }
    d.found = hits.len();
    d.split = hits.values().filter(|n| **n > 1).count();
    d.finish();
    d
}

/// Scores facts that change without a key: the learned fact memories,
/// and `as_of` answers just before and just after each change.
fn facts(
    engine: &Engine,
    truth: &Truth,
    learned: &[(strata::Memory, strata::Learned)],
    rep: &mut LearningReport,
) -> strata::Result<()> {
    let mut d = DetectorScore {
        planted: truth.facts.len(),
        ..DetectorScore::default()
    };
    let mut found = BTreeSet::new();
    for (m, _) in learned.iter().filter(|(_, l)| l.detector == "fact") {
        d.learned += 1;
        let key = |k: &str| {
            m.payload
                .as_ref()
                .and_then(|p| p.pointer(&format!("/fact/{k}")))
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let p: Option<usize> = m
            .scope
            .as_str()
            .strip_prefix("project/p")
            .and_then(|n| n.parse().ok());
        let planted = p.and_then(|p| {
            truth.facts.iter().find(|((q, who, attr), _)| {
                *q == p && *who == key("subject") && *attr == key("attribute")
            })
        });
        if let Some((k, said)) = planted
            && said.last().map(|(_, v)| v.as_str()) == Some(key("value").as_str())
        {
            d.correct += 1;
            found.insert(k.clone());
        }
    }
    d.found = found.len();
    d.finish();
    rep.fact = d;
    for ((p, who, attr), said) in &truth.facts {
        let scope = Scope::parse(&format!("project/p{p}"))?;
        for (i, (at, value)) in said.iter().enumerate() {
            let probe = match said.get(i + 1) {
                Some((next, _)) => *next - SignedDuration::from_mins(1),
                None => *at + SignedDuration::from_hours(24),
            };
            let mut r = Recall::new(format!("{who} {attr}"), View::scope(scope.clone()));
            r.as_of = Some(probe);
            r.min_relevance = Some(0.0);
            r.touch = false;
            r.filter = strata::Filter::parse(&serde_json::json!({
                "payload.fact.subject": who, "payload.fact.attribute": attr}))?;
            let got = engine.recall(&r)?;
            rep.fact_as_of_checks += 1;
            if got
                .first()
                .is_some_and(|h| h.memory.content.ends_with(value.as_str()))
            {
                rep.fact_as_of_correct += 1;
            }
        }
    }
    Ok(())
}

/// Scores consolidation: every memory that lists merged ids, against the
/// planted groups (a group written once, as happens when its sessions
/// repeat, is not a group to find).
fn consolidation(engine: &Engine, truth: &Truth) -> strata::Result<DetectorScore> {
    let mut d = DetectorScore::default();
    let groups: Vec<&Vec<String>> = truth
        .note_groups
        .values()
        .filter(|ids| ids.len() > 1)
        .collect();
    d.planted = groups.len();
    let mut list = strata::List::new(View::parse(&["project/**".to_string()])?);
    list.filter = strata::Filter::parse(&serde_json::json!({"kind": "finding"}))?;
    list.limit = usize::MAX;
    let mut merged_into: BTreeMap<String, String> = BTreeMap::new();
    for m in engine.list(&list)? {
        let from = m
            .payload
            .as_ref()
            .and_then(|p| p.pointer("/consolidated/from"))
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        for id in from.iter().filter_map(|v| v.as_str()) {
            d.learned += 1;
            let same =
                truth.note_of.contains_key(id) && truth.note_of.get(id) == truth.note_of.get(&m.id);
            if same {
                d.correct += 1;
            }
            merged_into.insert(id.to_string(), m.id.clone());
        }
    }
    for ids in groups {
        let kept: BTreeSet<&String> = ids
            .iter()
            .map(|id| merged_into.get(id).unwrap_or(id))
            .collect();
        if kept.len() == 1 {
            d.found += 1;
        } else {
            d.split += 1;
        }
    }
    d.finish();
    Ok(d)
}

/// Fills `engine` with about `o.memories` memories of the same generator,
/// then times a full learning run and an incremental one.
fn timing(
    engine: &Engine,
    o: &LearningOptions,
    start: Timestamp,
) -> strata::Result<LearningTiming> {
    // Turns, the assistant's every third, an instruction, distractor or
    // failure a session, about two mentions of topics or the codename a
    // session; two facts and a fix a project.
    let per_project = (o.sessions * (o.turns + o.turns.div_ceil(3) + 3) + 8).max(1);
    let projects = (o.memories / per_project).max(1);
    let big = LearningOptions {
        projects,
        ..o.clone()
    };
    let mut rng = Rng(o.seed.wrapping_add(7).max(1));
    let (_, written) = generate(engine, &big, &mut rng, start)?;
    let t = Instant::now();
    let full = engine.learn()?;
    let full_secs = t.elapsed().as_secs_f64();
    // One more session in a tenth of the projects.
    let mut more = Vec::new();
    for p in (0..projects).step_by(10) {
        let scope = Scope::parse(&format!("project/p{p}"))?;
        for k in 0..o.turns {
            let text = if k == 0 {
                "Always run the smoke tests after a deploy.".to_string()
            } else {
                rng.pick(FILLER).replace("{}", rng.pick(THINGS))
            };
            more.push(
                NewMemory::new(scope.clone(), text)
                    .kind(Kind::Conversation)
                    .role(Role::User)
                    .session(format!("p{p}-late")),
            );
        }
    }
    let added = more.len();
    engine.remember_batch(more, strata::Confirm::No)?;
    let t = Instant::now();
    let inc = engine.learn()?;
    Ok(LearningTiming {
        memories: written + added,
        full_secs,
        full_examined: full.examined,
        incremental_secs: t.elapsed().as_secs_f64(),
        incremental_examined: inc.examined,
        added,
        full_consolidated: full.consolidated,
    })
}
