//! `tansa diff A B`: per-unit changes between two heap recordings or two CPU recordings,
//! and a growth gate for CI (`--fail-if-growth`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use tansa_analysis::diff::{self, DiffError, Gate, Metric, Threshold};

use super::options::{self, ChargeArg, FormatArg, FreeToArg, ReportBy};
use super::{report, report_cpu};
use crate::exit;

/// Options of `tansa diff`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa diff before.tansa after.tansa                      heap per library, by change of peak
  tansa diff before.tansa after.tansa --by function --top 20
  tansa diff before.tansa after.tansa --metric net --fail-if-growth 10%
  tansa diff before.tansa after.tansa --fail-if-growth 10% --fail-if-growth 64KiB
  tansa diff before.tansa after.tansa --by function --metric temporary --fail-if-growth 1000
                                                           a gate on heap churn
  tansa diff before.tansa after.tansa --by function --metric lost --fail-if-growth 0
                                                           a gate on memory lost at exit
                                                           (both made with record --leak-check)
  tansa diff before.tansa after.tansa --format json | jq '.units[0].delta'
  tansa diff cpu-a.tansa cpu-b.tansa --by function         two `tansa sample` recordings

Both recordings must be of the same kind (two heap recordings from `tansa record`, or two
CPU recordings from `tansa sample`). A or B may be a directory: every heap recording in it
(*.tansa) is read as one, as `tansa report` reads a job's per-rank files:
  tansa diff run1/ run2/          mpiexec ... tansa record -o run1/job-%r.tansa -- ./prog
Each side is reported on with the same options, then units
are matched: by name (libraries, functions, lines, instructions), by name and index (--by
call, --by interval), and by name and rank for threads and processes (the first `worker`
thread of A with the first of B, by process and thread id), since ids change between runs. A
unit found in one recording only is shown as new or gone, with zeros on the other side.
Rows are sorted by the absolute change of the metric, growth first at equal size.

CPU recordings are compared by each unit's share of its run's samples (runs differ in
length) as well as by counts: rows are sorted, and growth judged, on the share.

--fail-if-growth THRESHOLD: a unit crosses the threshold when its metric grew (B > A) by
more than THRESHOLD:
  10%      more than 10 percent of its value in A (of |A| when negative); a unit whose
           value in A is zero (new in B) crosses any percentage as soon as B is above zero
  64KiB    more than that many bytes (heap byte metrics; 4096, 1MiB, 1.5MB, ...), or calls
           or allocations with --metric calls or temporary (a plain number); not for CPU
           recordings
Given twice (a percentage and an amount), a unit must cross both: `--fail-if-growth 10%
--fail-if-growth 64KiB` ignores new units of a few bytes. Every unit is judged, whatever
--top shows; the totals row is not. The units that crossed it are listed on standard error.

JSON output follows the schema tansa.diff.v1 (docs/json/diff.v1.md).
Exit status: 0 on success; 1 when a unit grew past --fail-if-growth (the comparison is
still written), or when a recording cannot be read; 2 for a wrong command line (two
recordings of different kinds, an option that does not apply); 3 when a recording is
truncated or damaged (the comparison then covers what was recorded before the damage; 3
wins over 1, since the figures are partial).")]
pub struct Args {
    /// The baseline recording, or a directory of heap recordings read as one (a job's
    /// per-rank files).
    #[arg(value_name = "A")]
    a: PathBuf,

    /// The recording compared with it, or a directory of heap recordings.
    #[arg(value_name = "B")]
    b: PathBuf,

    /// Unit of aggregation. Heap recordings: library, function, thread, call, interval.
    /// CPU recordings: process, thread, space, library, function, line, instruction.
    /// [default: library for heap, function for CPU]
    #[arg(long, value_enum)]
    by: Option<ReportBy>,

