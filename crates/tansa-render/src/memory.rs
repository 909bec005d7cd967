//! Renderers of [`MemoryReport`].

use std::io::{self, Write};

use tansa_analysis::memory::report::{AtExit, ImproperReport, MemoryReport, Stats, UnitReport};

use crate::header::Header;
use crate::table::{Align, Table};

/// Formats nanoseconds for people (`1.234 s`, `12.5 ms`, `870 µs`).
pub fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{} µs", ns / 1000)
    }
}

/// The figures of `s`, the temporary allocations last when `temporary` (not in sampled
/// reports, which do not count them).
fn stat_cells(s: &Stats, temporary: bool) -> Vec<String> {
    let mut cells = vec![
        crate::bytes(s.net_bytes),
        crate::bytes(s.max_bytes),
        crate::bytes(s.min_bytes),
        crate::bytes(sat(s.allocated_bytes)),
        s.calls.malloc.to_string(),
        s.calls.calloc.to_string(),
        s.calls.realloc.to_string(),
        s.calls.free.to_string(),
        s.calls.memalign.to_string(),
    ];
    if temporary {
        cells.push(s.temporary_allocations.to_string());
    }
    cells
}

fn sat(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One row for the units not shown (`--top`): their number, and the figures that add up
/// (net and allocated bytes, calls; not the maxima and minima over time, which do not),
/// unless units share events (`overlapping`: `--charge all` charges an event to every
/// library on its stack), when only their number is given.
fn rest_cells(rest: &[UnitReport], overlapping: bool, temporary: bool) -> Option<Vec<String>> {
    if rest.is_empty() {
        return None;
    }
    if overlapping {
        let mut cells = vec![String::new(); STAT_HEADERS.len() + 1 + usize::from(temporary)];
        cells[0] = format!("({} more)", rest.len());
        return Some(cells);
    }
    // `then` adds up what adds up (net and allocated bytes, calls); max and min are left
    // out below.
    let sum = rest.iter().fold(Stats::default(), |a, u| a.then(&u.stats));
    let mut cells = vec![format!("({} more)", rest.len())];
    cells.extend(stat_cells(&sum, temporary));
    cells[2] = String::new();
    cells[3] = String::new();
    Some(cells)
}

const STAT_HEADERS: [(&str, Align); 9] = [
    ("net", Align::Right),
    ("max", Align::Right),
    ("min", Align::Right),
    ("allocated", Align::Right),
    ("malloc", Align::Right),
    ("calloc", Align::Right),
    ("realloc", Align::Right),
    ("free", Align::Right),
    ("memalign", Align::Right),
];

/// A unit as the tables name it (a call with its index and start, an interval with its
/// span, a program run by several processes with their number).
pub fn unit_label(u: &UnitReport) -> String {
    let mut unit = crate::short_name(&u.unit);
    if let Some(n) = u.processes.filter(|&n| n > 1) {
        unit = format!("{unit} ({n} processes)");
    }
    match (u.call_index, u.start_ns, u.end_ns) {
        (Some(i), Some(s), _) => format!("{unit} #{i} @{}", duration(s)),
        (None, Some(s), Some(e)) => format!("{}..{} {unit}", duration(s), duration(e)),
        _ => unit,
    }
}

fn frame_line(f: &tansa_analysis::memory::report::FrameReport) -> String {
    let func = f.function.as_deref().unwrap_or("??");
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{}!{} ({}:{})", f.module, func, file, line),
        _ => format!("{}!{} (+{})", f.module, func, f.offset),
    }
}

fn improper_block(imp: &ImproperReport, out: &mut dyn Write) -> io::Result<()> {
    if imp.lost_events > 0 {
        writeln!(
            out,
            "  {} of a pointer not seen allocated ({}), {} time(s) in process {} (its agent \
             could not record {} event(s): the allocation may be one of them):",
            imp.op, imp.ptr, imp.count, imp.pid, imp.lost_events
        )?;
    } else {
        writeln!(
            out,
            "  {} of a pointer never allocated ({}), {} time(s) in process {}{}:",
            imp.op,
            imp.ptr,
            imp.count,
            imp.pid,
            if imp.refused { ", refused" } else { "" }
        )?;
    }
    if imp.stack.is_empty() {
        writeln!(out, "      (stack unknown)")?;
    }
    for f in &imp.stack {
        writeln!(out, "      {}", frame_line(f))?;
    }
    Ok(())
}

