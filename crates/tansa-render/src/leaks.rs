//! Renderers of the leak report ([`LeaksReport`], `tansa leaks`): a diagnosis to read,
//! and JSON (schema `tansa.leaks.v1`, docs/json/leaks.v1.md).

use std::io::{self, Write};

use tansa_analysis::memory::leaks::{CodePlace, LeaksReport, SiteReport};

/// The report as JSON (schema `tansa.leaks.v1`).
pub fn json(report: &LeaksReport, out: &mut dyn Write) -> io::Result<()> {
    crate::json(report, out)
}

fn place(p: &CodePlace) -> String {
    if p.file.is_empty() {
        p.function.clone()
    } else {
        format!("{} ({}:{})", p.function, p.file, p.line)
    }
}

/// The diagnosis to read: each leaking site (every site with `all`) with its stack, the
/// judgement, and for leak-cause recordings the range end, the cause functions and branches
/// (with the branch's source line from `source_line(file, line)`, when it gives one) and a
/// leaking path.
pub fn text(
    report: &LeaksReport,
    all: bool,
    source_line: &mut dyn FnMut(&str, u32) -> Option<String>,
    out: &mut dyn Write,
) -> io::Result<()> {
    // Names and source text are the recorded programs': never raw to a terminal.
    let out: &mut dyn Write = &mut crate::table::Printable::new(out);
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
        site(s, source_line, out)?;
    }
    for f in &report.trace_failures {
        writeln!(out, "\nnote: a trace could not be taken: {f}")?;
    }
    Ok(())
}

fn site(
    s: &SiteReport,
    source_line: &mut dyn FnMut(&str, u32) -> Option<String>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let rank = s.rank.map(|r| format!(", rank {r}")).unwrap_or_default();
    writeln!(
        out,
        "\n#{} {}: {} (process {}{rank})",
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
