//! The analysed model of a retrace recording, which every renderer takes. Serialized with
//! serde it *is* the JSON document `tansa.retrace.v1` (see
//! `docs/architecture/retrace.md` for the contract).

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use tansa_format::retrace::{Execution, GroundTruth, RegionCode, RetraceInfo, RetraceSummary};

use crate::accuracy::accuracy;
use crate::merge::{GroupSimilarity, MergeConfig, MergeError, Method, Ranking};
use crate::rebuild::rebuild;
use crate::recording::{code_addr, partials, program};
use crate::score::{Scores, Variant};

/// The schema name of the JSON document.
pub const SCHEMA: &str = "tansa.retrace.v1";

/// One position of the rebuilt trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    /// Position in the trace, from 0.
    pub position: usize,
    /// Index into [`Report::modules`], or `null` for unknown code.
    pub module: Option<u32>,
    /// Address in the module's file (the runtime address for unknown code).
    pub address: u64,
    /// Function, if known.
    pub function: Option<String>,
    /// Byte offset in the function.
    pub offset: Option<u64>,
    /// Instruction index in the function (the seed's in-function offset).
    pub index: Option<u32>,
    /// Basic-block number in the function, from 1.
    pub block: Option<u32>,
    /// Instruction index in the basic block, from 0.
    pub block_offset: Option<u32>,
    /// Length of the instruction in bytes.
    pub length: Option<u8>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// Intel-syntax disassembly.
    pub mnemonic: Option<String>,
    /// How many executions' partial sequences contributed this position.
    pub support: u32,
}

/// How the partial sequences were merged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergeSummary {
    /// Method asked for.
    pub method: Method,
    /// How groups were compared.
    pub group_similarity: GroupSimilarity,
    /// Pairs tried per step.
    pub top_k: usize,
    /// Ranking of the top-K variant.
    pub ranking: Ranking,
    /// Merge steps.
    pub steps: usize,
    /// Steps whose patterns were enumerated.
    pub enumerated_steps: usize,
    /// Steps solved by the dynamic program.
    pub dp_steps: usize,
    /// Largest `C(a + b, a)` of a step (saturated to `u64`).
    pub max_patterns: u64,
    /// Seconds spent merging.
    pub seconds: f64,
}

/// Accuracy against the single-stepped ground truth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccuracyReport {
    /// `LCS / max(len)` after folding repeats; 1 is a perfect rebuild.
    pub lcs_ratio: f64,
    /// `Levenshtein / max(len)` after folding repeats; 0 is a perfect rebuild.
    pub edit_distance: f64,
    /// Length of the rebuilt path compared.
    pub rebuilt_length: usize,
    /// Length of the true path compared (the most frequent one).
    pub truth_length: usize,
    /// Executions single-stepped.
    pub truth_executions: usize,
    /// Distinct true paths among them (1 for a reproducible region).
    pub distinct_paths: usize,
    /// Executions that took the most frequent path, which is the one compared.
    pub modal_support: usize,
    /// Whether the stepped executions are the sampled ones (ptrace) or further ones.
    pub same_executions: bool,
}

/// The analysed recording.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The region's function.
    pub region: String,
    /// The command that was recorded.
    pub command: Vec<String>,
    /// Module paths, by index.
    pub modules: Vec<String>,
    /// The sampler: `ptrace`, `instructions` or `cpu-clock`.
    pub source: &'static str,
    /// Why that sampler.
    pub source_note: String,
    /// Sampling period.
    pub period: u64,
    /// `instructions` or `nanoseconds`.
    pub period_unit: &'static str,
    /// Executions sampled.
    pub executions: u64,
    /// Wall-clock seconds the target ran under the recorder (null if the recording is
    /// incomplete).
    pub recording_seconds: Option<f64>,
    /// Executions with at least one sample.
    pub partials: usize,
    /// Distinct partial sequences (what was merged).
    pub distinct_partials: usize,
    /// Samples in all.
    pub samples: usize,
    /// Annotation the scores used.
    pub variant: Variant,
    /// Whether the samples are time-based (execution-time weighted trace).
    pub time_weighted: bool,
    /// The tables.
    pub scores: Scores,
    /// How the merge went.
    pub merge: MergeSummary,
    /// The rebuilt trace.
    pub trace: Vec<TraceEntry>,
    /// Accuracy, when the recording has a ground truth.
    pub accuracy: Option<AccuracyReport>,
}

