//! `tansa retrace record`.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::ValueEnum;
use tansa_format::meta::RecordingMeta;
use tansa_format::output::{DEFAULT_MODE, Naming, OutputFile};
use tansa_format::retrace::{self, ExecutionChunk, PhaseChunk, PhaseRule, Source};
use tansa_format::{Kind, Writer};
use tansa_ptrace::{Options, SourceChoice, record, stopped_by_recorder};

/// Sample sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceArg {
    /// Hardware instruction sampling if the CPU has a PMU, else ptrace (or cpu-clock with
    /// --hz).
    Auto,
    /// Exact: single-step the region with ptrace and keep every P-th instruction (slow).
    Ptrace,
    /// Hardware retired-instruction counter with a fixed period (needs a PMU).
    Instructions,
    /// Time-based samples (`cpu-clock`): an execution-time-weighted trace.
    CpuClock,
}

/// How the ptrace sampler picks where, in each execution, its every-P-th sampling starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PhaseArg {
    /// At random for each execution, and recorded (each path gets every phase once per P of
    /// its executions): no cycle of the program can line up with the period.
    Shuffled,
    /// The seed's fixed period: one count runs on across executions. Paths taken in turn
    /// whose lengths add up to a multiple of P are then sampled at the same positions every
    /// time, and the other positions never.
    Counted,
}

/// Options of `tansa retrace record`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The function whose executions form the region (it and everything it calls): its
    /// name as symbols give it, or a short one (`Acc::step` or `step` for
    /// `calc::Acc::step(int)`) that names one function. Of several functions of one name
    /// (two files' `static dup`), the refusal lists each as `dup@0xSTART`, which picks it.
    /// It must be a function of the main executable, not of a shared library.
    #[arg(long, value_name = "FUNCTION")]
    region: String,
    /// Sampling period: every P-th instruction (ptrace: 7, instructions: 10007), or
    /// nanoseconds for cpu-clock; 1 to 2^63 - 1 (perf_event_open's largest).
    #[arg(long, value_name = "P", value_parser = parse_period, conflicts_with = "hz")]
    period: Option<u64>,
    /// Time-based sampling at HZ samples per second of region time (selects cpu-clock;
    /// at most 100000, the kernel's 10 µs timer floor).
    #[arg(long, value_name = "HZ", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    hz: Option<u64>,
    /// Which sampler to use.
    #[arg(long, value_enum, default_value_t = SourceArg::Auto)]
    source: SourceArg,
    /// Where the ptrace sampler starts sampling each execution (perf sources count on
    /// across executions whatever this says).
    #[arg(long, value_enum, value_name = "RULE", default_value_t = PhaseArg::Shuffled)]
    phase: PhaseArg,
    /// Executions of the region to sample; the target is stopped after that.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    executions: u64,
    /// Executions to let run first, unsampled (cold caches, first-call effects).
    #[arg(long, value_name = "N", default_value_t = 1)]
    warmup: u64,
    /// Also single-step executions and store the true trace, so the report can give the
    /// accuracy of the rebuilt one.
    #[arg(long)]
    ground_truth: bool,
    /// With --ground-truth and a perf source: how many further executions to single-step.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    ground_truth_executions: u64,
    /// Where to write the recording (default: tansa-retrace-COMMAND-PID.tansa).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The command to run.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The largest period `perf_event_open` takes (it refuses one with the top bit set).
const MAX_PERIOD: u64 = i64::MAX as u64;

/// `--period`: 1 to [`MAX_PERIOD`], whichever source ends up sampling (`auto` picks it
/// after the command starts).
fn parse_period(s: &str) -> Result<u64, String> {
    let bounds = || format!("the period is 1 to {MAX_PERIOD} (the largest perf_event_open takes)");
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("not a whole number; {}", bounds()));
    }
    // Digits only: a failed parse is a number beyond u64.
    match s.parse::<u64>() {
        Ok(p) if (1..=MAX_PERIOD).contains(&p) => Ok(p),
        _ => Err(bounds()),
    }
}