/// Options of the table view.
#[derive(Debug, Clone, Copy, Default)]
pub struct TableOptions {
    /// List every process image (as a tree by parent) even when there are many.
    pub all_processes: bool,
    /// Show only the first this many units; the others are summed in one row (the units
    /// of reports by library, function or thread come largest first).
    pub top: Option<usize>,
}

/// Process images listed one by one above this count are summarized instead.
pub const MAX_LISTED_PROCESSES: usize = 10;

fn command_of(p: &tansa_analysis::memory::report::ProcessReport) -> String {
    if p.command.is_empty() {
        p.exe.clone()
    } else {
        p.command.join(" ")
    }
}

/// Where a process ran, in a report over several recordings or an MPI job: ` rank 2 on
/// node1`, ` on node1`.
fn place_of(p: &tansa_analysis::memory::report::ProcessReport) -> String {
    let mut s = String::new();
    if let Some(r) = p.rank {
        s.push_str(&format!(" rank {r}"));
    }
    if let Some(h) = p.host.as_deref().filter(|h| !h.is_empty()) {
        s.push_str(&format!(" on {h}"));
    }
    s
}

/// Whether a process image ended in a way worth pointing out (a signal, a failure code,
/// an unknown end).
fn abnormal(p: &tansa_analysis::memory::report::ProcessReport) -> bool {
    match p.exit.kind {
        "exited" => p.exit.code != Some(0),
        "exec" | "running" => false,
        _ => true,
    }
}

