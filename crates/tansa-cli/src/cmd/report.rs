//! `tansa report` (being built).

use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `tansa report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recording.
    file: PathBuf,
}

/// Runs `tansa report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("report is not built yet: {}", args.file.display())
}