    /// What rows are sorted by and --fail-if-growth judges. Heap: max (peak bytes held,
    /// the default: what a memory limit or the OOM killer sees, and the order of `tansa
    /// report`; a leak that outgrows the unit's earlier peak raises it too), net (bytes
    /// still held at the end: leaks alone, even those smaller than an earlier peak),
    /// allocated (bytes requested: allocation churn), calls (allocator calls), lost (bytes
    /// the leak check at exit found lost: recordings made with --leak-check). CPU: self,
    /// total (the unit's share of the samples). [default: max for heap, self for CPU]
    #[arg(long, value_enum)]
    metric: Option<MetricArg>,

    /// Exit with status 1 when a unit's metric grew by more than THRESHOLD: a percentage of
    /// its value in A (`10%`) or an amount (`64KiB`, `4096`); see below. May be given twice
    /// (a percentage and an amount: both must be crossed).
    #[arg(long, value_name = "THRESHOLD", value_parser = parse_threshold_arg)]
    fail_if_growth: Vec<ThresholdArg>,

    /// Show the N units that changed most (the gate still judges every unit).
    #[arg(long, value_name = "N")]
    top: Option<usize>,

    /// Which frame of each stack is charged (heap) [default: first].
    #[arg(long, value_enum)]
    charge: Option<ChargeArg>,

    /// Who releases are charged to (heap) [default: owner].
    #[arg(long, value_enum)]
    free_to: Option<FreeToArg>,

    /// Also treat FUNCTION as an allocation function, as `operator new`, `strdup` and the
    /// known wrappers (`xmalloc`, `g_malloc`, `PyObject_Malloc`, ...) are (heap): an
    /// allocation made through it is charged to, and its leak site named after, its
    /// caller. A name as symbols give it or a short one (`my_alloc`, `Pool::get`);
    /// repeatable.
    #[arg(long = "alloc-fn", value_name = "FUNCTION")]
    alloc_fn: Vec<String>,

    /// Interval length for --by interval (heap), e.g. 100ms, 1s [default: 100ms].
    #[arg(long, value_parser = options::parse_interval)]
    interval: Option<Duration>,

    /// Compare one process of each recorded tree: `PID` (the same in both) or `PID_A,PID_B`.
    #[arg(long, value_name = "PID[,PID]", value_parser = parse_pids)]
    pid: Option<(u32, u32)>,

    /// Output format: table (aligned columns for people), json (schema tansa.diff.v1), csv
    /// (one row per unit, then the totals).
    #[arg(long, value_enum, default_value = "table", hide_possible_values = true)]
    format: FormatArg,

