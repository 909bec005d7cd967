//! The analysed model of a retrace recording, which every renderer takes. Serialized with
//! serde it *is* the JSON document `tansa.retrace.v1` (see
//! `docs/architecture/retrace.md` for the contract).

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use tansa_format::retrace::{
    Execution, GroundTruth, PhaseRule, RegionCode, RetraceInfo, RetraceSummary, Source,
};

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

/// How well one true path was rebuilt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TruePathAccuracy {
    /// Single-stepped executions that took it.
    pub executions: usize,
    /// Their fraction of the single-stepped executions.
    pub share: f64,
    /// Its length in instructions (as stepped, before folding repeats).
    pub length: usize,
    /// Index into [`Report::paths`] of the rebuilt path it is compared with: of the paths
    /// of its length, the closest (after a similarity merge, the one blended trace); null
    /// when no path of its length was rebuilt (then `lcs_ratio` is 0 and `edit_distance`
    /// 1).
    pub rebuilt_path: Option<usize>,
    /// As [`AccuracyReport::lcs_ratio`].
    pub lcs_ratio: f64,
    /// As [`AccuracyReport::edit_distance`].
    pub edit_distance: f64,
}

/// Most distinct true paths compared one by one (most executions first); the weighted
/// figures cover the executions of those.
pub const MAX_TRUE_PATHS: usize = 256;

/// Accuracy against the single-stepped ground truth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccuracyReport {
    /// `LCS / max(len)` after folding repeats, of the rebuilt trace ([`Report::trace`])
    /// against the most frequent true path; 1 is a perfect rebuild.
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
    /// The LCS ratio of every true path against its rebuilt path, weighted by the
    /// executions that took it: how well the rebuild describes what the executions did.
    pub weighted_lcs_ratio: f64,
    /// The edit distance, weighted as `weighted_lcs_ratio`.
    pub weighted_edit_distance: f64,
    /// Fraction of the stepped executions the weighted figures cover (1 unless there are
    /// more than [`MAX_TRUE_PATHS`] distinct true paths).
    pub weighted_share: f64,
    /// The true paths compared, most executions first (then the shorter).
    pub true_paths: Vec<TruePathAccuracy>,
    /// Index into `true_paths` of the worst rebuilt one (lowest LCS ratio; between equal
    /// ones, the one more executions took).
    pub worst_true_path: Option<usize>,
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
    /// How the ptrace sampler chose each execution's phase: `shuffled` (drawn at random and
    /// recorded) or `counted` (the seed's: a count running on across executions, as perf
    /// sources also count).
    pub sampling_phase: &'static str,
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
    /// `PHASES`, concatenated, if any (`PhaseRule::Shuffled`).
    pub phases: Option<&'a [u64]>,
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
            align(
                &prog,
                &counted,
                input.info.period,
                input.phases,
                Some(region),
            )
        }
        Alignment::Merge => None,
    };
    let align_seconds = started.elapsed().as_secs_f64();
    let (alignment, alignment_note, paths) = match &aligned {
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
    let rebuilt_paths: Vec<(Option<u64>, Vec<CodeAddr>)> = match (&aligned, &rebuilt) {
        (Some(a), _) => a
            .paths
            .iter()
            .map(|p| (Some(p.length), p.entries.iter().map(|e| e.at).collect()))
            .collect(),
        (None, Some(r)) => vec![(None, r.entries.iter().map(|e| e.at).collect())],
        (None, None) => Vec::new(),
    };
    let weighted = weigh_true_paths(&truths, &rebuilt_paths);
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
            weighted_lcs_ratio: weighted.lcs_ratio,
            weighted_edit_distance: weighted.edit_distance,
            weighted_share: weighted.share,
            worst_true_path: weighted.worst,
            true_paths: weighted.paths,
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
        sampling_phase: match (input.info.source, input.phases) {
            (Source::Ptrace, Some(_)) => PhaseRule::Shuffled.name(),
            _ => PhaseRule::Counted.name(),
        },
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

/// The accuracy of every true path, and their weighted mean.
struct Weighted {
    lcs_ratio: f64,
    edit_distance: f64,
    share: f64,
    paths: Vec<TruePathAccuracy>,
    worst: Option<usize>,
}

/// Compares each true path (`(trace, executions)`) with its rebuilt path among `rebuilt`
/// (`(length, trace)`, length `None` after a similarity merge: then every true path is
/// compared with it): of those of its length, the closest. The mean over the true paths,
/// weighted by their executions, is the figure that does not hide a badly rebuilt path
/// behind a well rebuilt frequent one.
fn weigh_true_paths(
    truths: &[(Vec<CodeAddr>, usize)],
    rebuilt: &[(Option<u64>, Vec<CodeAddr>)],
) -> Weighted {
    let total: usize = truths.iter().map(|t| t.1).sum();
    let mut order: Vec<usize> = (0..truths.len()).collect();
    order.sort_by(|&a, &b| {
        tansa_format::retrace::representative_order(
            (truths[a].1, truths[a].0.len() as u64),
            (truths[b].1, truths[b].0.len() as u64),
        )
        .then(a.cmp(&b))
    });
    let paths: Vec<TruePathAccuracy> = order
        .iter()
        .take(MAX_TRUE_PATHS)
        .map(|&t| {
            let (truth, n) = &truths[t];
            let best = rebuilt
                .iter()
                .enumerate()
                .filter(|(_, (len, _))| len.is_none_or(|l| l == truth.len() as u64))
                .map(|(i, (_, got))| (i, accuracy(got, truth)))
                .fold(
                    None,
                    |best: Option<(usize, crate::Accuracy)>, (i, a)| match best {
                        Some((_, b)) if b.lcs_ratio >= a.lcs_ratio => best,
                        _ => Some((i, a)),
                    },
                );
            TruePathAccuracy {
                executions: *n,
                share: *n as f64 / total.max(1) as f64,
                length: truth.len(),
                rebuilt_path: best.map(|b| b.0),
                lcs_ratio: best.map_or(0.0, |b| b.1.lcs_ratio),
                edit_distance: best.map_or(1.0, |b| b.1.edit_distance),
            }
        })
        .collect();
    let covered: usize = paths.iter().map(|p| p.executions).sum();
    let mean = |f: fn(&TruePathAccuracy) -> f64| {
        paths
            .iter()
            .map(|p| f(p) * p.executions as f64)
            .sum::<f64>()
            / covered.max(1) as f64
    };
    let worst = paths
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.lcs_ratio.total_cmp(&b.1.lcs_ratio).then(a.0.cmp(&b.0)))
        .map(|(i, _)| i);
    Weighted {
        lcs_ratio: mean(|p| p.lcs_ratio),
        edit_distance: mean(|p| p.edit_distance),
        share: covered as f64 / total.max(1) as f64,
        worst,
        paths,
    }
}

