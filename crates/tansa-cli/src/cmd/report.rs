//! `tansa report`: analyse a recording.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tansa_analysis::memory::recording::{MemoryRecording, RecordingError};
use tansa_analysis::memory::{Config, MemoryReport};

use super::options::{self, ChargeArg, FormatArg, FreeToArg, ReportBy, SortArg};
use super::report_cpu;
use crate::exit;

/// Options of `tansa report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa report run.tansa                          heap per shared library
  tansa report run.tansa --by function --charge last
  tansa report run.tansa --by thread
  tansa report run.tansa --by function --sort temporary --top 10
                                                  the most heap churn (allocations freed at once)
  tansa report run.tansa --by interval --interval 1s --format csv
  tansa report run.tansa --format json | jq '.units[0]'
  tansa report cpu.tansa --by function            CPU time per function (tansa sample)
  tansa report cpu.tansa --by function --top 20   only the 20 functions with most samples
  tansa report cpu.tansa --by program             a script's processes, one row per program
  tansa report job-*.tansa                        one MPI job: every rank's recording as one
  tansa report job-*.tansa --by rank              one row per rank, with its host
  tansa report job-*.tansa --rank 2 --by function
  tansa record -o whole.tansa -- mpiexec -n 4 ./prog; tansa report whole.tansa --by rank

