//! The result of a heap analysis: what every renderer (table, JSON, CSV) consumes.
//!
//! The JSON form of [`MemoryReport`] is the documented contract `tansa.memory-report.v1`
//! (see `docs/json/memory-report.v1.md`): fields are only ever added.

pub use super::atexit::{AtExit, LeakCheckSummary};
use serde::Serialize;
use tansa_format::memory::Losses;
use tansa_format::meta::ExitStatus;
pub use tansa_format::meta::signal_name;

/// Schema identifier of the JSON form.
pub const SCHEMA: &str = "tansa.memory-report.v1";

/// Call counts per function family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Calls {
    /// `malloc`
    pub malloc: u64,
    /// `calloc`
    pub calloc: u64,
    /// `realloc` and `reallocarray`
    pub realloc: u64,
    /// `free`
    pub free: u64,
    /// `memalign`, `posix_memalign`, `aligned_alloc`, `valloc`, `pvalloc`
    pub memalign: u64,
}

impl Calls {
    /// The calls of every family, added.
    pub fn total(&self) -> u64 {
        self.malloc
            .saturating_add(self.calloc)
            .saturating_add(self.realloc)
            .saturating_add(self.free)
            .saturating_add(self.memalign)
    }
}

/// Per-unit figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Bytes allocated minus bytes released (seed `mem_size`).
    pub net_bytes: i64,
    /// Largest value the running net took (seed `max_size`; starts at 0).
    pub max_bytes: i64,
    /// Smallest value the running net took (seed `min_size`; starts at 0).
    pub min_bytes: i64,
    /// Bytes allocated (sizes requested, including the new size of each `realloc`).
    pub allocated_bytes: u64,
    /// Bytes released (including the old size of each `realloc`).
    pub freed_bytes: u64,
    /// Calls.
    pub calls: Calls,
    /// Temporary allocations: blocks released by the thread that allocated them with no
    /// other allocation of that thread in between (heaptrack's figure, by block): heap churn
    /// a local variable or a reused buffer would avoid. Counted for the unit charged with
    /// the allocation. Not counted in sampled recordings (0), where the allocations in
    /// between are not seen.
    pub temporary_allocations: u64,
}

impl Stats {
    /// Applies a change of the running net.
    pub fn add(&mut self, delta: i64) {
        self.net_bytes = self.net_bytes.saturating_add(delta);
        self.max_bytes = self.max_bytes.max(self.net_bytes);
        self.min_bytes = self.min_bytes.min(self.net_bytes);
    }

    /// The figures of `self` followed by those of `next` (each with its running net
    /// counted from 0): those of the two periods as one, exactly.
    pub fn then(&self, next: &Stats) -> Stats {
        let (a, b) = (self, next);
        let mut calls = a.calls;
        calls.malloc = calls.malloc.saturating_add(b.calls.malloc);
        calls.calloc = calls.calloc.saturating_add(b.calls.calloc);
        calls.realloc = calls.realloc.saturating_add(b.calls.realloc);
        calls.free = calls.free.saturating_add(b.calls.free);
        calls.memalign = calls.memalign.saturating_add(b.calls.memalign);
        Stats {
            net_bytes: a.net_bytes.saturating_add(b.net_bytes),
            max_bytes: a.max_bytes.max(a.net_bytes.saturating_add(b.max_bytes)),
            min_bytes: a.min_bytes.min(a.net_bytes.saturating_add(b.min_bytes)),
            allocated_bytes: a.allocated_bytes.saturating_add(b.allocated_bytes),
            freed_bytes: a.freed_bytes.saturating_add(b.freed_bytes),
            calls,
            temporary_allocations: a
                .temporary_allocations
                .saturating_add(b.temporary_allocations),
        }
    }
}

/// How a process ended, for JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExitReport {
    /// `exited`, `signaled`, `exec`, `unknown` or `running`.
    pub kind: &'static str,
    /// Exit code (`exited`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Signal number (`signaled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Signal name, e.g. `SIGKILL` (`signaled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
    /// Whether a core was dumped (`signaled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_dumped: Option<bool>,
    /// Whether the process ran its exit handlers (`unknown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normal_exit: Option<bool>,
    /// A sentence for people.
    pub description: String,
}