/// Runs `tansa retrace record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(p) = &args.output {
        crate::output::check_recording_given(p)?;
    }
    let (source, period) = match (args.source, args.hz) {
        (SourceArg::Auto | SourceArg::CpuClock, Some(hz)) => (
            SourceChoice::Exactly(Source::CpuClock),
            Some(1_000_000_000 / hz),
        ),
        (_, Some(_)) => {
            return Err(crate::exit::usage(
                "--hz selects time-based sampling; it goes with --source cpu-clock",
            ));
        }
        (SourceArg::Auto, None) => (SourceChoice::Auto, args.period),
        (SourceArg::Ptrace, None) => (SourceChoice::Exactly(Source::Ptrace), args.period),
        (SourceArg::Instructions, None) => {
            (SourceChoice::Exactly(Source::Instructions), args.period)
        }
        (SourceArg::CpuClock, None) => (SourceChoice::Exactly(Source::CpuClock), args.period),
    };
    let opts = Options {
        command: args.command.clone(),
        region: args.region.clone(),
        source,
        period,
        phase: match args.phase {
            PhaseArg::Shuffled => PhaseRule::Shuffled,
            PhaseArg::Counted => PhaseRule::Counted,
        },
        executions: args.executions,
        warmup: args.warmup,
        ground_truth: args.ground_truth,
        ground_truth_executions: args.ground_truth_executions,
    };
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let bar = crate::cmd::options::bar(
        args.executions,
        "{spinner} {msg} {bar:30} {pos}/{len} executions",
    )
    .inspect(|b| b.set_message(format!("sampling `{}`", args.region)));
    let rec = record(&opts, &mut |sampled, stepped| {
        if let Some(b) = &bar {
            b.set_position(sampled);
            if stepped > 0 && sampled >= args.executions {
                b.set_message(format!("ground truth: {stepped} stepped"));
            }
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let rec = rec?;
    let naming = if args.output.is_some() {
        Naming::Given
    } else {
        Naming::Chosen
    };
    let dest = args.output.clone().unwrap_or_else(|| {
        let name = Path::new(&args.command[0])
            .file_name()
            .map_or_else(|| "target".into(), |n| n.to_string_lossy().into_owned());
        PathBuf::from(format!("tansa-retrace-{name}-{}.tansa", rec.pid))
    });
    let mut out = OutputFile::create(&dest, DEFAULT_MODE)
        .with_context(|| format!("cannot create {}", dest.display()))?;
    let file = out.take_file().context("the recording file")?;
    let mut w = Writer::new(BufWriter::new(file), Kind::Retrace)?;
    w.value(
        tansa_format::FrameType::META,
        &RecordingMeta {
            tool: format!("tansa {}", env!("CARGO_PKG_VERSION")),
            started_unix_ms,
            hostname: tansa_proc::os::hostname(),
            command: args.command.clone(),
            options: vec![
                ("region".into(), args.region.clone()),
                ("source".into(), rec.info.source.name().into()),
                ("period".into(), rec.info.period.to_string()),
                (
                    "phase".into(),
                    match rec.phases {
                        Some(_) => PhaseRule::Shuffled.name(),
                        None => PhaseRule::Counted.name(),
                    }
                    .into(),
                ),
                ("executions".into(), args.executions.to_string()),
                ("warmup".into(), args.warmup.to_string()),
                ("ground_truth".into(), args.ground_truth.to_string()),
            ],
        },
    )?;
    w.value(retrace::INFO, &rec.info)?;
    w.value(retrace::CODE, &rec.code)?;
    for (i, chunk) in rec.executions.chunks(4096).enumerate() {
        if let Some(phases) = &rec.phases {
            // Before the executions they place: a file cut short never holds executions
            // without their phases.
            let start = (i * 4096).min(phases.len());
            let end = (start + chunk.len()).min(phases.len());
            w.value(
                retrace::PHASES,
                &PhaseChunk {
                    first: (i * 4096) as u64,
                    phases: phases[start..end].to_vec(),
                },
            )?;
        }
        w.value(
            retrace::EXECUTIONS,
            &ExecutionChunk {
                first: (i * 4096) as u64,
                executions: chunk.to_vec(),
            },
        )?;
    }
    if let Some(gt) = &rec.ground_truth {
        w.value(retrace::GROUND_TRUTH, gt)?;
    }
    w.value(retrace::SUMMARY, &rec.summary)?;
    w.finish()
        .with_context(|| format!("cannot write {}", dest.display()))?;
    let path = out
        .commit(&dest, naming)
        .with_context(|| format!("cannot move the recording to {}", dest.display()))?;
    if naming == Naming::Chosen && path != dest {
        eprintln!(
            "tansa: {} exists; the recording is {} instead",
            dest.display(),
            path.display()
        );
    }

    let s = &rec.summary;
    eprintln!(
        "tansa: sampled {} execution(s) of `{}`{} with {} (period {} {}; {}), {} samples, in {:.2} s",
        s.executions,
        rec.info.region,
        if rec.threads > 1 {
            format!(" in {} threads", rec.threads)
        } else {
            String::new()
        },
        rec.info.source.name(),
        rec.info.period,
        rec.info.source.period_unit(),
        rec.info.source_note,
        s.samples,
        s.seconds
    );
    if let Some(gt) = &rec.ground_truth {
        eprintln!(
            "tansa: ground truth: {} single-stepped execution(s), {} distinct path(s)",
            gt.executions.len(),
            gt.traces.len()
        );
    }
    for w in &rec.warnings {
        eprintln!("tansa: warning: {w}");
    }
    if s.executions < args.executions {
        eprintln!(
            "tansa: warning: the target {} after {} of {} executions",
            tansa_ptrace::ended(&s.exit),
            s.executions,
            args.executions
        );
    } else if !stopped_by_recorder(&s.exit) {
        eprintln!("tansa: the target {}", tansa_ptrace::ended(&s.exit));
    }
    eprintln!(
        "tansa: wrote {} (report: tansa retrace {})",
        path.display(),
        path.display()
    );
    // The command's own status, as `tansa record` exits with (not the kill that ended it
    // once enough executions were sampled).
    Ok(if stopped_by_recorder(&s.exit) {
        ExitCode::SUCCESS
    } else {
        crate::exit::of_command(s.exit)
    })
}
