//! `tansa record`: run a command under the heap agent.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use tansa_collect::file::{Compression, FileSink, Written};
use tansa_collect::{Config as CollectConfig, Outcome};
use tansa_format::meta::{ClockSource, RecordingMeta};
use tansa_format::output::{DEFAULT_MODE, Naming, OutputFile};

use super::options::{self, ChargeArg, FormatArg, FreeToArg, SortArg};
use tansa_ptrace::leaks::{LeakCauseConfig, record_leak_cause};

/// Options of `tansa record`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa record -- ./server --port 8080         record to tansa-server-<pid>.tansa
  tansa record -o run.tansa -- make -j2        record a whole process tree
  tansa record --online --by function -- ./a   print a per-function table at exit
                                               (and, on a terminal, show it live)
  tansa record --leak-cause -- ./server        also find why leaking sites leak (tansa leaks)
  tansa record --sample-rate 512KiB -- ./server   sampled: low overhead, estimated figures

tansa record exits with the command's exit status (128 + N if a signal N killed it).
SIGTERM and SIGHUP are passed on to the command; 300 ms later the recording is finished
whoever still runs (they end as \"still running when the recording was stopped by SIGTERM\")
and tansa record exits with 128 + the signal.")]
pub struct Args {
    /// Recording file to write, replaced if it exists (default: tansa-COMMAND-PID.tansa in
    /// the current directory, numbered if taken; never replaces a file). Recordings are
    /// private (mode 0600). With --online, the report is written there instead of to
    /// stderr. For parallel jobs, %r is the rank (from mpiexec's or srun's environment),
    /// %h the host name, %p tansa's pid, %j the job id and %% a percent sign:
    /// `mpiexec -n 4 tansa record -o job-%r.tansa -- ./prog`.
    #[arg(short, long, value_name = "FILE", value_parser = options::output_pattern())]
    output: Option<PathBuf>,

    /// Aggregate while the program runs and print the per-unit table when it ends (also
    /// when a signal kills it); write no event log. A free or realloc of a pointer that was
    /// never allocated is reported as improper use and not passed on.
    #[arg(long)]
    online: bool,

    /// Unit of the online table.
    #[arg(long, default_value = "library", requires = "online",
          value_parser = options::memory_by_parser())]
    by: tansa_analysis::memory::By,

    /// Which frame of a stack is charged (online).
    #[arg(long, value_enum, default_value = "first", requires = "online")]
    charge: ChargeArg,

    /// Who releases are charged to (online).
    #[arg(long, value_enum, default_value = "owner", requires = "online")]
    free_to: FreeToArg,

    /// Also treat FUNCTION as an allocation function (online), as `operator new`, `strdup`
    /// and the known wrappers (`xmalloc`, `g_malloc`, `PyObject_Malloc`, ...) are: an
    /// allocation made through it is charged to its caller. A name as symbols give it or a
    /// short one (`my_alloc`, `Pool::get`); repeatable. (`tansa report` takes it too.)
    #[arg(long = "alloc-fn", value_name = "FUNCTION", requires = "online")]
    alloc_fn: Vec<String>,

    /// Order the units of the online report by this figure, largest first (as `tansa
    /// report --sort`), and the live view's table until a key changes it [default: max;
    /// the live view: net].
    #[arg(long, value_enum, requires = "online")]
    sort: Option<SortArg>,

    /// Interval length for --by interval (online), e.g. 100ms, 1s.
    #[arg(long, default_value = "100ms", value_parser = options::parse_interval, requires = "online")]
    interval: Duration,

    /// Format of the online report.
    #[arg(long, value_enum, default_value = "table", requires = "online")]
    format: FormatArg,

    /// Live view of the online table while the program runs (keys: n/m/a/c/t sort by
    /// net/max/allocated/calls/temporary allocations, u switches library/function/thread, q closes the view and
    /// lets the program and the recording go on; the report is printed at the end as
    /// without it). `auto` shows it when standard input and standard error are terminals,
    /// TERM is not `dumb` and no -o is given; `always` whenever standard error is a
    /// terminal; `never` prints only the report. The view draws on standard error and
    /// reads keys from the terminal: a program that reads the terminal, or whose own output
    /// there matters, is better run with `--live never`.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        default_value = "auto",
        requires = "online"
    )]
    live: When,

    /// Do not record the call stacks of free (lower overhead; `--free-to caller` reports then
    /// charge releases to "unknown").
    #[arg(long)]
    no_free_stacks: bool,

    /// Deepest stack recorded, in frames (1 to 256).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=256))]
    max_frames: u32,

    /// Size of each thread's ring buffer in KiB (a power of two, 64 to 262144).
    #[arg(long, value_name = "KIB", value_parser = options::parse_ring_kb)]
    ring_kb: Option<u32>,

    /// Leak-cause mode (seed 001): judge allocation sites while the program runs and,
    /// for a site that leaks, follow the threads of its next allocations (single-stepping,
    /// from the allocation until the block is freed or the innermost function common to
    /// its allocation and free stacks returns), to find the function and the branch where
    /// the leaking paths leave the freeing ones. Report with `tansa leaks FILE`.
    #[arg(long, conflicts_with = "online")]
    leak_cause: bool,

    /// Leak check at exit, as Valgrind's memcheck and LeakSanitizer do: when a process calls
    /// `exit` (or returns from `main`), look for pointers to each block still allocated in
    /// its globals, stacks and reachable blocks, and record which blocks it can no longer
    /// reach (definitely lost, or indirectly: only through lost blocks). `tansa report`
    /// sums it up (with --online, the report at exit); `tansa leaks` names the allocation
    /// sites that lost blocks. The agent keeps a table of live blocks for it, which costs
    /// some time per call. Not with --sample-rate.
    #[arg(long, conflicts_with = "sample_rate")]
    leak_check: bool,

    /// Most allocations traced per leaking site (leak-cause mode); tracing of a site stops
    /// earlier once every free site was reached on a traced path, a leaking path was seen,
    /// and 16 traces in a row brought no new path.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "leak_cause",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    traces: u32,

    /// How often allocation sites are judged (leak-cause mode), e.g. 50ms, 1s.
    #[arg(long, value_name = "DURATION", default_value = "50ms", requires = "leak_cause",
          value_parser = options::parse_interval)]
    scan_interval: Duration,

    /// Most instructions one trace follows (leak-cause mode) before it is given up: a
    /// path from the allocation to the block's release, or to the return of the innermost
    /// function common to the allocation and free stacks. Each is single-stepped: about
    /// 40,000 a second on a 2-CPU VM, so the default takes up to 5 s per trace there.
    #[arg(long, value_name = "N", default_value_t = 200_000, requires = "leak_cause",
          value_parser = clap::value_parser!(u64).range(1_000..=1_000_000_000))]
    trace_steps: u64,

    /// Sampled heap mode, for long-running programs: record only allocations sampled every
    /// BYTES allocated on average (a Poisson process over bytes, as tcmalloc, jemalloc and Go
    /// do; e.g. 512KiB), and the releases of those blocks. Reports scale every figure back
    /// (each sampled block of s bytes stands for s / (1 - exp(-s/BYTES)) bytes) and say they
    /// are estimates. Not with --online or --leak-cause.
    #[arg(long, value_name = "BYTES", value_parser = options::parse_sample_rate,
          conflicts_with_all = ["online", "leak_cause"])]
    sample_rate: Option<u64>,

    /// Durable recording: the agents' shared rings are files in a private directory next to
    /// the recording (`.NAME.d`, removed at the end), the recording is written in place at
    /// its name (refused if the name exists) under a lock, and ring space is reused only
    /// once its bytes are in the recording. If tansa is killed (even with SIGKILL), nothing
    /// the program handed over is lost: `tansa report` completes the recording (with a
    /// warning). `auto`: when a launcher runs tansa (one of OMPI_COMM_WORLD_RANK, PMI_RANK,
    /// PMIX_RANK, SLURM_PROCID is set).
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        default_value = "auto",
        conflicts_with = "online"
    )]
    durable: When,

    /// When the recorded events are compressed. `auto`: while the CPUs have time to spare
    /// (a quarter of a CPU idle over the last 100 ms), since compressing would otherwise
    /// take CPU time from the program; `always`: the smallest file; `never`: the least CPU
    /// time, with files about 4 times larger. Reports read every mix alike.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        default_value = "auto",
        conflicts_with = "online"
    )]
    compress: When,

    /// The command to run, with its arguments (put it after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// When an option of `record` applies (`--live`, `--durable`, `--compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum When {
    /// As the option describes.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// The variables by which launchers tell a process its rank.
