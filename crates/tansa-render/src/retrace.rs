//! Renderers of a retrace [`Report`] (`tansa retrace analyze`): the text view is a
//! header, then the trace with straight-line runs (consecutive instructions of one
//! function, each following the previous one in memory) collapsed to one row, or every
//! instruction with `expand`; JSON (schema `tansa.retrace.v1`, docs/json/retrace.v1.md) is
//! the report itself.

use std::io::{self, Write};

use tansa_retrace::report::{AccuracyReport, Alignment, PathReport, Report, TraceEntry};

use crate::header::Header;
use crate::table::{Align, Table};

fn location(e: &TraceEntry) -> String {
    match (&e.function, e.offset) {
        (Some(f), Some(o)) => format!("{f}+{o:#x}"),
        _ => format!("{:#x}", e.address),
    }
}

fn source(e: &TraceEntry) -> Option<String> {
    let file = e.file.as_deref()?;
    let name = file.rsplit('/').next().unwrap_or(file);
    Some(format!("{name}:{}", e.line.unwrap_or(0)))
}

/// Whether `b` directly follows `a` in memory, in the same function.
fn falls_through(a: &TraceEntry, b: &TraceEntry) -> bool {
    a.function.is_some()
        && a.function == b.function
        && a.module == b.module
        && a.length
            .is_some_and(|l| a.address + u64::from(l) == b.address)
}

/// Consecutive positions `[start, end)` forming runs; a run also absorbs repeats of the
/// same instruction (time-weighted traces).
fn runs(trace: &[TraceEntry]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=trace.len() {
        let breaks = i == trace.len() || {
            let (a, b) = (&trace[i - 1], &trace[i]);
            !(falls_through(a, b) || (a.address == b.address && a.module == b.module))
        };
        if breaks {
            out.push((start, i));
            start = i;
        }
    }
    out
}

fn header(r: &Report, trace_runs: usize) -> Header {
    let mut h = Header::new(format!("region `{}` of {}", r.region, r.command.join(" ")));
    h.line(format!("source: {} ({})", r.source, r.source_note));
    h.line(format!(
        "period: {} {}{}; {} executions, {} partial sequences ({} distinct), {} samples",
        r.period,
        r.period_unit,
        if r.sampling_phase == "shuffled" {
            ", each execution at a random phase"
        } else {
            ""
        },
        r.executions,
        r.partials,
        r.distinct_partials,
        r.samples
    ));
    if r.alignment == Alignment::Counts {
        h.line(format!(
            "order: by position ({}), {:.1} ms",
            r.alignment_note,
            r.merge.seconds * 1e3
        ));
        for (k, p) in r.paths.iter().enumerate() {
            h.line(path_line(k, p));
        }
    } else {
        h.line(format!(
            "merge: {} tables{}, {} steps ({} enumerated, {} dynamic programming), {:.1} ms",
            match r.variant {
                tansa_retrace::Variant::Function => "function",
                tansa_retrace::Variant::Block => "basic-block",
            },
            if r.time_weighted {
                " (time-weighted)"
            } else {
                ""
            },
            r.merge.steps,
            r.merge.enumerated_steps,
            r.merge.dp_steps,
            r.merge.seconds * 1e3
        ));
        if r.alignment_note != "requested" {
            h.line(format!("order: {}", r.alignment_note));
        }
    }
    if let Some(a) = &r.accuracy {
        h.line(accuracy_line(a));
        h.line(format!(
            "  the first rebuilt path against the most frequent true path: LCS ratio \
             {:.4}, edit distance {:.4} ({} rebuilt vs {} true instructions)",
            a.lcs_ratio, a.edit_distance, a.rebuilt_length, a.truth_length,
        ));
    }
    h.line(format!(
        "rebuilt trace: {} instructions in {trace_runs} runs",
        r.trace.len()
    ));
    for w in &r.warnings {
        h.line(format!("warning: {w}"));
    }
    h
}

