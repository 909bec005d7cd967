//! The test plan: what to watch, what to run, how to judge.
//!
//! A plan is written in TOML and read with [`Plan::parse`]; every error names the line it
//! is about. The file format is documented in `docs/architecture/leaktest.md`; in short:
//!
//! ```toml
//! [settings]
//! retest_limit = 5            # N of the upper-limit check, at least 3
//!
//! [thresholds]
//! memory = "64KiB"            # growth that counts, for rss and pss
//! fds = 1
//!
//! [[process]]                 # the system under test: pid, match (by name) or command
//! name = "srv"
//! command = ["./srv", "--port-file", "/tmp/srv.port"]
//! ready_file = "/tmp/srv.port"
//!
//! [[log]]
//! file = "/tmp/srv.log"
//! process = "srv"
//!
//! [[item]]
//! name = "get"
//! command = "./client --port-file /tmp/srv.port get {size}"
//! [[item.param]]
//! name = "size"
//! default = 1024
//! min = 1
//! max = 1048576
//! ```

mod parse;
mod template;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use parse::PlanError;
pub use template::Template;

use crate::measure::Resource;

/// A whole test plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// How to measure and judge.
    pub settings: Settings,
    /// The processes of the system under test.
    pub processes: Vec<ProcessSpec>,
    /// The test items, in the order they run.
    pub items: Vec<Item>,
    /// Where error logs come from.
    pub logs: Vec<LogSource>,
    /// The idle test, if any.
    pub idle: Option<IdleSpec>,
}

impl Plan {
    /// Parses and checks the text of a plan.
    pub fn parse(text: &str) -> Result<Plan, PlanError> {
        parse::parse(text)
    }

    /// The process spec called `name`.
    pub fn process(&self, name: &str) -> Option<&ProcessSpec> {
        self.processes.iter().find(|p| p.name == name)
    }

    /// The known limit of growth of `resource` for the process called `name`, if the plan
    /// gives one.
    pub fn limit(&self, name: &str, resource: Resource) -> Option<u64> {
        // A spec name may carry a `[pid]` suffix when a `match` found several processes.
        let base = name.split_once('[').map_or(name, |(b, _)| b);
        let spec = self.process(base)?;
        match resource {
            Resource::Rss | Resource::Pss => spec.memory_limit,
            Resource::Fds => spec.fd_limit,
        }
    }
}

/// How to measure and judge.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// N: the last run of the upper-limit check (the seed's repetition limit, at least 3).
    pub retest_limit: u32,
    /// Readings per measurement; with three or more, the one farthest from the mean is
    /// dropped and the rest averaged.
    pub readings: u32,
    /// Time between two readings of one measurement.
    pub reading_interval: Duration,
    /// Wait after a run before measuring.
    pub settle: Duration,
    /// Default time limit of one run of a test item; a run that takes longer has hung.
    pub timeout: Duration,
    /// The resources whose growth is judged (all three are always measured and reported).
    pub judge: Vec<Resource>,
    /// Growth at or above these counts.
    pub thresholds: Thresholds,
    /// How many one-off growths of a process, in different items and without an error log,
    /// make it a suspect of condition-driven growth (type 3). The seed says "more than one".
    pub type3_min_records: u32,
    /// Restart the processes that can be restarted before each sweep of the accelerated
    /// test (the seed's reboot), so memory reserved earlier does not hide growth.
    pub restart_before_sweep: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retest_limit: 10,
            readings: 3,
            reading_interval: Duration::from_millis(50),
            settle: Duration::from_millis(50),
            timeout: Duration::from_secs(60),
            judge: vec![Resource::Pss, Resource::Fds],
            thresholds: Thresholds::default(),
            type3_min_records: 2,
            restart_before_sweep: true,
        }
    }
}

/// Growth at or above a threshold counts as growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// For RSS and PSS, in bytes.
    pub memory_bytes: u64,
    /// For open file descriptors.
    pub fds: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            memory_bytes: 64 * 1024,
            fds: 1,
        }
    }
}

impl Thresholds {
    /// The threshold of `resource`.
    pub fn of(&self, resource: Resource) -> u64 {
        match resource {
            Resource::Rss | Resource::Pss => self.memory_bytes,
            Resource::Fds => self.fds,
        }
    }
}

/// A command: a string run by `/bin/sh -c`, or a program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandSpec {
    /// Run by `/bin/sh -c`.
    Shell(String),
    /// `argv[0]` is the program (found in `PATH` unless it holds a `/`).
    Argv(Vec<String>),
}

/// A process of the system under test.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSpec {
    /// The name tansa reports it under (unique in the plan).
    pub name: String,
    /// How to find it.
    pub source: ProcessSource,
    /// Known limit of its memory growth (RSS/PSS), in bytes, from its documentation.
    pub memory_limit: Option<u64>,
    /// Known limit of its open file descriptors' growth.
    pub fd_limit: Option<u64>,
}

