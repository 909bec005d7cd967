//! Option groups and helpers shared by several subcommands: the report units, charge
//! policies and formats (`report`, `record --online`), durations and ring sizes, the agent
//! library, and progress indicators. Each value is parsed here once and mapped once into the
//! library type that uses it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use tansa_analysis::memory::{Charge, Config as MemoryConfig, FreeTo};

/// `--by`: the units of memory and CPU reports (each kind of recording accepts its own).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ReportBy {
    /// Per shared library (memory and CPU; the main executable when no library is on the
    /// stack).
    Library,
    /// Per function, named module!function (memory and CPU).
    Function,
    /// Per thread, with its name (memory and CPU).
    Thread,
    /// Per call of a library: a run of consecutive events charged to the same library
    /// (memory).
    Call,
    /// Per library per time interval, see --interval (memory).
    Interval,
    /// Per MPI rank, with its host; processes without a rank as one row (memory).
    Rank,
    /// Per process: user executable, shared libraries, kernel (CPU).
    Process,
    /// Per program: the processes that ran one executable together (memory and CPU; split
    /// as per process for CPU).
    Program,
    /// Per process and address space (CPU).
    Space,
    /// Per source line, inlined code on its own line (CPU).
    Line,
    /// Per instruction address (CPU).
    Instruction,
}

/// The `--by` values of memory reports.
pub const MEMORY_BY: [&str; 7] = [
    "library", "function", "thread", "call", "interval", "rank", "program",
];
/// The `--by` values of CPU reports.
pub const CPU_BY: [&str; 9] = [
    "process",
    "program",
    "thread",
    "space",
    "library",
    "function",
    "line",
    "instruction",
    "interval",
];

impl ReportBy {
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    /// The memory unit this names, if it is one.
    pub fn memory_unit(self) -> Option<tansa_analysis::memory::By> {
        use tansa_analysis::memory::By;
        Some(match self {
            ReportBy::Library => By::Library,
            ReportBy::Function => By::Function,
            ReportBy::Thread => By::Thread,
            ReportBy::Call => By::Call,
            ReportBy::Interval => By::Interval,
            ReportBy::Rank => By::Rank,
            ReportBy::Program => By::Program,
            ReportBy::Process | ReportBy::Space | ReportBy::Line | ReportBy::Instruction => {
                return None;
            }
        })
    }

    /// The memory unit (default `library`), or a usage error naming the valid ones.
    pub fn memory(by: Option<ReportBy>, file: &Path) -> anyhow::Result<tansa_analysis::memory::By> {
        let by = by.unwrap_or(ReportBy::Library);
        by.memory_unit().ok_or_else(|| {
            crate::exit::usage(format!(
                "--by {} applies to CPU recordings; {} is a memory recording (valid: {})",
                by.name(),
                file.display(),
                MEMORY_BY.join(", ")
            ))
        })
    }

    /// The CPU unit (default `process`; `interval` of `interval`, or chosen), or a usage
    /// error naming the valid ones. Says that `interval` is ignored by another unit.
    pub fn cpu(
        by: Option<ReportBy>,
        interval: Option<Duration>,
        file: &Path,
    ) -> anyhow::Result<tansa_analysis::cpu::By> {
        use tansa_analysis::cpu::By;
        let by = by.unwrap_or(ReportBy::Process);
        if interval.is_some() && by != ReportBy::Interval {
            eprintln!(
                "tansa: warning: --interval applies to --by interval; the report by {} \
                 ignores it",
                by.name()
            );
        }
        Ok(match by {
            ReportBy::Interval => By::Interval {
                width_ns: interval.map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64),
            },
            ReportBy::Process => By::Process,
            ReportBy::Program => By::Program,
            ReportBy::Thread => By::Thread,
            ReportBy::Space => By::Space,
            ReportBy::Library => By::Library,
            ReportBy::Function => By::Function,
            ReportBy::Line => By::Line,
            ReportBy::Instruction => By::Instruction,
            other => {
                return Err(crate::exit::usage(format!(
                    "--by {} applies to memory recordings; {} is a CPU recording (valid: {})",
                    other.name(),
                    file.display(),
                    CPU_BY.join(", ")
                )));
            }
        })
    }
}

/// Says that `--interval` is ignored by a heap report by another unit than `interval`
/// (a CPU report refuses it; this one cannot use it).
pub fn warn_unused_interval(interval: Option<Duration>, by: tansa_analysis::memory::By) {
    if interval.is_some() && by != tansa_analysis::memory::By::Interval {
        eprintln!(
            "tansa: warning: --interval applies to --by interval; the report by {} ignores it",
            by.name()
        );
    }
}

