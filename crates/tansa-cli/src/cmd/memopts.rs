//! Options shared by `tansa report` and `tansa record --online`.

use std::time::Duration;

use clap::ValueEnum;
use tansa_analysis::memory::{By, Charge, Config, FreeTo};

/// `--by`
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ByArg {
    /// Per shared library (the main executable when no library is on the stack).
    Library,
    /// Per function, named module!function.
    Function,
    /// Per thread, with its name.
    Thread,
    /// Per call of a library: a run of consecutive events charged to the same library.
    Call,
    /// Per library per time interval (see --interval).
    Interval,
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

/// `--free-to`
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FreeToArg {
    /// Charge a release to the unit that allocated the block: net bytes are live bytes.
    Owner,
    /// Charge a release to the unit found from the release's own stack (seed 000).
    Caller,
}

/// `--format`
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum FormatArg {
    /// Aligned columns for people.
    Table,
    /// JSON: schema tansa.memory-report.v1 (memory recordings) or tansa.cpu-report.v1 (CPU).
    Json,
    /// CSV, one row per unit.
    Csv,
}

/// Parses a duration such as `100ms`, `2s`, `500us` or `1m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (examples: 100ms, 2s, 500us)"))?;
    let secs = match unit.trim() {
        "ns" => value / 1e9,
        "us" | "µs" => value / 1e6,
        "ms" | "" => value / 1e3,
        "s" => value,
        "m" | "min" => value * 60.0,
        other => {
            return Err(format!(
                "unknown time unit `{other}` (use ns, us, ms, s or m)"
            ));
        }
    };
    if !(secs > 0.0 && secs.is_finite()) {
        return Err("the interval must be positive".to_string());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Builds the analysis configuration.
pub fn config(
    by: ByArg,
    charge: ChargeArg,
    free_to: FreeToArg,
    interval: Duration,
    pid: Option<u32>,
) -> Config {
    Config {
        by: match by {
            ByArg::Library => By::Library,
            ByArg::Function => By::Function,
            ByArg::Thread => By::Thread,
            ByArg::Call => By::Call,
            ByArg::Interval => By::Interval,
        },
        charge: match charge {
            ChargeArg::First => Charge::First,
            ChargeArg::Last => Charge::Last,
            ChargeArg::All => Charge::All,
        },
        free_to: match free_to {
            FreeToArg::Owner => FreeTo::Owner,
            FreeToArg::Caller => FreeTo::Caller,
        },
        interval_ns: interval.as_nanos().min(u128::from(u64::MAX)) as u64,
        pid,
    }
}

/// Renders a memory report.
pub fn render(
    report: &tansa_analysis::memory::MemoryReport,
    format: FormatArg,
    table: &tansa_render::memory::TableOptions,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    match format {
        FormatArg::Table => tansa_render::memory::table_with(report, table, out),
        FormatArg::Json => tansa_render::memory::json(report, out),
        FormatArg::Csv => {
            // CSV has no place for them: the warnings (lost events, damage) go to stderr.
            for w in &report.warnings {
                eprintln!("tansa: warning: {w}");
            }
            tansa_render::memory::csv(report, out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("10parsecs").is_err());
        assert!(parse_duration("0ms").is_err());
    }
}
