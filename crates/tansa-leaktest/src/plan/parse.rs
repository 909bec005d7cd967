//! Reading a plan from TOML, with the line of every error.
//!
//! `serde` reads the file into the `Raw*` structs below (unknown keys are errors, with the
//! span `toml` reports); [`Spanned`] keeps the position of the values checked afterwards,
//! so a bad value is reported at its own line.

use std::collections::HashSet;
use std::ops::Range as Span;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{
    CommandSpec, IdleSpec, Launch, LogKind, LogSource, Plan, ProcessSource, ProcessSpec, Settings,
    Thresholds,
};
use crate::measure::Resource;

/// Most values a parameter sweep may have.
const MAX_SWEEP: usize = 1000;

/// Default pattern of an error line.
const DEFAULT_ERROR: &str = r"(?i)\b(error|err|fatal|crit|critical|alert|emerg|emergency|panic)\b";
/// Default pattern of a log ID: the seed's `NNNN-NNNN-NNNN`.
const DEFAULT_ID: &str = r"\b[0-9]{4}-[0-9]{4}-[0-9]{4}\b";

/// A plan that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct PlanError {
    /// 1-based line of the plan the error is about.
    pub line: usize,
    /// What is wrong and what to do.
    pub message: String,
}

/// Builds errors with lines from byte offsets of one text.
struct Lines<'a> {
    text: &'a str,
}