/// A `--by` parser that accepts the memory units only (`tansa record --online`).
pub fn memory_by_parser() -> impl clap::builder::TypedValueParser<Value = tansa_analysis::memory::By>
{
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(MEMORY_BY).try_map(|s| {
        ReportBy::from_str(&s, false)
            .ok()
            .and_then(ReportBy::memory_unit)
            .ok_or_else(|| format!("`{s}` is not a memory unit"))
    })
}

/// `--charge`
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ChargeArg {
    /// The outermost frame below main (or the thread's start routine) in a shared library.
    First,
    /// The innermost such frame.
    Last,
    /// Every distinct shared library (or function) on the path, once each.
    All,
}

impl From<ChargeArg> for Charge {
    fn from(c: ChargeArg) -> Charge {
        match c {
            ChargeArg::First => Charge::First,
            ChargeArg::Last => Charge::Last,
            ChargeArg::All => Charge::All,
        }
    }
}

/// `--free-to`
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FreeToArg {
    /// Charge a release to the unit that allocated the block: net bytes are live bytes.
    Owner,
    /// Charge a release to the unit found from the release's own stack (seed 000).
    Caller,
}

impl From<FreeToArg> for FreeTo {
    fn from(f: FreeToArg) -> FreeTo {
        match f {
            FreeToArg::Owner => FreeTo::Owner,
            FreeToArg::Caller => FreeTo::Caller,
        }
    }
}

/// `--format` of the unit reports.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum FormatArg {
    /// Aligned columns for people.
    Table,
    /// JSON: schema tansa.memory-report.v1 (memory recordings) or tansa.cpu-report.v1 (CPU).
    Json,
    /// CSV, one row per unit.
    Csv,
}

impl From<FormatArg> for tansa_render::Format {
    fn from(f: FormatArg) -> tansa_render::Format {
        match f {
            FormatArg::Table => tansa_render::Format::Table,
            FormatArg::Json => tansa_render::Format::Json,
            FormatArg::Csv => tansa_render::Format::Csv,
        }
    }
}

/// `--sort` of heap tables: the figure units are ordered by, largest first.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SortArg {
    /// Peak of the running net (the default).
    Max,
    /// Net bytes (live at the end, when releases are charged to the owner).
    Net,
    /// Bytes allocated.
    Allocated,
    /// Calls of every family.
    Calls,
    /// Temporary allocations (freed by their thread before it allocated again).
    Temporary,
    /// Bytes the leak check at exit found lost (recordings made with --leak-check).
    Lost,
}

impl From<SortArg> for tansa_analysis::memory::report::SortKey {
    fn from(s: SortArg) -> Self {
        use tansa_analysis::memory::report::SortKey;
        match s {
            SortArg::Max => SortKey::Max,
            SortArg::Net => SortKey::Net,
            SortArg::Allocated => SortKey::Allocated,
            SortArg::Calls => SortKey::Calls,
            SortArg::Temporary => SortKey::Temporary,
            SortArg::Lost => SortKey::Lost,
        }
    }
}

/// The order `--sort` asks for, or a usage error for a report whose rows come in time or
/// rank order (`--by interval`, `call`, `rank`). Checked before the recording is read.
pub fn memory_sort(
    by: tansa_analysis::memory::By,
    sort: Option<SortArg>,
) -> anyhow::Result<Option<tansa_analysis::memory::report::SortKey>> {
    use tansa_analysis::memory::By;
    let Some(sort) = sort else {
        return Ok(None);
    };
    if matches!(by, By::Interval | By::Call | By::Rank) {
        return Err(crate::exit::usage(format!(
            "--sort orders units by size, and --by {} lists its rows in order",
            by.name()
        )));
    }
    Ok(Some(sort.into()))
}

/// The memory analysis configuration from the report options.
pub fn memory_config(
    by: tansa_analysis::memory::By,
    charge: ChargeArg,
    free_to: FreeToArg,
    interval: Duration,
    pid: Option<u32>,
) -> MemoryConfig {
    MemoryConfig {
        by,
        charge: charge.into(),
        free_to: free_to.into(),
        interval_ns: interval.as_nanos().min(u128::from(u64::MAX)) as u64,
        pid,
        rank: None,
        split_intervals: false,
    }
}