impl From<ExitStatus> for ExitReport {
    fn from(e: ExitStatus) -> Self {
        let mut r = ExitReport {
            kind: "unknown",
            code: None,
            signal: None,
            signal_name: None,
            core_dumped: None,
            normal_exit: None,
            description: e.describe(),
        };
        match e {
            ExitStatus::Exited { code } => {
                r.kind = "exited";
                r.code = Some(code);
            }
            ExitStatus::Signaled {
                signal,
                core_dumped,
            } => {
                r.kind = "signaled";
                r.signal = Some(signal);
                r.signal_name = Some(signal_name(signal));
                r.core_dumped = Some(core_dumped);
            }
            ExitStatus::Exec => r.kind = "exec",
            ExitStatus::Unknown { normal_exit } => r.normal_exit = Some(normal_exit),
            ExitStatus::Running => r.kind = "running",
            ExitStatus::Stopped { signal } => {
                r.kind = "stopped";
                r.signal = Some(signal);
                r.signal_name = Some(signal_name(signal));
            }
            ExitStatus::RecorderKilled => r.kind = "recorder_killed",
        }
        r
    }
}

/// A process (image) of the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessReport {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub command: Vec<String>,
    /// How it ended.
    pub exit: ExitReport,
    /// Events recorded in it.
    pub events: u64,
    /// Events the agent could not record.
    pub lost_events: u64,
    /// The same, by cause, and the events recorded without their stack.
    pub losses: Losses,
    /// The host it ran on (reports over several recordings or an MPI job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its MPI rank, when its environment gave one (reports over several recordings or an
    /// MPI job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The index of its recording in [`MemoryReport::recordings`] (reports over several
    /// recordings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording: Option<u32>,
    /// Its own heap at its peak: the most bytes of its own blocks live at once (reports over
    /// several recordings or an MPI job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<i64>,
    /// When it ended, in nanoseconds since the report's start (reports over several
    /// recordings or an MPI job; absent when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// The blocks still allocated at its end as the leak check at exit found them
    /// (recordings made with `tansa record --leak-check`; absent when the image was not
    /// checked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_exit: Option<AtExit>,
    /// The process image's session number in the report (not serialized: profiles map
    /// allocation stacks to processes with it).
    #[serde(skip)]
    pub session: u32,
}

impl ProcessReport {
    /// A process outside any job: no host, rank, recording, peak or end, no events counted,
    /// and session 0. Set the counts with struct update syntax
    /// (`ProcessReport { events: 10, ..ProcessReport::new(...) }`).
    pub fn new(pid: u32, ppid: u32, exe: String, command: Vec<String>, exit: ExitReport) -> Self {
        ProcessReport {
            pid,
            ppid,
            exe,
            command,
            exit,
            events: 0,
            lost_events: 0,
            losses: Losses::default(),
            host: None,
            rank: None,
            recording: None,
            peak_bytes: None,
            end_ns: None,
            at_exit: None,
            session: 0,
        }
    }
}

/// A process of the recorded tree that ran without being recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnrecordedReport {
    /// Process id.
    pub pid: u32,
    /// Parent process id (0 when unknown).
    pub ppid: u32,
    /// Executable path, when known.
    pub exe: String,
    /// Why it was not recorded.
    pub reason: String,
}

/// Thread details of a `--by thread` unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadReport {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name (`/proc` comm).
    pub name: String,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitReport {
    /// The unit's name: `liba.so`, `liba.so!func_a0`, `worker [1234]`, ...
    pub unit: String,
    /// Figures.
    #[serde(flatten)]
    pub stats: Stats,
    /// Thread details (`--by thread`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadReport>,
    /// Ordinal of this call among the calls of the same library, from 0 (`--by call`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_index: Option<u64>,
    /// Start of the call or interval, in nanoseconds since the recording started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// End of the interval (`--by interval`), or of the call's last event (`--by call`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
    /// The unit's running net at the end of the interval, counted from the start of the
    /// recording (`--by interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cumulative_net_bytes: Option<i64>,
    /// The rank (`--by rank`; absent on the row of the processes without a rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The host(s) the unit's processes ran on, comma-separated (`--by rank`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The program's executable (`--by program`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// How many process images ran the program and had events (`--by program`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// The unit's blocks still allocated at the end of the process images the leak check
    /// at exit classified, as it found them (recordings made with `tansa record
    /// --leak-check`; absent otherwise). Split by interval, only the unit's last row has
    /// it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_exit: Option<AtExit>,
}