impl Lines<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn err(&self, span: &Span<usize>, message: impl Into<String>) -> PlanError {
        PlanError {
            line: self.line_of(span.start),
            message: message.into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    settings: Option<RawSettings>,
    thresholds: Option<RawThresholds>,
    #[serde(default)]
    process: Vec<Spanned<RawProcess>>,
    #[serde(default)]
    item: Vec<Spanned<RawItem>>,
    #[serde(default)]
    log: Vec<Spanned<RawLog>>,
    idle: Option<Spanned<RawIdle>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    retest_limit: Option<Spanned<i64>>,
    readings: Option<Spanned<i64>>,
    reading_interval: Option<Spanned<String>>,
    settle: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    judge: Option<Spanned<Vec<String>>>,
    type3_min_records: Option<Spanned<i64>>,
    restart_before_sweep: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThresholds {
    memory: Option<Spanned<RawSize>>,
    fds: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(i64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProcess {
    name: Spanned<String>,
    pid: Option<Spanned<i64>>,
    #[serde(rename = "match")]
    match_name: Option<Spanned<String>>,
    command: Option<Spanned<RawCommand>>,
    ready_file: Option<Spanned<String>>,
    ready_tcp: Option<Spanned<String>>,
    start_settle: Option<Spanned<String>>,
    start_timeout: Option<Spanned<String>>,
    restart: Option<Spanned<RawCommand>>,
    limit: Option<Spanned<RawSize>>,
    fd_limit: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawItem {
    name: Spanned<String>,
    command: Option<Spanned<RawCommand>>,
    timeout: Option<Spanned<String>>,
    #[serde(default)]
    param: Vec<Spanned<RawParam>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    name: Spanned<String>,
    default: Option<Spanned<i64>>,
    min: Option<Spanned<i64>>,
    max: Option<Spanned<i64>>,
    steps: Option<Spanned<Vec<i64>>>,
    sweep: Option<Spanned<String>>,
    step: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    file: Option<String>,
    output: Option<String>,
    journal: Option<bool>,
    process: Option<Spanned<String>>,
    error: Option<Spanned<String>>,
    id: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdle {
    duration: Spanned<String>,
    interval: Spanned<String>,
    readings: Option<Spanned<i64>>,
    reading_interval: Option<Spanned<String>>,
}

pub(super) fn parse(text: &str) -> Result<Plan, PlanError> {
    let lines = Lines { text };
    let raw: RawPlan = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| lines.line_of(s.start));
        PlanError {
            line,
            message: e.message().trim().to_string(),
        }
    })?;
    let settings = settings(&lines, raw.settings, raw.thresholds)?;

    let mut processes = Vec::new();
    let mut names = HashSet::new();
    for p in raw.process {
        let span = p.span();
        let spec = process(&lines, p.into_inner())?;
        if !names.insert(spec.name.clone()) {
            return Err(lines.err(&span, format!("a second process is named `{}`", spec.name)));
        }
        processes.push(spec);
    }
    if processes.is_empty() {
        return Err(PlanError {
            line: 1,
            message:
                "the plan watches no process: add a [[process]] table with pid, match or command"
                    .into(),
        });
    }

    let mut items = Vec::new();
    let mut names = HashSet::new();
    for it in raw.item {
        let span = it.span();
        let item = item::item(&lines, &span, it.into_inner())?;
        if !names.insert(item.name.clone()) {
            return Err(lines.err(&span, format!("a second item is named `{}`", item.name)));
        }
        items.push(item);
    }

    let mut logs = Vec::new();
    for l in raw.log {
        let span = l.span();
        logs.push(log(&lines, &span, l.into_inner(), &processes)?);
    }

    let idle = raw.idle.map(|i| idle(&lines, i.into_inner())).transpose()?;
    if items.is_empty() && idle.is_none() {
        return Err(PlanError {
            line: 1,
            message: "the plan has nothing to run: add an [[item]] table or an [idle] test".into(),
        });
    }
    Ok(Plan {
        settings,
        processes,
        items,
        logs,
        idle,
    })
}

fn settings(
    lines: &Lines<'_>,
    raw: Option<RawSettings>,
    thresholds: Option<RawThresholds>,
) -> Result<Settings, PlanError> {
    let mut s = Settings::default();
    if let Some(raw) = raw {
        if let Some(n) = raw.retest_limit {
            if *n.get_ref() < 3 {
                return Err(lines.err(
                    &n.span(),
                    format!(
                        "retest_limit is {}: the upper-limit check needs at least 3 runs",
                        n.get_ref()
                    ),
                ));
            }
            s.retest_limit = bounded_count(
                lines,
                &n,
                "retest_limit",
                MAX_RETESTS,
                " (runs of one item)",
            )?;
        }
        if let Some(n) = raw.readings {
            s.readings = bounded_count(
                lines,
                &n,
                "readings",
                MAX_READINGS,
                " (readings in one measurement)",
            )?;
        }
        if let Some(d) = raw.reading_interval {
            s.reading_interval = duration(lines, &d)?;
        }
        if let Some(d) = raw.settle {
            s.settle = duration(lines, &d)?;
        }
        if let Some(d) = raw.timeout {
            s.timeout = positive_duration(lines, &d, "timeout")?;
        }
        if let Some(j) = raw.judge {
            let mut judge = Vec::new();
            for name in j.get_ref() {
                let r = Resource::from_name(name).ok_or_else(|| {
                    lines.err(
                        &j.span(),
                        format!("judge: unknown resource `{name}` (use rss, pss or fds)"),
                    )
                })?;
                if !judge.contains(&r) {
                    judge.push(r);
                }
            }
            if judge.is_empty() {
                return Err(lines.err(&j.span(), "judge is empty: name rss, pss or fds"));
            }
            s.judge = judge;
        }
        if let Some(n) = raw.type3_min_records {
            s.type3_min_records = count(lines, &n, "type3_min_records")?;
        }
        if let Some(b) = raw.restart_before_sweep {
            s.restart_before_sweep = b;
        }
    }
    if let Some(t) = thresholds {
        let mut th = Thresholds::default();
        if let Some(m) = t.memory {
            th.memory_bytes = size(lines, &m, "thresholds.memory")?;
        }
        if let Some(f) = t.fds {
            th.fds = count(lines, &f, "thresholds.fds")?.into();
        }
        s.thresholds = th;
    }
    Ok(s)
}

/// A positive integer that fits a `u32`.
fn count(lines: &Lines<'_>, v: &Spanned<i64>, what: &str) -> Result<u32, PlanError> {
    bounded_count(lines, v, what, u32::MAX, "")
}

/// Most readings in one measurement, and most runs of an item: a plan asking for more is a
/// mistake (a measurement of a hundred million readings takes months), which would run on
/// silently.
const MAX_READINGS: u32 = 1000;
const MAX_RETESTS: u32 = 1000;

/// A positive integer of at most `max`; `why` says what the bound is for.
fn bounded_count(
    lines: &Lines<'_>,
    v: &Spanned<i64>,
    what: &str,
    max: u32,
    why: &str,
) -> Result<u32, PlanError> {
    let n = *v.get_ref();
    if n <= 0 {
        return Err(lines.err(&v.span(), format!("{what} must be a positive whole number")));
    }
    u32::try_from(n).ok().filter(|&n| n <= max).ok_or_else(|| {
        lines.err(
            &v.span(),
            format!("{what} is {n}: it may be at most {max}{why}"),
        )
    })
}

/// Longest duration a plan takes: a year. Anything longer is a mistake, and would not fit
/// the clock arithmetic of a run.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

fn duration(lines: &Lines<'_>, v: &Spanned<String>) -> Result<Duration, PlanError> {
    let d = humantime::parse_duration(v.get_ref()).map_err(|e| {
        lines.err(
            &v.span(),
            format!(
                "`{}` is not a duration ({e}); write e.g. \"50ms\" or \"2s\"",
                v.get_ref()
            ),
        )
    })?;
    if d > MAX_DURATION {
        return Err(lines.err(
            &v.span(),
            format!(
                "`{}` is longer than a year, the longest duration a plan takes",
                v.get_ref()
            ),
        ));
    }
    Ok(d)
}

fn positive_duration(
    lines: &Lines<'_>,
    v: &Spanned<String>,
    what: &str,
) -> Result<Duration, PlanError> {
    let d = duration(lines, v)?;
    if d.is_zero() {
        return Err(lines.err(&v.span(), format!("{what} must be longer than zero")));
    }
    Ok(d)
}

fn size(lines: &Lines<'_>, v: &Spanned<RawSize>, what: &str) -> Result<u64, PlanError> {
    match v.get_ref() {
        RawSize::Bytes(n) => u64::try_from(*n)
            .map_err(|_| lines.err(&v.span(), format!("{what} must not be negative"))),
        RawSize::Text(t) => t
            .parse::<bytesize::ByteSize>()
            .map(|b| b.as_u64())
            .map_err(|e| {
                lines.err(
                    &v.span(),
                    format!("{what}: `{t}` is not a size ({e}); write e.g. \"64KiB\" or 65536"),
                )
            }),
    }
}

fn command(
    lines: &Lines<'_>,
    v: Spanned<RawCommand>,
    what: &str,
) -> Result<CommandSpec, PlanError> {
    let span = v.span();
    match v.into_inner() {
        RawCommand::Shell(s) if s.trim().is_empty() => {
            Err(lines.err(&span, format!("{what} is empty")))
        }
        RawCommand::Shell(s) => Ok(CommandSpec::Shell(s)),
        RawCommand::Argv(a) if a.is_empty() || a[0].is_empty() => {
            Err(lines.err(&span, format!("{what} has no program")))
        }
        RawCommand::Argv(a) => Ok(CommandSpec::Argv(a)),
    }
}

fn name(lines: &Lines<'_>, v: &Spanned<String>, what: &str) -> Result<String, PlanError> {
    let n = v.get_ref();
    let ok = !n.is_empty()
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !ok {
        return Err(lines.err(
            &v.span(),
            format!("{what} name `{n}` must be letters, digits, '_', '-' or '.'"),
        ));
    }
    Ok(n.clone())
}

fn process(lines: &Lines<'_>, raw: RawProcess) -> Result<ProcessSpec, PlanError> {
    let pname = name(lines, &raw.name, "process")?;
    let at = raw.name.span();
    let launch_only = [
        ("ready_file", raw.ready_file.as_ref().map(Spanned::span)),
        ("ready_tcp", raw.ready_tcp.as_ref().map(Spanned::span)),
        ("start_settle", raw.start_settle.as_ref().map(Spanned::span)),
        (
            "start_timeout",
            raw.start_timeout.as_ref().map(Spanned::span),
        ),
    ];
    let restart = raw
        .restart
        .map(|r| command(lines, r, &format!("process `{pname}`: restart")))
        .transpose()?;
    let source = match (raw.pid, raw.match_name, raw.command) {
        (Some(pid), None, None) => {
            let p = u32::try_from(*pid.get_ref())
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| lines.err(&pid.span(), "pid must be a positive number"))?;
            ProcessSource::Pid { pid: p, restart }
        }
        (None, Some(m), None) => {
            if m.get_ref().is_empty() {
                return Err(lines.err(&m.span(), "match is empty"));
            }
            ProcessSource::Match {
                name: m.into_inner(),
                restart,
            }
        }
        (None, None, Some(c)) => {
            if restart.is_some() {
                return Err(lines.err(
                    &at,
                    format!("process `{pname}`: tansa restarts a command itself; remove `restart`"),
                ));
            }
            let command = command(lines, c, &format!("process `{pname}`: command"))?;
            ProcessSource::Command(Launch {
                command,
                ready_file: raw.ready_file.map(|f| PathBuf::from(f.into_inner())),
                ready_tcp: raw.ready_tcp.map(Spanned::into_inner),
                settle: raw
                    .start_settle
                    .map(|d| duration(lines, &d))
                    .transpose()?
                    .unwrap_or(Duration::from_millis(100)),
                start_timeout: raw
                    .start_timeout
                    .map(|d| positive_duration(lines, &d, "start_timeout"))
                    .transpose()?
                    .unwrap_or(Duration::from_secs(10)),
            })
        }
        (None, None, None) => {
            return Err(lines.err(
                &at,
                format!("process `{pname}` needs one of `pid`, `match` or `command`"),
            ));
        }
        _ => {
            return Err(lines.err(
                &at,
                format!("process `{pname}` has more than one of `pid`, `match` and `command`"),
            ));
        }
    };
    if !matches!(source, ProcessSource::Command(_))
        && let Some((key, Some(span))) = launch_only.iter().find(|(_, s)| s.is_some())
    {
        return Err(lines.err(
            span,
            format!("process `{pname}`: `{key}` only applies to a process started with `command`"),
        ));
    }
    Ok(ProcessSpec {
        name: pname,
        source,
        memory_limit: raw.limit.map(|l| size(lines, &l, "limit")).transpose()?,
        fd_limit: raw
            .fd_limit
            .map(|f| count(lines, &f, "fd_limit").map(u64::from))
            .transpose()?,
    })
}

fn log(
    lines: &Lines<'_>,
    span: &Span<usize>,
    raw: RawLog,
    processes: &[ProcessSpec],
) -> Result<LogSource, PlanError> {
    let process = match raw.process {
        Some(p) => {
            if !processes.iter().any(|s| &s.name == p.get_ref()) {
                return Err(lines.err(
                    &p.span(),
                    format!("log: no [[process]] is named `{}`", p.get_ref()),
                ));
            }
            Some(p.into_inner())
        }
        None => None,
    };
    let kind = match (raw.file, raw.output, raw.journal) {
        (Some(f), None, None | Some(false)) => {
            if process.is_none() {
                return Err(lines.err(
                    span,
                    "log file needs `process = \"...\"`: the watched process that writes it",
                ));
            }
            LogKind::File(PathBuf::from(f))
        }
        (None, Some(o), None | Some(false)) => {
            let spec = processes.iter().find(|s| s.name == o).ok_or_else(|| {
                lines.err(span, format!("log output: no [[process]] is named `{o}`"))
            })?;
            if !matches!(spec.source, ProcessSource::Command(_)) {
                return Err(lines.err(
                    span,
                    format!("log output: tansa only has the output of processes it starts, and `{o}` is not started with `command`"),
                ));
            }
            if process.as_ref().is_some_and(|p| p != &o) {
                return Err(lines.err(span, "log output: `process` must be the same process"));
            }
            LogKind::Output(o)
        }
        (None, None, Some(true)) => LogKind::Journal,
        (None, None, None | Some(false)) => {
            return Err(lines.err(
                span,
                "log needs one of `file`, `output` or `journal = true`",
            ));
        }
        _ => {
            return Err(lines.err(
                span,
                "log has more than one of `file`, `output` and `journal`",
            ));
        }
    };
    let process = match &kind {
        LogKind::Output(o) => Some(o.clone()),
        _ => process,
    };
    let regex = |v: Option<Spanned<String>>, default: &str, what: &str| match v {
        None => regex::Regex::new(default).map_err(|e| lines.err(span, e.to_string())),
        Some(s) => regex::Regex::new(s.get_ref()).map_err(|e| {
            lines.err(
                &s.span(),
                format!("log {what}: bad regular expression: {e}"),
            )
        }),
    };
    Ok(LogSource {
        kind,
        process,
        error: regex(raw.error, DEFAULT_ERROR, "error")?,
        id: regex(raw.id, DEFAULT_ID, "id")?,
    })
}

fn idle(lines: &Lines<'_>, raw: RawIdle) -> Result<IdleSpec, PlanError> {
    let duration_ = positive_duration(lines, &raw.duration, "idle duration")?;
    let interval = positive_duration(lines, &raw.interval, "idle interval")?;
    if interval > duration_ {
        return Err(lines.err(
            &raw.interval.span(),
            "idle interval is longer than the duration: there would be one measurement only",
        ));
    }
    Ok(IdleSpec {
        duration: duration_,
        interval,
        readings: raw
            .readings
            .map(|r| {
                bounded_count(
                    lines,
                    &r,
                    "idle readings",
                    MAX_READINGS,
                    " (readings in one measurement)",
                )
            })
            .transpose()?
            .unwrap_or(3),
        reading_interval: raw
            .reading_interval
            .map(|d| duration(lines, &d))
            .transpose()?
            .unwrap_or(Duration::from_secs(1)),
    })
}

mod item;

#[cfg(test)]
mod tests;