/// A duration with its unit (`100ms`, `2s`, `1.5ms`, `1m30s`; humantime's units), or a bare
/// number in `bare_unit`s (`250` for an interval in milliseconds, `2.5` seconds for
/// `sample --duration`). Must be positive.
pub fn parse_duration_in(s: &str, bare_unit: Duration) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("`{s}` is not a duration (examples: 100ms, 2s, 1.5s, 500us, 1m)");
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let d = if unit.is_empty() {
        let v: f64 = number.parse().map_err(|_| bad())?;
        Duration::try_from_secs_f64(bare_unit.as_secs_f64() * v).map_err(|_| bad())?
    } else if number.contains('.') {
        // humantime takes integers: scale one of the unit by the decimal value.
        let one = humantime::parse_duration(&format!("1{unit}"))
            .map_err(|e| format!("`{s}`: {e} (use ns, us, ms, s, m or h)"))?;
        let v: f64 = number.parse().map_err(|_| bad())?;
        Duration::try_from_secs_f64(one.as_secs_f64() * v).map_err(|_| bad())?
    } else {
        humantime::parse_duration(t)
            .map_err(|e| format!("`{s}`: {e} (use ns, us, ms, s, m or h)"))?
    };
    if d.is_zero() {
        return Err("the duration must be positive".into());
    }
    Ok(d)
}

/// An interval (`--interval`, `--scan-interval`): a bare number is milliseconds.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_millis(1))
}

/// A run length (`sample --duration`): a bare number is seconds.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    parse_duration_in(s, Duration::from_secs(1))
}

/// A count of rows (`--top`): a whole number, at least 1.
pub fn parse_rows(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 rows would show nothing: give at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a number of rows")),
    }
}

/// A ring size in KiB (`--ring-kb`): a power of two from 64 KiB to 256 MiB; a unit
/// (`4MiB`) is accepted too.
pub fn parse_ring_kb(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let kib = if t.chars().all(|c| c.is_ascii_digit()) {
        t.parse::<u64>()
            .map_err(|_| format!("`{s}` is not a number of KiB"))?
    } else {
        let b: bytesize::ByteSize = t
            .parse()
            .map_err(|_| format!("`{s}` is not a size (examples: 4096, 4MiB)"))?;
        if !b.as_u64().is_multiple_of(1024) {
            return Err(format!("`{s}` is not a whole number of KiB"));
        }
        b.as_u64() / 1024
    };
    if !(64..=262_144).contains(&kib) || !kib.is_power_of_two() {
        return Err("the ring size must be a power of two between 64 and 262144 KiB".into());
    }
    Ok(kib as u32)
}

/// A byte count: a bare number is bytes; units as `512KiB`, `1MiB`, `64kB`.
pub fn parse_byte_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.chars().all(|c| c.is_ascii_digit()) && !t.is_empty() {
        return t.parse::<u64>().map_err(|_| format!("`{s}` is too large"));
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|_| format!("`{s}` is not a byte count (examples: 524288, 512KiB, 1MiB)"))
}

/// A mean sampling interval in bytes (`record --sample-rate`): 1 byte to 1 GiB.
pub fn parse_sample_rate(s: &str) -> Result<u64, String> {
    let b = parse_byte_count(s)?;
    if !(1..=1 << 30).contains(&b) {
        return Err("the sample rate must be between 1 byte and 1GiB".into());
    }
    Ok(b)
}

/// A recording's `-o` name, with the job patterns `%r %h %p %j %%` expanded from this
/// process's environment (`tansa_collect::naming`), so that one command line names each
/// rank's file under `mpiexec` or `srun`.
pub fn output_pattern() -> impl clap::builder::TypedValueParser<Value = PathBuf> {
    use clap::builder::TypedValueParser as _;
    clap::builder::OsStringValueParser::new()
        .try_map(|s| tansa_collect::naming::JobNames::current().expand(&s))
}

/// Finds `libtansa_agent.so`: `$TANSA_AGENT`, next to the `tansa` executable, or in
/// `../lib/tansa/` relative to it.
pub fn find_agent() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("TANSA_AGENT") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("cannot locate the tansa executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join("libtansa_agent.so"),
        dir.join("../lib/tansa/libtansa_agent.so"),
        dir.join("../libtansa_agent.so"),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    bail!(
        "cannot find libtansa_agent.so next to {} (build it with `cargo build --workspace`, \
         or point TANSA_AGENT at it)",
        exe.display()
    )
}

/// Prints what the collector has to tell on standard error, as `tansa: ...`.
pub fn print_collect_events() -> tansa_collect::EventHandler {
    tansa_collect::EventHandler(std::sync::Arc::new(|e| eprintln!("tansa: {e}")))
}

/// A spinner showing `message` on standard error, when that is a terminal.
pub fn spinner(message: impl Into<String>) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let p = indicatif::ProgressBar::new_spinner();
        p.set_message(message.into());
        p
    })
}

