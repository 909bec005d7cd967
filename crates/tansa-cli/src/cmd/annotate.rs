//! `tansa annotate`: one function's instructions and source lines with their samples.

use std::path::PathBuf;
use std::process::ExitCode;

use tansa_analysis::cpu::annotate;

use super::report_cpu;

/// Options of `tansa annotate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa annotate run.tansa work                 disassembly of `work` with samples
  tansa annotate run.tansa libm.so.6!sin --asm
  tansa annotate run.tansa work --source        its source lines with samples

Everything comes from the recording (code, lines and source text are stored in it), so this
works after the binaries and sources are gone. A clock sample names the instruction where
execution resumed, so a slow instruction's time often shows on the next one (skid).

Exit status: 0 on success; 1 when the recording cannot be read; 2 for a wrong command line
(a function that is not in the recording); 3 when the recording is truncated or damaged
(the listing then covers what was recorded before the damage).")]
pub struct Args {
    /// A CPU recording (from `tansa sample`).
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// The function: `function` or `module!function` as `tansa report --by function`
    /// names it.
    #[arg(value_name = "FUNCTION")]
    function: String,

    /// The disassembly with per-instruction samples, interleaved with source lines
    /// (the default).
    #[arg(long, conflicts_with = "source")]
    asm: bool,

    /// The source files with per-line samples.
    #[arg(long)]
    source: bool,

    /// Count only the samples of this process id.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,

    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `tansa annotate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rec = report_cpu::open(&args.file)?;
    if let Some(pid) = args.pid
        && !rec.processes.iter().any(|p| p.pid == pid)
    {
        return Err(crate::exit::no_such_process(
            pid,
            &args.file,
            rec.processes.iter().map(|p| p.pid),
        ));
    }
    // A function that is not in the recording is a wrong argument, unless the recording
    // is damaged: the function may be in the part that was lost, which is said first.
    let a = match annotate::annotate(&rec, &args.function, args.pid) {
        Ok(a) => a,
        Err(e) if rec.damaged => {
            crate::exit::print_warnings(&args.file, &rec.warnings);
            anyhow::bail!(
                "{}: {e}; the recording is damaged, and the function may have been in the part \
                 that was lost",
                args.file.display()
            );
        }
        Err(e) => return Err(crate::exit::usage(format!("{}: {e}", args.file.display()))),
    };
    let mut out = crate::output::open(args.output.as_deref(), &[&args.file])?;
    if args.source {
        tansa_render::cpu::annotate_source(&a, &mut out)?;
    } else {
        tansa_render::cpu::annotate_asm(&a, &mut out)?;
    }
    out.finish()?;
    Ok(report_cpu::exit_status(&args.file, &rec))
}
