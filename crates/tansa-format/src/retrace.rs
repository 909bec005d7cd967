//! Frames of an instruction-trace recording (`tansa retrace record`).
//!
//! ```text
//! META INFO CODE (PHASES? EXECUTIONS)* GROUND_TRUTH? SUMMARY END
//! ```
//!
//! Everything needed to rebuild and report without the binary is stored: the code of every
//! function the samples (and the ground truth) touched, with a source line per instruction,
//! the samples of each execution of the region, the true traces if they were captured, and
//! the sampler and period. Addresses are module-relative ([`Addr`]: module index into
//! [`RegionCode::modules`], address in the module's file), so a recording does not depend
//! on where the process was loaded.

use serde::{Deserialize, Serialize};

use crate::container::FrameType;
use crate::meta::ExitStatus;

/// [`RetraceInfo`] (postcard).
pub const INFO: FrameType = FrameType(0x0300);
/// [`RegionCode`] (postcard).
pub const CODE: FrameType = FrameType(0x0301);
/// [`ExecutionChunk`] (postcard); there may be many, in execution order.
pub const EXECUTIONS: FrameType = FrameType(0x0302);
/// [`GroundTruth`] (postcard).
pub const GROUND_TRUTH: FrameType = FrameType(0x0303);
/// [`RetraceSummary`] (postcard).
pub const SUMMARY: FrameType = FrameType(0x0304);
/// [`PhaseChunk`] (postcard): where the `ptrace` sampler started sampling each execution,
/// when it drew each execution's phase at random ([`PhaseRule::Shuffled`]). Written before
/// the [`EXECUTIONS`] frame of the same executions, so a file cut short never holds
/// executions without their phases. A recording without these frames was sampled with
/// [`PhaseRule::Counted`] (a later addition: older readers ignore the frame).
pub const PHASES: FrameType = FrameType(0x0305);

/// An instruction address: `(module index, address in the module's file)`.
pub type Addr = (u32, u64);

/// Which sampler produced the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// Exact every-`P`-th-instruction sampling by single-stepping the region with ptrace.
    Ptrace,
    /// Hardware retired-instruction counter with a fixed period (needs a PMU).
    Instructions,
    /// Time-based sampling with the `cpu-clock` software event: an execution-time-weighted
    /// trace.
    CpuClock,
}

impl Source {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Source::Ptrace => "ptrace",
            Source::Instructions => "instructions",
            Source::CpuClock => "cpu-clock",
        }
    }

    /// Unit of the period.
    pub fn period_unit(self) -> &'static str {
        match self {
            Source::Ptrace | Source::Instructions => "instructions",
            Source::CpuClock => "nanoseconds",
        }
    }

    /// Whether samples are taken at fixed time intervals (execution-time weighted).
    pub fn is_time_based(self) -> bool {
        self == Source::CpuClock
    }
}

/// What was recorded and how. Written first, after the common META frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetraceInfo {
    /// The region: the function whose executions were sampled.
    pub region: String,
    /// Module index of the region's function.
    pub region_module: u32,
    /// Address of the region's function in its module's file.
    pub region_addr: u64,
    /// The sampler.
    pub source: Source,
    /// Why this sampler (e.g. the fallback reason when no PMU was found).
    pub source_note: String,
    /// Sampling period, in [`Source::period_unit`] units.
    pub period: u64,
    /// Executions run at full speed before sampling started.
    pub warmup: u64,
}

/// A module (executable or shared library) the region's code came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    /// Path of the file.
    pub path: String,
    /// GNU build id, if any.
    pub build_id: Vec<u8>,
}

/// The source line of one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Address of the instruction.
    pub addr: u64,
    /// Index into [`RegionCode::files`].
    pub file: u32,
    /// Line number (0 if unknown).
    pub line: u32,
}

/// The code of one function the region executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// Module index.
    pub module: u32,
    /// Name (demangled).
    pub name: String,
    /// Address of its first byte in the module's file.
    pub start: u64,
    /// Its machine code.
    pub bytes: Vec<u8>,
    /// Source lines of its instructions that have one, by address.
    pub lines: Vec<Line>,
}

/// The region's code: everything a report needs instead of the binaries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionCode {
    /// Modules, by index.
    pub modules: Vec<Module>,
    /// Source file paths (interned).
    pub files: Vec<String>,
    /// Functions touched by samples or the ground truth.
    pub functions: Vec<Function>,
}

/// The samples of one execution of the region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    /// Instructions the execution ran, when the sampler knows (ptrace), else 0.
    pub instructions: u64,
    /// The sampled instruction addresses, in time order.
    pub samples: Vec<Addr>,
}

/// How the `ptrace` sampler chooses which instructions of an execution it keeps: every
/// `P`-th from the execution's *phase*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PhaseRule {
    /// The seed's: one count runs on across the executions, and instruction `n` of an
    /// execution is kept when `(N + n) % P == 0`, `N` being the instructions of the
    /// executions that ended before it. The phase follows from the counts; but when the
    /// executions' lengths repeat with a cycle whose sum is a multiple of `P` (paths taken
    /// in turn), every execution of a path is sampled at the same positions and the others
    /// are never seen.
    Counted,
    /// Each execution's phase (the position of its first sample, `0..P`) is chosen at
    /// random and recorded ([`PHASES`]): the executions of one length (a path) take the
    /// phases `b, b + a, b + 2a, ...` mod `P`, `a` the golden-ratio step coprime with `P` and
    /// `b` random for each run of `P` of them, so each path gets every phase once per `P` of
    /// its executions, evenly spread in between. The mean period stays `P` and every
    /// partial is still the seed's strided subsequence, but no cycle of the program can
    /// line up with the sampler.
    Shuffled,
}

