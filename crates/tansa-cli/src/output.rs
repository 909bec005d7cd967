//! Where command output goes: a file given with `-o`, or standard output.
//!
//! Every output file goes through [`tansa_format::output::OutputFile`]: written to a private
//! temporary file next to its destination and moved into place only when complete, so a
//! name that is a symbolic link is replaced, never followed, and a report that fails
//! part-way leaves nothing behind. A name that is a stream (`/dev/null`, `/dev/stdout`, a
//! FIFO: [`tansa_format::output::is_stream`]) is written in place instead. An output that is
//! one of the command's inputs is refused before anything is written: moving a report over
//! it would destroy the recording.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tansa_format::output::{self, DEFAULT_MODE, Naming, OutputFile};

/// A command's output being written: standard output or standard error, or a file that
/// appears at its name only once [`Output::finish`] is called (dropped unfinished, it is
/// removed).
pub struct Output {
    sink: Sink,
}

enum Sink {
    Stream(BufWriter<Box<dyn Write>>),
    File {
        out: BufWriter<File>,
        file: Option<OutputFile>,
        dest: PathBuf,
        naming: Naming,
    },
}

impl Output {
    /// Standard error (the online report's default place).
    pub fn stderr() -> Output {
        Output {
            sink: Sink::Stream(BufWriter::new(Box::new(io::stderr()))),
        }
    }

    /// Flushes the output and, for a file, moves it into place; returns the file's name
    /// (`None` for a stream).
    pub fn finish(mut self) -> anyhow::Result<Option<PathBuf>> {
        match &mut self.sink {
            Sink::Stream(out) => {
                out.flush()?;
                Ok(None)
            }
            Sink::File {
                out,
                file,
                dest,
                naming,
            } => {
                out.flush()
                    .with_context(|| format!("cannot write {}", dest.display()))?;
                let file = file.take().context("output file already finished")?;
                let name = commit(file, dest, *naming)?;
                Ok(Some(name))
            }
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Stream(out) => out.write(buf),
            Sink::File { out, .. } => out.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stream(out) => out.write_all(buf),
            Sink::File { out, .. } => out.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stream(out) => out.flush(),
            Sink::File { out, .. } => out.flush(),
        }
    }
}

impl Drop for Output {
    /// An output abandoned part-way (the command failed) is removed: a report is made again
    /// from its recording, and a half-written one would only mislead.
    fn drop(&mut self) {
        if let Sink::File { file, .. } = &mut self.sink
            && let Some(f) = file.take()
        {
            f.discard();
        }
    }
}

/// Opens where a command's output goes: standard output when `path` is `None` or `-`, else
/// the file `path` (see the module documentation). `inputs` are the files the command
/// reads: an output that is one of them is refused.
pub fn open(path: Option<&Path>, inputs: &[&Path]) -> anyhow::Result<Output> {
    match path {
        Some(p) if p != Path::new("-") => open_file(p, Naming::Given, inputs),
        _ => Ok(Output {
            sink: Sink::Stream(BufWriter::new(Box::new(io::stdout().lock()))),
        }),
    }
}

fn open_file(dest: &Path, naming: Naming, inputs: &[&Path]) -> anyhow::Result<Output> {
    if naming == Naming::Given {
        check_given(dest)?;
        if output::is_stream(dest) {
            // `/dev/null`, `/dev/stdout`, a FIFO: written in place, never replaced.
            let f = output::open_stream(dest)
                .with_context(|| format!("cannot write {}", dest.display()))?;
            return Ok(Output {
                sink: Sink::Stream(BufWriter::new(Box::new(f))),
            });
        }
        check_not_input(dest, inputs)?;
    }
    let mut file = OutputFile::create(dest, DEFAULT_MODE)
        .with_context(|| format!("cannot create {}", dest.display()))?;
    let f = file.take_file().context("output file already taken")?;
    Ok(Output {
        sink: Sink::File {
            out: BufWriter::new(f),
            file: Some(file),
            dest: dest.to_path_buf(),
            naming,
        },
    })
}

