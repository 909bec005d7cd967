//! `tansa sample`: sample where CPU time goes, across every process of a run.

use std::ffi::OsString;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::ValueEnum;
use tansa_format::meta::RecordingMeta;
use tansa_format::output::{DEFAULT_MODE, Naming, OutputFile};
use tansa_sample::perf::{self, CallGraph, Config, EventChoice, Target};
use tansa_sample::phases::Phases;
use tansa_sample::{Sampler, SamplerChoice};

use super::options;

/// `--stack-size`'s default.
const DEFAULT_STACK_SIZE: u32 = 8192;
/// `--ring-kb`'s default.
const DEFAULT_RING_KB: u32 = 4096;

/// Options of `tansa sample`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["command", "pid", "all"])))]
#[command(after_help = "\
Examples:
  tansa sample -- ./server --port 8080          sample a command and its children
  tansa sample -F 10000 -o run.tansa -- make    10 kHz, to run.tansa
  tansa sample -p 1234,1240 --duration 10       two running processes for 10 s
  tansa sample -a --duration 5                  every process, the kernel and idle
  tansa report run.tansa --by function          then: where the time went
  tansa annotate run.tansa work --asm           and: which instructions of `work`

The recording keeps symbols, source lines and the code of every function hit, so reports
and annotation work after the binaries are gone. With a command, tansa sample exits with
the command's exit status (128 + N if a signal N killed it); otherwise 0. It exits 1 when
it cannot sample, and 2 for a wrong command line.")]
pub struct Args {
    /// Samples per second on each CPU.
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = 997,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    frequency: u64,

    /// Recording file to write, replaced if it exists (default: tansa-sample-NAME.tansa in
    /// the current directory, numbered if taken; never replaces a file). Mode 0600. %r, %h,
    /// %p, %j and %% name a parallel job's files as for `tansa record -o`.
    #[arg(short, long, value_name = "FILE", value_parser = options::output_pattern())]
    output: Option<PathBuf>,

    /// Stop after this long, e.g. 10, 2.5, 500ms, 1m (seconds when no unit is given). A
    /// command still running then is terminated.
    #[arg(long, value_name = "S", value_parser = options::parse_seconds)]
    duration: Option<Duration>,

    /// Keep the time of every sample too (the recording then grows with the run).
    #[arg(long)]
    timeline: bool,

    /// Event that drives sampling.
    #[arg(long, value_enum, default_value = "auto")]
    event: EventArg,

    /// How user call chains are unwound.
    #[arg(long, value_enum, default_value = "dwarf")]
    call_graph: CallGraphArg,

    /// Bytes of user stack copied per sample for DWARF unwinding (8 to 65528).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_STACK_SIZE,
          value_parser = clap::value_parser!(u32).range(8..=65528))]
    stack_size: u32,

    /// Size of each CPU's ring buffer in KiB (a power of two, 64 to 262144).
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_RING_KB, value_parser = options::parse_ring_kb)]
    ring_kb: u32,

    /// Which sampler: perf_event_open, or the agent's in-process SIGPROF timer (commands
    /// only). `auto` uses perf and falls back to the agent where perf is not permitted.
    #[arg(long, value_enum, default_value = "auto")]
    source: SourceArg,

    /// Sample these running processes (comma-separated ids) instead of a command.
    #[arg(short, long, value_name = "PID[,PID..]", value_delimiter = ',')]
    pid: Vec<u32>,

    /// Sample every process on every CPU, the kernel and the idle task included.
    #[arg(short, long)]
    all: bool,

    /// The command to run, with its arguments (put it after `--`).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// `--event`
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum EventArg {
    /// Hardware cycles where the machine has a PMU, else cpu-clock.
    Auto,
    /// The cpu-clock software event (a timer; also samples idle).
    CpuClock,
    /// Hardware cycles (an error without a PMU).
    Cycles,
}

/// `--call-graph`
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum CallGraphArg {
    /// DWARF CFI over a copy of the user stack (works without frame pointers).
    Dwarf,
    /// Frame pointers only (cheaper; wrong for code built without them).
    Fp,
}

