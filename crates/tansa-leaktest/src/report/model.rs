//! The pieces of a report: runs, measurements, findings, lists.

use serde::Serialize;

use crate::measure::{ProcId, Resource, Snapshot};
use crate::plan::ParamValues;

/// The verdict on a process (for one item and resource, or overall).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Verdict {
    /// Did not grow.
    #[serde(rename = "no-growth")]
    NoGrowth,
    /// 1-a: grows with every run (or ended abnormally while re-tested): a leak.
    #[serde(rename = "1-a")]
    SteadyLeak,
    /// 1-b: grew with the first runs, then stopped: bounded by design.
    #[serde(rename = "1-b")]
    Bounded,
    /// 2: one-off growth that came with the same logged error in more than one item.
    #[serde(rename = "2")]
    OneOffFault,
    /// 3-a: grows with a parameter (a condition), without a cap.
    #[serde(rename = "3-a")]
    ConditionUnbounded,
    /// 3-b: grows with a parameter, up to a cap.
    #[serde(rename = "3-b")]
    ConditionBounded,
    /// One-off growth that did not recur and is not a fault (the seed's 障害でない).
    #[serde(rename = "not-fault")]
    NotFault,
    /// The flow could not decide; the finding says why.
    #[serde(rename = "undeterminable")]
    Undeterminable,
}

impl Verdict {
    /// Its code in reports: `1-a`, `no-growth`, ...
    pub fn code(self) -> &'static str {
        match self {
            Verdict::NoGrowth => "no-growth",
            Verdict::SteadyLeak => "1-a",
            Verdict::Bounded => "1-b",
            Verdict::OneOffFault => "2",
            Verdict::ConditionUnbounded => "3-a",
            Verdict::ConditionBounded => "3-b",
            Verdict::NotFault => "not-fault",
            Verdict::Undeterminable => "undeterminable",
        }
    }

    /// A few words for people.
    pub fn meaning(self) -> &'static str {
        match self {
            Verdict::NoGrowth => "no growth",
            Verdict::SteadyLeak => "steady leak",
            Verdict::Bounded => "bounded growth (by design)",
            Verdict::OneOffFault => "one-off growth caused by another event",
            Verdict::ConditionUnbounded => "condition-driven growth without a cap",
            Verdict::ConditionBounded => "condition-driven growth with a cap",
            Verdict::NotFault => "one-off growth, not a fault",
            Verdict::Undeterminable => "undeterminable",
        }
    }

    /// Whether it is a fault (1-a, 2, 3-a): what makes `tansa leaktest` exit with 1.
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            Verdict::SteadyLeak | Verdict::OneOffFault | Verdict::ConditionUnbounded
        )
    }

    /// Rank for picking a process's overall verdict: faults first, then undeterminable,
    /// then growth by design, then one-off, then none.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::SteadyLeak | Verdict::OneOffFault | Verdict::ConditionUnbounded => 5,
            Verdict::Undeterminable => 4,
            Verdict::Bounded | Verdict::ConditionBounded => 3,
            Verdict::NotFault => 2,
            Verdict::NoGrowth => 1,
        }
    }
}

/// Why a finding has its verdict (machine-readable; the finding's `reason` says it in words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// Grew in every run up to the retest limit N.
    ContinuedGrowth,
    /// Grew, then a run of the upper-limit check showed no growth.
    GrowthStopped,
    /// A watched process ended during a run.
    ProcessEnded,
    /// The test item ended with a failure status during a run where the seed judges that.
    ItemFailed,
    /// The test item did not finish in time (the system under test hung).
    ItemHung,
    /// The same error log ID came with one-off growth in two or more items.
    LogIdRepeated,
    /// The error log ID came with growth once and was also logged at other times.
    LogIdSeenElsewhere,
    /// The error log ID came with growth once and nowhere else: too little information.
    LogIdOnce,
    /// One-off growth without an error log, in too few items to suspect type 3.
    OneOffNoLog,
    /// Growth in one run of the maximum-value or accelerated test exceeded the known limit.
    LimitExceeded,
    /// Still growing in the last 10 % of a parameter sweep.
    TailGrowth,
    /// No growth in the last 10 % of every parameter sweep.
    TailFlat,
    /// A type-3 suspect whose item has no parameter with a range to vary.
    NoParameterRange,
    /// Grew between two measurements of the idle test.
    IdleGrowth,
    /// The process was not running (or not measurable) when its test needed it.
    NotMeasured,
}