/// A progress bar of `len` steps drawn with `template` (indicatif's syntax) on standard
/// error, when that is a terminal.
pub fn bar(len: u64, template: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let p = indicatif::ProgressBar::new(len);
        p.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        p
    })
}

/// Runs `work` with a per-module progress callback (`index, count, module path`) drawn as a
/// bar on a terminal with `label` before it (symbolizing the modules of a recording).
pub fn with_module_progress<T>(
    label: &str,
    work: impl FnOnce(&mut dyn FnMut(usize, usize, &str)) -> T,
) -> T {
    let progress = bar(
        0,
        &format!("{label} {{bar:30}} {{pos}}/{{len}} modules {{msg}}"),
    );
    let out = work(&mut |i, n, module| {
        if let Some(p) = &progress {
            p.set_length(n as u64);
            p.set_position(i as u64);
            p.set_message(module.rsplit('/').next().unwrap_or(module).to_string());
        }
    });
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    out
}

/// Says which unfinished recordings of the name `dest` killed recorders left (before a new
/// recording of that name is made, which would hide them).
pub fn note_leftovers(dest: &Path) {
    for l in tansa_format::output::leftovers(dest)
        .iter()
        .filter(|l| !l.in_use)
    {
        if l.len == 0 {
            eprintln!(
                "tansa: note: {} is what a killed tansa (pid {}) left: empty, nothing to \
                 recover (remove it)",
                l.path.display(),
                l.pid
            );
        } else {
            eprintln!(
                "tansa: note: {} is an unfinished recording a killed tansa (pid {}) left: \
                 `tansa report {}` completes it, or says why it cannot",
                l.path.display(),
                l.pid,
                l.path.display()
            );
        }
    }
}

/// What completing a recording left by a killed recorder did, by its kind.
#[derive(Debug)]
pub enum Completion {
    /// A heap recording (`None`: it was complete already).
    Heap(Option<tansa_collect::salvage::Salvaged>),
    /// A CPU recording (`None`: it was complete already).
    Cpu(Option<tansa_sample::CpuCompleted>),
}