/// `--source`
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum SourceArg {
    /// perf_event_open, else the agent.
    Auto,
    /// perf_event_open only.
    Perf,
    /// The agent's SIGPROF timer (commands only).
    Agent,
}

fn default_output(args: &Args) -> PathBuf {
    let name = if args.all {
        "system".to_string()
    } else if !args.pid.is_empty() {
        args.pid
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("-")
    } else {
        std::path::Path::new(&args.command[0])
            .file_name()
            .map_or_else(|| "command".into(), |n| n.to_string_lossy().into_owned())
    };
    PathBuf::from(format!("tansa-sample-{name}.tansa"))
}

/// The options given that only perf's sampler uses (their values differ from the
/// defaults), by name.
fn perf_only_options(args: &Args) -> Vec<&'static str> {
    let mut given = Vec::new();
    if args.event != EventArg::Auto {
        given.push("--event");
    }
    if args.call_graph != CallGraphArg::Dwarf {
        given.push("--call-graph");
    }
    if args.stack_size != DEFAULT_STACK_SIZE {
        given.push("--stack-size");
    }
    if args.ring_kb != DEFAULT_RING_KB {
        given.push("--ring-kb");
    }
    given
}

/// Samples the command in-process with the agent's `SIGPROF` timers.
fn run_agent(
    started: Instant,
    args: &Args,
    output: &std::path::Path,
    meta: RecordingMeta,
) -> anyhow::Result<ExitCode> {
    let ignored = perf_only_options(args);
    if !ignored.is_empty() {
        eprintln!(
            "tansa: warning: {} {} perf's sampler only: the agent samples each thread's CPU \
             time with SIGPROF, unwinds in-process with DWARF and has no ring to size, so \
             {} ignored",
            ignored.join(", "),
            if ignored.len() == 1 {
                "is for"
            } else {
                "are for"
            },
            if ignored.len() == 1 {
                "it is"
            } else {
                "they are"
            }
        );
    }
    let agent = options::find_agent()?;
    let config = tansa_sample::agent::AgentConfig {
        command: args.command.clone(),
        agent,
        frequency_hz: u32::try_from(args.frequency).unwrap_or(u32::MAX),
        duration: args.duration,
        timeline: args.timeline,
        events: Some(options::print_collect_events()),
    };
    // Ctrl-C ends the command with SIGTERM, as with perf (the collector passes SIGTERM and
    // SIGHUP on itself; alone, it leaves SIGINT to the command's process group).
    let stop = stop_on(&[signal_hook::consts::SIGINT]);
    let naming = if args.output.is_some() {
        Naming::Given
    } else {
        Naming::Chosen
    };
    let recording = Instant::now();
    let (outcome, output) = record_to(output, naming, " (agent)", |file, tick| {
        tansa_sample::agent::record(&config, meta, &stop, file, &mut |n| tick(n))
    })?
    .context("sampling with the agent failed")?;
    let committed = Instant::now();
    let output = output.as_path();
    let s = outcome.summary;
    let size = std::fs::metadata(output).map_or(0, |m| m.len());
    eprintln!(
        "tansa: {} samples ({}, user code only) written to {} ({} KiB){}; report with `tansa \
         report {}`",
        s.samples,
        outcome.event,
        output.display(),
        size.div_ceil(1024),
        if s.lost_samples > 0 {
            format!(", {} samples lost", s.lost_samples)
        } else {
            String::new()
        },
        output.display()
    );
    for line in &outcome.unresolved {
        eprintln!("tansa: warning: {line}");
    }
    if outcome.unsampled.cpu_ns > 0 {
        eprintln!(
            "tansa: warning: {:.1} ms of CPU time is in no sample (the last partial sampling \
             period of {} thread(s)); `tansa report` says more",
            outcome.unsampled.cpu_ns as f64 / 1e6,
            outcome.unsampled.threads
        );
    }
    if s.samples == 0 {
        eprintln!(
            "tansa: warning: no samples: the command used little CPU time, or does not load \
             the agent (statically linked or set-uid programs)"
        );
    }
    if std::env::var_os("TANSA_TIMINGS").is_some_and(|v| v == "1") {
        print_timings([started, recording, committed], &outcome.phases);
    }
    Ok(crate::exit::of_command(outcome.exit))
}

