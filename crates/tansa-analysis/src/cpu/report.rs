//! The result of a CPU analysis: what every renderer consumes.
//!
//! The JSON form of [`CpuReport`] is the documented contract `tansa.cpu-report.v1` (see
//! `docs/architecture/cpu.md`): fields are only ever added.

use serde::Serialize;

/// Schema identifier of the JSON form.
pub const SCHEMA: &str = "tansa.cpu-report.v1";

/// Unit of aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Per process: user executable, shared libraries, kernel (seed report 31, Fig. 1).
    Process,
    /// Per program: the processes that ran one executable together (a build's compilers,
    /// a script's commands), split as per process.
    Program,
    /// Per thread, with its name, split as per process.
    Thread,
    /// Per process and address space (module).
    Space,
    /// Per module (executable, library, kernel), over all processes.
    Library,
    /// Per function `module!function`, self and total, with callers (seed report 55).
    Function,
    /// Per source line `file:line`, inlined code on its own line.
    Line,
    /// Per instruction address.
    Instruction,
    /// Per interval of time from the first sample (`--timeline` recordings only), with
    /// the function most often interrupted in each; `width_ns` 0 chooses a width giving
    /// about 40 intervals.
    Interval {
        /// The intervals' length in nanoseconds, 0 to choose.
        width_ns: u64,
    },
}

impl By {
    /// Name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            By::Process => "process",
            By::Program => "program",
            By::Thread => "thread",
            By::Space => "space",
            By::Library => "library",
            By::Function => "function",
            By::Line => "line",
            By::Instruction => "instruction",
            By::Interval { .. } => "interval",
        }
    }
}

/// Samples per kind of address space (`--by process`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpaceSplit {
    /// In the process's own executable.
    pub user_samples: u64,
    /// In shared libraries (and the vDSO).
    pub shared_samples: u64,
    /// In the kernel, on behalf of the process.
    pub kernel_samples: u64,
    /// Elsewhere (anonymous or unknown code).
    pub other_samples: u64,
}

/// A caller of a function and how many of the function's samples came through it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallerReport {
    /// `module!function` of the caller (`[root]` when the function is the outermost
    /// frame).
    pub unit: String,
    /// Samples.
    pub samples: u64,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuUnit {
    /// The unit's name: `hot [1234]`, `libc.so.6`, `hot!work`, `hot.c:12`,
    /// `hot!work+0x1a`.
    pub unit: String,
    /// Samples taken in the unit itself.
    pub self_samples: u64,
    /// Samples taken in the unit or in anything it called.
    pub total_samples: u64,
    /// `self_samples` × period.
    pub self_ns: u64,
    /// `total_samples` × period.
    pub total_ns: u64,
    /// `self_samples` in percent of all samples of the report.
    pub self_percent: f64,
    /// `total_samples` in percent of all samples of the report.
    pub total_percent: f64,
    /// Process id (`process`, `space`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Process name (`process`, `space`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Thread id (`thread`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// The thread's name, the last one it took (`thread`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// Executable path (`process`, `program`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Whether this is the idle task (`process`, `program`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle: Option<bool>,
    /// How many processes ran the program (`program`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Split by address space (`process`, `thread`, `program`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub spaces: Option<SpaceSplit>,
    /// Module file name (`space`, `library`, `function`, `instruction`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Module path (`space`, `library`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `user`, `shared`, `kernel` or `other` (`space`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<&'static str>,
    /// Function name (`function`, `line`, `instruction`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Source file (`line`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Source line (`line`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Address in the module's file, hex (`instruction`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Callers, most samples first (`function`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callers: Option<Vec<CallerReport>>,
    /// Start of the interval, nanoseconds after the first sample (`interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// End of the interval (`interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// The function most often interrupted in the interval, `module!function`
    /// (`interval`, when it has samples).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_function: Option<String>,
    /// Its samples in the interval (`interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_samples: Option<u64>,
}

impl CpuUnit {
    /// A unit with only its name and counts set.
    pub fn new(unit: String, self_samples: u64, total_samples: u64) -> Self {
        CpuUnit {
            unit,
            self_samples,
            total_samples,
            self_ns: 0,
            total_ns: 0,
            self_percent: 0.0,
            total_percent: 0.0,
            pid: None,
            command: None,
            tid: None,
            thread: None,
            exe: None,
            idle: None,
            processes: None,
            spaces: None,
            module: None,
            path: None,
            class: None,
            function: None,
            file: None,
            line: None,
            address: None,
            callers: None,
            start_ns: None,
            end_ns: None,
            top_function: None,
            top_samples: None,
        }
    }
}

/// A CPU report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Unit of aggregation.
    pub by: &'static str,
    /// Nominal sampling period in nanoseconds (samples × period = CPU time).
    pub period_ns: u64,
    /// Samples reported on (all samples, or the selected process's).
    pub total_samples: u64,
    /// The event sampled (`cpu-clock`, `cycles`, ...).
    pub event: String,
    /// The sampler (`perf` or `agent`).
    pub source: &'static str,
    /// What was sampled (`command`, `pids`, `system`).
    pub target: String,
    /// Whether kernel code was sampled.
    pub kernel: bool,
    /// CPUs sampled.
    pub cpus: u32,
    /// Wall-clock duration of sampling, in nanoseconds.
    pub duration_ns: u64,
    /// Samples dropped before reaching the recorder.
    pub lost_samples: u64,
    /// Records dropped because a ring was full.
    pub lost_records: u64,
    /// In-process sampling: CPU time, in nanoseconds, that no sample stands for (threads'
    /// last partial periods), 0 otherwise. Of the whole recording, whatever `--pid`.
    pub unsampled_ns: u64,
    /// The process selected with `--pid`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The units, most samples first.
    pub units: Vec<CpuUnit>,
    /// Notes of the recorder (fallbacks taken).
    pub notes: Vec<String>,
    /// Things the reader should know (damaged recording, lost samples, ...).
    pub warnings: Vec<String>,
}
