//! Renderers of [`CpuReport`] and [`Annotation`].

use std::io::{self, Write};

use tansa_analysis::cpu::CpuReport;
use tansa_analysis::cpu::annotate::Annotation;

use crate::header::Header;
use crate::memory::duration;
use crate::table::{Align, Table};

/// How many callers are shown under each function in the table.
const CALLERS_SHOWN: usize = 3;

fn percent(x: f64) -> String {
    format!("{x:.2}")
}

fn header(r: &CpuReport, out: &mut dyn Write) -> io::Result<()> {
    let hz = if r.period_ns > 0 {
        1e9 / r.period_ns as f64
    } else {
        0.0
    };
    let mut h = Header::new(format!(
        "CPU profile by {}: {} sampled by {} at {:.0} Hz per CPU ({} CPU(s), {}), {} samples = {} of CPU time{}",
        r.by,
        r.event,
        r.source,
        hz,
        r.cpus,
        if r.kernel {
            "kernel and user"
        } else {
            "user only"
        },
        r.total_samples,
        duration(r.total_samples.saturating_mul(r.period_ns)),
        if r.duration_ns > 0 {
            format!(" over {} wall time", duration(r.duration_ns))
        } else {
            String::new()
        }
    ));
    if let Some(pid) = r.pid {
        h.line(format!("Process {pid} only."));
    }
    if r.lost_samples + r.lost_records > 0 {
        h.line(format!(
            "Lost: {} samples, {} records.",
            r.lost_samples, r.lost_records
        ));
    }
    for n in &r.notes {
        h.line(format!("Note: {n}"));
    }
    for w in &r.warnings {
        h.line(format!("Warning: {w}"));
    }
    h.write(out)
}

/// Writes `r` in `format` (the table with only the first `top` units, when given).
pub fn write(
    r: &CpuReport,
    format: crate::Format,
    top: Option<usize>,
    out: &mut dyn Write,
) -> io::Result<()> {
    match format {
        crate::Format::Table => table_with(r, top, out),
        crate::Format::Json => json(r, out),
        crate::Format::Csv => csv(r, out),
    }
}

/// Writes the report as a table for people.
pub fn table(r: &CpuReport, out: &mut dyn Write) -> io::Result<()> {
    table_with(r, None, out)
}

/// Writes the report as a table for people, with only the first `top` units (the others
/// summed in one row) when given.
pub fn table_with(r: &CpuReport, top: Option<usize>, out: &mut dyn Write) -> io::Result<()> {
    header(r, out)?;
    let shown = top.map_or(r.units.len(), |n| n.min(r.units.len()));
    let (units, rest) = r.units.split_at(shown);
    // The units not shown: their number and self figures (totals overlap: not summed).
    let rest_row = |columns: usize, label_at: usize| -> Option<Vec<String>> {
        if rest.is_empty() {
            return None;
        }
        let mut row = vec![String::new(); columns];
        let samples: u64 = rest.iter().map(|u| u.self_samples).sum();
        row[0] = samples.to_string();
        // Of the samples themselves: a sum of the units' rounded shares drifts (26.68 %
        // for 26.67 %), and the rows then add up to more than 100 %.
        row[1] = percent(if r.total_samples == 0 {
            0.0
        } else {
            samples as f64 * 100.0 / r.total_samples as f64
        });
        row[2] = duration(rest.iter().map(|u| u.self_ns).sum());
        row[label_at] = format!("({} more)", rest.len());
        Some(row)
    };
    if r.by == "process" || r.by == "thread" || r.by == "program" {
        let mut t = Table::new(&[
            ("samples", Align::Right),
            ("%", Align::Right),
            ("time", Align::Right),
            ("user", Align::Right),
            ("shared", Align::Right),
            ("kernel", Align::Right),
            ("other", Align::Right),
            (r.by, Align::Left),
        ]);
        for u in units {
            let s = u.spaces.unwrap_or_default();
            t.row(vec![
                u.self_samples.to_string(),
                percent(u.self_percent),
                duration(u.self_ns),
                s.user_samples.to_string(),
                s.shared_samples.to_string(),
                s.kernel_samples.to_string(),
                s.other_samples.to_string(),
                match u.processes {
                    Some(n) if n > 1 => format!("{} ({n} processes)", u.unit),
                    _ => u.unit.clone(),
                },
            ]);
        }
        if let Some(row) = rest_row(8, 7) {
            t.row(row);
        }
        return t.write(out);
    }
    if r.by == "interval" {
        let mut t = Table::new(&[
            ("samples", Align::Right),
            ("%", Align::Right),
            ("time", Align::Right),
            ("interval", Align::Left),
            ("most interrupted function", Align::Left),
        ]);
        for u in &r.units {
            let top = match (&u.top_function, u.top_samples) {
                (Some(f), Some(n)) => {
                    format!("{} ({}%)", crate::short_name(f), share(n, u.self_samples))
                }
                _ => String::new(),
            };
            t.row(vec![
                u.self_samples.to_string(),
                percent(u.self_percent),
                duration(u.self_ns),
                u.unit.clone(),
                top,
            ]);
        }
        return t.write(out);
    }
    let with_total = matches!(r.by, "library" | "function" | "line");
    let mut headers = vec![
        ("self", Align::Right),
        ("self%", Align::Right),
        ("self time", Align::Right),
    ];
    if with_total {
        headers.extend([("total", Align::Right), ("total%", Align::Right)]);
    }
    if r.by == "space" {
        headers.push(("class", Align::Left));
    }
    headers.push((r.by, Align::Left));
    let mut t = Table::new(&headers);
    for u in units {
        let mut row = vec![
            u.self_samples.to_string(),
            percent(u.self_percent),
            duration(u.self_ns),
        ];
        if with_total {
            row.extend([u.total_samples.to_string(), percent(u.total_percent)]);
        }
        if r.by == "space" {
            row.push(u.class.unwrap_or("").to_string());
        }
        let mut label = crate::short_name(&u.unit);
        if r.by == "line"
            && let Some(f) = &u.function
        {
            label = format!("{label} ({f})");
        }
        row.push(label);
        t.row(row);
        if let Some(callers) = &u.callers {
            for c in callers.iter().take(CALLERS_SHOWN) {
                let mut row = vec![String::new(); headers.len() - 1];
                row.push(format!(
                    "    <- {} ({})",
                    crate::short_name(&c.unit),
                    c.samples
                ));
                t.row(row);
            }
        }
    }
    if let Some(row) = rest_row(headers.len(), headers.len() - 1) {
        t.row(row);
    }
    t.write(out)
}

