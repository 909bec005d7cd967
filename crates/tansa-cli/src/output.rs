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
