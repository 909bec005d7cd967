//! `tansa report` on a CPU recording (from `tansa sample`); `tansa annotate` opens CPU
//! recordings here too.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::process::ExitCode;

use tansa_analysis::cpu::{self, CpuRecording};
use tansa_format::container::{Kind, Reader};

use super::options::{FormatArg, ReportBy};

/// Whether `file` is a CPU recording (the file position is left at its start).
pub fn is_cpu_recording(file: &File) -> bool {
    recording_kind(file).is_ok_and(|k| k == Kind::Cpu)
}

/// The kind of the recording in `file` (read from its header; the file is left at its
/// start), or why it is not a recording.
pub fn recording_kind(mut file: &File) -> Result<Kind, tansa_format::FormatError> {
    let kind = Reader::new(Read::by_ref(&mut file)).map(|r| r.kind());
    let _ = file.seek(SeekFrom::Start(0));
    kind
}

/// Opens and reads a CPU recording, with clear messages.
pub fn open(path: &Path) -> anyhow::Result<CpuRecording> {
    let file = super::options::open_recording(path)?;
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
    /// `--interval`.
    pub interval: Option<std::time::Duration>,
    /// `--format`.
    pub format: FormatArg,
    /// `--pid`.
    pub pid: Option<u32>,
    /// `--top` (checked).
    pub top: Option<usize>,
    /// `-o`.
    pub output: Option<&'a Path>,
}

/// Reports on a CPU recording.
pub fn run(args: ReportArgs<'_>) -> anyhow::Result<ExitCode> {
    let by = ReportBy::cpu(args.by, args.interval, args.file)?;
    let (report, damaged) = cpu_report(args.file, args.input, by, args.pid)?;
    let mut out = crate::output::open(args.output, &[args.file])?;
    tansa_render::cpu::write(&report, args.format.into(), args.top, &mut out)?;
    out.finish()?;
    // The report's warnings start with the recording's.
    Ok(crate::exit::finish(args.file, damaged, &report.warnings))
}

/// Reads the CPU recording `file` (at `path`) and reports on it by `by` (one process with
/// `pid`); also says whether the recording was damaged (the report then covers what came
/// before the damage).
pub fn cpu_report(
    path: &Path,
    file: File,
    by: cpu::By,
    pid: Option<u32>,
) -> anyhow::Result<(cpu::CpuReport, bool)> {
    let rec = read(path, file)?;
    if matches!(by, cpu::By::Interval { .. }) && !rec.info.timeline {
        return Err(crate::exit::usage(format!(
            "--by interval needs the time of each sample, which {} does not hold: record it \
             with `tansa sample --timeline`",
            path.display()
        )));
    }
    if let Some(pid) = pid
        && !rec.processes.iter().any(|p| p.pid == pid)
    {
        return Err(crate::exit::no_such_process(
            pid,
            path,
            rec.processes.iter().map(|p| p.pid),
        ));
    }
    Ok((cpu::report(&rec, cpu::Options { by, pid }), rec.damaged))
}

/// Success, or [`crate::exit::DAMAGED`] when the recording is truncated or damaged (the
/// output then covers the data before the damage); the warnings go to standard error.
pub fn exit_status(path: &Path, rec: &CpuRecording) -> ExitCode {
    crate::exit::finish(path, rec.damaged, &rec.warnings)
}
