//! The analysed model of a retrace recording, which every renderer takes. Serialized with
//! serde it *is* the JSON document `tansa.retrace.v1` (see
//! `docs/architecture/retrace.md` for the contract).

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use tansa_format::retrace::{Execution, GroundTruth, RegionCode, RetraceInfo, RetraceSummary};

use crate::accuracy::accuracy;
use crate::align::{Counted, align};
use crate::annotate::Program;
use crate::merge::{GroupSimilarity, MergeConfig, MergeError, Method, Ranking};
use crate::model::CodeAddr;
use crate::rebuild::Entry;
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

/// How samples are put in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Alignment {
    /// By position, from the sampler's exact instruction counts ([`crate::align`]), one
    /// trace per path; the similarity merge when the recording has no exact counts.
    Counts,
    /// The seed's similarity merge of partial sequences, one trace for all executions.
    Merge,
}

/// One path the executions took, rebuilt on its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathReport {
    /// Fraction of the sampled executions that took it.
    pub share: f64,
    /// Executions that took it.
    pub executions: usize,
    /// Instructions each of them ran (null after a similarity merge).
    pub instructions: Option<u64>,
    /// Positions some sample hit.
    pub observed: u64,
    /// Positions filled from the control-flow graph (support 0 in the trace).
    pub filled: u64,
    /// Positions neither sampled nor filled (left out of the trace).
    pub missing: u64,
    /// The rebuilt trace of this path.
    pub trace: Vec<TraceEntry>,
    /// Against the true path of the same length taken by most executions (any path after
    /// a similarity merge: the most frequent), when the recording has a ground truth.
    pub accuracy: Option<PathAccuracy>,
}

/// A path's accuracy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathAccuracy {
    /// As [`AccuracyReport::lcs_ratio`].
    pub lcs_ratio: f64,
    /// As [`AccuracyReport::edit_distance`].
    pub edit_distance: f64,
    /// Fraction of the single-stepped executions that took the true path compared.
    pub truth_share: f64,
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
    /// How the samples were put in order.
    pub alignment: Alignment,
    /// Why (a fallback from `counts` says why the counts could not be used).
    pub alignment_note: String,
    /// The rebuilt trace (of the most frequent path).
    pub trace: Vec<TraceEntry>,
    /// Every path rebuilt, most executions first (one, the blend of all, after a
    /// similarity merge).
    pub paths: Vec<PathReport>,
    /// Accuracy, when the recording has a ground truth.
    pub accuracy: Option<AccuracyReport>,
    /// What makes the rebuilt trace less than it could be, and how to do better.
    pub warnings: Vec<String>,
}

/// Samples per sampled address below which a similarity merge has too little to go on.
const FEW_SAMPLES_PER_ADDRESS: usize = 5;

/// The warning for a recording whose samples are too few for a similarity merge to order
/// (`None` with exact positions, whose paths count what is missing): fewer than
/// [`FEW_SAMPLES_PER_ADDRESS`] samples per distinct address sampled. Most executions then
/// got no sample at all, as when a time-based period is longer than an execution; more
/// executions fix it.
pub fn few_samples_warning(
    alignment: Alignment,
    executions: u64,
    partials: usize,
    samples: usize,
    addresses: usize,
) -> Option<String> {
    if alignment != Alignment::Merge || samples >= FEW_SAMPLES_PER_ADDRESS * addresses.max(1) {
        return None;
    }
    if samples == 0 {
        return Some(format!(
            "no sample in {executions} executions: the period is longer than all of them \
             together; record many more executions (`tansa retrace record --executions`) or \
             with a shorter period"
        ));
    }
    let more = (FEW_SAMPLES_PER_ADDRESS * addresses.max(1)).div_ceil(samples) as u64;
    Some(format!(
        "{samples} samples for {addresses} distinct instructions, from {partials} of \
         {executions} executions: too few to put the trace in order; record about {more}x \
         more executions (`tansa retrace record --executions {}`) or with a shorter period",
        executions.saturating_mul(more)
    ))
}

#[cfg(test)]
mod warning_tests {
    use super::*;