const LAUNCHER_RANK_VARIABLES: [&str; 4] = [
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
];

/// Whether `--durable` asks for a durable recording here.
fn durable_wanted(args: &Args) -> bool {
    match args.durable {
        When::Always => true,
        When::Never => false,
        When::Auto => LAUNCHER_RANK_VARIABLES
            .iter()
            .any(|v| std::env::var_os(v).is_some()),
    }
}

impl From<When> for Compression {
    fn from(w: When) -> Self {
        match w {
            When::Auto => Compression::Auto,
            When::Always => Compression::Always,
            When::Never => Compression::Never,
        }
    }
}

/// The command's program, as messages name it: the file name of its path (`g++`), with
/// control characters shown as escapes.
fn command_display_name(command: &[OsString]) -> String {
    let first = command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = first.rsplit('/').next().unwrap_or(&first);
    tansa_render::printable(base).into_owned()
}

/// The command's program as a part of a file name (`tansa-NAME-PID.tansa`): letters,
/// digits, `-`, `_` and `.`, anything else as `_` (`g__` for `g++`).
fn command_name(command: &[OsString]) -> String {
    let first = command
        .first()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = first.rsplit('/').next().unwrap_or(&first).to_string();
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "command".into()
    } else {
        clean
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs `tansa record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // A name that cannot be written is said before the command runs, not after.
    if let Some(p) = &args.output {
        if args.online {
            // The online report, which may go to standard output like any report.
            crate::output::check_given(p)?;
        } else {
            crate::output::check_recording_given(p)?;
        }
    }
    let agent = options::find_agent()?;
    let config = CollectConfig {
        command: args.command.clone(),
        agent,
        online: args.online,
        free_stacks: !args.no_free_stacks,
        ring_kb: args.ring_kb,
        max_frames: Some(args.max_frames),
        // Online intervals need nanoseconds as events arrive; the TSC needs calibration first.
        monotonic_clock: args.online,
        sample_hz: None,
        leak_cause: args.leak_cause,
        leak_check: args.leak_check,
        sample_rate: args.sample_rate,
        events: Some(options::print_collect_events()),
        segment_dir: None,
    };
    if args.online {
        return run_online(&args, &config);
    }
    if durable_wanted(&args) {
        return run_durable(&args, config);
    }
    let clock = if tansa_collect::tsc_is_reliable() {
        ClockSource::Tsc
    } else {
        ClockSource::Monotonic
    };
    let name = command_name(&args.command);
    // Where the recording goes: the user's name, or tansa-NAME-PID.tansa once the pid is
    // known (never replacing a file there). It is written to a private temporary file next
    // to it meanwhile.
    let dir_hint = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("tansa-{name}.tansa")));
    options::note_leftovers(&dir_hint);
    let mut out = OutputFile::create(&dir_hint, DEFAULT_MODE).with_context(|| {
        format!(
            "cannot create a recording in {}",
            dir_hint
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .display()
        )
    })?;
    let path = out.temp_path().to_path_buf();
    let file = out.take_file().context("the recording file")?;
    let meta = recording_meta(&args, false);
    let sink = FileSink::create(file, &path, &meta, clock, args.compress.into())?;
    let started = Instant::now();
    let (sink, recorded) = collect(&args, &config, sink);
    let outcome: Outcome = match recorded {
        Ok(o) => o,
        Err(e @ tansa_collect::CollectError::Spawn { .. }) => {
            // Nothing ran, nothing was recorded.
            let _ = sink.finish(&mut |_, _, _| {});
            out.discard();
            return Err(e.into());
        }
        Err(e) => {
            // Keep what was recorded, if anything: finish the file and keep it as .partial.
            let finished = sink.finish(&mut |_, _, _| {});
            let dest = args.output.clone().unwrap_or(dir_hint);
            match finished
                .map_err(anyhow::Error::from)
                .and_then(|_| out.keep_partial(&dest).map_err(anyhow::Error::from))
            {
                Ok(kept) => eprintln!("tansa: what was recorded is kept in {}", kept.display()),
                Err(k) => eprintln!("tansa: the partial recording could not be kept: {k:#}"),
            }
            return Err(e.into());
        }
    };
    let elapsed = started.elapsed();
    let raw = sink.raw_bytes();
    let written = finish_with_progress(sink);
    let (dest, naming) = match &args.output {
        Some(p) => (p.clone(), Naming::Given),
        None => (
            PathBuf::from(format!("tansa-{name}-{}.tansa", outcome.pid)),
            Naming::Chosen,
        ),
    };
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            if let Ok(kept) = out.keep_partial(&dest) {
                eprintln!("tansa: what was recorded is kept in {}", kept.display());
            }
            return Err(e.into());
        }
    };
    let final_path = out
        .commit(&dest, naming)
        .with_context(|| format!("cannot move the recording to {}", dest.display()))?;
    if naming == Naming::Chosen && final_path != dest {
        eprintln!(
            "tansa: {} exists; the recording is {} instead",
            dest.display(),
            final_path.display()
        );
    }
    summarize(&args, &outcome, elapsed, raw, &final_path, written);
    Ok(crate::exit::of_command(outcome.exit))
}

/// The recording's `META` frame.
fn recording_meta(args: &Args, durable: bool) -> RecordingMeta {
    RecordingMeta {
        tool: format!("tansa {}", env!("CARGO_PKG_VERSION")),
        started_unix_ms: now_unix_ms(),
        hostname: tansa_proc::os::hostname(),
        command: args
            .command
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect(),
        options: vec![
            ("free_stacks".into(), (!args.no_free_stacks).to_string()),
            (
                tansa_analysis::memory::MAX_FRAMES_OPTION.into(),
                args.max_frames.to_string(),
            ),
            ("leak_cause".into(), args.leak_cause.to_string()),
            (
                tansa_analysis::memory::LEAK_CHECK_OPTION.into(),
                args.leak_check.to_string(),
            ),
        ]
        .into_iter()
        .chain(args.sample_rate.map(|r| {
            (
                tansa_analysis::memory::SAMPLE_RATE_OPTION.into(),
                r.to_string(),
            )
        }))
        .chain(durable.then(|| {
            (
                tansa_collect::salvage::DURABLE_OPTION.to_string(),
                "true".to_string(),
            )
        }))
        .collect(),
    }
}

/// Runs the command under the collector (in leak-cause mode, with the tracer).
fn collect(
    args: &Args,
    config: &CollectConfig,
    mut sink: FileSink,
) -> (FileSink, Result<Outcome, tansa_collect::CollectError>) {
    if args.leak_cause {
        let leak_cause = LeakCauseConfig {
            traces: args.traces,
            scan_interval: args.scan_interval,
            max_steps: args.trace_steps,
        };
        record_leak_cause(config, sink, leak_cause)
    } else {
        let recorded = tansa_collect::record(config, &mut sink);
        (sink, recorded)
    }
}

/// Finishes the recording (symbols, end frame) with a progress bar on a terminal.
fn finish_with_progress(sink: FileSink) -> Result<Written, tansa_collect::CollectError> {
    options::with_module_progress("symbolizing", |progress| sink.finish(progress))
}

/// Event bytes stored uncompressed from which `tansa record` says so at the end.
const NOTE_STORED_BYTES: u64 = 4 << 20;

/// What `tansa record` says at the end.
fn summarize(
    args: &Args,
    outcome: &Outcome,
    elapsed: Duration,
    raw: u64,
    final_path: &Path,
    written: Written,
) {
    eprintln!(
        "tansa: {} {}; recorded {} process image(s) in {:.2} s: {} of events, written to {} ({})",
        command_display_name(&args.command),
        outcome.exit.describe(),
        outcome.sessions,
        elapsed.as_secs_f64(),
        tansa_render::bytes(i64::try_from(raw).unwrap_or(i64::MAX)),
        final_path.display(),
        tansa_render::bytes(i64::try_from(written.size).unwrap_or(i64::MAX)),
    );
    if outcome.lost_events > 0 {
        eprintln!(
            "tansa: warning: the agent could not record {} event(s); `tansa report {}` says why",
            outcome.lost_events,
            final_path.display()
        );
    }
    for line in written.unresolved.iter().chain(&written.own_allocators) {
        eprintln!("tansa: warning: {line}");
    }
    // Said when it makes a difference on disk (compression divides the size by about 4).
    if written.stored_while_busy >= NOTE_STORED_BYTES {
        eprintln!(
            "tansa: note: {} of events stored uncompressed (compression waits for idle CPU \
             time{}; --compress always for a smaller file)",
            tansa_render::bytes(i64::try_from(written.stored_while_busy).unwrap_or(i64::MAX)),
            written.quota_used_up.map_or(String::new(), |cpus| format!(
                ", and this control group's CPU quota of {cpus:.2} CPU was used up"
            )),
        );
    }
    if outcome.sessions == 0 {
        eprintln!(
            "tansa: warning: no process ran under the agent (is the program statically linked, \
             or does it clear LD_PRELOAD?)"
        );
    } else {
        eprintln!("tansa: report with: tansa report {}", final_path.display());
        if args.leak_cause {
            eprintln!(
                "tansa: leaking sites and their causes: tansa leaks {}",
                final_path.display()
            );
        } else if args.leak_check {
            eprintln!(
                "tansa: blocks lost at exit, and their allocation sites: tansa leaks {}",
                final_path.display()
            );
        }
    }
}

/// `tansa record --durable`: the recording is written in place at its final name (never
/// replacing a file), the agents' segments are files in a private directory next to it,
/// and whatever ends tansa, the recording and the segment files hold everything handed
/// over (`tansa report` salvages an unfinished one).
fn run_durable(args: &Args, mut config: CollectConfig) -> anyhow::Result<ExitCode> {
    let clock = if tansa_collect::tsc_is_reliable() {
        ClockSource::Tsc
    } else {
        ClockSource::Monotonic
    };
    // The name must be known before the command starts: tansa's own pid names it when
    // the user gave none.
    let (dest, naming) = match &args.output {
        Some(p) => (p.clone(), Naming::Given),
        None => (
            PathBuf::from(format!(
                "tansa-{}-{}.tansa",
                command_name(&args.command),
                std::process::id()
            )),
            Naming::Chosen,
        ),
    };
    let (file, path) = tansa_format::output::create_locked(&dest, naming, DEFAULT_MODE)
        .with_context(|| format!("cannot create the recording {}", dest.display()))?;
    let dir = match tansa_collect::salvage::create_segment_dir(&path) {
        Ok(dir) => dir,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(anyhow::Error::from(e).context("cannot create the segment directory"));
        }
    };
    config.segment_dir = Some(dir);
    // The lock belongs to the open file description: this duplicate keeps it held until
    // the segment directory is gone, so a reader never sees a finished recording with its
    // segments still there.
    let lock = file.try_clone().context("the recording file")?;
    let meta = recording_meta(args, true);
    let sink = FileSink::create_durable(file, &path, &meta, clock, args.compress.into())?;
    let started = Instant::now();
    let (sink, recorded) = collect(args, &config, sink);
    let outcome = match recorded {
        Ok(o) => o,
        Err(e @ tansa_collect::CollectError::Spawn { .. }) => {
            drop(sink);
            tansa_collect::salvage::remove_segment_dir(&path);
            let _ = std::fs::remove_file(&path);
            return Err(e.into());
        }
        Err(e) => {
            // What was recorded stays: finished here, or salvaged by `tansa report`.
            if sink.finish(&mut |_, _, _| {}).is_ok() {
                tansa_collect::salvage::remove_segment_dir(&path);
            }
            eprintln!("tansa: what was recorded is kept in {}", path.display());
            return Err(e.into());
        }
    };
    let elapsed = started.elapsed();
    let raw = sink.raw_bytes();
    let written = finish_with_progress(sink)?;
    tansa_collect::salvage::remove_segment_dir(&path);
    drop(lock);
    if naming == Naming::Chosen && path != dest {
        eprintln!(
            "tansa: {} exists; the recording is {} instead",
            dest.display(),
            path.display()
        );
    }
    summarize(args, &outcome, elapsed, raw, &path, written);
    Ok(crate::exit::of_command(outcome.exit))
}

fn run_online(args: &Args, config: &CollectConfig) -> anyhow::Result<ExitCode> {
    let analysis = options::memory_config(args.by, args.charge, args.free_to, args.interval, None);
    let sort = options::memory_sort(args.by, args.sort)?;
    if sort == Some(tansa_live::SortKey::Lost) && !args.leak_check {
        return Err(crate::exit::usage(
            "--sort lost orders units by the bytes the leak check at exit found lost: give \
             --leak-check too",
        ));
    }
    let (outcome, mut report) = if live_view_wanted(args)? {
        // The view sorts as the report will, by net bytes unless --sort says otherwise
        // (bytes lost are known at exit only).
        let view_sort = sort
            .filter(|&k| k != tansa_live::SortKey::Lost)
            .unwrap_or(tansa_live::SortKey::Net);
        super::live::record_online_live(config, analysis, &args.alloc_fn, &args.command, view_sort)?
    } else {
        tansa_collect::online::record_online(config, analysis, &args.alloc_fn, None)?
    };
    if let Some(key) = sort {
        tansa_analysis::memory::report::sort_units(&mut report.units, key);
    }
    let mut out = match &args.output {
        Some(p) => crate::output::open(Some(p), &[])?,
        None => crate::output::Output::stderr(),
    };
    // `tansa report` puts every report's warnings on standard error; here, CSV has no place
    // for them (a table and JSON carry them).
    if args.format == FormatArg::Csv {
        for w in &report.warnings {
            eprintln!("tansa: warning: {w}");
        }
    }
    super::report::write_memory_report(
        &report,
        args.format,
        &tansa_render::memory::TableOptions::default(),
        &mut out,
    )?;
    out.finish()?;
    Ok(crate::exit::of_command(outcome.exit))
}

/// Whether `--live` asks for the live view here.
fn live_view_wanted(args: &Args) -> anyhow::Result<bool> {
    use std::io::IsTerminal;
    let stderr = std::io::stderr().is_terminal();
    Ok(match args.live {
        When::Never => false,
        When::Always if !stderr => anyhow::bail!(
            "--live always needs standard error to be a terminal (the view is drawn there); \
             use --live auto or never"
        ),
        When::Always => true,
        When::Auto => {
            stderr
                && std::io::stdin().is_terminal()
                && args.output.is_none()
                && std::env::var_os("TERM").is_some_and(|t| !t.is_empty() && t != "dumb")
        }
    })
}
