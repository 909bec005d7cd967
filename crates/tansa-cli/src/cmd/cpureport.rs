//! `tansa report` on a CPU recording (from `tansa sample`), and the `--by` values of both
//! kinds of recording.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write as _};
use std::path::Path;
use std::process::ExitCode;

use clap::ValueEnum;
use tansa_analysis::cpu::{self, By, CpuRecording};
use tansa_format::container::{Kind, Reader};

use super::memopts::{ByArg, FormatArg};

/// `--by`: the union of the units of memory and CPU recordings; each kind accepts its own.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ReportBy {
    /// Per shared library (memory and CPU).
    Library,
    /// Per function, named module!function (memory and CPU).
    Function,
    /// Per thread (memory).
    Thread,
    /// Per call of a library (memory).
    Call,
    /// Per library per time interval (memory).
    Interval,
    /// Per process: user executable, shared libraries, kernel (CPU).
    Process,
    /// Per process and address space (CPU).
    Space,
    /// Per source line, inlined code on its own line (CPU).
    Line,
    /// Per instruction address (CPU).
    Instruction,
}

const MEMORY_BY: &str = "library, function, thread, call, interval";
const CPU_BY: &str = "process, space, library, function, line, instruction";

fn by_name(b: ReportBy) -> String {
    b.to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

/// The memory unit for `--by` (default `library`), or an error naming the valid ones.
pub fn memory_by(by: Option<ReportBy>, file: &Path) -> anyhow::Result<ByArg> {
    Ok(match by.unwrap_or(ReportBy::Library) {
        ReportBy::Library => ByArg::Library,
        ReportBy::Function => ByArg::Function,
        ReportBy::Thread => ByArg::Thread,
        ReportBy::Call => ByArg::Call,
        ReportBy::Interval => ByArg::Interval,
        other => {
            return Err(crate::exit::usage(format!(
                "--by {} applies to CPU recordings; {} is a memory recording (valid: {MEMORY_BY})",
                by_name(other),
                file.display()
            )));
        }
    })
}

/// The CPU unit for `--by` (default `process`), or an error naming the valid ones.
pub fn cpu_by(by: Option<ReportBy>, file: &Path) -> anyhow::Result<By> {
    Ok(match by.unwrap_or(ReportBy::Process) {
        ReportBy::Process => By::Process,
        ReportBy::Space => By::Space,
        ReportBy::Library => By::Library,
        ReportBy::Function => By::Function,
        ReportBy::Line => By::Line,
        ReportBy::Instruction => By::Instruction,
        other => {
            return Err(crate::exit::usage(format!(
                "--by {} applies to memory recordings; {} is a CPU recording (valid: {CPU_BY})",
                by_name(other),
                file.display()
            )));
        }
    })
}

/// Whether `file` is a CPU recording (the file position is left at its start).
pub fn is_cpu_recording(mut file: &File) -> bool {
    let kind = Reader::new(Read::by_ref(&mut file)).map(|r| r.kind()).ok();
    let _ = file.seek(SeekFrom::Start(0));
    kind == Some(Kind::Cpu)
}

/// Opens and reads a CPU recording, with clear messages.
pub fn open(path: &Path) -> anyhow::Result<CpuRecording> {
    let file = File::open(path).map_err(|e| crate::exit::cannot_open(path, e))?;
    read(path, file)
}

/// Reads a CPU recording from `file`, with clear messages.
fn read(path: &Path, file: File) -> anyhow::Result<CpuRecording> {
    match CpuRecording::open(BufReader::with_capacity(1 << 20, file)) {
        Ok(r) => Ok(r),
        Err(cpu::CpuRecordingError::WrongKind { found }) => anyhow::bail!(
            "{}: a {found}; this command reads CPU recordings (from `tansa sample`)",
            path.display()
        ),
        Err(cpu::CpuRecordingError::Format(e)) => Err(crate::exit::unreadable(path, &e)),
        Err(e) => anyhow::bail!("{}: {e}; record again", path.display()),
    }
}

/// What `tansa report` passes on for a CPU recording.
#[derive(Debug)]
pub struct ReportArgs<'a> {
    /// The file's path.
    pub file: &'a Path,
    /// The open file.
    pub input: File,
    /// `--by`.
    pub by: Option<ReportBy>,
    /// `--format`.
    pub format: FormatArg,
    /// `--pid`.
    pub pid: Option<u32>,
    /// `-o`.
    pub output: Option<&'a Path>,
}

/// Reports on a CPU recording.
pub fn run(args: ReportArgs<'_>) -> anyhow::Result<ExitCode> {
    let by = cpu_by(args.by, args.file)?;
    let rec = read(args.file, args.input)?;
    if let Some(pid) = args.pid
        && !rec.processes.iter().any(|p| p.pid == pid)
    {
        let mut pids: Vec<u32> = rec.processes.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let list: Vec<String> = pids.iter().take(50).map(u32::to_string).collect();
        return Err(crate::exit::usage(format!(
            "process {pid} is not in {} (it has: {}{})",
            args.file.display(),
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            },
            if pids.len() > 50 { ", ..." } else { "" }
        )));
    }
    let report = cpu::report(&rec, cpu::Options { by, pid: args.pid });
    let mut out = crate::output::open(args.output)?;
    match args.format {
        FormatArg::Table => tansa_render::cpu::table(&report, &mut out)?,
        FormatArg::Json => tansa_render::cpu::json(&report, &mut out)?,
        FormatArg::Csv => tansa_render::cpu::csv(&report, &mut out)?,
    }
    out.flush()?;
    // The report's warnings start with the recording's.
    Ok(crate::exit::finish(
        args.file,
        rec.damaged,
        &report.warnings,
    ))
}

/// Success, or [`crate::exit::DAMAGED`] when the recording is truncated or damaged (the
/// output then covers the data before the damage); the warnings go to standard error.
pub fn exit_status(path: &Path, rec: &CpuRecording) -> ExitCode {
    crate::exit::finish(path, rec.damaged, &rec.warnings)
}
