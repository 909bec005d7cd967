//! A plain-text table for people.

use std::io::{self, Write};

use tansa_leaktest::report::Report;

use crate::header::Header;
use crate::table::{Align, Table};

pub(super) fn write(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let faults = r.processes.iter().filter(|p| p.fault).count();
    Header::new(format!(
        "tansa leaktest: {} process{}, {} item{}, {} run{} in {:.1} s: {}",
        r.processes.len(),
        plural_es(r.processes.len()),
        r.items.len(),
        plural(r.items.len()),
        r.summary.runs,
        plural(r.summary.runs as usize),
        r.duration_ms as f64 / 1000.0,
        if faults > 0 {
            format!("FAULT in {faults} process{}", plural_es(faults))
        } else {
            "no fault".to_string()
        }
    ))
    .write(out)?;

    let mut t = Table::new(&[
        ("PROCESS", Align::Left),
        ("VERDICT", Align::Left),
        ("MEANING", Align::Left),
        ("ITEM", Align::Left),
        ("RESOURCE", Align::Left),
        ("RUNS", Align::Left),
        ("WHY", Align::Left),
    ]);
    for p in &r.processes {
        if p.findings.is_empty() {
            t.row(vec![
                p.name.clone(),
                p.verdict.code().into(),
                p.verdict.meaning().into(),
                "-".into(),
                "-".into(),
                "-".into(),
                p.reason.clone(),
            ]);
        }
        for &i in &p.findings {
            let f = &r.findings[i];
            t.row(vec![
                p.name.clone(),
                f.verdict.code().into(),
                f.verdict.meaning().into(),
                f.item.clone(),
                f.resource.map_or("-", |x| x.name()).into(),
                if f.runs.is_empty() {
                    "-".into()
                } else {
                    f.runs.len().to_string()
                },
                f.reason.clone(),
            ]);
        }
    }
    t.write(out)?;

    writeln!(out)?;
    writeln!(
        out,
        "Noise (spread of the {} readings of one measurement: median / max):",
        r.settings.readings
    )?;
    for p in &r.processes {
        let parts: Vec<String> = p
            .noise
            .iter()
            .map(|n| {
                let f = |v: u64| {
                    if n.resource.is_bytes() {
                        n.resource.format(v.try_into().unwrap_or(i64::MAX))
                    } else {
                        v.to_string()
                    }
                };
                format!(
                    "{} {} / {}",
                    n.resource.name(),
                    f(n.median_spread),
                    f(n.max_spread)
                )
            })
            .collect();
        if parts.is_empty() {
            writeln!(out, "  {}: never measured", p.name)?;
        } else {
            writeln!(out, "  {}: {}", p.name, parts.join(", "))?;
        }
        for n in p.noise.iter().filter_map(|n| n.warning.as_ref()) {
            writeln!(out, "    warning: {n}")?;
        }
    }

    if !r.items.is_empty() {
        writeln!(out)?;
        writeln!(out, "Runs per item:")?;
        for it in &r.items {
            let phases: Vec<String> = it
                .runs_by_phase
                .iter()
                .map(|(k, v)| format!("{} {v}", k.name()))
                .collect();
            writeln!(out, "  {}: {} ({})", it.name, it.runs, phases.join(", "))?;
        }
    }
    if !r.restarts.is_empty() {
        writeln!(out)?;
        writeln!(out, "Restarts:")?;
        for x in &r.restarts {
            match (&x.started, &x.error) {
                (Some(id), _) => writeln!(out, "  {} {}: now pid {}", x.process, x.why, id.pid)?,
                (None, Some(e)) => writeln!(out, "  {} {}: failed: {e}", x.process, x.why)?,
                (None, None) => writeln!(out, "  {} {}", x.process, x.why)?,
            }
        }
    }
    if !r.notes.is_empty() {
        writeln!(out)?;
        writeln!(out, "Notes:")?;
        for n in &r.notes {
            writeln!(out, "  {n}")?;
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn plural_es(n: usize) -> &'static str {
    if n == 1 { "" } else { "es" }
}