Several heap recordings (the ranks of one job, from one node or many: `mpiexec tansa record
-o job-%r.tansa -- ./prog`, `srun tansa record -o %j-%h-%r.tansa -- ./prog`) give one
report: every unit's figures are the job's (net, allocated and counts sum; max is the
maximum over time of the job's sum). Recordings of one host share its clock; those of
different hosts are aligned by the wall-clock time each started, as the header says. The
header lists the ranks (host, pid, peak heap, how each ended) and which ended first.
A process is a recording and a pid: --pid must name a pid found in one recording only.

JSON output follows the schema tansa.memory-report.v1 (docs/json/memory-report.v1.md) for
memory recordings and tansa.cpu-report.v1 (docs/architecture/cpu.md) for CPU recordings.
Exit status: 0 on success; 1 when the recording cannot be read (nothing is reported); 2 for
a wrong command line; 3 when it is truncated or damaged (the report then covers what was
recorded before the damage, and the warnings on standard error say where the damage is).
--by interval makes at most 10000 intervals: a shorter --interval is lengthened, with a
warning.

A durable recording (tansa record --durable, the default under mpiexec or srun) whose
recorder was killed has no end marker: it is completed in place first (salvaged: what the
agents' shared rings next to it still hold is added, processes still running end as
\"recording ended when the recorder was killed\"), with a warning saying how many events
were recovered. One still being recorded is refused (\"still being recorded by pid N\").
An ordinary recording whose recorder was killed outright (SIGKILL, the OOM killer) is left
as .NAME.PID.N.tmp next to NAME: reading NAME completes it the same way (without what the
rings held) and moves it into place, with a warning.")]
pub struct Args {
    /// The recording (from `tansa record` or `tansa sample`); several heap recordings
    /// (the ranks of one job) are reported as one.
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<PathBuf>,

    /// List every process image of a memory recording, as a tree by parent, before the
    /// table (more than 10 are otherwise summarized: counts by command, abnormal ends).
    #[arg(long)]
    processes: bool,

    /// Unit of aggregation. Memory recordings: library, function, thread, call, interval,
    /// rank.
    /// CPU recordings: process, thread, space, library, function, line, instruction,
    /// interval (recorded with `tansa sample --timeline`).
    /// [default: library for memory, process for CPU]
    #[arg(long, value_enum)]
    by: Option<ReportBy>,

    /// Which frame of each stack is charged (memory) [default: first].
    #[arg(long, value_enum)]
    charge: Option<ChargeArg>,

    /// Who releases are charged to (memory) [default: owner].
    #[arg(long, value_enum)]
    free_to: Option<FreeToArg>,

    /// Also treat FUNCTION as an allocation function, as `operator new`, `strdup` and the
    /// known wrappers (`xmalloc`, `g_malloc`, `PyObject_Malloc`, ...) are (memory): an allocation
    /// made through it is charged to, and its leak site named after, its caller. A name as
    /// symbols give it or a short one (`my_alloc`, `Pool::get`); repeatable.
    #[arg(long = "alloc-fn", value_name = "FUNCTION")]
    alloc_fn: Vec<String>,

    /// Interval length for --by interval, e.g. 100ms, 1s [default: 100ms for memory; for
    /// CPU, a round length giving about 40 intervals].
    #[arg(long, value_parser = options::parse_interval)]
    interval: Option<Duration>,

    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,

    /// Report on one process of a recorded process tree (default: all merged).
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,

    /// Report on the processes of one MPI rank (memory).
    #[arg(long, value_name = "N")]
    rank: Option<u32>,

    /// Order the units of a memory report by this figure, largest first (the table, JSON and
    /// CSV alike; with --top, the N largest by it) [default: max]. By library, function,
    /// thread or program.
    #[arg(long, value_enum)]
    sort: Option<SortArg>,

    /// Show only the N largest units in the table (the others are summed in one row, and
    /// the total stays that of all). Reports by library, function, thread, process, space,
    /// line or instruction; JSON and CSV always hold every unit.
    #[arg(long, value_name = "N", value_parser = options::parse_rows)]
    top: Option<usize>,

    /// Write the report to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `--top` as a count of rows, refused where it would not mean the largest units: with
/// JSON or CSV (which hold every unit, for scripts) and with reports whose rows come in
/// time or rank order.
fn top_rows(args: &Args, by: ReportBy) -> anyhow::Result<Option<usize>> {
    let Some(n) = args.top else {
        return Ok(None);
    };
    if args.format != FormatArg::Table {
        return Err(exit::usage(
            "--top shortens the table; JSON and CSV hold every unit (filter them with jq or \
             head)",
        ));
    }
    if matches!(by, ReportBy::Interval | ReportBy::Call | ReportBy::Rank) {
        return Err(exit::usage(format!(
            "--top shows the largest units, and --by {} lists its rows in order, not by \
             size",
            by.name()
        )));
    }
    Ok(Some(n))
}

/// Runs `tansa report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let first = &args.files[0];
    let file = options::open_recording(first)?;
    if args.files.len() > 1 {
        refuse_cpu(&args.files, "`tansa report`")?;
    } else if report_cpu::is_cpu_recording(&file) {
        let memory_only = [
            ("--charge", args.charge.is_some()),
            ("--free-to", args.free_to.is_some()),
            ("--alloc-fn", !args.alloc_fn.is_empty()),
            ("--rank", args.rank.is_some()),
            ("--sort", args.sort.is_some()),
        ];
        if let Some((flag, _)) = memory_only.iter().find(|f| f.1) {
            return Err(exit::usage(format!(
                "{flag} applies to memory recordings; {} is a CPU recording",
                first.display()
            )));
        }
        let top = top_rows(&args, args.by.unwrap_or(ReportBy::Process))?;
        return report_cpu::run(report_cpu::ReportArgs {
            file: first,
            input: file,
            by: args.by,
            top,
            interval: args.interval,
            format: args.format,
            pid: args.pid,
            output: args.output.as_deref(),
        });
    }
    drop(file);
    let by = ReportBy::memory(args.by, first)?;
    let top = top_rows(&args, args.by.unwrap_or(ReportBy::Library))?;
    options::warn_unused_interval(args.interval, by);
    let (charge, free_to, interval) = (
        args.charge.unwrap_or(ChargeArg::First),
        args.free_to.unwrap_or(FreeToArg::Owner),
        args.interval.unwrap_or(Duration::from_millis(100)),
    );
    let mut config = options::memory_config(by, charge, free_to, interval, args.pid);
    config.rank = args.rank;
    let sort = options::memory_sort(by, args.sort)?;
    let (mut report, damaged) = memory_report(&args.files, config, &args.alloc_fn, "tansa report")?;
    if sort == Some(tansa_analysis::memory::report::SortKey::Lost) && report.leak_check.is_none() {
        return Err(crate::exit::usage(
            "--sort lost orders units by the bytes the leak check at exit found lost, and \
             the recording was made without it (tansa record --leak-check)",
        ));
    }
    if let Some(key) = sort {
        tansa_analysis::memory::report::sort_units(&mut report.units, key);
    }
    let inputs: Vec<&Path> = args.files.iter().map(PathBuf::as_path).collect();
    let mut out = crate::output::open(args.output.as_deref(), &inputs)?;
    write_memory_report(
        &report,
        args.format,
        &tansa_render::memory::TableOptions {
            all_processes: args.processes,
            top,
        },
        &mut out,
    )?;
    out.finish()?;
    // Warnings go to standard error too (they start with the recording's problems); a
    // partial report says so to scripts with its exit status.
    Ok(exit::finish_all(&args.files, damaged, &report.warnings))
}

/// Refuses a CPU recording among several (reports over several recordings read heap
/// recordings only).
pub fn refuse_cpu(paths: &[PathBuf], command: &str) -> anyhow::Result<()> {
    for p in paths {
        let f = options::open_recording(p)?;
        if report_cpu::is_cpu_recording(&f) {
            return Err(exit::usage(format!(
                "{} is a CPU recording: {command} reads several recordings as one job only \
                 when they are all heap recordings (give a CPU recording alone)",
                p.display()
            )));
        }
    }
    Ok(())
}

/// Opens the heap recordings at `paths` as one (a job's ranks, or a single recording),
/// with the same messages as [`open_memory`], and checks the selection: `pid` must be in
/// exactly one recording (pids repeat across hosts and runs), `rank` must be recorded.
/// Event chunks are decompressed on second threads (one per recording, up to
/// [`MAX_PREFETCHED`] recordings).
pub fn open_memory_job(
    paths: &[PathBuf],
    pid: Option<u32>,
    rank: Option<u32>,
    allocation_functions: &[String],
    reads: &str,
) -> anyhow::Result<MemoryRecording<BufReader<File>>> {
    let mut recording = if let [path] = paths {
        let file = options::open_recording(path)?;
        open_memory(path, file, pid, reads)?
    } else {
        raise_open_file_limit(paths.len());
        let mut recording = MemoryRecording::new_job();
        // A file given twice (under one name or two) would count each of its events twice.
        let mut seen: std::collections::HashMap<(u64, u64), &Path> = Default::default();
        for path in paths {
            let file = options::open_recording(path)?;
            if let Ok(m) = file.metadata() {
                use std::os::unix::fs::MetadataExt;
                if let Some(first) = seen.insert((m.dev(), m.ino()), path) {
                    return Err(exit::usage(format!(
                        "{} is given twice{}: each recording is read once",
                        first.display(),
                        if first == path.as_path() {
                            String::new()
                        } else {
                            format!(" (also as {})", path.display())
                        }
                    )));
                }
            }
            let file = salvage_if_unfinished(path, file)?;
            let input = BufReader::with_capacity(1 << 16, file);
            match recording.add(path.display().to_string(), input) {
                Ok(()) => {}
                Err(RecordingError::WrongKind { found }) => {
                    anyhow::bail!("{}: a {found}; {reads}", path.display())
                }
                Err(RecordingError::Format(e)) => return Err(exit::unreadable(path, &e)),
                Err(e) => anyhow::bail!("{}: {e}", path.display()),
            }
        }
        recording.finish_job();
        if let Some(pid) = pid {
            let holders: Vec<&Path> = paths
                .iter()
                .zip(&recording.parts_info)
                .filter(|(_, part)| {
                    recording
                        .sessions
                        .iter()
                        .any(|s| s.pid == pid && part.holds(s.session))
                })
                .map(|(p, _)| p.as_path())
                .collect();
            match holders.len() {
                0 => {
                    return Err(exit::no_such_process(
                        pid,
                        Path::new("these recordings"),
                        recording.sessions.iter().map(|s| s.pid),
                    ));
                }
                1 => {}
                _ => {
                    let names: Vec<String> =
                        holders.iter().map(|p| p.display().to_string()).collect();
                    return Err(exit::usage(format!(
                        "process {pid} is in several recordings ({}): pids repeat across \
                         hosts and runs; select a rank with --rank, or report on one of \
                         these files",
                        names.join(", ")
                    )));
                }
            }
        }
        if paths.len() <= MAX_PREFETCHED {
            for (i, path) in paths.iter().enumerate() {
                if let Ok(second) = tansa_format::input::open(path) {
                    recording.prefetch_part(i, second);
                }
            }
        }
        recording
    };
    if let Some(rank) = rank
        && !recording.places.iter().any(|p| p.rank == rank)
    {
        let mut ranks: Vec<u32> = recording.places.iter().map(|p| p.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let list: Vec<String> = ranks.iter().take(50).map(u32::to_string).collect();
        return Err(exit::usage(format!(
            "no process of rank {rank} was recorded (ranks recorded: {})",
            if list.is_empty() {
                "none: no process had a rank in its environment".to_string()
            } else {
                list.join(", ")
            }
        )));
    }
    recording
        .registry
        .add_allocation_functions(allocation_functions.iter().cloned());
    Ok(recording)
}

/// Recordings of a job decompressed on second threads: beyond this many, events are
/// decompressed on the reading thread (a thread and a second file per recording would
/// cost more than they save).
pub const MAX_PREFETCHED: usize = 16;

/// Makes room for `n` recordings open at once, and their second handles.
fn raise_open_file_limit(n: usize) {
    tansa_proc::os::ensure_open_files(2 * n as u64 + 64);
}

/// Opens the heap recording `file` (at `path`) with clear messages (`reads` completes the
/// one for a file of another kind: what the command reads), checks that process `pid`, if
/// given, is in it, and starts decompressing its event chunks on a second thread.
pub fn open_memory(
    path: &Path,
    file: File,
    pid: Option<u32>,
    reads: &str,
) -> anyhow::Result<MemoryRecording<BufReader<File>>> {
    let file = salvage_if_unfinished(path, file)?;
    let mut recording = match MemoryRecording::open(BufReader::with_capacity(1 << 20, file)) {
        Ok(r) => r,
        Err(RecordingError::WrongKind { found }) => {
            anyhow::bail!("{}: a {found}; {reads}", path.display())
        }
        Err(RecordingError::Format(e)) => return Err(exit::unreadable(path, &e)),
        Err(e) => anyhow::bail!("{}: {e}", path.display()),
    };
    if let Some(pid) = pid
        && !recording.sessions.iter().any(|s| s.pid == pid)
    {
        return Err(exit::no_such_process(
            pid,
            path,
            recording.sessions.iter().map(|s| s.pid),
        ));
    }
    // Decompress event chunks on a second thread while this one aggregates.
    if let Ok(second) = tansa_format::input::open(path) {
        // Unbuffered: it reads chunks at scattered offsets, each with exactly the reads it
        // needs (a buffer would refill itself in full at every seek).
        recording.prefetch_from(second);
    }
    Ok(recording)
}

/// A durable recording whose recorder was killed (no end frame, lock free) is completed
/// in place first (`tansa_collect::salvage`), with a warning; one still being recorded is
/// an error; a finished one loses the segments its recorder, killed before it removed
/// them, left next to it. Returns the file to read (reopened after a salvage).
fn salvage_if_unfinished(path: &Path, file: File) -> anyhow::Result<File> {
    use tansa_collect::salvage::{SalvageError, is_finished, salvage, tidy_finished};
    if is_finished(&file).unwrap_or(true) {
        tidy_finished(path);
        return Ok(file);
    }
    let salvaged =
        options::with_module_progress("salvaging: symbolizing", |progress| salvage(path, progress));
    match salvaged {
        Ok(None) => complete_if_abandoned(path, file),
        Ok(Some(done)) => {
            eprintln!(
                "tansa: warning: {} was not finished (its recorder was killed); salvaged it: \
                 {} event(s) ({}) recovered from the agents' shared rings, {} process image(s) \
                 ended there",
                path.display(),
                done.salvage.events,
                tansa_render::bytes(i64::try_from(done.salvage.bytes).unwrap_or(i64::MAX)),
                done.salvage.sessions_ended,
            );
            for note in &done.notes {
                eprintln!("tansa: warning: salvage: {note}");
            }
            tansa_format::input::open(path).map_err(|e| exit::cannot_open(path, e))
        }
        Err(e @ SalvageError::StillWritten { .. }) => anyhow::bail!(
            "{} is unfinished: its recorder was killed, and {e}; report on it once that \
             process has ended (completing it now would lose its events to come)",
            path.display()
        ),
        Err(SalvageError::StillRecording { pid }) => anyhow::bail!(
            "{} {}; report on it once that has finished",
            path.display(),
            options::lock_holder_phrase(pid)
        ),
        Err(e) => {
            // Read what is there, as for any unfinished recording.
            eprintln!("tansa: warning: {}: cannot salvage it: {e}", path.display());
            Ok(file)
        }
    }
}

/// An unfinished recording given by its temporary name (`.NAME.PID.N.tmp`), which a
/// recorder killed outright left, is completed (`salvage::complete_leftover`) and moved
/// to `NAME` next to it (numbered if taken), with a warning. Returns the file to read.
fn complete_if_abandoned(path: &Path, file: File) -> anyhow::Result<File> {
    use tansa_format::output::{abandoned, settle_leftover_unique};
    let Some((left, name)) = abandoned(path) else {
        return Ok(file);
    };
    drop(file);
    match options::with_module_progress("completing: symbolizing", |p| {
        options::complete_leftover(path, p)
    }) {
        Ok(done) => match settle_leftover_unique(path, &path.with_file_name(&name)) {
            Ok(moved) => {
                eprintln!(
                    "tansa: warning: {} is what a killed recorder (pid {}) left; completed it \
                     and moved it to {}",
                    path.display(),
                    left.pid,
                    moved.display()
                );
                options::tell_completion(&done);
                return tansa_format::input::open(&moved).map_err(|e| exit::cannot_open(&moved, e));
            }
            Err(e) => {
                eprintln!(
                    "tansa: warning: {} is what a killed recorder (pid {}) left; completed it \
                     in place (it cannot be moved to {name}: {e})",
                    path.display(),
                    left.pid
                );
                options::tell_completion(&done);
            }
        },
        // Read what is there, as for any unfinished recording.
        Err(e) => eprintln!(
            "tansa: warning: {}: cannot complete it: {e}",
            path.display()
        ),
    }
    tansa_format::input::open(path).map_err(|e| exit::cannot_open(path, e))
}

/// Reads the heap recordings at `paths` (one, or a job's) and reports on them with
/// `config`, with a spinner on a terminal; also says whether a recording was damaged (the
/// report then covers what came before the damage). `command` names the command in
/// messages.
pub fn memory_report(
    paths: &[PathBuf],
    config: Config,
    allocation_functions: &[String],
    command: &str,
) -> anyhow::Result<(MemoryReport, bool)> {
    let recording = open_memory_job(
        paths,
        config.pid,
        config.rank,
        allocation_functions,
        &format!("`{command}` reads memory and CPU recordings"),
    )?;
    let progress = options::spinner("reading events");
    let report = recording.report(config, |n| {
        if let Some(p) = &progress {
            p.set_message(format!("{} million events", n >> 20));
            p.tick();
        }
    });
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    Ok((report, recording.is_damaged()))
}

/// Writes a memory report (`tansa report`, `tansa record --online`) in `format`. (CSV has
/// no place for the report's warnings: the caller puts them on standard error, once.)
pub fn write_memory_report(
    report: &tansa_analysis::memory::MemoryReport,
    format: FormatArg,
    table: &tansa_render::memory::TableOptions,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    tansa_render::memory::write(report, format.into(), table, out)
}