/// Moves a complete output file into place; removes it if that fails.
fn commit(file: OutputFile, dest: &Path, naming: Naming) -> anyhow::Result<PathBuf> {
    let temp = file.temp_path().to_path_buf();
    file.commit(dest, naming).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        anyhow::Error::from(e).context(format!("cannot create {}", dest.display()))
    })
}

/// Checks, before any work, that an output name the user gave can be written: its
/// directory exists and the name is neither a directory nor a block device. (A stream such
/// as `/dev/null` or `/dev/stdout` is written in place; whatever else is there, a file or a
/// symbolic link, is replaced when the output is complete.)
pub fn check_given(dest: &Path) -> anyhow::Result<()> {
    if dest == Path::new("-") {
        return Ok(());
    }
    if let Ok(md) = std::fs::symlink_metadata(dest)
        && md.is_dir()
    {
        bail!("cannot write {}: it is a directory", dest.display());
    }
    if output::is_device(dest) {
        bail!("cannot write {}: it is a block device", dest.display());
    }
    let dir = output::dir_of(dest);
    match std::fs::metadata(&dir) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => bail!(
            "cannot write {}: {} is not a directory",
            dest.display(),
            dir.display()
        ),
        Err(e) => Err(anyhow::Error::from(e).context(format!(
            "cannot write {}: no directory {}",
            dest.display(),
            dir.display()
        ))),
    }
}

/// Checks, before the command runs, the name given for a recording (see [`check_given`]).
/// `-`, standard output for reports, is refused: the command's own output goes there.
pub fn check_recording_given(dest: &Path) -> anyhow::Result<()> {
    if dest == Path::new("-") {
        return Err(crate::exit::usage(
            "-o -: a recording is not written to standard output, where the command's own \
             output goes; name a file (or /dev/stdout, if the command writes nothing there)",
        ));
    }
    check_given(dest)
}

/// Refuses an output that is one of the inputs, under whatever name: the output replaces
/// the file at its name, so the input would be lost. (A symbolic link named as the output
/// is replaced itself, which leaves its target alone.)
pub fn check_not_input(dest: &Path, inputs: &[&Path]) -> anyhow::Result<()> {
    let Ok(out) = std::fs::symlink_metadata(dest) else {
        return Ok(());
    };
    for input in inputs {
        if let Ok(md) = std::fs::metadata(input)
            && md.dev() == out.dev()
            && md.ino() == out.ino()
        {
            let what = if dest == *input {
                format!("{} is an input of this command", dest.display())
            } else {
                format!(
                    "{} is the same file as the input {}",
                    dest.display(),
                    input.display()
                )
            };
            return Err(crate::exit::usage(format!(
                "{what}: writing the output there would replace it; choose another output name"
            )));
        }
    }
    Ok(())
}

/// Whether an error chain ends in a broken pipe (the reader of our output went away, as
/// with `tansa report x | head`): that is success, not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Writes a whole output file (an export, a flame graph) safely: to `given` when the user
/// named one (`-` is standard output), else to `default`, a name tansa chose, which never
/// replaces an existing file (a number is added). The file is private (0600) and appears
/// only once complete; `inputs` as for [`open`]. Returns where it went (`None` for standard
/// output).
pub fn write_whole(
    given: Option<&Path>,
    default: &Path,
    inputs: &[&Path],
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<Option<PathBuf>> {
    let mut out = match given {
        Some(p) => open(Some(p), inputs)?,
        None => open_file(default, Naming::Chosen, inputs)?,
    };
    write(&mut out)?;
    out.finish()
}

/// The default output name for `input` with a new extension, in the current directory
/// (`run.tansa` → `run.svg`).
pub fn default_name(input: &Path, extension: &str) -> std::path::PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "tansa".into(), |s| s.to_string_lossy().into_owned());
    std::path::PathBuf::from(format!("{stem}.{extension}"))
}