    #[test]
    fn few_samples_for_a_merge_are_a_warning_that_says_how_many_more() {
        let w = few_samples_warning(Alignment::Merge, 1000, 90, 90, 38).unwrap();
        assert_eq!(
            w,
            "90 samples for 38 distinct instructions, from 90 of 1000 executions: too few \
             to put the trace in order; record about 3x more executions (`tansa retrace \
             record --executions 3000`) or with a shorter period"
        );
        let none = few_samples_warning(Alignment::Merge, 50, 0, 0, 0).unwrap();
        assert!(none.starts_with("no sample in 50 executions"), "{none}");
        // Enough samples, or exact positions (whose paths count what is missing): none.
        assert_eq!(
            few_samples_warning(Alignment::Merge, 1000, 900, 190, 38),
            None
        );
        assert_eq!(
            few_samples_warning(Alignment::Counts, 1000, 90, 90, 38),
            None
        );
    }
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

/// Rebuilds the trace of `input` with `cfg` (ordered as `alignment` says) and builds the
/// report.
pub fn build_report(
    input: ReportInput<'_>,
    cfg: &MergeConfig,
    alignment: Alignment,
) -> Result<Report, MergeError> {
    let prog = program(input.code);
    let sampled = partials(input.executions);
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
    let view = TraceView {
        prog: &prog,
        lines: &lines,
        code: input.code,
    };
    let truths: Vec<(Vec<CodeAddr>, usize)> = input
        .ground_truth
        .map(|gt| {
            let mut counts = vec![0usize; gt.traces.len()];
            for &e in &gt.executions {
                if let Some(c) = counts.get_mut(e as usize) {
                    *c += 1;
                }
            }
            gt.traces
                .iter()
                .zip(counts)
                .map(|(t, n)| (t.iter().copied().map(code_addr).collect(), n))
                .collect()
        })
        .unwrap_or_default();
    let truth_total: usize = truths.iter().map(|t| t.1).sum();
    let path_accuracy = |got: &[Entry], length: Option<u64>| -> Option<PathAccuracy> {
        let (truth, n) = truths
            .iter()
            .filter(|(t, _)| length.is_none_or(|l| t.len() as u64 == l))
            .max_by(|a, b| a.1.cmp(&b.1))?;
        let got: Vec<CodeAddr> = got.iter().map(|e| e.at).collect();
        let a = accuracy(&got, truth);
        Some(PathAccuracy {
            lcs_ratio: a.lcs_ratio,
            edit_distance: a.edit_distance,
            truth_share: *n as f64 / truth_total.max(1) as f64,
        })
    };
    let started = Instant::now();
    let aligned = match alignment {
        Alignment::Counts => {
            let counted: Vec<Counted<'_>> = input
                .executions
                .iter()
                .zip(&sampled)
                .map(|(e, s)| Counted {
                    instructions: e.instructions,
                    samples: s,
                })
                .collect();
            let region = CodeAddr {
                module: input.info.region_module,
                addr: input.info.region_addr,
            };
            align(&prog, &counted, input.info.period, Some(region))
        }
        Alignment::Merge => None,
    };
    let align_seconds = started.elapsed().as_secs_f64();
    let (alignment, alignment_note, paths) = match aligned {
        Some(a) => {
            let paths = a
                .paths
                .iter()
                .map(|p| PathReport {
                    share: p.executions as f64 / a.executions.max(1) as f64,
                    executions: p.executions,
                    instructions: Some(p.length),
                    observed: p.observed,
                    filled: p.filled,
                    missing: p.missing,
                    trace: view.entries(&p.entries),
                    accuracy: path_accuracy(&p.entries, Some(p.length)),
                })
                .collect::<Vec<_>>();
            let entries = a.paths.first().map(|p| p.entries.clone());
            (
                Alignment::Counts,
                "the sampler counted every instruction: samples placed by position".to_string(),
                Some((paths, entries.unwrap_or_default())),
            )
        }
        None => (
            Alignment::Merge,
            match alignment {
                Alignment::Merge => "requested".to_string(),
                Alignment::Counts => format!(
                    "the {} sampler's counts do not give each sample's position: similarity merge",
                    input.info.source.name()
                ),
            },
            None,
        ),
    };
    let started = Instant::now();
    let rebuilt = match paths {
        Some(_) => None,
        None => Some(rebuild(&prog, &sampled, cfg)?),
    };
    let merge_seconds = started.elapsed().as_secs_f64();
    let (paths, entries) = match (paths, &rebuilt) {
        (Some(p), _) => p,
        (None, None) => (Vec::new(), Vec::new()),
        (None, Some(rebuilt)) => {
            let blend = PathReport {
                share: 1.0,
                executions: rebuilt.partials,
                instructions: None,
                observed: rebuilt.entries.len() as u64,
                filled: 0,
                missing: 0,
                trace: view.entries(&rebuilt.entries),
                accuracy: path_accuracy(&rebuilt.entries, None),
            };
            (vec![blend], rebuilt.entries.clone())
        }
    };
    let seconds = match alignment {
        Alignment::Counts => align_seconds,
        Alignment::Merge => merge_seconds,
    };
    let trace = view.entries(&entries);
    let accuracy = input.ground_truth.and_then(|gt| {
        let (modal, modal_support) = gt.modal()?;
        let truth: Vec<_> = modal.iter().copied().map(code_addr).collect();
        let got: Vec<_> = entries.iter().map(|e| e.at).collect();
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
    let steps: &[crate::merge::MergeStep] = rebuilt.as_ref().map_or(&[], |r| &r.merged.steps);
    let mut distinct: Vec<&[CodeAddr]> = sampled
        .iter()
        .filter(|s| !s.is_empty())
        .map(Vec::as_slice)
        .collect();
    let partials_count = distinct.len();
    distinct.sort_unstable();
    distinct.dedup();
    let executions = input
        .summary
        .map_or(input.executions.len() as u64, |s| s.executions);
    let samples: usize = sampled.iter().map(Vec::len).sum();
    let addresses = sampled
        .iter()
        .flatten()
        .collect::<std::collections::HashSet<_>>()
        .len();
    let warnings = few_samples_warning(alignment, executions, partials_count, samples, addresses)
        .into_iter()
        .collect();
    Ok(Report {
        schema: SCHEMA,
        region: input.info.region.clone(),
        command: input.command.to_vec(),
        modules: input.code.modules.iter().map(|m| m.path.clone()).collect(),
        source: input.info.source.name(),
        source_note: input.info.source_note.clone(),
        period: input.info.period,
        period_unit: input.info.source.period_unit(),
        executions,
        recording_seconds: input.summary.map(|s| s.seconds),
        partials: partials_count,
        distinct_partials: distinct.len(),
        samples,
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
        alignment,
        alignment_note,
        trace,
        paths,
        accuracy,
        warnings,
    })
}

/// Turns rebuilt entries into report entries.
struct TraceView<'a> {
    prog: &'a Program,
    lines: &'a HashMap<(u32, u64), (u32, u32)>,
    code: &'a RegionCode,
}

impl TraceView<'_> {
    fn entries(&self, entries: &[Entry]) -> Vec<TraceEntry> {
        entries
            .iter()
            .enumerate()
            .map(|(position, e)| {
                let insn = e.insn.map(|id| self.prog.insn(id));
                let func = insn.and_then(|i| self.prog.function(i.loc.function));
                let line = self.lines.get(&(e.at.module, e.at.addr));
                TraceEntry {
                    position,
                    module: ((e.at.module as usize) < self.code.modules.len())
                        .then_some(e.at.module),
                    address: e.at.addr,
                    function: func.map(|f| f.name.clone()),
                    offset: func.and_then(|f| e.at.addr.checked_sub(f.start)),
                    index: insn.map(|i| i.loc.index),
                    block: insn.map(|i| i.loc.block),
                    block_offset: insn.map(|i| i.loc.block_offset),
                    length: insn.map(|i| i.len),
                    file: line.and_then(|&(f, _)| self.code.files.get(f as usize).cloned()),
                    line: line.map(|&(_, l)| l),
                    mnemonic: insn.map(|i| i.text.clone()),
                    support: e.support,
                }
            })
            .collect()
    }
}
