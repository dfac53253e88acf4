//! The benchmarks and retrieval evaluations behind strata's published
//! numbers, kept out of the engine crate (as redb keeps its benchmarks).
//!
//! `strata bench` and `strata eval` are these functions: the `strata`
//! command depends on this crate behind its default `bench` feature, so a
//! user runs the same code that produced the published numbers, on their own
//! machine, without a second binary. A library user reaches the evaluation
//! protocols directly:
//!
//! - [`bench()`]: insert, remember, recall, cold start, context and vector
//!   search on synthetic memories, and (feature `http`) recall over HTTP
//!   against the same recalls in process;
//! - [`locomo`]: recall@k, MRR and evidence inside assembled contexts on
//!   LoCoMo, per category;
//! - [`retrieval`]: the same metrics for any labelled set in the generic
//!   format (`tests/fixtures/retrieval.json` is a small example);
//! - [`learning()`]: upkeep's detectors on synthetic histories with planted
//!   patterns (precision and recall per detector, `as_of` answers, time).

mod bench;
mod eval;
mod floor;
mod heldout;
mod learn;
mod out;
mod rng;
mod secrets;
mod utterances;

pub use bench::{BenchArgs, bench};
pub use eval::cmd::{EvalCmd, eval};
pub use eval::{
    CATEGORIES, Candidate, ContextMetrics, LocomoOptions, LocomoReport, Metrics, QuestionLine,
    RetrievalOptions, RetrievalReport, Timing, evidence_ids, locomo, parse_date, retrieval,
};
pub use floor::{FloorCandidate, FloorLine, FloorReport, FloorScore, relevance_floor};
pub use heldout::{Found, HeldoutReport, learning_heldout};
pub use learn::{DetectorScore, LearningOptions, LearningReport, LearningTiming, learning};
pub use out::UsageError;
pub use secrets::{KindScore, NegativeScore, SecretsReport, secrets};
pub use utterances::{ClassScore, TrainOptions, TrainReport, train};