/// One recording of a report over several (`tansa report A.tansa B.tansa ...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordingReport {
    /// The name the caller gave it (the file's path).
    pub name: String,
    /// The host it was made on.
    pub host: String,
    /// When it started, milliseconds since the Unix epoch (0 when unknown).
    pub started_unix_ms: u64,
    /// The job id its processes' environment gave (`SLURM_JOB_ID`, ...), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// What the recording's timestamps were shifted by to put them on the report's
    /// timeline, in nanoseconds (0 for recordings sharing one clock).
    pub shift_ns: u64,
    /// Process images recorded in it.
    pub processes: u32,
}

/// How the timelines of several recordings were put together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobClock {
    /// Every recording was made on one host since one boot: their `CLOCK_MONOTONIC`
    /// timestamps are comparable as they are.
    Shared,
    /// Recordings of different hosts (or boots) were aligned by the wall-clock time each
    /// started at: the order of events of different hosts is as good as the hosts' clocks
    /// agree (NTP: typically within milliseconds).
    WallClock,
}

/// One MPI rank of a job report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankReport {
    /// The rank.
    pub rank: u32,
    /// The host it ran on.
    pub host: String,
    /// Its process id (its last image's, when it has several).
    pub pid: u32,
    /// The most bytes its own blocks took at once (all its images together).
    pub peak_bytes: i64,
    /// Bytes of its own blocks still live at its end.
    pub net_bytes: i64,
    /// Bytes it allocated.
    pub allocated_bytes: u64,
    /// How it ended (its last image's end).
    pub exit: ExitReport,
    /// When it ended, in nanoseconds since the report's start (absent when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
}

/// What a report over several recordings or an MPI job says about the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobReport {
    /// The job id, when the processes' environment gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// How many ranks the job had (`MPI_COMM_WORLD`'s size), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// How many recordings the report reads.
    pub recordings: u32,
    /// How their timelines were put together.
    pub clock: JobClock,
    /// Every rank recorded, by rank.
    pub ranks: Vec<RankReport>,
    /// The rank whose end came first (the cause of an abort, when one rank failed and the
    /// launcher ended the others): its rank number. See `first_ended_by`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_ended: Option<u32>,
    /// How `first_ended` was found: `end-time` (the recordings tell when each rank ended:
    /// one recording per rank), or `exit-status` (a recording of the whole job stamps
    /// every process with the recording's end: the rank that failed by itself, with an
    /// exit code other than 0 or a signal other than those launchers end ranks with,
    /// SIGTERM, SIGKILL, SIGINT, SIGHUP; the lowest such rank; without one, the lowest rank
    /// whose end the agent did not see).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_ended_by: Option<&'static str>,
    /// The launcher (`mpiexec`, `srun`) when it was recorded too: the parent of the ranks,
    /// without a rank of its own. Its exit code often tells a rank's end the agent could
    /// not see (Open MPI exits with 128 + the signal that killed the first failed rank).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launcher: Option<LauncherReport>,
}

/// The launcher of a job recorded whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LauncherReport {
    /// Its process id.
    pub pid: u32,
    /// Its command line.
    pub command: Vec<String>,
    /// How it ended.
    pub exit: ExitReport,
}

/// A source-level frame in a printed stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameReport {
    /// Module file name.
    pub module: String,
    /// Function, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Source file, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Line, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Return address relative to the module.
    pub offset: String,
}

/// Improper use: `free` or `realloc` of a pointer that was never allocated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImproperReport {
    /// `free` or `realloc`.
    pub op: &'static str,
    /// How many times this stack did it.
    pub count: u64,
    /// One of the pointers.
    pub ptr: String,
    /// Process id.
    pub pid: u32,
    /// Whether the call was refused (online mode) or went through to the allocator.
    pub refused: bool,
    /// For a call that went through: the events its process's agent could not record. When
    /// not 0, the pointer may well have been allocated, by an allocation among them.
    pub lost_events: u64,
    /// The stack, innermost first.
    pub stack: Vec<FrameReport>,
}

