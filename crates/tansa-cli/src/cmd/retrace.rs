//! `tansa retrace`: rebuild the exact instruction path of a hot, repeated region from
//! sparse samples (seed 004).
//!
//! * `tansa retrace record --region FUNCTION [--period P | --hz HZ] [--executions N]
//!   [--ground-truth] [-o FILE] -- CMD [ARGS..]` records ([`record`]);
//! * `tansa retrace FILE [--format text|json]` rebuilds and reports ([`analyze`], rendered
//!   by [`text`] or as JSON `tansa.retrace.v1`).

mod analyze;
mod record;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};

/// Options of `tansa retrace`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  \
        tansa retrace record --region work --ground-truth -- ./prog 5000\n  \
        tansa retrace tansa-retrace-prog-1234.tansa\n  \
        tansa retrace tansa-retrace-prog-1234.tansa --format json --variant function\n\n\
        Exit status: 0 on success; 1 when the recording cannot be read or the command cannot \
        run; 2 for a wrong command line; 3 when the recording is truncated or damaged (the \
        report then covers what was recorded before the damage, and the warnings on standard \
        error say where the damage is)."
)]
pub struct Args {
    #[command(subcommand)]
    record: Option<Sub>,
    /// A recording made by `tansa retrace record`.
    #[arg(required = true)]
    file: Option<PathBuf>,
    #[command(flatten)]
    analyze: analyze::ReportOptions,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Run a command and sample every execution of a region (a function and its callees).
    #[command(
        after_help = "FUNCTION must be in the main executable, not in a shared library it \
        loads; the functions it calls may be anywhere.\n\n\
        Every thread of the command is traced: the region's executions are sampled in \
        whichever thread runs them (the report says in how many), and no thread is stopped \
        while another one is stepped. Child processes are not followed.\n\n\
        Exit status: the command's own (128 + N if signal N killed it), or 0 when tansa \
        stopped it once the executions asked for were sampled; 1 when it could not be \
        recorded, 2 for a wrong command line."
    )]
    Record(record::Args),
}

/// Output format of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people: the trace with straight-line runs collapsed.
    Text,
    /// The `tansa.retrace.v1` JSON document.
    Json,
}

/// Runs `tansa retrace`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match (args.record, args.file) {
        (Some(Sub::Record(r)), _) => record::run(r),
        (None, Some(file)) => analyze::run(&file, args.analyze),
        (None, None) => Err(crate::exit::usage(
            "give a recording to report, or `record`",
        )),
    }
}
