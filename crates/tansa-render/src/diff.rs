//! Renderers of [`HeapDiff`] and [`CpuDiff`] (`tansa diff`): a table for people, JSON
//! (`tansa.diff.v1`), CSV.

use std::io::{self, Write};

use tansa_analysis::diff::cpu::{CpuDelta, CpuDiff, CpuFigures};
use tansa_analysis::diff::memory::{HeapDiff, HeapFigures, HeapUnitDiff};
use tansa_analysis::diff::{Gate, Metric, Status, UnitDiff, Value, label};

use crate::header::Header;
use crate::memory::duration;
use crate::table::{Align, Table};

/// A signed byte count for people: `+1.5 KiB`, `-64 B`, `0 B`.
pub fn signed_bytes(b: i64) -> String {
    if b > 0 {
        format!("+{}", crate::bytes(b))
    } else {
        crate::bytes(b)
    }
}

/// A signed count: `+40`, `-1`, `0`.
fn signed(n: i64) -> String {
    if n > 0 {
        format!("+{n}")
    } else {
        n.to_string()
    }
}

/// Percentage points: `+10.00`, `-2.50`, `0.00`.
fn points(x: f64) -> String {
    if x > 0.0 {
        format!("+{x:.2}")
    } else if x == 0.0 {
        "0.00".to_string()
    } else {
        format!("{x:.2}")
    }
}

/// The relative change of a row's metric: `+25.0%`, `new`, `gone`, or empty when both
/// sides are zero.
fn relative(status: Status, a: f64, b: f64) -> String {
    match status {
        Status::Added => "new".to_string(),
        Status::Removed => "gone".to_string(),
        _ if a == 0.0 && b == 0.0 => String::new(),
        _ if a == 0.0 => "new".to_string(),
        _ => {
            let r = (b - a) * 100.0 / a.abs();
            if r > 0.0 {
                format!("+{r:.1}%")
            } else {
                format!("{r:.1}%")
            }
        }
    }
}

fn metric_of(name: &str, default: Metric) -> Metric {
    Metric::from_name(name).unwrap_or(default)
}

fn row_label<F, D>(u: &UnitDiff<F, D>) -> String {
    let l = label(u);
    let l = crate::short_name(&l);
    match (&u.a_unit, &u.b_unit) {
        (Some(a), Some(b)) if a != b => format!("{l} ({a} / {b})"),
        (Some(x), None) | (None, Some(x)) => format!("{l} ({x})"),
        _ => l,
    }
}

fn omitted(n: usize, out: &mut dyn Write) -> io::Result<()> {
    if n > 0 {
        writeln!(out, "({n} more unit(s) not shown: see --top)")?;
    }
    Ok(())
}

fn value_text(v: Value, bytes: bool) -> String {
    match v {
        Value::Count(n) if bytes => crate::bytes(n),
        Value::Count(n) => n.to_string(),
        Value::Percent(p) => format!("{p:.2}%"),
    }
}

fn gate(g: &Option<Gate>, bytes: bool, out: &mut dyn Write) -> io::Result<()> {
    let Some(g) = g else { return Ok(()) };
    let thresholds: Vec<String> = g
        .thresholds
        .iter()
        .map(|t| match t.ends_with('%') || !bytes {
            true => t.clone(),
            false => format!("{t} bytes"),
        })
        .collect();
    let what = format!(
        "growth gate: {} grown by more than {}",
        g.metric,
        thresholds.join(" and ")
    );
    if g.crossed.is_empty() {
        return writeln!(out, "\n{what}: no unit crossed it.");
    }
    writeln!(out, "\n{what}: {} unit(s) crossed it:", g.crossed.len())?;
    for c in &g.crossed {
        writeln!(
            out,
            "  {}: {} -> {} ({})",
            c.unit,
            value_text(c.a, bytes),
            value_text(c.b, bytes),
            c.growth_percent
                .map_or("new".to_string(), |p| format!("+{p:.1}%"))
        )?;
    }
    Ok(())
}