/// What the units of a report by size (library, function, thread, program) are ordered
/// by, largest first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SortKey {
    /// The peak of the running net (then bytes allocated): the default.
    #[default]
    Max,
    /// Net bytes (live at the end, when releases are charged to the owner).
    Net,
    /// Bytes allocated.
    Allocated,
    /// Calls of every family.
    Calls,
    /// Temporary allocations.
    Temporary,
    /// Bytes the leak check at exit found lost (recordings made with `tansa record
    /// --leak-check`).
    Lost,
}

impl SortKey {
    /// The figure's name, as `--sort` takes it.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Max => "max",
            SortKey::Net => "net",
            SortKey::Allocated => "allocated",
            SortKey::Calls => "calls",
            SortKey::Temporary => "temporary",
            SortKey::Lost => "lost",
        }
    }

    /// The figure `units` are ordered by (then the peak, then bytes allocated), of a
    /// unit's figures: 0 for [`SortKey::Lost`], which is not one of them (see
    /// [`SortKey::of_unit`]).
    pub fn figure(self, s: &Stats) -> i128 {
        match self {
            SortKey::Max => s.max_bytes.into(),
            SortKey::Net => s.net_bytes.into(),
            SortKey::Allocated => s.allocated_bytes.into(),
            SortKey::Calls => s.calls.total().into(),
            SortKey::Temporary => s.temporary_allocations.into(),
            SortKey::Lost => 0,
        }
    }

    /// The figure a unit is ordered by.
    pub fn of_unit(self, u: &UnitReport) -> i128 {
        match self {
            SortKey::Lost => u.at_exit.map_or(0, |x| x.lost_bytes()).into(),
            _ => self.figure(&u.stats),
        }
    }
}

/// Orders `units` by `key`, largest first; ties by peak, bytes allocated, then name.
pub fn sort_units(units: &mut [UnitReport], key: SortKey) {
    units.sort_by(|a, b| {
        let k = |u: &UnitReport| (key.of_unit(u), u.stats.max_bytes, u.stats.allocated_bytes);
        k(b).cmp(&k(a)).then_with(|| a.unit.cmp(&b.unit))
    });
}

/// A heap report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Unit of aggregation.
    pub by: &'static str,
    /// Charge policy.
    pub charge: &'static str,
    /// Free accounting.
    pub free_to: &'static str,
    /// Interval length (`--by interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ns: Option<u64>,
    /// The process reported on: the command's process, or the one selected with `--pid`.
    pub process: ProcessReport,
    /// Every process image in the recording (forks and execs included).
    pub processes: Vec<ProcessReport>,
    /// Figures over everything reported, independent of units.
    pub totals: Stats,
    /// The units.
    pub units: Vec<UnitReport>,
    /// Improper uses.
    pub improper: Vec<ImproperReport>,
    /// Frees of blocks a forked child inherited from its parent (not charged).
    pub inherited_frees: u64,
    /// Events reported on.
    pub events: u64,
    /// Time from the first process start to the last event, in nanoseconds.
    pub duration_ns: u64,
    /// Processes of the tree that ran without being recorded.
    pub unrecorded: Vec<UnrecordedReport>,
    /// A sampled recording (`tansa record --sample-rate`): the mean bytes between samples.
    /// Every figure is then an estimate (see docs/json/memory-report.v1.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_rate_bytes: Option<u64>,
    /// The recordings read, when there are several (`tansa report A.tansa B.tansa`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recordings: Vec<RecordingReport>,
    /// The job: ranks, how each ended, which ended first (reports over several recordings
    /// or of an MPI job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobReport>,
    /// What the leak check at exit found in the processes reported on (recordings made
    /// with `tansa record --leak-check`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_check: Option<LeakCheckSummary>,
    /// Things the reader should know (truncated recording, lost events, ...).
    pub warnings: Vec<String>,
}
