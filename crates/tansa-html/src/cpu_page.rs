//! The CPU page: top functions with self and total samples, the per-process split by kind
//! of address space, libraries, source and assembly annotation of the hottest functions,
//! and the flame graphs given.

use serde::Serialize;
use tansa_analysis::cpu::CpuReport;
use tansa_analysis::cpu::annotate::Annotation;

use crate::{FlameGraph, HtmlError, Kind, Limits, Page};

/// The reports a CPU page is made from.
#[derive(Debug, Clone, Copy)]
pub struct CpuInput<'a> {
    /// What the page is about (the recording's file name), for its title.
    pub source: &'a str,
    /// Per function (`By::Function`).
    pub functions: &'a CpuReport,
    /// Per process (`By::Process`), with the split by kind of space.
    pub processes: &'a CpuReport,
    /// Per library (`By::Library`).
    pub libraries: &'a CpuReport,
    /// Annotations of the hottest functions (see [`CpuInput::hottest`]), hottest first.
    pub annotations: &'a [Annotation],
}

impl CpuInput<'_> {
    /// The `n` functions with the most self samples in `functions`, as `annotate` takes
    /// them: the functions to annotate.
    pub fn hottest(functions: &CpuReport, n: usize) -> Vec<String> {
        let mut units: Vec<_> = functions
            .units
            .iter()
            .filter(|u| u.self_samples > 0)
            .collect();
        units.sort_by(|a, b| {
            b.self_samples
                .cmp(&a.self_samples)
                .then(a.unit.cmp(&b.unit))
        });
        units.into_iter().take(n).map(|u| u.unit.clone()).collect()
    }
}

#[derive(Debug, Serialize)]
struct AsmData {
    offset: u64,
    text: String,
    samples: u64,
    /// `file:line` when it changes from the previous instruction's.
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<String>,
}

#[derive(Debug, Serialize)]
struct SourceData {
    file: String,
    available: bool,
    /// Line number, text, samples.
    lines: Vec<(u32, Option<String>, u64)>,
    truncated: usize,
}

#[derive(Debug, Serialize)]
struct AnnotationData {
    unit: String,
    module_path: String,
    start: u64,
    size: u64,
    samples: u64,
    all_samples: u64,
    instructions: Vec<AsmData>,
    truncated: usize,
    sources: Vec<SourceData>,
}

#[derive(Debug, Serialize)]
struct CpuData<'a> {
    source: &'a str,
    header: Header<'a>,
    functions: &'a [tansa_analysis::cpu::report::CpuUnit],
    function_count: usize,
    processes: &'a [tansa_analysis::cpu::report::CpuUnit],
    libraries: &'a [tansa_analysis::cpu::report::CpuUnit],
    annotations: Vec<AnnotationData>,
    flame_graphs: &'a [FlameGraph],
}

#[derive(Debug, Serialize)]
struct Header<'a> {
    event: &'a str,
    sampler: &'static str,
    target: &'a str,
    period_ns: u64,
    total_samples: u64,
    duration_ns: u64,
    cpus: u32,
    kernel: bool,
    lost_samples: u64,
    lost_records: u64,
    pid: Option<u32>,
    notes: &'a [String],
    warnings: &'a [String],
}

fn annotation(a: &Annotation, max_lines: usize) -> AnnotationData {
    // Keep the instructions around the samples when the function is long: the hottest
    // instructions and their neighbours, in address order.
    let n = a.instructions.len();
    let keep: Vec<bool> = if n <= max_lines {
        vec![true; n]
    } else {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&x, &y| a.instructions[y].samples.cmp(&a.instructions[x].samples));
        let mut keep = vec![false; n];
        let mut kept = 0;
        for i in order {
            for k in &mut keep[i.saturating_sub(3)..(i + 4).min(n)] {
                if !*k && kept < max_lines {
                    *k = true;
                    kept += 1;
                }
            }
            if kept >= max_lines {
                break;
            }
        }
        keep
    };
    let mut last_line = None;
    let mut instructions = Vec::new();
    for (i, ins) in a.instructions.iter().enumerate() {
        let line = ins.file.as_ref().map(|f| format!("{f}:{}", ins.line));
        let changed = line != last_line;
        last_line = line.clone();
        if keep[i] {
            instructions.push(AsmData {
                offset: ins.offset,
                text: ins.text.clone(),
                samples: ins.samples,
                line: if changed { line } else { None },
            });
        }
    }
    let sources = a
        .sources
        .iter()
        .map(|b| SourceData {
            file: b.file.clone(),
            available: b.available,
            lines: b
                .lines
                .iter()
                .take(max_lines)
                .map(|l| (l.line, l.text.clone(), l.samples))
                .collect(),
            truncated: b.lines.len().saturating_sub(max_lines),
        })
        .collect();
    AnnotationData {
        unit: a.unit.clone(),
        module_path: a.module_path.clone(),
        start: a.start,
        size: a.size,
        samples: a.samples,
        all_samples: a.all_samples,
        truncated: n - instructions.len(),
        instructions,
        sources,
    }
}

/// Builds the CPU page.
pub fn cpu(
    input: &CpuInput<'_>,
    flame_graphs: &[FlameGraph],
    limits: &Limits,
) -> Result<Page, HtmlError> {
    let f = input.functions;
    let data = CpuData {
        source: input.source,
        header: Header {
            event: &f.event,
            sampler: f.source,
            target: &f.target,
            period_ns: f.period_ns,
            total_samples: f.total_samples,
            duration_ns: f.duration_ns,
            cpus: f.cpus,
            kernel: f.kernel,
            lost_samples: f.lost_samples,
            lost_records: f.lost_records,
            pid: f.pid,
            notes: &f.notes,
            warnings: &f.warnings,
        },
        functions: &f.units[..f.units.len().min(limits.cpu_functions)],
        function_count: f.units.len(),
        processes: &input.processes.units,
        libraries: &input.libraries.units[..input.libraries.units.len().min(limits.cpu_functions)],
        annotations: input
            .annotations
            .iter()
            .map(|a| annotation(a, limits.annotation_lines))
            .collect(),
        flame_graphs,
    };
    Page::new(
        Kind::Cpu,
        format!("tansa CPU report: {}", input.source),
        &data,
    )
}