/// What a report is built from: the frames of a recording.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// The recorded command.
    pub command: &'a [String],
    /// `INFO`.
    pub info: &'a RetraceInfo,
    /// `CODE`.
    pub code: &'a RegionCode,
    /// `EXECUTIONS`, concatenated.
    pub executions: &'a [Execution],
    /// `GROUND_TRUTH`, if any.
    pub ground_truth: Option<&'a GroundTruth>,
    /// `SUMMARY`, if the recording is complete.
    pub summary: Option<&'a RetraceSummary>,
}

/// Rebuilds the trace of `input` with `cfg` and builds the report.
pub fn build_report(input: ReportInput<'_>, cfg: &MergeConfig) -> Result<Report, MergeError> {
    let prog = program(input.code);
    let started = Instant::now();
    let rebuilt = rebuild(&prog, &partials(input.executions), cfg)?;
    let seconds = started.elapsed().as_secs_f64();
    let lines: HashMap<(u32, u64), (u32, u32)> = input
        .code
        .functions
        .iter()
        .flat_map(|f| {
            f.lines
                .iter()
                .map(move |l| ((f.module, l.addr), (l.file, l.line)))
        })
        .collect();
    let trace = rebuilt
        .entries
        .iter()
        .enumerate()
        .map(|(position, e)| {
            let insn = e.insn.map(|id| prog.insn(id));
            let func = insn.and_then(|i| prog.function(i.loc.function));
            let line = lines.get(&(e.at.module, e.at.addr));
            TraceEntry {
                position,
                module: ((e.at.module as usize) < input.code.modules.len()).then_some(e.at.module),
                address: e.at.addr,
                function: func.map(|f| f.name.clone()),
                offset: func.and_then(|f| e.at.addr.checked_sub(f.start)),
                index: insn.map(|i| i.loc.index),
                block: insn.map(|i| i.loc.block),
                block_offset: insn.map(|i| i.loc.block_offset),
                length: insn.map(|i| i.len),
                file: line.and_then(|&(f, _)| input.code.files.get(f as usize).cloned()),
                line: line.map(|&(_, l)| l),
                mnemonic: insn.map(|i| i.text.clone()),
                support: e.support,
            }
        })
        .collect();
    let accuracy = input.ground_truth.and_then(|gt| {
        let (modal, modal_support) = gt.modal()?;
        let truth: Vec<_> = modal.iter().copied().map(code_addr).collect();
        let got: Vec<_> = rebuilt.entries.iter().map(|e| e.at).collect();
        let a = accuracy(&got, &truth);
        Some(AccuracyReport {
            lcs_ratio: a.lcs_ratio,
            edit_distance: a.edit_distance,
            rebuilt_length: a.rebuilt_len,
            truth_length: a.truth_len,
            truth_executions: gt.executions.len(),
            distinct_paths: gt.traces.len(),
            modal_support,
            same_executions: gt.same_executions,
        })
    });
    let steps = &rebuilt.merged.steps;
    Ok(Report {
        schema: SCHEMA,
        region: input.info.region.clone(),
        command: input.command.to_vec(),
        modules: input.code.modules.iter().map(|m| m.path.clone()).collect(),
        source: input.info.source.name(),
        source_note: input.info.source_note.clone(),
        period: input.info.period,
        period_unit: input.info.source.period_unit(),
        executions: input
            .summary
            .map_or(input.executions.len() as u64, |s| s.executions),
        recording_seconds: input.summary.map(|s| s.seconds),
        partials: rebuilt.partials,
        distinct_partials: rebuilt.distinct_partials,
        samples: rebuilt.samples,
        variant: cfg.scores.likelihood.variant(),
        time_weighted: input.info.source.is_time_based(),
        scores: cfg.scores.clone(),
        merge: MergeSummary {
            method: cfg.method,
            group_similarity: cfg.group_similarity,
            top_k: cfg.top_k,
            ranking: cfg.ranking,
            steps: steps.len(),
            enumerated_steps: steps.iter().filter(|s| s.enumerated).count(),
            dp_steps: steps.iter().filter(|s| !s.enumerated).count(),
            max_patterns: steps
                .iter()
                .map(|s| u64::try_from(s.patterns).unwrap_or(u64::MAX))
                .max()
                .unwrap_or(0),
            seconds,
        },
        trace,
        accuracy,
    })
}
