//! `tansa leaks`: the leak report of a heap recording.

use std::path::PathBuf;
use std::process::ExitCode;

use tansa_analysis::memory::leaks;

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
  tansa leaks job-*.tansa                              an MPI job recorded per rank, as one

A site is judged leaking when it was freed at least once and its blocks still allocated kept
growing (at each of the last 3 of 8 moments of its process's run; while recording, at
each of the last 3 scans). Sites never freed are `no-free-site`: tansa does not guess why.
A site is one allocation stack in one process image; in the text view, the same stack in
other images of the same program (a script that runs it many times) is one line under the
first.")]
pub struct Args {
    /// A heap recording (`tansa record`, best with --leak-cause); several heap recordings
    /// (the ranks of one job) are read as one, each site named with its process and rank.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,

    /// Only the site with this number (as the report numbers them).
    #[arg(long, value_name = "N")]
    site: Option<usize>,

    /// In the text view, also the sites that are not leaking.
    #[arg(long)]
    all: bool,

    /// Also treat FUNCTION as an allocation function, as `operator new`, `strdup` and the
    /// known wrappers (`xmalloc`, `g_malloc`, `PyObject_Malloc`, ...) are: an
    /// allocation made through it is charged to, and its leak site named after, its
    /// caller. A name as symbols give it or a short one (`my_alloc`, `Pool::get`);
    /// repeatable.
    #[arg(long = "alloc-fn", value_name = "FUNCTION")]
    alloc_fn: Vec<String>,
}

/// Runs `tansa leaks`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.files.len() > 1 {
        super::report::refuse_cpu(&args.files, "`tansa leaks`")?;
    }
    let recording = super::report::open_memory_job(
        &args.files,
        None,
        None,
        &args.alloc_fn,
        "`tansa leaks` reads heap recordings (made by `tansa record`)",
    )?;
    let mut report = leaks::report_without_stacks(&recording);
    if let Some(n) = args.site {
        if !(1..=report.sites.len()).contains(&n) {
            let what = match &args.files[..] {
                [one] => format!("{} has", one.display()),
                several => format!("these {} recordings have", several.len()),
            };
            return Err(exit::usage(format!(
                "--site {n}: {what} {} site(s)",
                report.sites.len()
            )));
        }
        report.sites.retain(|s| s.index == n);
    }
    // The stacks of the sites shown: every site in JSON, the leaking ones (or all) in text.
    let every = args.all || args.site.is_some() || matches!(args.format, Format::Json);
    leaks::fill_stacks(&mut report, &recording, |s| every || s.worth_showing());
    let mut out = crate::output::open(None, &[])?;
    match args.format {
        Format::Json => tansa_render::leaks::json(&report, &mut out)?,
        Format::Text => tansa_render::leaks::text(
            &report,
            args.all || args.site.is_some(),
            &mut source_line,
            &mut out,
        )?,
    }
    out.flush()?;
    Ok(exit::finish_all(
        &args.files,
        recording.is_damaged(),
        &report.warnings,
    ))
}

/// The source line `line` of `file`, if it can be read.
fn source_line(file: &str, line: u32) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .nth((line as usize).checked_sub(1)?)
        .map(|l| l.trim().to_string())
}

use std::io::Write as _;