/// How tansa finds a process.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessSource {
    /// This pid (its start time is taken when the test starts).
    Pid {
        /// Process id.
        pid: u32,
        /// Command that restarts it, if any.
        restart: Option<CommandSpec>,
    },
    /// Every live process with this name (command name or executable file name).
    Match {
        /// The name.
        name: String,
        /// Command that restarts it, if any.
        restart: Option<CommandSpec>,
    },
    /// A command tansa starts before the test, restarts when asked, and stops at the end.
    Command(Launch),
}

impl ProcessSource {
    /// Whether tansa can restart this process.
    pub fn restartable(&self) -> bool {
        match self {
            ProcessSource::Pid { restart, .. } | ProcessSource::Match { restart, .. } => {
                restart.is_some()
            }
            ProcessSource::Command(_) => true,
        }
    }
}

/// How to start a process and know it is ready.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The command.
    pub command: CommandSpec,
    /// Ready when this file exists and is not empty (removed before each start).
    pub ready_file: Option<PathBuf>,
    /// Ready when this address accepts a TCP connection.
    pub ready_tcp: Option<String>,
    /// Time to wait after it is ready.
    pub settle: Duration,
    /// Time limit for getting ready.
    pub start_timeout: Duration,
}

/// A test item: a command, run once per run, with named parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Name (unique in the plan).
    pub name: String,
    /// The command, with `{param}` placeholders.
    pub command: ItemCommand,
    /// Parameters, in plan order.
    pub params: Vec<Param>,
    /// Time limit of one run (else the plan's default).
    pub timeout: Option<Duration>,
}

impl Item {
    /// Parameter values with every parameter at its default.
    pub fn defaults(&self) -> ParamValues {
        self.params
            .iter()
            .map(|p| (p.name.clone(), p.default))
            .collect()
    }

    /// The parameters that have a range (min and max), which the maximum-value and
    /// accelerated tests vary.
    pub fn ranged(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| p.range.is_some())
    }
}

/// Parameter values by name.
pub type ParamValues = BTreeMap<String, i64>;

/// The command of a test item, with placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemCommand {
    /// Run by `/bin/sh -c`.
    Shell(Template),
    /// Program and arguments.
    Argv(Vec<Template>),
}

impl ItemCommand {
    /// The command with `values` filled in.
    pub fn render(&self, values: &ParamValues) -> CommandSpec {
        match self {
            ItemCommand::Shell(t) => CommandSpec::Shell(t.render(values)),
            ItemCommand::Argv(ts) => {
                CommandSpec::Argv(ts.iter().map(|t| t.render(values)).collect())
            }
        }
    }
}

/// A named integer parameter of a test item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Name, used as `{name}` in the command and `TANSA_PARAM_<NAME>` in its environment.
    pub name: String,
    /// Value in the initial run, the re-tests, and for the other parameters while one is
    /// varied.
    pub default: i64,
    /// Minimum, maximum and the values of the sweep, when the parameter has a range.
    pub range: Option<Range>,
}

/// The range of a parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Smallest value.
    pub min: i64,
    /// Largest value: the maximum-value test runs with it.
    pub max: i64,
    /// Values of the accelerated test, ascending, from `min` to `max`.
    pub sweep: Vec<i64>,
}

/// Where error logs come from.
#[derive(Debug, Clone)]
pub struct LogSource {
    /// What to read.
    pub kind: LogKind,
    /// The watched process the lines belong to (for files and outputs; optional filter for
    /// the journal).
    pub process: Option<String>,
    /// A line is an error when this matches.
    pub error: regex::Regex,
    /// The log ID is the first capture group (or the whole match) of this; when it does not
    /// match, the ID is the message with its numbers masked.
    pub id: regex::Regex,
}

/// What a log source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogKind {
    /// A text file, read as it grows.
    File(PathBuf),
    /// Standard output and error of a process tansa starts.
    Output(String),
    /// The systemd journal (priority `err` and above), where present.
    Journal,
}

/// The idle test: leave the system alone and look for growth between measurements.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleSpec {
    /// How long.
    pub duration: Duration,
    /// Time between two measurements.
    pub interval: Duration,
    /// Readings per measurement (the seed's base measurement count).
    pub readings: u32,
    /// Time between two readings.
    pub reading_interval: Duration,
}

impl IdleSpec {
    /// Number of measurements: one at the start, then one per interval.
    pub fn measurements(&self) -> u32 {
        let n = self.duration.as_nanos() / self.interval.as_nanos().max(1);
        u32::try_from(n).unwrap_or(u32::MAX).saturating_add(1)
    }
}