/// A flag that `signals` set, from the handler itself: no thread to start before the
/// command (the `ctrlc` crate's took 15-20 ms on a loaded machine), and the recording
/// loop's poll wakes on the signal. A failure to register leaves the default action.
fn stop_on(signals: &[std::ffi::c_int]) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for &sig in signals {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    stop
}

/// Runs `record` into a new recording for `output` (see `tansa_format::output`: a private
/// temporary file moved into place at the end; a name tansa chose never replaces a file),
/// with a spinner counting samples on a terminal (`label` follows the count). Returns the
/// recording's final name. A recording that fails before its first checkpoint is removed
/// (nothing worth reading was written); one that fails later is left under its temporary
/// name, for the next report to complete. The error is returned as the inner result for
/// the caller to inspect.
fn record_to<T, E>(
    output: &std::path::Path,
    naming: Naming,
    label: &str,
    record: impl FnOnce(BufWriter<File>, &mut dyn FnMut(u64)) -> Result<T, E>,
) -> anyhow::Result<Result<(T, PathBuf), E>> {
    options::note_leftovers(output);
    let mut out = OutputFile::create(output, DEFAULT_MODE)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let file = out.take_file().context("the recording file")?;
    let progress = options::spinner(format!("sampling{label}"));
    let mut tick = |n: u64| {
        if let Some(p) = &progress {
            p.set_message(format!("{n} samples{label}"));
            p.tick();
        }
    };
    let result = record(BufWriter::with_capacity(1 << 20, file), &mut tick);
    if let Some(p) = &progress {
        p.finish_and_clear();
    }
    match result {
        Ok(t) => {
            let path = out
                .commit(output, naming)
                .with_context(|| format!("cannot move the recording to {}", output.display()))?;
            if naming == Naming::Chosen && path != output {
                eprintln!(
                    "tansa: {} exists; the recording is {} instead",
                    output.display(),
                    path.display()
                );
            }
            Ok(Ok((t, path)))
        }
        Err(e) if tansa_sample::checkpoint::holds_checkpoint(out.temp_path()) => {
            // Sampling failed after a checkpoint: what it holds is kept, under the name of
            // a recording its recorder did not finish, for the next report to complete.
            eprintln!(
                "tansa: what was sampled up to the last checkpoint is kept in {}: `tansa \
                 report {}` completes it",
                out.temp_path().display(),
                output.display()
            );
            drop(out);
            Ok(Err(e))
        }
        Err(e) => {
            out.discard();
            Ok(Err(e))
        }
    }
}

fn recording_meta(args: &Args) -> RecordingMeta {
    RecordingMeta {
        tool: format!("tansa {}", env!("CARGO_PKG_VERSION")),
        started_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        hostname: tansa_proc::os::hostname(),
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        options: vec![
            ("freq".into(), args.frequency.to_string()),
            ("event".into(), format!("{:?}", args.event)),
            ("call-graph".into(), format!("{:?}", args.call_graph)),
            ("stack-size".into(), args.stack_size.to_string()),
            ("timeline".into(), args.timeline.to_string()),
            ("source".into(), format!("{:?}", args.source)),
        ],
    }
}

