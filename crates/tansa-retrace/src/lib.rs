//! Rebuilding an instruction trace of a repeated code region from sparse periodic samples
//! (seed 004, JP 2010-009282 A): the sans-I/O core of `tansa retrace`.
//!
//! A region (a function and what it calls) runs many times and takes the same path each
//! time. Sampling every `P`-th instruction while it runs gives, per execution, a sparse
//! *partial sequence* at a different phase. Merging the partials — repeatedly the most
//! *similar* pair, interleaved in the most *likely* order — rebuilds the full path.
//!
//! * [`model`]: addresses, function code, instruction info ([`Loc`]).
//! * [`annotate`]: function + instruction index and basic block + offset, from the code
//!   (`iced-x86`), seed S101/S401.
//! * [`divide`]: the `T/P` and marker division rules (unit 112).
//! * [`score`]: the similarity and likelihood tables, explicit and configurable.
//! * [`pattern`]: materialisation, similarity, likelihood, combination patterns.
//! * [`merge`](mod@merge): the synthesis loop (units 113a–113e) with the top-K variant; [`dp`]: the
//!   equivalent dynamic-programming search for the best pattern.
//! * [`align`](mod@align): rebuilding by position when the sampler counted exactly, one
//!   trace per path, gaps filled from the control-flow graph.
//! * [`rebuild`](mod@rebuild): samples in, trace with per-position support out.
//! * [`accuracy`](mod@accuracy): LCS ratio and normalised edit distance against a true trace.
//! * [`recording`]: reading `tansa-format` retrace frames into this model; [`report`]: the
//!   analysed model every renderer takes (the JSON document `tansa.retrace.v1`).
//!
//! Nothing here reads files or talks to processes; `tansa-ptrace` records, this rebuilds.

pub mod accuracy;
pub mod align;
pub mod annotate;
pub mod divide;
pub mod dp;
pub mod merge;
pub mod model;
pub mod pattern;
pub mod rebuild;
pub mod recording;
pub mod report;
pub mod score;

#[cfg(test)]
mod worked_example;

pub use accuracy::{Accuracy, accuracy};
pub use annotate::{Function, Insn, InsnId, Program};
pub use merge::{
    GroupSimilarity, MergeConfig, MergeError, MergeStep, Merged, Method, Ranking, merge,
};
pub use model::{CodeAddr, FunctionCode, Loc};
pub use rebuild::{Entry, Rebuilt, rebuild};
pub use score::{DiffTable, Scores, Table, Variant};
