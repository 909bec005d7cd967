//! `tansa html FILE`: a self-contained HTML report of a heap recording, a CPU recording or
//! a leak-test report (JSON).

use std::io::{Read, Seek as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tansa_analysis::cpu::{self, annotate};
use tansa_analysis::memory::By;
use tansa_analysis::memory::leaks;
use tansa_html::{CpuInput, FlameGraph, HeapInput, Limits, Page};

use super::options::{self, ChargeArg, FreeToArg};
use super::report_cpu;
use crate::exit;
use crate::output;

/// Options of `tansa html`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa html run.tansa                  heap recording -> run.html
  tansa html cpu.tansa -o cpu.html      CPU recording
  tansa html report.json                leak-test report (tansa leaktest PLAN --format json)
  tansa html job-*.tansa -o job.html    the ranks of one MPI job, as one report

The page is one file with its scripts and data inside: it needs no network and no server.
Heap: the heap over time per library (drag across it to choose a time range: the tables
follow), sortable tables by library, function, thread and call, leak sites, improper uses,
the process tree. CPU: top functions (self and total), the split per process and space,
libraries, and the source and assembly of the hottest functions. Leak test: each watched
process's measurements with the runs and phases marked, and each verdict with its series.
Long recordings are summed into at most 400 time intervals and the largest units, so the
page stays small.

Without -o the page is written to the current directory as NAME.html (NAME: the input's
name without its extension), never replacing a file: NAME.1.html, ... when taken.
Exit status: 0 on success; 1 when the input cannot be read; 2 for a wrong command line; 3
when the recording is truncated or damaged (the page covers what was recorded before the
damage).")]
pub struct Args {
    /// A heap recording (`tansa record`), a CPU recording (`tansa sample`) or a leak-test
    /// report in JSON (`tansa leaktest PLAN --format json`).
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// More heap recordings, read with FILE as one job (the ranks of an MPI job): the
    /// page's process table shows each process's rank and host, and a table the ranks.
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,

    /// Write the page to OUT.html (replaced if it exists; `-` for standard output).
    #[arg(short, long, value_name = "OUT.html")]
    output: Option<PathBuf>,

    /// Report on one process of a recorded process tree (default: all merged).
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,

    /// Which frame of each stack is charged (heap) [default: first].
    #[arg(long, value_enum)]
    charge: Option<ChargeArg>,

    /// Who releases are charged to (heap) [default: owner].
    #[arg(long, value_enum)]
    free_to: Option<FreeToArg>,

    /// Also treat FUNCTION as an allocation function, as `operator new`, `strdup` and the
    /// known wrappers (`xmalloc`, `g_malloc`, `PyObject_Malloc`, ...) are (heap): an
    /// allocation made through it is charged to, and its leak site named after, its
    /// caller. A name as symbols give it or a short one (`my_alloc`, `Pool::get`);
    /// repeatable.
    #[arg(long = "alloc-fn", value_name = "FUNCTION")]
    alloc_fn: Vec<String>,

    /// How many of the hottest functions get their source and assembly (CPU).
    #[arg(long, value_name = "N", default_value_t = 5)]
    annotate: usize,
}

/// What the input is.
enum Input {
    Heap,
    Cpu,
    LeaktestJson,
}

fn kind_of(path: &Path) -> anyhow::Result<Input> {
    let mut file = options::open_recording(path)?;
    let mut magic = [0u8; 8];
    let n = file.read(&mut magic).unwrap_or(0);
    if n == 8 && &magic == b"TANSAREC" {
        file.rewind().map_err(|e| exit::cannot_open(path, e))?;
        return Ok(if report_cpu::is_cpu_recording(&file) {
            Input::Cpu
        } else {
            Input::Heap
        });
    }
    Ok(Input::LeaktestJson)
}

/// Runs `tansa html`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let input = kind_of(&args.file)?;
    if !args.more.is_empty() {
        if !matches!(input, Input::Heap) {
            return Err(exit::usage(format!(
                "several inputs are read as one job only when they are heap recordings; {} \
                 is not one",
                args.file.display()
            )));
        }
        let mut all = vec![args.file.clone()];
        all.extend(args.more.iter().cloned());
        super::report::refuse_cpu(&all, "`tansa html`")?;
    }
    let heap_only = [
        ("--charge", args.charge.is_some()),
        ("--free-to", args.free_to.is_some()),
        ("--alloc-fn", !args.alloc_fn.is_empty()),
    ];
    if !matches!(input, Input::Heap)
        && let Some((flag, _)) = heap_only.iter().find(|f| f.1)
    {
        return Err(exit::usage(format!(
            "{flag} applies to heap recordings; {} is not one",
            args.file.display()
        )));
    }
    if matches!(input, Input::LeaktestJson) && args.pid.is_some() {
        return Err(exit::usage(format!(
            "--pid applies to recordings; {} is not one",
            args.file.display()
        )));
    }
    let limits = Limits::default();
    let source = args.file.file_name().map_or_else(
        || args.file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let (page, status) = match input {
        Input::Heap => heap(&args, &source, &limits)?,
        Input::Cpu => cpu(&args, &source, &limits)?,
        Input::LeaktestJson => (leaktest_json(&args.file, &source)?, ExitCode::SUCCESS),
    };
    let mut inputs = vec![args.file.as_path()];
    inputs.extend(args.more.iter().map(PathBuf::as_path));
    write_page(&page, args.output.as_deref(), &args.file, &inputs)?;
    Ok(status)
}

/// Writes `page` to `output` (`-`: standard output) or to its default name, `NAME.html` in
/// the current directory, named after `input`; `inputs` are every file the page was made
/// from (the output may not be one of them).
pub fn write_page(
    page: &Page,
    output: Option<&Path>,
    input: &Path,
    inputs: &[&Path],
) -> anyhow::Result<()> {
    let default = output::default_name(input, "html");
    let written = output::write_whole(output, &default, inputs, |w| Ok(page.write(w)?))?;
    if let Some(path) = written {
        eprintln!("tansa: wrote {}", path.display());
    }
    Ok(())
}

fn heap(args: &Args, source: &str, limits: &Limits) -> anyhow::Result<(Page, ExitCode)> {
    let mut paths = vec![args.file.clone()];
    paths.extend(args.more.iter().cloned());
    let mut recording = super::report::open_memory_job(
        &paths,
        args.pid,
        None,
        &args.alloc_fn,
        "`tansa html` reads heap and CPU recordings and leak-test reports",
    )?;
    let base = options::memory_config(
        By::Library,
        args.charge.unwrap_or(ChargeArg::First),
        args.free_to.unwrap_or(FreeToArg::Owner),
        Duration::from_millis(100),
        args.pid,
    );
    let configs = tansa_html::heap_configs(base, recording.span_ns(), limits);
    let progress = options::spinner("reading events");
    let (reports, stacks) = recording.reports_with_stacks(&configs, |n| {
        if let Some(p) = &progress {
            p.set_message(format!("{} million events", n >> 20));
            p.tick();
        }
    });
    if let Some(p) = &progress {
        p.set_message("leak sites");
        p.tick();
    }
    // The leak report reads the events again, with a prefetcher of its own.
    if paths.len() <= super::report::MAX_PREFETCHED {
        for (i, path) in paths.iter().enumerate() {
            if let Ok(second) = tansa_format::input::open(path) {
                recording.prefetch_part(i, second);
            }
        }
    }
    let mut leak_report = leaks::report_without_stacks(&recording);
    if let Some(pid) = args.pid {
        leak_report.sites.retain(|s| s.pid == pid);
    }
    // The page shows the sites not freed, each with its repeats folded in: their stacks
    // decide what repeats what.
    leaks::fill_stacks(&mut leak_report, &recording, |s| s.judgement != "freed");
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    let [library, function, thread, call] = &reports[..] else {
        anyhow::bail!(
            "internal error: {} heap reports for 4 configurations",
            reports.len()
        );
    };
    let profile =
        tansa_analysis::profile::heap::from_figures(&recording.registry, &stacks, library);
    let flames = flame_graphs(&profile, &["allocated", "live", "peak"])?;
    let page = tansa_html::heap(
        &HeapInput {
            source,
            library,
            function,
            thread,
            call,
            leaks: Some(&leak_report),
        },
        &flames,
        limits,
    )?;
    let status = exit::finish_all(&paths, recording.is_damaged(), &library.warnings);
    Ok((page, status))
}

fn cpu(args: &Args, source: &str, limits: &Limits) -> anyhow::Result<(Page, ExitCode)> {
    let rec = report_cpu::open(&args.file)?;
    if let Some(pid) = args.pid
        && !rec.processes.iter().any(|p| p.pid == pid)
    {
        return Err(exit::no_such_process(
            pid,
            &args.file,
            rec.processes.iter().map(|p| p.pid),
        ));
    }
    let progress = options::spinner("aggregating samples");
    let report = |by| cpu::report(&rec, cpu::Options { by, pid: args.pid });
    let functions = report(cpu::By::Function);
    let processes = report(cpu::By::Process);
    let libraries = report(cpu::By::Library);
    let mut annotations = Vec::new();
    for name in CpuInput::hottest(&functions, args.annotate) {
        if let Some(p) = &progress {
            p.set_message(format!("annotating {name}"));
            p.tick();
        }
        // A function without stored code (the kernel's, say) has no listing: left out.
        if let Ok(a) = annotate::annotate(&rec, &name, args.pid) {
            annotations.push(a);
        }
    }
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    let flames = flame_graphs(
        &tansa_analysis::profile::cpu::profile(&rec, args.pid),
        &["samples"],
    )?;
    let page = tansa_html::cpu(
        &CpuInput {
            source,
            functions: &functions,
            processes: &processes,
            libraries: &libraries,
            annotations: &annotations,
        },
        &flames,
        limits,
    )?;
    let status = exit::finish(&args.file, rec.damaged, &functions.warnings);
    Ok((page, status))
}

/// The flame graphs of `profile` under each of `weights` (names of
/// [`tansa_export::weights`]).
fn flame_graphs(
    profile: &tansa_analysis::profile::Profile,
    weights: &[&str],
) -> anyhow::Result<Vec<FlameGraph>> {
    let mut graphs = Vec::new();
    for &weight in weights {
        let value = tansa_export::weight_index(profile, Some(weight))?;
        let title = tansa_export::weights(profile.kind)
            .iter()
            .find(|w| w.0 == weight)
            .map_or(weight, |w| w.2);
        let mut svg = Vec::new();
        let options = tansa_export::flamegraph::Options {
            value,
            title: title.to_string(),
            ..Default::default()
        };
        tansa_export::flamegraph::write(profile, &options, &mut svg)?;
        graphs.push(FlameGraph {
            title: title.to_string(),
            svg: String::from_utf8_lossy(&svg).into_owned(),
        });
    }
    Ok(graphs)
}

fn leaktest_json(path: &Path, source: &str) -> anyhow::Result<Page> {
    let text = std::fs::read(path).map_err(|e| exit::cannot_open(path, e))?;
    let value: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: neither a tansa recording nor a leak-test report in JSON ({e})",
            path.display()
        )
    })?;
    tansa_html::leaktest(&value, source).with_context(|| path.display().to_string())
}