    /// Write the comparison to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `--metric`
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum MetricArg {
    /// Peak bytes held (heap).
    Max,
    /// Bytes held at the end (heap).
    Net,
    /// Bytes allocated (heap).
    Allocated,
    /// Allocator calls (heap).
    Calls,
    /// Temporary allocations: blocks freed by their own thread before it allocated again
    /// (heap).
    Temporary,
    /// Bytes the leak check at exit found lost (heap recordings made with `tansa record
    /// --leak-check`).
    Lost,
    /// Share of samples taken in the unit itself (CPU).
    #[value(name = "self")]
    SelfSamples,
    /// Share of samples taken in the unit or what it called (CPU).
    Total,
}

impl From<MetricArg> for Metric {
    fn from(m: MetricArg) -> Metric {
        match m {
            MetricArg::Max => Metric::Max,
            MetricArg::Net => Metric::Net,
            MetricArg::Allocated => Metric::Allocated,
            MetricArg::Calls => Metric::Calls,
            MetricArg::Temporary => Metric::Temporary,
            MetricArg::Lost => Metric::Lost,
            MetricArg::SelfSamples => Metric::SelfSamples,
            MetricArg::Total => Metric::TotalSamples,
        }
    }
}

/// A `--fail-if-growth` threshold as given: the threshold, and the text when it is an
/// amount with a unit of bytes (`64KiB`), which counts no calls.
#[derive(Debug, Clone)]
pub struct ThresholdArg(Threshold, Option<String>);

fn parse_threshold_arg(s: &str) -> Result<ThresholdArg, String> {
    let t = parse_threshold(s)?;
    let with_unit =
        matches!(t, Threshold::Amount(_)) && s.trim().chars().any(|c| c.is_ascii_alphabetic());
    Ok(ThresholdArg(t, with_unit.then(|| s.trim().to_string())))
}

/// The thresholds, refusing an amount of bytes for a heap metric that counts
/// (`--metric calls`, `temporary`: `1KiB` was taken as 1,024 calls).
fn thresholds_for(args: &[ThresholdArg], metric: Metric) -> anyhow::Result<Vec<Threshold>> {
    if metric.is_heap()
        && !metric.is_bytes()
        && let Some(text) = args.iter().find_map(|a| a.1.as_deref())
    {
        return Err(exit::usage(format!(
            "--fail-if-growth {text} is an amount of bytes, but --metric {} counts {}: \
             give a plain number (100) or a percentage (10%)",
            metric.name(),
            if metric == Metric::Calls {
                "calls"
            } else {
                "allocations"
            }
        )));
    }
    Ok(args.iter().map(|a| a.0).collect())
}

/// A `--fail-if-growth` threshold: `10%`, `2.5%`, or an amount (`4096`, `64KiB`, `1MiB`).
pub fn parse_threshold(s: &str) -> Result<Threshold, String> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a percentage (examples: 10%, 2.5%)"))?;
        if !v.is_finite() {
            return Err(format!("`{s}`: the percentage must be a finite number"));
        }
        if v < 0.0 {
            return Err(format!("`{s}`: the percentage must be zero or more"));
        }
        return Ok(Threshold::Percent(v));
    }
    if t.chars().all(|c| c.is_ascii_digit()) && !t.is_empty() {
        return t
            .parse()
            .map(Threshold::Amount)
            .map_err(|_| format!("`{s}` is too large"));
    }
    let b: bytesize::ByteSize = t
        .parse()
        .map_err(|_| format!("`{s}` is not a threshold (examples: 10%, 4096, 64KiB, 1MiB)"))?;
    Ok(Threshold::Amount(b.as_u64()))
}