/// Completes the recording at `path` that a killed recorder left, by its kind: a heap
/// recording with `tansa_collect::salvage`, a CPU recording from its last checkpoint with
/// `tansa_sample`. `progress` is called before each module is symbolized.
pub fn complete_leftover(
    path: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Completion, tansa_collect::salvage::SalvageError> {
    use tansa_format::container::{Kind, Reader};
    let kind = Reader::new(tansa_format::input::open(path)?)?.kind();
    Ok(match kind {
        Kind::Cpu => Completion::Cpu(tansa_sample::complete_leftover(path, progress)?),
        _ => Completion::Heap(tansa_collect::salvage::complete_leftover(path, progress)?),
    })
}

/// How a process holding a recording's lock is named in messages: the recorder, or
/// another process (a report completing it) by its command line.
pub fn lock_holder_phrase(pid: Option<u32>) -> String {
    let Some(pid) = pid else {
        return "is still being recorded".into();
    };
    let command: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    // Unreadable (the process just ended): taken for the recorder, as before.
    let recorder = command.is_empty()
        || command
            .get(1)
            .is_some_and(|a| matches!(a.as_str(), "record" | "sample" | "retrace" | "leaktest"));
    if recorder {
        format!("is still being recorded by pid {pid}")
    } else {
        format!(
            "is locked by pid {pid} (`{}`), not by a recorder: another process is completing it",
            command.join(" ")
        )
    }
}

/// Says on stderr what completing a leftover did (`what` names the file completed).
pub fn tell_completion(done: &Completion) {
    match done {
        Completion::Heap(salvaged) => {
            for note in salvaged.iter().flat_map(|s| &s.notes) {
                eprintln!("tansa: warning: completing: {note}");
            }
        }
        Completion::Cpu(Some(c)) => {
            eprintln!(
                "tansa: warning: it holds the {} sample(s) of its last checkpoint ({:.1} s into \
                 sampling); what was sampled after it is lost",
                c.samples,
                c.at_ns as f64 / 1e9
            );
            for line in &c.unresolved {
                eprintln!("tansa: warning: completing: {line}");
            }
        }
        Completion::Cpu(None) => {}
    }
}

/// Opens the recording at `path` for reading. One that does not exist may have been left
/// by a recorder killed outright (`SIGKILL`, the OOM killer) under its temporary name: it
/// is then completed (a heap recording from what its agents wrote, a CPU recording from
/// its last checkpoint), moved into place and opened, with a warning; one still being
/// written, or one that cannot be completed, is a clear error.
pub fn open_recording(path: &Path) -> anyhow::Result<std::fs::File> {
    use tansa_collect::salvage::{Recovery, recover_leftover_with};
    let err = match tansa_format::input::open(path) {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => e,
        Err(e) => return Err(crate::exit::cannot_open(path, e)),
    };
    if tansa_format::output::leftovers(path).is_empty() {
        return Err(crate::exit::cannot_open(path, err));
    }
    let recovery = with_module_progress("completing: symbolizing", |p| {
        recover_leftover_with(path, |temp| complete_leftover(temp, p))
    });
    match recovery {
        Recovery::Nothing => Err(crate::exit::cannot_open(path, err)),
        // Its recorder still runs, or (gone) another process holds the file's lock: a
        // report completing it at this moment.
        Recovery::InUse { temp, pid } if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
            bail!(
                "{} is still being recorded by pid {pid} (into {}); read it once that \
                 recorder has finished",
                path.display(),
                temp.display()
            )
        }
        Recovery::InUse { temp, pid } => bail!(
            "{} is being completed by another process right now (its recorder, pid {pid}, \
             was killed; {} is locked); read it once that has finished",
            path.display(),
            temp.display()
        ),
        Recovery::Empty { temp, pid } => bail!(
            "{}: not recorded: its recorder (pid {pid}) was killed before it wrote anything \
             into {}",
            path.display(),
            temp.display()
        ),
        Recovery::Unusable { temp, pid, error } => bail!(
            "{} does not exist; {} is what its recorder (pid {pid}) left when it was killed, \
             and it cannot be completed: {error}",
            path.display(),
            temp.display()
        ),
        Recovery::Completed {
            temp,
            pid,
            salvaged,
            others,
        } => {
            eprintln!(
                "tansa: warning: {} was not finished: its recorder (pid {pid}) was killed; \
                 completed it from {}{}, and moved it into place",
                path.display(),
                temp.display(),
                match &salvaged {
                    Completion::Heap(Some(s)) => format!(
                        " ({} process image(s) ended there; what its rings held then is lost)",
                        s.salvage.sessions_ended
                    ),
                    _ => String::new(),
                },
            );
            tell_completion(&salvaged);
            for other in others {
                eprintln!(
                    "tansa: warning: {} is an older unfinished recording of the same name, \
                     left as it is",
                    other.display()
                );
            }
            tansa_format::input::open(path).map_err(|e| crate::exit::cannot_open(path, e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_interval("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_interval("500µs"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_interval("250"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_interval("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_seconds("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_seconds("10"), Ok(Duration::from_secs(10)));
        assert!(parse_interval("fast").is_err());
        assert!(parse_interval("10parsecs").is_err());
        assert!(parse_interval("0ms").is_err());
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("1e400").is_err());
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_byte_count("4096"), Ok(4096));
        assert_eq!(parse_byte_count("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_byte_count("1MiB"), Ok(1 << 20));
        assert!(parse_byte_count("lots").is_err());
        assert!(parse_byte_count("").is_err());
        assert_eq!(parse_sample_rate("512KiB"), Ok(524_288));
        assert!(parse_sample_rate("0").is_err());
        assert!(parse_sample_rate("2GiB").is_err());
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(parse_ring_kb("4096"), Ok(4096));
        assert_eq!(parse_ring_kb("4MiB"), Ok(4096));
        assert_eq!(parse_ring_kb("64KiB"), Ok(64));
        assert!(parse_ring_kb("100").is_err());
        assert!(parse_ring_kb("32").is_err());
        assert!(parse_ring_kb("1GiB").is_err());
        assert!(parse_ring_kb("big").is_err());
    }

    #[test]
    fn units_by_kind() {
        let f = Path::new("x.tansa");
        assert!(ReportBy::memory(Some(ReportBy::Thread), f).is_ok());
        assert!(ReportBy::memory(Some(ReportBy::Line), f).is_err());
        assert!(ReportBy::cpu(Some(ReportBy::Line), None, f).is_ok());
        assert!(ReportBy::cpu(Some(ReportBy::Thread), None, f).is_ok());
        assert!(ReportBy::cpu(Some(ReportBy::Call), None, f).is_err());
        for name in MEMORY_BY {
            let by = ReportBy::from_str(name, false).unwrap();
            assert!(ReportBy::memory(Some(by), f).is_ok(), "{name}");
        }
        for name in CPU_BY {
            let by = ReportBy::from_str(name, false).unwrap();
            assert!(ReportBy::cpu(Some(by), None, f).is_ok(), "{name}");
        }
    }
}
