//! `tansa record` (being built).

use std::process::ExitCode;

/// Options of `tansa record`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The command to run.
    #[arg(trailing_var_arg = true, required = true)]
    command: Vec<String>,
}

/// Runs `tansa record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("record is not built yet: {:?}", args.command)
}