/// `--pid PID` or `--pid PID_A,PID_B`.
fn parse_pids(s: &str) -> Result<(u32, u32), String> {
    let pid = |p: &str| {
        p.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{p}` is not a process id (give PID or PID_A,PID_B)"))
    };
    match s.split_once(',') {
        Some((a, b)) => Ok((pid(a)?, pid(b)?)),
        None => pid(s).map(|p| (p, p)),
    }
}

/// Opens a recording, saying whether it is a CPU recording.
fn open(path: &Path) -> anyhow::Result<(File, bool)> {
    let file = options::open_recording(path)?;
    let kind = report_cpu::recording_kind(&file).map_err(|e| exit::unreadable(path, &e))?;
    Ok((file, kind == tansa_format::container::Kind::Cpu))
}

/// One side of the comparison: a recording, or every recording (`*.tansa`) in a directory,
/// in name order; the first one opened, saying whether the side is CPU recordings.
fn side(path: &Path) -> anyhow::Result<(Vec<PathBuf>, File, bool)> {
    if !path.is_dir() {
        let (file, cpu) = open(path)?;
        return Ok((vec![path.to_path_buf()], file, cpu));
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot list the directory: {e}", path.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tansa") && p.is_file())
        .collect();
    files.sort();
    let Some(first) = files.first() else {
        return Err(exit::usage(format!(
            "{} is a directory without recordings (*.tansa) in it",
            path.display()
        )));
    };
    let (file, cpu) = open(first)?;
    for other in &files[1..] {
        if open(other)?.1 != cpu {
            return Err(exit::usage(format!(
                "{} holds heap and CPU recordings ({} and {}): a side of `tansa diff` is \
                 heap recordings or one CPU recording",
                path.display(),
                first.display(),
                other.display()
            )));
        }
    }
    if cpu && files.len() > 1 {
        return Err(exit::usage(format!(
            "{} holds {} CPU recordings: CPU recordings are compared one with another; give \
             the files",
            path.display(),
            files.len()
        )));
    }
    Ok((files, file, cpu))
}

fn kind_name(cpu: bool) -> &'static str {
    if cpu { "CPU" } else { "heap" }
}

/// An option of the comparison that does not apply: a usage error.
fn usage_of(e: DiffError) -> anyhow::Error {
    exit::usage(e.to_string())
}

/// Runs `tansa diff`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (files_a, file_a, cpu_a) = side(&args.a)?;
    let (files_b, file_b, cpu_b) = side(&args.b)?;
    if cpu_a != cpu_b {
        return Err(exit::usage(format!(
            "{} is a {} recording and {} a {} recording: `tansa diff` compares two heap \
             recordings (`tansa record`) or two CPU recordings (`tansa sample`)",
            args.a.display(),
            kind_name(cpu_a),
            args.b.display(),
            kind_name(cpu_b)
        )));
    }
    let metric = args.metric.map(Metric::from);
    let (label_a, label_b) = (args.a.display().to_string(), args.b.display().to_string());
    let (pid_a, pid_b) = match args.pid {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let mut out;
    let (damaged, gate) = if cpu_a {
        let heap_only = [
            ("--charge", args.charge.is_some()),
            ("--free-to", args.free_to.is_some()),
            ("--alloc-fn", !args.alloc_fn.is_empty()),
            ("--interval", args.interval.is_some()),
        ];
        if let Some((flag, _)) = heap_only.iter().find(|f| f.1) {
            return Err(exit::usage(format!(
                "{flag} applies to heap recordings; {} and {} are CPU recordings",
                args.a.display(),
                args.b.display()
            )));
        }
        let by = ReportBy::cpu(Some(args.by.unwrap_or(ReportBy::Function)), None, &args.a)?;
        if matches!(by, tansa_analysis::cpu::By::Interval { .. }) {
            return Err(exit::usage(
                "CPU recordings are compared by process, thread, space, library, function, \
                 line or instruction; --by interval is for `tansa report`",
            ));
        }
        let metric = metric.unwrap_or(Metric::SelfSamples);
        let options = diff::cpu::Options {
            metric,
            thresholds: thresholds_for(&args.fail_if_growth, metric)?,
            top: args.top,
        };
        // A wrong option is told before the recordings are read.
        options.check().map_err(usage_of)?;
        let (ra, damaged_a) = report_cpu::cpu_report(&files_a[0], file_a, by, pid_a)?;
        let (rb, damaged_b) = report_cpu::cpu_report(&files_b[0], file_b, by, pid_b)?;
        exit::print_warnings(&args.a, &ra.warnings);
        exit::print_warnings(&args.b, &rb.warnings);
        let d = diff::cpu::diff((&label_a, &ra), (&label_b, &rb), &options).map_err(usage_of)?;
        out = crate::output::open(args.output.as_deref(), &[&args.a, &args.b])?;
        tansa_render::diff::write_cpu(&d, args.format.into(), &mut out)?;
        (damaged_a || damaged_b, d.gate)
    } else {
        let by = ReportBy::memory(args.by, &args.a)?;
        options::warn_unused_interval(args.interval, by);
        let config = options::memory_config(
            by,
            args.charge.unwrap_or(ChargeArg::First),
            args.free_to.unwrap_or(FreeToArg::Owner),
            args.interval.unwrap_or(Duration::from_millis(100)),
            None,
        );
        let metric = metric.unwrap_or(Metric::Max);
        let options = diff::memory::Options {
            metric,
            thresholds: thresholds_for(&args.fail_if_growth, metric)?,
            top: args.top,
        };
        options.check().map_err(usage_of)?;
        let with_pid = |pid| tansa_analysis::memory::Config { pid, ..config };
        drop((file_a, file_b));
        let (ra, damaged_a) =
            report::memory_report(&files_a, with_pid(pid_a), &args.alloc_fn, "tansa diff")?;
        let (rb, damaged_b) =
            report::memory_report(&files_b, with_pid(pid_b), &args.alloc_fn, "tansa diff")?;
        exit::print_warnings(&args.a, &ra.warnings);
        exit::print_warnings(&args.b, &rb.warnings);
        let d = diff::memory::diff((&label_a, &ra), (&label_b, &rb), &options).map_err(usage_of)?;
        let inputs: Vec<&Path> = files_a
            .iter()
            .chain(&files_b)
            .map(PathBuf::as_path)
            .collect();
        out = crate::output::open(args.output.as_deref(), &inputs)?;
        tansa_render::diff::write_heap(&d, args.format.into(), &mut out)?;
        (damaged_a || damaged_b, d.gate)
    };
    out.finish()?;
    let crossed = gate.as_ref().is_some_and(|g| !g.crossed.is_empty());
    if let Some(g) = &gate {
        tell_gate(g);
    }
    Ok(ExitCode::from(if damaged {
        exit::DAMAGED
    } else if crossed {
        exit::GROWTH
    } else {
        exit::SUCCESS
    }))
}

/// Says on standard error which units crossed the gate (or that none did).
fn tell_gate(g: &Gate) {
    let bytes = Metric::from_name(g.metric).is_some_and(Metric::is_bytes);
    let thresholds: Vec<String> = g
        .thresholds
        .iter()
        .map(|t| {
            if bytes && !t.ends_with('%') {
                format!("{t} bytes")
            } else {
                t.clone()
            }
        })
        .collect();
    let thresholds = thresholds.join(" and ");
    if g.crossed.is_empty() {
        eprintln!(
            "tansa: no unit's {} grew by more than {thresholds}",
            g.metric
        );
        return;
    }
    let units: Vec<String> = g
        .crossed
        .iter()
        .map(|c| match c.growth_percent {
            Some(p) => format!("{} (+{p:.1}%)", c.unit),
            None => format!("{} (new)", c.unit),
        })
        .collect();
    eprintln!(
        "tansa: {} unit(s) grew by more than {thresholds} ({}): {}",
        units.len(),
        g.metric,
        units.join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds() {
        assert_eq!(parse_threshold("10%"), Ok(Threshold::Percent(10.0)));
        assert_eq!(parse_threshold(" 2.5 % "), Ok(Threshold::Percent(2.5)));
        assert_eq!(parse_threshold("0%"), Ok(Threshold::Percent(0.0)));
        assert_eq!(parse_threshold("4096"), Ok(Threshold::Amount(4096)));
        assert_eq!(parse_threshold("64KiB"), Ok(Threshold::Amount(65536)));
        assert_eq!(parse_threshold("1MiB"), Ok(Threshold::Amount(1 << 20)));
        assert_eq!(parse_threshold("1MB"), Ok(Threshold::Amount(1_000_000)));
        // An amount of bytes is no number of calls.
        let given = |s: &str| parse_threshold_arg(s).unwrap();
        assert!(thresholds_for(&[given("1KiB")], Metric::Calls).is_err());
        assert_eq!(
            thresholds_for(&[given("100"), given("10%")], Metric::Calls).unwrap(),
            [Threshold::Amount(100), Threshold::Percent(10.0)]
        );
        assert_eq!(
            thresholds_for(&[given("1KiB")], Metric::Net).unwrap(),
            [Threshold::Amount(1024)]
        );
        for bad in [
            "",
            "%",
            "ten%",
            "-5%",
            "inf%",
            "NaN%",
            "big",
            "99999999999999999999999",
        ] {
            assert!(parse_threshold(bad).is_err(), "{bad}");
        }
        assert!(parse_threshold("inf%").unwrap_err().contains("finite"));
        assert!(parse_threshold("-1%").unwrap_err().contains("zero or more"));
    }

    #[test]
    fn pids() {
        assert_eq!(parse_pids("42"), Ok((42, 42)));
        assert_eq!(parse_pids("42,43"), Ok((42, 43)));
        assert!(parse_pids("42,").is_err());
        assert!(parse_pids("x").is_err());
    }
}
