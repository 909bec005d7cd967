//! `tansa leaks`: the leak report of a heap recording.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use tansa_analysis::memory::leaks::{self, LeaksReport, SiteReport};
use tansa_analysis::memory::recording::{MemoryRecording, RecordingError};

use crate::exit;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A diagnosis to read.
    Text,
    /// The `tansa.leaks.v1` document (docs/json/leaks.v1.md).
    Json,
}

/// Options of `tansa leaks`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa record --leak-cause -o run.tansa -- ./server   record, tracing leaking sites
  tansa leaks run.tansa                                the diagnosis of each leaking site
  tansa leaks run.tansa --site 1 --format json         one site, as JSON

A site is judged leaking when it was freed at least once and its blocks still allocated kept
growing (at each of the last 3 of 8 moments of the run; while recording, at each of the
last 3 scans). Sites never freed are `no-free-site`: tansa does not guess why.")]
pub struct Args {
    /// A heap recording (`tansa record`, best with --leak-cause).
    file: PathBuf,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,

    /// Only the site with this number (as the report numbers them).
    #[arg(long, value_name = "N")]
    site: Option<usize>,

    /// In the text view, also the sites that are not leaking.
    #[arg(long)]
    all: bool,
}

/// Runs `tansa leaks`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let file = File::open(&args.file).map_err(|e| exit::cannot_open(&args.file, e))?;
    let recording = match MemoryRecording::open(BufReader::with_capacity(1 << 20, file)) {
        Ok(r) => r,
        Err(RecordingError::WrongKind { found }) => anyhow::bail!(
            "{}: a {found}; `tansa leaks` reads heap recordings (made by `tansa record`)",
            args.file.display()
        ),
        Err(RecordingError::Format(e)) => return Err(exit::unreadable(&args.file, &e)),
        Err(e) => anyhow::bail!("{}: {e}", args.file.display()),
    };
    let mut report = leaks::report(&recording);
    if let Some(n) = args.site {
        if !(1..=report.sites.len()).contains(&n) {
            return Err(exit::usage(format!(
                "--site {n}: {} has {} site(s)",
                args.file.display(),
                report.sites.len()
            )));
        }
        report.sites.retain(|s| s.index == n);
    }
    let mut out = crate::output::open(None)?;
    match args.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        }
        Format::Text => text(&report, args.all || args.site.is_some(), &mut out)?,
    }
    out.flush()?;
    Ok(exit::finish(
        &args.file,
        recording.is_damaged(),
        &report.warnings,
    ))
}

fn place(p: &tansa_analysis::memory::leaks::CodePlace) -> String {
    if p.file.is_empty() {
        p.function.clone()
    } else {
        format!("{} ({}:{})", p.function, p.file, p.line)
    }
}

/// The source line `line` of `file`, if it can be read.
fn source_line(file: &str, line: u32) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .nth((line as usize).checked_sub(1)?)
        .map(|l| l.trim().to_string())
}

fn text(report: &LeaksReport, all: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let leaking = report
        .sites
        .iter()
        .filter(|s| s.judgement == "leaking")
        .count();
    writeln!(
        out,
        "{leaking} leaking allocation site(s) of {}{}",
        report.sites.len(),
        if report.leak_cause {
            ""
        } else {
            " (record with --leak-cause to find why they leak)"
        }
    )?;
    for s in report
        .sites
        .iter()
        .filter(|s| all || s.judgement == "leaking")
    {
        site(s, out)?;
    }
    for f in &report.trace_failures {
        writeln!(out, "\nnote: a trace could not be taken: {f}")?;
    }
    Ok(())
}

fn site(s: &SiteReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "\n#{} {}: {} (process {})",
        s.index,
        s.judgement,
        place(&s.site),
        s.pid
    )?;
    writeln!(
        out,
        "   {} allocation(s), {} free(s); {} block(s), {} byte(s) still allocated at the end",
        s.allocations, s.frees, s.leaked_blocks, s.leaked_bytes
    )?;
    for f in s.stack.iter().skip(1).take(6) {
        writeln!(out, "     called from {}", place(f))?;
    }
    let Some(status) = &s.tracing else {
        return Ok(());
    };
    writeln!(
        out,
        "   traced {} allocation(s) ({} freed, {} not freed; {status}) up to the return of {}{}",
        s.traces.freed + s.traces.not_freed,
        s.traces.freed,
        s.traces.not_freed,
        s.range_end.as_deref().unwrap_or("?"),
        if s.range_moves > 0 {
            format!(" (moved up {} time(s): blocks outlived it)", s.range_moves)
        } else {
            String::new()
        }
    )?;
    if s.cause_functions.is_empty() {
        if s.traces.not_freed == 0 {
            writeln!(out, "   no traced allocation leaked: no cause found yet")?;
        }
        return Ok(());
    }
    for f in &s.cause_functions {
        writeln!(
            out,
            "   cause: the leaking path leaves the freeing ones in {}",
            place(f)
        )?;
    }
    for b in &s.cause_branches {
        writeln!(
            out,
            "   at the branch {}+{:#x} `{}`{}, {} on the leaking path",
            b.function,
            b.offset,
            b.instruction,
            if b.file.is_empty() {
                String::new()
            } else {
                format!(" ({}:{})", b.file, b.line)
            },
            if b.taken_on_leak {
                "taken"
            } else {
                "not taken"
            }
        )?;
        if let Some(line) = source_line(&b.file, b.line) {
            writeln!(out, "       {:>5} | {line}", b.line)?;
        }
    }
    if let Some(freed) = s
        .paths
        .iter()
        .filter(|p| p.end == "F")
        .max_by_key(|p| p.count)
    {
        let calls: Vec<&str> = freed
            .steps
            .iter()
            .filter(|t| !t.starts_with('@'))
            .map(String::as_str)
            .collect();
        writeln!(
            out,
            "   the most common freeing path: {} F",
            calls.join(" ")
        )?;
    }
    if let Some(leak) = s.paths.iter().find(|p| p.end == "E") {
        let calls: Vec<&str> = leak
            .steps
            .iter()
            .filter(|t| !t.starts_with('@'))
            .map(String::as_str)
            .collect();
        writeln!(out, "   a leaking path:              {} E", calls.join(" "))?;
    }
    Ok(())
}
