//! Where command output goes: a file given with `-o`, or standard output.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context;

/// Opens `path` for writing, or standard output when `path` is `None` or `-`.
pub fn open(path: Option<&Path>) -> anyhow::Result<Box<dyn Write>> {
    match path {
        Some(p) if p != Path::new("-") => {
            let f = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            Ok(Box::new(BufWriter::new(f)))
        }
        _ => Ok(Box::new(BufWriter::new(io::stdout().lock()))),
    }
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
/// only once complete. Returns where it went (`None` for standard output).
pub fn write_whole(
    given: Option<&Path>,
    default: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    use tansa_format::output::{DEFAULT_MODE, Naming, OutputFile};
    let (dest, naming) = match given {
        Some(p) if p == Path::new("-") => {
            let mut out = BufWriter::new(io::stdout().lock());
            write(&mut out)?;
            out.flush()?;
            return Ok(None);
        }
        Some(p) => (p, Naming::Given),
        None => (default, Naming::Chosen),
    };
    let mut file = OutputFile::create(dest, DEFAULT_MODE)
        .with_context(|| format!("cannot create a file next to {}", dest.display()))?;
    let f = file.take_file().context("output file already taken")?;
    let mut out = BufWriter::new(f);
    let written = write(&mut out).and_then(|()| out.flush().map_err(anyhow::Error::from));
    drop(out);
    if let Err(e) = written {
        file.discard();
        return Err(e);
    }
    let name = file
        .commit(dest, naming)
        .with_context(|| format!("cannot create {}", dest.display()))?;
    Ok(Some(name))
}

/// The default output name for `input` with a new extension, in the current directory
/// (`run.tansa` → `run.svg`).
pub fn default_name(input: &Path, extension: &str) -> std::path::PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "tansa".into(), |s| s.to_string_lossy().into_owned());
    std::path::PathBuf::from(format!("{stem}.{extension}"))
}