/// The part of the flow a run belongs to (ordered as the flow goes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// First run of an item (seed S2–S5).
    Initial,
    /// Second run, after growth (S6–S9).
    Retest,
    /// Runs 3..N of the upper-limit check (Fig. 11).
    UpperLimit,
    /// One parameter at its maximum (P2-4).
    MaxValue,
    /// A parameter swept from min to max (P2-5).
    Accelerated,
    /// The idle test (Figs. 20–22).
    Idle,
}

impl Phase {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Initial => "initial",
            Phase::Retest => "retest",
            Phase::UpperLimit => "upper-limit",
            Phase::MaxValue => "max-value",
            Phase::Accelerated => "accelerated",
            Phase::Idle => "idle",
        }
    }

    /// The fault type of an abnormal end in this phase (S64: 1-a; S130, S174: 3-a).
    pub fn abnormal_verdict(self) -> Verdict {
        match self {
            Phase::MaxValue | Phase::Accelerated => Verdict::ConditionUnbounded,
            _ => Verdict::SteadyLeak,
        }
    }
}

/// How one run of a test item ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum RunOutcome {
    /// Exited with status 0.
    Completed,
    /// Exited with another status, or was killed by a signal.
    Failed {
        /// Exit status, if it exited.
        exit_code: Option<i32>,
        /// Signal, if one killed it.
        signal: Option<i32>,
        /// The end of its standard error.
        stderr_tail: String,
    },
    /// Did not finish within its time limit and was killed.
    Hung {
        /// The time limit, ms.
        timeout_ms: u64,
    },
    /// Could not be started.
    NotStarted {
        /// Why.
        error: String,
    },
}

impl RunOutcome {
    /// Whether the item completed normally.
    pub fn is_completed(&self) -> bool {
        matches!(self, RunOutcome::Completed)
    }

    /// In words.
    pub fn describe(&self) -> String {
        match self {
            RunOutcome::Completed => "completed".into(),
            RunOutcome::Failed {
                exit_code,
                signal,
                stderr_tail,
            } => {
                let how = match (exit_code, signal) {
                    (Some(c), _) => format!("exited with status {c}"),
                    (None, Some(s)) => format!("was killed by signal {s}"),
                    (None, None) => "failed".into(),
                };
                let tail = stderr_tail.trim();
                if tail.is_empty() {
                    how
                } else {
                    format!("{how}: {}", tail.lines().last().unwrap_or(tail))
                }
            }
            RunOutcome::Hung { timeout_ms } => format!("did not finish within {timeout_ms} ms"),
            RunOutcome::NotStarted { error } => format!("could not start: {error}"),
        }
    }
}

/// One run of a test item, with the measurements around it.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// 1-based number among all runs of the session.
    pub seq: u32,
    /// Test item.
    pub item: String,
    /// Phase of the flow.
    pub phase: Phase,
    /// 1-based number among the runs of this item.
    pub run_in_item: u32,
    /// Parameter values.
    pub params: ParamValues,
    /// Start, ms after the session started.
    pub start_ms: u64,
    /// End of the item's command, ms after the session started.
    pub end_ms: u64,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Measurement just before (absent in the upper-limit check, which compares with the
    /// previous run's `after`, as the seed does).
    pub before: Option<Snapshot>,
    /// Measurement after.
    pub after: Snapshot,
    /// Watched processes that ended during the run, and how.
    pub ended: Vec<Ended>,
}