/// The process images of a recording of several: each one (as a tree by parent) when there
/// are few or when asked, else counts by command, the root and the abnormal ends.
fn processes(r: &MemoryReport, opts: &TableOptions, h: &mut Header) {
    let ps = &r.processes;
    if ps.len() <= 1 {
        return;
    }
    if opts.all_processes || ps.len() <= MAX_LISTED_PROCESSES {
        h.line(format!("{} process images recorded:", ps.len()));
        // A tree: each image under the image of its parent, if that was recorded.
        let pids: std::collections::HashSet<u32> = ps.iter().map(|p| p.pid).collect();
        fn walk(
            ps: &[tansa_analysis::memory::report::ProcessReport],
            i: usize,
            depth: usize,
            done: &mut Vec<bool>,
            h: &mut Header,
        ) {
            if done[i] {
                return;
            }
            done[i] = true;
            let p = &ps[i];
            h.line(format!(
                "{:indent$}  pid {} (parent {}){} `{}`: {}",
                "",
                p.pid,
                p.ppid,
                place_of(p),
                command_of(p),
                p.exit.description,
                indent = depth * 2
            ));
            for j in 0..ps.len() {
                if !done[j]
                    && ps[j].ppid == p.pid
                    && ps[j].pid != p.pid
                    && ps[j].recording == p.recording
                {
                    walk(ps, j, depth + 1, done, h);
                }
            }
        }
        let mut done = vec![false; ps.len()];
        for i in 0..ps.len() {
            if !pids.contains(&ps[i].ppid) || ps[i].ppid == ps[i].pid {
                walk(ps, i, 0, &mut done, h);
            }
        }
        for i in 0..ps.len() {
            walk(ps, i, 0, &mut done, h);
        }
        return;
    }
    let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for p in ps {
        let name = p.exe.rsplit('/').next().unwrap_or(&p.exe).to_string();
        *counts.entry(name).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown: Vec<String> = counts
        .iter()
        .take(5)
        .map(|(name, n)| format!("{n} x {name}"))
        .collect();
    let others: usize = counts.iter().skip(5).map(|c| c.1).sum();
    h.line(format!(
        "{} process images recorded: {}{}",
        ps.len(),
        shown.join(", "),
        if others > 0 {
            format!(", {others} others")
        } else {
            String::new()
        }
    ));
    let bad: Vec<_> = ps.iter().filter(|p| abnormal(p)).collect();
    if !bad.is_empty() {
        h.line(format!("  {} ended abnormally:", bad.len()));
        for p in bad.iter().take(MAX_LISTED_PROCESSES) {
            h.line(format!(
                "    pid {} `{}`: {}",
                p.pid,
                command_of(p),
                p.exit.description
            ));
        }
        if bad.len() > MAX_LISTED_PROCESSES {
            h.line("    ...");
        }
    }
    h.line("  (`tansa report FILE --processes` lists every image as a tree)");
}

/// Writes `r` in `format` (the table with `opts`).
pub fn write(
    r: &MemoryReport,
    format: crate::Format,
    opts: &TableOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    match format {
        crate::Format::Table => table_with(r, opts, out),
        crate::Format::Json => json(r, out),
        crate::Format::Csv => csv(r, out),
    }
}

/// The report as a table for people.
pub fn table(r: &MemoryReport, out: &mut dyn Write) -> io::Result<()> {
    table_with(r, &TableOptions::default(), out)
}

/// The report as a table for people, with `opts`.
pub fn table_with(r: &MemoryReport, opts: &TableOptions, out: &mut dyn Write) -> io::Result<()> {
    let mut h = Header::new(format!(
        "tansa heap report: by {} (charge {}, releases charged to {})",
        r.by, r.charge, r.free_to
    ));
    // The images of the process reported on: more than one when it replaced itself
    // (execve), and then the last one says how the process ended.
    let images: Vec<_> = r
        .processes
        .iter()
        .filter(|p| p.pid == r.process.pid && p.recording == r.process.recording)
        .collect();
    match images.as_slice() {
        [] if r.processes.is_empty() => h.line(format!(
            "no process image in this recording (no process ran under the agent); {} events",
            r.events
        )),
        [first, .., last] => h.line(format!(
            "process {} (images `{}`{} then `{}`): {}; {} events over {}",
            r.process.pid,
            command_of(first),
            if images.len() > 2 {
                format!(", {} more", images.len() - 2)
            } else {
                String::new()
            },
            command_of(last),
            last.exit.description,
            r.events,
            duration(r.duration_ns)
        )),
        _ => h.line(format!(
            "process {} `{}`: {}; {} events over {}",
            r.process.pid,
            command_of(&r.process),
            r.process.exit.description,
            r.events,
            duration(r.duration_ns)
        )),
    }
    if let Some(rate) = r.sample_rate_bytes {
        h.line(format!(
            "sampled: figures are estimates from allocations sampled every {} on average \
             (relative error about sqrt({rate} / bytes) for a figure of that many bytes)",
            crate::bytes(rate as i64)
        ));
    }
    crate::job::lines(r, &mut h);
    processes(r, opts, &mut h);
    h.write(out)?;
    let mut headers: Vec<(&str, Align)> = vec![("unit", Align::Left)];
    headers.extend(STAT_HEADERS);
    let temporary = r.sample_rate_bytes.is_none();
    if temporary {
        headers.push(("temporary", Align::Right));
    }
    // The leak check's lost bytes per unit (not per interval: it is made at the end).
    let lost = r.leak_check.as_ref().filter(|_| r.interval_ns.is_none());
    if lost.is_some() {
        headers.push(("lost at exit", Align::Right));
    }
    let lost_cell = |x: Option<&AtExit>| crate::bytes(sat(x.map_or(0, AtExit::lost_bytes)));
    let mut t = Table::new(&headers);
    let shown = opts.top.map_or(r.units.len(), |n| n.min(r.units.len()));
    for u in &r.units[..shown] {
        let mut cells = vec![unit_label(u)];
        cells.extend(stat_cells(&u.stats, temporary));
        if lost.is_some() {
            cells.push(lost_cell(u.at_exit.as_ref()));
        }
        t.row(cells);
    }
    let overlapping = r.charge == "all";
    if let Some(mut rest) = rest_cells(&r.units[shown..], overlapping, temporary) {
        if lost.is_some() {
            let mut sum = AtExit::default();
            for u in &r.units[shown..] {
                if let Some(x) = &u.at_exit {
                    sum.sum(x);
                }
            }
            rest.push(if overlapping {
                String::new()
            } else {
                lost_cell(Some(&sum))
            });
        }
        t.row(rest);
    }
    let mut total = vec!["(total)".to_string()];
    total.extend(stat_cells(&r.totals, temporary));
    if let Some(check) = lost {
        total.push(lost_cell(Some(&check.at_exit)));
    }
    t.row(total);
    t.write(out)?;
    if r.inherited_frees > 0 {
        writeln!(
            out,
            "\n{} release(s) of blocks inherited from a parent process were not charged.",
            r.inherited_frees
        )?;
    }
    if let Some(check) = &r.leak_check {
        writeln!(out)?;
        crate::leaks::leak_check_summary(check, out)?;
        if check.at_exit.lost_blocks() > 0 {
            writeln!(
                out,
                "   (column `lost at exit`: per unit; `tansa leaks` on the recording names the \
                 allocation sites that lost them)"
            )?;
        }
    }
    if !r.improper.is_empty() {
        writeln!(out, "\nimproper use:")?;
        for imp in &r.improper {
            improper_block(imp, out)?;
        }
    }
    for w in &r.warnings {
        writeln!(out, "\nwarning: {w}")?;
    }
    Ok(())
}

/// The report as JSON (`tansa.memory-report.v1`).
pub fn json(r: &MemoryReport, out: &mut dyn Write) -> io::Result<()> {
    crate::json(r, out)
}

/// The units as CSV, one row per unit, with a header row.
pub fn csv(r: &MemoryReport, out: &mut dyn Write) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    // Units per rank carry their rank and host in two more columns.
    let per_rank = r.by == "rank";
    let mut header = vec![
        "unit",
        "net_bytes",
        "max_bytes",
        "min_bytes",
        "allocated_bytes",
        "freed_bytes",
        "malloc",
        "calloc",
        "realloc",
        "free",
        "memalign",
        "pid",
        "tid",
        "thread_name",
        "call_index",
        "start_ns",
        "end_ns",
        "cumulative_net_bytes",
    ];
    if per_rank {
        header.extend(["rank", "host"]);
    }
    // Last, so that the columns before it keep their places (empty when sampled: not
    // counted).
    header.push("temporary_allocations");
    let sampled = r.sample_rate_bytes.is_some();
    w.write_record(&header).map_err(crate::csv_io)?;
    let opt = |v: Option<String>| v.unwrap_or_default();
    for u in &r.units {
        let s = &u.stats;
        let mut row = vec![
            u.unit.clone(),
            s.net_bytes.to_string(),
            s.max_bytes.to_string(),
            s.min_bytes.to_string(),
            s.allocated_bytes.to_string(),
            s.freed_bytes.to_string(),
            s.calls.malloc.to_string(),
            s.calls.calloc.to_string(),
            s.calls.realloc.to_string(),
            s.calls.free.to_string(),
            s.calls.memalign.to_string(),
            opt(u.thread.as_ref().map(|t| t.pid.to_string())),
            opt(u.thread.as_ref().map(|t| t.tid.to_string())),
            opt(u.thread.as_ref().map(|t| t.name.clone())),
            opt(u.call_index.map(|v| v.to_string())),
            opt(u.start_ns.map(|v| v.to_string())),
            opt(u.end_ns.map(|v| v.to_string())),
            opt(u.cumulative_net_bytes.map(|v| v.to_string())),
        ];
        if per_rank {
            row.push(opt(u.rank.map(|v| v.to_string())));
            row.push(opt(u.host.clone()));
        }
        row.push(if sampled {
            String::new()
        } else {
            s.temporary_allocations.to_string()
        });
        w.write_record(&row).map_err(crate::csv_io)?;
    }
    w.flush()
}