#[cfg(test)]
mod weighted_tests {
    use super::*;

    fn trace(addrs: &[u64]) -> Vec<CodeAddr> {
        addrs
            .iter()
            .map(|&addr| CodeAddr { module: 0, addr })
            .collect()
    }

    /// Four true paths of equal share; the shortest rebuilt exactly, the others with
    /// holes: the weighted figure is their mean, the worst is named, and a true path
    /// whose length no rebuilt path has counts as not rebuilt.
    #[test]
    fn every_true_path_counts_by_its_executions() {
        let truths = vec![
            (trace(&[1, 2, 3, 4]), 10),
            (trace(&[1, 2, 5, 6, 7, 8, 3, 4]), 10),
            (trace(&[1, 2, 9, 3, 4]), 20),
            (trace(&[7, 7, 7]), 0),
        ];
        let rebuilt = vec![
            (Some(4), trace(&[1, 2, 3, 4])),
            // Half of path 2 rebuilt.
            (Some(8), trace(&[1, 2, 5, 6])),
        ];
        let w = weigh_true_paths(&truths, &rebuilt);
        let shares: Vec<_> = w.paths.iter().map(|p| (p.length, p.share)).collect();
        assert_eq!(shares, [(5, 0.5), (4, 0.25), (8, 0.25), (3, 0.0)]);
        let lcs: Vec<_> = w.paths.iter().map(|p| p.lcs_ratio).collect();
        assert_eq!(lcs, [0.0, 1.0, 0.5, 0.0]);
        assert_eq!(w.paths[0].rebuilt_path, None);
        assert_eq!(w.paths[0].edit_distance, 1.0);
        assert_eq!(w.paths[2].rebuilt_path, Some(1));
        assert_eq!(w.lcs_ratio, 0.25 * 1.0 + 0.25 * 0.5);
        // The worst: LCS 0, and of the two, the one most executions took.
        assert_eq!(w.worst, Some(0));
        assert_eq!(w.share, 1.0);
        // A similarity merge's blend is compared with every true path.
        let blend = vec![(None, trace(&[1, 2, 3, 4]))];
        let w = weigh_true_paths(&truths[..3], &blend);
        assert!(w.paths.iter().all(|p| p.rebuilt_path == Some(0)));
        assert_eq!(w.paths[1].lcs_ratio, 1.0);
        assert!(w.lcs_ratio < 1.0 && w.lcs_ratio > 0.5, "{}", w.lcs_ratio);
        // No ground truth: nothing to weigh.
        let w = weigh_true_paths(&[], &rebuilt);
        assert_eq!((w.paths.len(), w.worst, w.lcs_ratio), (0, None, 0.0));
    }
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
