//! `tansa leaktest PLAN`: leak testing with typed re-tests.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use tansa_leaktest::flow::{self, Event, Observer};
use tansa_leaktest::plan::Plan;
use tansa_leaktest::report::Report;
use tansa_leaktest::run::{Cleanup, LocalTarget};
use tansa_render::leaktest::{self as render, Format};

use crate::output;

/// Exit status when a fault verdict was found.
const EXIT_FAULT: u8 = 1;
/// Exit status for a bad command line, or a plan that cannot be read or used.
const EXIT_USAGE: u8 = 2;
/// Exit status when the test cannot run: the system under test cannot be set up, the
/// report cannot be written.
const EXIT_CANNOT_RUN: u8 = 4;
/// Exit status when interrupted (SIGINT or SIGTERM), as shells report a signal.
const EXIT_INTERRUPTED: u8 = 130;

const AFTER_HELP: &str = "\
The plan (TOML) names the processes to watch ([[process]] with pid, match or command), the
test items ([[item]] with a command and [[item.param]] parameters: default, min, max, steps),
thresholds, the retest limit N, known limits, log sources ([[log]]) and an optional [idle]
test. See docs/architecture/leaktest.md for the format.

Verdicts: 1-a steady leak (fault), 1-b bounded growth by design, 2 one-off growth caused by
another event (fault), 3-a condition-driven growth without a cap (fault), 3-b with a cap,
not-fault (one-off growth that did not recur), undeterminable (with the reason).

Exit status:
  0    no fault verdict
  1    a fault verdict (1-a, 2 or 3-a) was found
  2    the command line is wrong, or the plan cannot be read or used (the message gives its
       line)
  4    the test could not run: a process of the system under test could not be started or
       found, or the report could not be written
  130  interrupted (the processes tansa started are stopped; no report)";

/// Options of `tansa leaktest`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The test plan (TOML).
    plan: PathBuf,
    /// Output format: a table for people, JSON (schema tansa.leaktest-report.v1), or JUnit
    /// XML for CI systems.
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    format: FormatArg,
    /// Write the report to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Show no progress, even on a terminal.
    #[arg(short, long)]
    quiet: bool,
    /// Also write an HTML report (one self-contained file) to OUT.html: each process's
    /// measurements with the runs and phases marked, and each verdict explained.
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum FormatArg {
    Table,
    Json,
    Junit,
}

/// Runs `tansa leaktest`. Its own failures have their own status ([`EXIT_CANNOT_RUN`]), as
/// 1 means that a fault was found.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match run_plan(args) {
        Ok(code) => Ok(code),
        Err(e) if output::is_broken_pipe(&e) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("tansa: error: {}", crate::error_text(&e));
            Ok(ExitCode::from(EXIT_CANNOT_RUN))
        }
    }
}

fn run_plan(args: Args) -> anyhow::Result<ExitCode> {
    let shown = args.plan.display().to_string();
    let text = match std::fs::read_to_string(&args.plan) {
        Ok(t) => t,
        Err(e) => return usage(format!("cannot read the plan {shown}: {e}")),
    };
    let plan = match Plan::parse(&text) {
        Ok(p) => p,
        Err(e) => return usage(format!("{shown}:{}: {}", e.line, e.message)),
    };
    let base = plan_dir(&args.plan)?;

    let cleanup = Cleanup::default();
    let on_signal = cleanup.clone();
    let interrupted = cleanup.clone();
    // If the handler cannot be set, an interrupted run may leave the processes it started
    // running; that is worth a warning, not a refusal.
    if let Err(e) = ctrlc::set_handler(move || {
        on_signal.stop_all();
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    }) {
        eprintln!(
            "tansa: warning: cannot catch interruptions ({e}); processes started for the test may outlive an interrupted run"
        );
    }
    let mut target = match LocalTarget::start(&plan, &base, cleanup) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tansa: error: {shown}: {e}");
            return Ok(ExitCode::from(EXIT_CANNOT_RUN));
        }
    };
    let started_unix_ms = target
        .epoch()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));

    let mut progress = Progress::new(!args.quiet && std::io::stderr().is_terminal());
    let session = flow::run(&plan, &mut target, &mut progress);
    progress.finish();
    target.stop();
    if interrupted.stopped() {
        // The processes were stopped under the flow's feet: its last verdicts are ours.
        eprintln!("tansa: interrupted; no report");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }

    let mut report = Report::build(&plan, session, Some(shown.clone()), started_unix_ms);
    report.notes.extend(target.notes());
    let format = match args.format {
        FormatArg::Table => Format::Table,
        FormatArg::Json => Format::Json,
        FormatArg::Junit => Format::Junit,
    };
    let mut out = output::open(args.output.as_deref(), &[&args.plan])?;
    render::write(&report, format, &mut out).context("cannot write the report")?;
    out.finish().context("cannot write the report")?;
    if let Some(path) = &args.html {
        let value = serde_json::to_value(&report).context("cannot write the HTML report")?;
        let page = tansa_html::leaktest(&value, &shown).context("cannot write the HTML report")?;
        crate::cmd::html::write_page(&page, Some(path), &args.plan, &[&args.plan])?;
    }
    Ok(if report.has_fault() {
        ExitCode::from(EXIT_FAULT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints a usage error and returns the exit status for it.
fn usage(message: String) -> anyhow::Result<ExitCode> {
    eprintln!("tansa: error: {message}");
    Ok(ExitCode::from(EXIT_USAGE))
}

/// The directory of the plan, where its commands run.
fn plan_dir(plan: &Path) -> anyhow::Result<PathBuf> {
    let dir = match plan.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    dir.canonicalize()
        .with_context(|| format!("cannot resolve the directory of {}", plan.display()))
}

/// Progress on a terminal: the item, the run, elapsed and estimated remaining time.
struct Progress {
    bar: Option<ProgressBar>,
    stage: String,
    run_started: Option<Instant>,
    run_time: Duration,
    runs_timed: u32,
}

impl Progress {
    fn new(on: bool) -> Progress {
        let bar = on.then(|| {
            let b = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}") {
                b.set_style(style);
            }
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Progress {
            bar,
            stage: String::new(),
            run_started: None,
            run_time: Duration::ZERO,
            runs_timed: 0,
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn event(&mut self, event: &Event<'_>) {
        let Some(bar) = &self.bar else { return };
        match event {
            Event::Stage(s) => {
                self.stage = s.to_string();
                bar.set_message(s.to_string());
            }
            Event::Run {
                ctx,
                done,
                remaining,
            } => {
                let now = Instant::now();
                if let Some(t) = self.run_started.replace(now) {
                    self.run_time += now - t;
                    self.runs_timed += 1;
                }
                let eta = if self.runs_timed > 0 {
                    let per = self.run_time / self.runs_timed;
                    format!(", ~{}s left", (per * (*remaining + 1)).as_secs().max(1))
                } else {
                    String::new()
                };
                bar.set_message(format!(
                    "{} run {} ({}), {done} runs done{eta}",
                    ctx.item,
                    ctx.run_in_item,
                    ctx.phase.name(),
                ));
            }
            Event::Restart(r) => {
                bar.set_message(format!("{}: restarting {}", self.stage, r.process));
            }
            Event::Note(n) => bar.set_message(format!("{}: {n}", self.stage)),
        }
    }
}
