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

/// Where a file goes: the name the user gave (`-o`, replaced atomically if it exists) or
/// one tansa chose (never replacing anything: `NAME.1`, ... when taken).
#[derive(Debug, Clone)]
pub struct Destination {
    /// The path.
    pub path: std::path::PathBuf,
    /// Who named it.
    pub naming: tansa_format::output::Naming,
}

/// Writes a whole file through [`tansa_format::output`] (private temporary file moved into
/// place when complete; nothing left behind on failure) and returns the name it got.
pub fn write_file(
    dest: &Destination,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> anyhow::Result<std::path::PathBuf> {
    use tansa_format::output::{DEFAULT_MODE, OutputFile};
    let shown = dest.path.display();
    let mut out = OutputFile::create(&dest.path, DEFAULT_MODE)
        .with_context(|| format!("cannot create {shown}"))?;
    let Some(file) = out.take_file() else {
        out.discard();
        anyhow::bail!("cannot create {shown}");
    };
    let mut w = BufWriter::new(file);
    let written = write(&mut w).and_then(|()| w.flush());
    drop(w);
    if let Err(e) = written {
        out.discard();
        return Err(anyhow::Error::new(e).context(format!("cannot write {shown}")));
    }
    out.commit(&dest.path, dest.naming)
        .with_context(|| format!("cannot create {shown}"))
}