impl PhaseRule {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PhaseRule::Counted => "counted",
            PhaseRule::Shuffled => "shuffled",
        }
    }
}

/// The phases of consecutive executions ([`PhaseRule::Shuffled`]): for each, the position
/// in it of its first sample if it is long enough to hold one (samples are at `phase`,
/// `phase + P`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseChunk {
    /// Index of the first execution (0 is the first sampled execution).
    pub first: u64,
    /// The phases, one per execution, each below the period.
    pub phases: Vec<u64>,
}

/// Consecutive executions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionChunk {
    /// Index of the first one (0 is the first sampled execution).
    pub first: u64,
    /// The executions.
    pub executions: Vec<Execution>,
}

/// True traces of single-stepped executions, de-duplicated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// The distinct traces (every executed instruction, in order).
    pub traces: Vec<Vec<Addr>>,
    /// For each single-stepped execution, in order, the index of its trace.
    pub executions: Vec<u32>,
    /// Whether these are the sampled executions themselves (ptrace) or further executions
    /// of the same run stepped after sampling (other sources).
    pub same_executions: bool,
}

/// The order in which the paths of a region stand for it, the most representative first:
/// the path more executions took, then, between paths taken equally often, the shorter
/// one. One rule for the paths rebuilt from samples (`tansa_retrace::align`) and for the
/// true paths ([`GroundTruth::modal`]), so that the rebuilt trace of a report is compared
/// with the true path it stands for: with two paths taken equally often (an alternating
/// branch), the rebuilt trace was the shorter path and the truth the one stepped first,
/// and a reconstruction exact on each path was reported as 0.81 against the other.
/// Paths are `(executions, length in instructions)`.
pub fn representative_order(a: (usize, u64), b: (usize, u64)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then(a.1.cmp(&b.1))
}

impl GroundTruth {
    /// The most frequent trace and how many executions took it; between traces taken
    /// equally often, as [`representative_order`] says (the shorter, then the one recorded
    /// first).
    pub fn modal(&self) -> Option<(&[Addr], usize)> {
        let mut counts = vec![0usize; self.traces.len()];
        for &e in &self.executions {
            if let Some(c) = counts.get_mut(e as usize) {
                *c += 1;
            }
        }
        let length = |i: usize| self.traces.get(i).map_or(0, |t| t.len() as u64);
        let (i, &n) = counts.iter().enumerate().min_by(|a, b| {
            representative_order((*a.1, length(a.0)), (*b.1, length(b.0))).then(a.0.cmp(&b.0))
        })?;
        Some((self.traces.get(i)?.as_slice(), n))
    }
}

/// How the recording ended. Written last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetraceSummary {
    /// Executions sampled.
    pub executions: u64,
    /// Samples taken.
    pub samples: u64,
    /// Executions cut short (the target exited inside the region); not stored.
    pub incomplete: u64,
    /// Records the kernel dropped (perf sources).
    pub lost: u64,
    /// How the target ended (`Signaled` with SIGKILL when stopped after enough executions).
    pub exit: ExitStatus,
    /// Wall-clock seconds from start to end of the target.
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modal_trace() {
        let g = GroundTruth {
            traces: vec![vec![(0, 1)], vec![(0, 2)]],
            executions: vec![0, 1, 1, 0, 1],
            same_executions: true,
        };
        assert_eq!(g.modal(), Some((&[(0, 2)][..], 3)));
        assert_eq!(GroundTruth::default().modal(), None);
    }

    /// Two true paths taken equally often: the shorter stands for the region, as among
    /// rebuilt paths, whichever was stepped first; equal lengths: the first stepped.
    #[test]
    fn modal_trace_ties_go_to_the_shorter_path_then_the_first() {
        let long = vec![(0, 1), (0, 2), (0, 3)];
        let short = vec![(0, 1), (0, 3)];
        for (traces, executions) in [
            (vec![long.clone(), short.clone()], vec![0, 1, 0, 1]),
            (vec![short.clone(), long.clone()], vec![1, 0, 1, 0]),
        ] {
            let g = GroundTruth {
                traces,
                executions,
                same_executions: true,
            };
            assert_eq!(g.modal(), Some((&short[..], 2)));
        }
        let other = vec![(0, 1), (0, 4)];
        let g = GroundTruth {
            traces: vec![other.clone(), short.clone()],
            executions: vec![1, 0, 0, 1],
            same_executions: true,
        };
        assert_eq!(g.modal(), Some((&other[..], 2)));
        // More executions win over length.
        let g = GroundTruth {
            traces: vec![long.clone(), short.clone()],
            executions: vec![0, 1, 0],
            same_executions: true,
        };
        assert_eq!(g.modal(), Some((&long[..], 2)));
        // The rule itself: more executions first, then the shorter.
        use std::cmp::Ordering::*;
        assert_eq!(representative_order((3, 10), (2, 5)), Less);
        assert_eq!(representative_order((2, 5), (2, 10)), Less);
        assert_eq!(representative_order((2, 10), (2, 5)), Greater);
        assert_eq!(representative_order((2, 5), (2, 5)), Equal);
    }
}