/// Writes the report as JSON (`tansa.cpu-report.v1`).
pub fn json(r: &CpuReport, out: &mut dyn Write) -> io::Result<()> {
    crate::json(r, out)
}

/// Writes the report as CSV, one row per unit.
pub fn csv(r: &CpuReport, out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    if r.by == "interval" {
        w.write_record([
            "unit",
            "start_ns",
            "end_ns",
            "samples",
            "ns",
            "percent",
            "top_function",
            "top_samples",
        ])
        .map_err(crate::csv_io)?;
        for u in &r.units {
            w.write_record([
                u.unit.clone(),
                u.start_ns.unwrap_or(0).to_string(),
                u.end_ns.unwrap_or(0).to_string(),
                u.self_samples.to_string(),
                u.self_ns.to_string(),
                percent(u.self_percent),
                u.top_function.clone().unwrap_or_default(),
                u.top_samples.unwrap_or(0).to_string(),
            ])
            .map_err(crate::csv_io)?;
        }
        return w.flush();
    }
    // By line, a unit is a line of one function: two template instances, or two static
    // functions, on one line are two rows with one `unit`, told apart by the function
    // (as the table and the JSON do).
    let by_line = r.by == "line";
    let mut header = vec![
        "unit",
        "self_samples",
        "total_samples",
        "self_ns",
        "total_ns",
        "self_percent",
        "total_percent",
    ];
    if by_line {
        header.push("function");
    }
    w.write_record(&header).map_err(crate::csv_io)?;
    for u in &r.units {
        let mut row = vec![
            u.unit.clone(),
            u.self_samples.to_string(),
            u.total_samples.to_string(),
            u.self_ns.to_string(),
            u.total_ns.to_string(),
            percent(u.self_percent),
            percent(u.total_percent),
        ];
        if by_line {
            row.push(u.function.clone().unwrap_or_default());
        }
        w.write_record(&row).map_err(crate::csv_io)?;
    }
    w.flush()
}

fn share(n: u64, of: u64) -> String {
    if n == 0 || of == 0 {
        String::new()
    } else {
        format!("{:.2}", n as f64 * 100.0 / of as f64)
    }
}

fn annotation_header(a: &Annotation, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{} ({}), {:#x}..{:#x}, {} bytes",
        a.unit,
        a.module_path,
        a.start,
        a.start + a.size,
        a.size
    )?;
    writeln!(
        out,
        "{} samples = {} ({} of all samples); percentages below are of the function's samples",
        a.samples,
        duration(a.samples.saturating_mul(a.period_ns)),
        if a.all_samples > 0 {
            format!("{:.2}%", a.samples as f64 * 100.0 / a.all_samples as f64)
        } else {
            "0%".into()
        }
    )?;
    if a.misaligned_samples > 0 {
        writeln!(
            out,
            "Warning: {} samples fall between instruction starts (the code differs from the \
             listing)",
            a.misaligned_samples
        )?;
    }
    for b in &a.sources {
        if let Some(n) = &b.newer {
            writeln!(
                out,
                "Warning: {} was modified {} s after {} was built: the lines shown may not be \
                 the code's (rebuild, then record again)",
                b.file, n.seconds, n.module
            )?;
        }
    }
    writeln!(out)
}