/// Writes a heap comparison in `format`.
pub fn write_heap(d: &HeapDiff, format: crate::Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        crate::Format::Table => heap_table(d, out),
        crate::Format::Json => crate::json(d, out),
        crate::Format::Csv => heap_csv(d, out),
    }
}

/// Writes a CPU comparison in `format`.
pub fn write_cpu(d: &CpuDiff, format: crate::Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        crate::Format::Table => cpu_table(d, out),
        crate::Format::Json => crate::json(d, out),
        crate::Format::Csv => cpu_csv(d, out),
    }
}

/// The heap columns other than the metric's own: (header, delta).
const HEAP_DELTAS: [(Metric, &str); 4] = [
    (Metric::Max, "Δmax"),
    (Metric::Net, "Δnet"),
    (Metric::Allocated, "Δallocated"),
    (Metric::Calls, "Δcalls"),
];

fn heap_value(f: &HeapFigures, m: Metric) -> i64 {
    f.metric(m)
        .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn heap_text(v: i64, m: Metric, sign: bool) -> String {
    match (m.is_bytes(), sign) {
        (true, true) => signed_bytes(v),
        (true, false) => crate::bytes(v),
        (false, true) => signed(v),
        (false, false) => v.to_string(),
    }
}

/// The heap comparison as a table for people.
pub fn heap_table(d: &HeapDiff, out: &mut dyn Write) -> io::Result<()> {
    let metric = metric_of(d.metric, Metric::Max);
    let mut h = Header::new(format!(
        "tansa heap diff: by {}, sorted by the change of {} (charge {}, releases charged to {})",
        d.by, d.metric, d.charge, d.free_to
    ));
    for (name, s) in [("A", &d.a), ("B", &d.b)] {
        h.line(format!(
            "{name}: {}: process {} `{}`: {}; {} events over {}",
            s.file,
            s.pid,
            s.command.join(" "),
            s.exit,
            s.events,
            duration(s.duration_ns)
        ));
    }
    for w in &d.warnings {
        h.line(format!("warning: {w}"));
    }
    h.write(out)?;
    let m = d.metric;
    let (col_a, col_b, col_d) = (format!("{m} A"), format!("{m} B"), format!("Δ{m}"));
    let mut headers: Vec<(&str, Align)> = vec![
        ("unit", Align::Left),
        (&col_a, Align::Right),
        (&col_b, Align::Right),
        (&col_d, Align::Right),
        ("Δ%", Align::Right),
    ];
    let others: Vec<(Metric, &str)> = HEAP_DELTAS
        .into_iter()
        .filter(|(x, _)| *x != metric)
        .collect();
    headers.extend(others.iter().map(|(_, name)| (*name, Align::Right)));
    let mut t = Table::new(&headers);
    let row = |label: String, u: Option<&HeapUnitDiff>, a: &HeapFigures, b: &HeapFigures| {
        let (va, vb) = (heap_value(a, metric), heap_value(b, metric));
        let status = u.map_or(Status::Changed, |u| u.status);
        let rel = relative(status, va as f64, vb as f64);
        let mut cells = vec![
            label,
            heap_text(va, metric, false),
            heap_text(vb, metric, false),
            heap_text(vb.saturating_sub(va), metric, true),
            rel,
        ];
        for (x, _) in &others {
            let delta = heap_value(b, *x).saturating_sub(heap_value(a, *x));
            cells.push(heap_text(delta, *x, true));
        }
        cells
    };
    for u in &d.units {
        t.row(row(row_label(u), Some(u), &u.a, &u.b));
    }
    t.row(row("(total)".to_string(), None, &d.totals.a, &d.totals.b));
    t.write(out)?;
    omitted(d.units_omitted, out)?;
    gate(&d.gate, metric.is_bytes(), out)
}

/// The CPU comparison as a table for people.
pub fn cpu_table(d: &CpuDiff, out: &mut dyn Write) -> io::Result<()> {
    let metric = metric_of(d.metric, Metric::SelfSamples);
    let mut h = Header::new(format!(
        "tansa CPU diff: by {}, sorted by the change of the {} share (percent of each run's samples)",
        d.by, d.metric
    ));
    for (name, s) in [("A", &d.a), ("B", &d.b)] {
        h.line(format!(
            "{name}: {}: {} samples of {} by {} every {} ({} of CPU time) over {} wall time",
            s.file,
            s.total_samples,
            s.event,
            s.source,
            duration(s.period_ns),
            duration(s.total_samples.saturating_mul(s.period_ns)),
            duration(s.duration_ns)
        ));
    }
    for w in &d.warnings {
        h.line(format!("warning: {w}"));
    }
    h.write(out)?;
    let (m, other) = match metric {
        Metric::TotalSamples => ("total", "self"),
        _ => ("self", "total"),
    };
    let heads: Vec<String> = vec![
        format!("{m}% A"),
        format!("{m}% B"),
        format!("Δ{m}%"),
        format!("{m} A"),
        format!("{m} B"),
        format!("Δ{m}"),
        format!("Δ{other}%"),
    ];
    let mut headers: Vec<(&str, Align)> =
        heads.iter().map(|h| (h.as_str(), Align::Right)).collect();
    headers.push((d.by, Align::Left));
    let mut t = Table::new(&headers);
    let pick = |f: &CpuFigures, total: bool| {
        if total {
            (f.total_percent, f.total_samples)
        } else {
            (f.self_percent, f.self_samples)
        }
    };
    let is_total = metric == Metric::TotalSamples;
    let row = |label: String, a: &CpuFigures, b: &CpuFigures| {
        let (pa, na) = pick(a, is_total);
        let (pb, nb) = pick(b, is_total);
        let (oa, ob) = (pick(a, !is_total).0, pick(b, !is_total).0);
        vec![
            format!("{pa:.2}"),
            format!("{pb:.2}"),
            points(pb - pa),
            na.to_string(),
            nb.to_string(),
            signed(i64::try_from(i128::from(nb) - i128::from(na)).unwrap_or(i64::MAX)),
            points(ob - oa),
            label,
        ]
    };
    for u in &d.units {
        let mut label = row_label(u);
        match u.status {
            Status::Added => label.push_str(" [new]"),
            Status::Removed => label.push_str(" [gone]"),
            _ => {}
        }
        t.row(row(label, &u.a, &u.b));
    }
    t.row(row("(total)".to_string(), &d.totals.a, &d.totals.b));
    t.write(out)?;
    omitted(d.units_omitted, out)?;
    gate(&d.gate, false, out)
}

/// Columns every CSV row starts with.
const KEY_COLUMNS: [&str; 7] = [
    "unit",
    "status",
    "call_index",
    "interval_index",
    "occurrence",
    "a_unit",
    "b_unit",
];

fn key_cells<F, D>(u: &UnitDiff<F, D>) -> Vec<String> {
    let opt = |v: Option<String>| v.unwrap_or_default();
    vec![
        u.unit.clone(),
        match u.status {
            Status::Changed => "changed",
            Status::Unchanged => "unchanged",
            Status::Added => "added",
            Status::Removed => "removed",
        }
        .to_string(),
        opt(u.call_index.map(|v| v.to_string())),
        opt(u.interval_index.map(|v| v.to_string())),
        opt(u.occurrence.map(|v| v.to_string())),
        opt(u.a_unit.clone()),
        opt(u.b_unit.clone()),
    ]
}

fn total_key() -> Vec<String> {
    let mut k = vec!["(total)".to_string(), "total".to_string()];
    k.resize(KEY_COLUMNS.len(), String::new());
    k
}

const HEAP_FIELDS: [&str; 11] = [
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
    "total_calls",
];

fn heap_fields(f: &HeapFigures) -> [i128; 11] {
    let (s, c) = (&f.stats, &f.stats.calls);
    [
        s.net_bytes.into(),
        s.max_bytes.into(),
        s.min_bytes.into(),
        s.allocated_bytes.into(),
        s.freed_bytes.into(),
        c.malloc.into(),
        c.calloc.into(),
        c.realloc.into(),
        c.free.into(),
        c.memalign.into(),
        f.total_calls.into(),
    ]
}

/// The heap comparison as CSV: one row per unit (A's, B's and the change of every figure),
/// then a `(total)` row of status `total`.
pub fn heap_csv(d: &HeapDiff, out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    let mut header: Vec<String> = KEY_COLUMNS.iter().map(|s| s.to_string()).collect();
    for side in ["a", "b", "delta"] {
        header.extend(HEAP_FIELDS.iter().map(|f| format!("{side}_{f}")));
    }
    // Added later, after every column that was there before (scripts read by position).
    header.extend(["a", "b", "delta"].map(|side| format!("{side}_temporary_allocations")));
    w.write_record(&header).map_err(crate::csv_io)?;
    let cells = |key: Vec<String>, a: &HeapFigures, b: &HeapFigures| {
        let (fa, fb) = (heap_fields(a), heap_fields(b));
        let mut row = key;
        row.extend(fa.iter().map(i128::to_string));
        row.extend(fb.iter().map(i128::to_string));
        row.extend(fa.iter().zip(&fb).map(|(x, y)| (y - x).to_string()));
        let (ta, tb) = (
            i128::from(a.stats.temporary_allocations),
            i128::from(b.stats.temporary_allocations),
        );
        row.extend([ta, tb, tb - ta].map(|v| v.to_string()));
        row
    };
    for u in &d.units {
        w.write_record(cells(key_cells(u), &u.a, &u.b))
            .map_err(crate::csv_io)?;
    }
    w.write_record(cells(total_key(), &d.totals.a, &d.totals.b))
        .map_err(crate::csv_io)?;
    w.flush()
}

/// The CPU comparison as CSV: one row per unit, then a `(total)` row of status `total`.
pub fn cpu_csv(d: &CpuDiff, out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    let mut header: Vec<String> = KEY_COLUMNS.iter().map(|s| s.to_string()).collect();
    for side in ["a", "b", "delta"] {
        for f in [
            "self_samples",
            "total_samples",
            "self_percent",
            "total_percent",
        ] {
            header.push(format!("{side}_{f}"));
        }
    }
    w.write_record(&header).map_err(crate::csv_io)?;
    let cells = |key: Vec<String>, a: &CpuFigures, b: &CpuFigures, delta: &CpuDelta| {
        let mut row = key;
        for f in [a, b] {
            row.extend([
                f.self_samples.to_string(),
                f.total_samples.to_string(),
                format!("{:.2}", f.self_percent),
                format!("{:.2}", f.total_percent),
            ]);
        }
        row.extend([
            delta.self_samples.to_string(),
            delta.total_samples.to_string(),
            format!("{:.2}", delta.self_percent),
            format!("{:.2}", delta.total_percent),
        ]);
        row
    };
    for u in &d.units {
        w.write_record(cells(key_cells(u), &u.a, &u.b, &u.delta))
            .map_err(crate::csv_io)?;
    }
    let t = &d.totals;
    w.write_record(cells(total_key(), &t.a, &t.b, &t.delta))
        .map_err(crate::csv_io)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    #[test]
    fn signs() {
        assert_eq!(super::signed_bytes(1536), "+1.5 KiB");
        assert_eq!(super::signed_bytes(-64), "-64 B");
        assert_eq!(super::signed_bytes(0), "0 B");
        assert_eq!(super::signed(3), "+3");
        assert_eq!(super::signed(-3), "-3");
        assert_eq!(super::points(0.0), "0.00");
        assert_eq!(super::points(-2.5), "-2.50");
        assert_eq!(super::points(10.0), "+10.00");
    }
}