/// Runs `tansa sample`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    if !args.command.is_empty() && (args.all || !args.pid.is_empty()) {
        return Err(crate::exit::usage(
            "give either a command (after --), -p PID or -a, not several",
        ));
    }
    for &pid in &args.pid {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(crate::exit::usage(format!("no process with id {pid} (-p)")));
        }
    }
    if let Some(p) = &args.output {
        crate::output::check_recording_given(p)?;
    }
    let output = args.output.clone().unwrap_or_else(|| default_output(&args));
    let target = if args.all {
        Target::System
    } else if !args.pid.is_empty() {
        Target::Pids(args.pid.clone())
    } else {
        Target::Command(args.command.clone())
    };
    let choice = match args.source {
        SourceArg::Auto => SamplerChoice::Auto,
        SourceArg::Perf => SamplerChoice::Perf,
        SourceArg::Agent => SamplerChoice::Agent,
    };
    if choice.first(&target).map_err(crate::exit::usage)? == Sampler::Agent {
        return run_agent(started, &args, &output, recording_meta(&args));
    }
    let config = Config {
        target,
        frequency_hz: args.frequency,
        duration: args.duration,
        timeline: args.timeline,
        event: match args.event {
            EventArg::Auto => EventChoice::Auto,
            EventArg::CpuClock => EventChoice::CpuClock,
            EventArg::Cycles => EventChoice::Cycles,
        },
        call_graph: match args.call_graph {
            CallGraphArg::Dwarf => CallGraph::Dwarf,
            CallGraphArg::Fp => CallGraph::FramePointers,
        },
        stack_bytes: args.stack_size,
        ring_pages: (args.ring_kb as usize * 1024 / 4096).max(16),
    };
    let meta = recording_meta(&args);
    // Ctrl-C, SIGTERM and SIGHUP end the recording.
    let stop = stop_on(&[
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ]);
    let naming = if args.output.is_some() {
        Naming::Given
    } else {
        Naming::Chosen
    };
    let recording = Instant::now();
    let result = record_to(&output, naming, "", |file, tick| {
        perf::record(&config, meta, &stop, file, &mut |n| tick(n))
    })?;
    let committed = Instant::now();
    let (outcome, output) = match result {
        Ok(o) => o,
        Err(e) => {
            if let Some(reason) = choice.fallback(&config.target, &e) {
                eprintln!(
                    "tansa: perf_event_open is not permitted here ({reason}); falling back to \
                     the agent's in-process SIGPROF sampler (user code only)"
                );
                return run_agent(started, &args, &output, recording_meta(&args));
            }
            return Err(anyhow::Error::new(e).context("sampling failed"));
        }
    };
    for n in &outcome.notes {
        eprintln!("tansa: note: {n}");
    }
    let s = outcome.summary;
    let size = std::fs::metadata(&output).map_or(0, |m| m.len());
    eprintln!(
        "tansa: {} samples ({} event) written to {} ({} KiB){}; report with `tansa report {}`",
        s.samples,
        outcome.event,
        output.display(),
        size.div_ceil(1024),
        if s.lost_samples + s.lost_records > 0 {
            format!(
                ", {} samples and {} records lost",
                s.lost_samples, s.lost_records
            )
        } else {
            String::new()
        },
        output.display()
    );
    for line in &outcome.unresolved {
        eprintln!("tansa: warning: {line}");
    }
    let short = outcome.short_stack_copies;
    if short.samples > 0 {
        eprintln!(
            "tansa: warning: {} of {} samples' stacks were {}: their call chains stop short",
            short.samples,
            s.samples,
            short.advice()
        );
    }
    if std::env::var_os("TANSA_TIMINGS").is_some_and(|v| v == "1") {
        print_timings([started, recording, committed], &outcome.phases);
    }
    Ok(outcome
        .exit
        .map_or(ExitCode::SUCCESS, crate::exit::of_command))
}

/// `TANSA_TIMINGS=1`: how long each phase of the run took, on standard error. `at`: when
/// `run` began, when recording began, when the recording was in place.
fn print_timings(at: [Instant; 3], phases: &Phases) {
    let [started, recording, committed] = at;
    let recorded: Duration = phases.list().iter().map(|p| p.1).sum();
    let total = started.elapsed();
    let mut rows = vec![("cli: options", recording - started)];
    rows.extend(phases.list().iter().copied());
    rows.push((
        "cli: create file, commit",
        (committed - recording).saturating_sub(recorded),
    ));
    rows.push(("cli: summary", committed.elapsed()));
    for (name, d) in rows {
        eprintln!(
            "tansa: timing {:<28} {:9.3} ms",
            name,
            d.as_secs_f64() * 1e3
        );
    }
    eprintln!(
        "tansa: timing {:<28} {:9.3} ms",
        "total (in main)",
        total.as_secs_f64() * 1e3
    );
}