fn source_text<'a>(a: &'a Annotation, file: &str, line: u32) -> Option<&'a str> {
    a.sources
        .iter()
        .find(|b| b.file == file)?
        .lines
        .iter()
        .find(|l| l.line == line)?
        .text
        .as_deref()
}

/// Writes the annotated disassembly, with the source line of each run of instructions.
/// A clock sample names the instruction execution resumes at, so the time of a slow
/// instruction often shows on the one after it (skid).
pub fn annotate_asm(a: &Annotation, out: &mut dyn Write) -> io::Result<()> {
    // Names and source text are the recorded programs': never raw to a terminal.
    let out: &mut dyn Write = &mut crate::table::Printable::new(out);
    annotation_header(a, out)?;
    writeln!(
        out,
        "{:>8} {:>7}  {:<8}  instruction",
        "samples", "%", "offset"
    )?;
    let mut last: Option<(Option<&str>, u32)> = None;
    for i in &a.instructions {
        let key = (i.file.as_deref(), i.line);
        if last != Some(key) {
            match (&i.file, i.line) {
                (Some(f), l) if l > 0 => {
                    let name = f.rsplit('/').next().unwrap_or(f);
                    let text = source_text(a, f, l).unwrap_or("").trim();
                    writeln!(out, "{:>18}  {name}:{l}  {text}", "")?;
                }
                _ => writeln!(out, "{:>18}  <no line>", "")?,
            }
            last = Some(key);
        }
        let samples = if i.samples > 0 {
            i.samples.to_string()
        } else {
            String::new()
        };
        writeln!(
            out,
            "{:>8} {:>7}  +{:<7x}  {}",
            samples,
            share(i.samples, a.samples),
            i.offset,
            i.text
        )?;
    }
    Ok(())
}

/// Writes the source files of the function with per-line samples.
pub fn annotate_source(a: &Annotation, out: &mut dyn Write) -> io::Result<()> {
    // Names and source text are the recorded programs': never raw to a terminal.
    let out: &mut dyn Write = &mut crate::table::Printable::new(out);
    annotation_header(a, out)?;
    if a.sources.is_empty() {
        writeln!(
            out,
            "No source lines: the module has no line information (built without -g)."
        )?;
    }
    for b in &a.sources {
        match (b.available, &b.withheld) {
            (true, _) => writeln!(out, "{}", b.file)?,
            (false, Some(why)) => {
                writeln!(out, "{}  <source not in the recording: {why}>", b.file)?;
            }
            (false, None) => writeln!(out, "{}  <source unavailable>", b.file)?,
        }
        writeln!(out, "{:>8} {:>7} {:>6}  source", "samples", "%", "line")?;
        for l in &b.lines {
            let samples = if l.samples > 0 {
                l.samples.to_string()
            } else {
                String::new()
            };
            writeln!(
                out,
                "{:>8} {:>7} {:>6}  {}",
                samples,
                share(l.samples, a.samples),
                l.line,
                l.text.as_deref().unwrap_or("")
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tansa_analysis::cpu::CpuReport;
    use tansa_analysis::cpu::report::CpuUnit;

    /// The `--top` row's share is that of its samples, not the sum of its units' rounded
    /// shares: three units of one sample each, the first shown, the others 66.67 %.
    #[test]
    fn the_rest_rows_share_is_of_its_samples() {
        let unit = |name: &str| {
            let mut u = CpuUnit::new(name.into(), 1, 1);
            u.self_percent = 33.33;
            u.total_percent = 33.33;
            u.self_ns = 1_000_000;
            u
        };
        let r = CpuReport {
            schema: tansa_analysis::cpu::report::SCHEMA,
            by: "library",
            period_ns: 1_000_000,
            total_samples: 3,
            event: "cpu-clock".into(),
            source: "perf",
            target: "command".into(),
            kernel: false,
            cpus: 2,
            duration_ns: 3_000_000,
            lost_samples: 0,
            lost_records: 0,
            unsampled_ns: 0,
            pid: None,
            units: vec![unit("a.so"), unit("b.so"), unit("c.so")],
            notes: vec![],
            warnings: vec![],
        };
        let mut out = Vec::new();
        super::table_with(&r, Some(1), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rest = text
            .lines()
            .find(|l| l.contains("(2 more)"))
            .unwrap_or_else(|| panic!("{text}"));
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(&fields[..2], ["2", "66.67"], "{text}");
    }
}