/// A watched process that ended during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ended {
    /// Who.
    #[serde(flatten)]
    pub id: ProcId,
    /// How, when known ("killed by signal 6").
    pub how: String,
}

/// One point of the series that led to a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The run (`seq`); absent for idle-test measurements.
    pub run: Option<u32>,
    /// Its phase.
    pub phase: Phase,
    /// Parameter values of the run.
    pub params: ParamValues,
    /// Value compared against: before the run, or after the previous run in the
    /// upper-limit check, or the previous measurement in the idle test.
    pub before: u64,
    /// Value after.
    pub after: u64,
    /// `after - before`.
    pub growth: i64,
    /// Whether the growth reached the threshold.
    pub grew: bool,
}

/// A verdict on one process, for one item (or the idle test) and resource, with the
/// measurements that led to it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Process name.
    pub process: String,
    /// Test item, or `(idle)`.
    pub item: String,
    /// Resource; absent when the finding is about the process as a whole (it ended).
    pub resource: Option<Resource>,
    /// The verdict.
    pub verdict: Verdict,
    /// Whether the verdict is a fault.
    pub fault: bool,
    /// Why, for programs.
    pub cause: Cause,
    /// Why, for people.
    pub reason: String,
    /// The runs (`seq`) whose measurements led to it.
    pub runs: Vec<u32>,
    /// The measurements of this resource, run by run.
    pub series: Vec<Point>,
    /// Error log IDs involved.
    pub log_ids: Vec<String>,
}

/// An error log line of a watched process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogRecord {
    /// When tansa read it (files) or when it was logged (journal), ms after the session
    /// started.
    pub t_ms: u64,
    /// The watched process it belongs to.
    pub process: String,
    /// Its pid, when the source says.
    pub pid: Option<u32>,
    /// Where it came from (a file path, `output:<process>`, `journal`).
    pub source: String,
    /// Its log ID.
    pub id: String,
    /// The line.
    pub message: String,
}

/// Entry of the seed's first process list: one-off growth with error logs (S55).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogOnIncrease {
    /// Process name.
    pub process: String,
    /// Resource that grew.
    pub resource: Resource,
    /// Test item.
    pub item: String,
    /// Distinct error log IDs in the window.
    pub log_ids: Vec<String>,
    /// Window searched: from the start of the initial run to the end of the re-test, ms.
    pub window_ms: (u64, u64),
    /// The initial run and re-test.
    pub runs: Vec<u32>,
    /// Their measurements of this resource.
    #[serde(skip)]
    pub series: Vec<Point>,
}

/// Entry of the seed's second process list: one-off growth without error logs (S57).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NonRecurring {
    /// Process name.
    pub process: String,
    /// Resource that grew.
    pub resource: Resource,
    /// Test item.
    pub item: String,
    /// The initial run and re-test.
    pub runs: Vec<u32>,
    /// Their measurements of this resource.
    #[serde(skip)]
    pub series: Vec<Point>,
}

/// A restart of a watched process (the seed's reboot before the accelerated test, or after
/// a process ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Restart {
    /// Process name.
    pub process: String,
    /// When, ms after the session started.
    pub t_ms: u64,
    /// Why.
    pub why: String,
    /// The new identity, when it started.
    pub started: Option<ProcId>,
    /// Why it could not be restarted, when it could not.
    pub error: Option<String>,
}

/// Entry of the seed's type-3 list (third process list, S104), and of the maximum-value
/// test's survivors (S127).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Type3Entry {
    /// Process name.
    pub process: String,
    /// Resource that grew.
    pub resource: Resource,
    /// Test item.
    pub item: String,
    /// The runs whose measurements led here.
    #[serde(skip)]
    pub runs: Vec<u32>,
    /// Their measurements of this resource.
    #[serde(skip)]
    pub series: Vec<Point>,
}