/// The headline: every true path's accuracy weighted by its executions, and the worst.
fn accuracy_line(a: &AccuracyReport) -> String {
    let mut line = format!(
        "accuracy against the ground truth: LCS ratio {:.4}, edit distance {:.4}, over the \
         true paths weighted by their executions ({} stepped execution(s), {} distinct \
         path(s){})",
        a.weighted_lcs_ratio,
        a.weighted_edit_distance,
        a.truth_executions,
        a.distinct_paths,
        if a.weighted_share < 1.0 {
            format!(
                "; the {} most frequent, {:.1}% of the executions",
                a.true_paths.len(),
                a.weighted_share * 100.0
            )
        } else {
            String::new()
        }
    );
    let worst = a.worst_true_path.and_then(|i| a.true_paths.get(i));
    if a.true_paths.len() > 1 && worst.is_some_and(|w| w.lcs_ratio >= 1.0) {
        line.push_str("; every true path rebuilt exactly");
    } else if a.true_paths.len() > 1
        && let Some(w) = worst
    {
        line.push_str(&format!(
            "; worst: LCS ratio {:.4} for the true path of {} instructions taken by {:.1}% of \
             executions{}",
            w.lcs_ratio,
            w.length,
            w.share * 100.0,
            match w.rebuilt_path {
                Some(k) => format!(" (path {} below)", k + 1),
                None => " (no path of its length was rebuilt)".to_string(),
            }
        ));
    }
    line
}

fn path_line(k: usize, p: &PathReport) -> String {
    let mut line = format!(
        "path {}: {:.1}% of executions ({}), {} instructions: {} sampled, {} from the \
         control-flow graph, {} missing",
        k + 1,
        p.share * 100.0,
        p.executions,
        p.instructions.unwrap_or(0),
        p.observed,
        p.filled,
        p.missing
    );
    if let Some(a) = &p.accuracy {
        line.push_str(&format!(
            "; LCS ratio {:.4} against the true path of {:.1}% of stepped executions",
            a.lcs_ratio,
            a.truth_share * 100.0
        ));
    }
    line
}

/// The report as text for people: every instruction with `expand`, else one row per
/// straight-line run. With several paths, each path's trace follows under its own line.
pub fn text(r: &Report, expand: bool, out: &mut dyn Write) -> io::Result<()> {
    // Names and source text are the recorded programs': never raw to a terminal.
    let out: &mut dyn Write = &mut crate::table::Printable::new(out);
    header(r, runs(&r.trace).len()).write(out)?;
    if r.alignment == Alignment::Counts && r.paths.len() > 1 {
        for (k, p) in r.paths.iter().enumerate() {
            writeln!(out, "\n{}", path_line(k, p))?;
            trace_table(&p.trace, expand, out)?;
        }
        return Ok(());
    }
    trace_table(&r.trace, expand, out)
}

fn trace_table(t: &[TraceEntry], expand: bool, out: &mut dyn Write) -> io::Result<()> {
    let runs = runs(t);
    if expand {
        let mut table = Table::new(&[
            ("pos", Align::Right),
            ("location", Align::Left),
            ("index", Align::Left),
            ("source", Align::Left),
            ("support", Align::Right),
            ("instruction", Align::Left),
        ]);
        for e in t {
            let index = match (e.index, e.block, e.block_offset) {
                (Some(i), Some(b), Some(o)) => format!("#{i} bb{b}:{o}"),
                _ => String::new(),
            };
            table.row(vec![
                e.position.to_string(),
                location(e),
                index,
                source(e).unwrap_or_default(),
                e.support.to_string(),
                e.mnemonic.as_deref().unwrap_or("?").to_string(),
            ]);
        }
        return table.write(out);
    }
    let mut table = Table::new(&[
        ("pos", Align::Right),
        ("count", Align::Right),
        ("instructions", Align::Left),
        ("source", Align::Left),
        ("support", Align::Right),
        ("first instruction", Align::Left),
    ]);
    for (s, e) in runs {
        let (first, last) = (&t[s], &t[e - 1]);
        let span = if e - s == 1 {
            location(first)
        } else {
            format!("{} .. +{:#x}", location(first), last.offset.unwrap_or(0))
        };
        let lines: Vec<u32> = t[s..e].iter().filter_map(|x| x.line).collect();
        let src = match (source(first), lines.iter().min(), lines.iter().max()) {
            (Some(_), Some(lo), Some(hi)) if lo != hi => {
                let file = first.file.as_deref().unwrap_or("");
                format!("{}:{lo}-{hi}", file.rsplit('/').next().unwrap_or(file))
            }
            (Some(s), _, _) => s,
            _ => String::new(),
        };
        let (lo, hi) = t[s..e].iter().fold((u32::MAX, 0), |(lo, hi), x| {
            (lo.min(x.support), hi.max(x.support))
        });
        let support = if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}-{hi}")
        };
        table.row(vec![
            first.position.to_string(),
            (e - s).to_string(),
            span,
            src,
            support,
            first.mnemonic.as_deref().unwrap_or("?").to_string(),
        ]);
    }
    table.write(out)
}

/// The report as JSON (schema `tansa.retrace.v1`).
pub fn json(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    crate::json(r, out)
}
