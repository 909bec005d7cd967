//! `tansa`: a Linux profiler and memory-diagnostics toolkit.
//!
//! This binary is the only crate that knows about command-line parsing and `anyhow`; every
//! subcommand lives in its own module under [`cmd`] and calls into the library crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod exit;
mod output;

/// Where does my memory go, why is it never freed, where does my CPU time go.
#[derive(Debug, Parser)]
#[command(name = "tansa", version, about, long_about = None, propagate_version = true)]
#[command(after_help = "Run `tansa help <command>` for the options of a command.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command under the heap recorder (every malloc-family call, with its stack).
    Record(cmd::record::Args),
    /// Report on a recording: memory per library, function, thread, call or interval; CPU
    /// time per process, thread, space, library, function, line or instruction.
    Report(cmd::report::Args),
    /// Compare two heap recordings or two CPU recordings per unit; with --fail-if-growth, a
    /// CI gate for memory regressions.
    Diff(cmd::diff::Args),
    /// Print a recording's raw contents: heap (sessions, modules, stacks, events) or CPU
    /// (each frame's processes, modules, counts, checkpoints and totals).
    Dump(cmd::dump::Args),
    /// The leaking allocation sites of a heap recording and, for `record --leak-cause`,
    /// the function and branch where their leaking paths part from the freeing ones.
    Leaks(cmd::leaks::Args),
    /// Rebuild the exact instruction path of a hot, repeated region from sparse samples.
    Retrace(Box<cmd::retrace::Args>),
    /// Find leaks in a system under test with typed re-tests, run from a TOML plan.
    Leaktest(cmd::leaktest::Args),
    /// Sample where CPU time goes: a command and its children, processes, or everything.
    Sample(Box<cmd::sample::Args>),
    /// Show one function's instructions and source lines with their CPU samples.
    Annotate(cmd::annotate::Args),
    /// Write a recording in another tool's format: pprof, collapsed stacks, speedscope.
    Export(cmd::export::Args),
    /// Draw a recording (or the difference between two) as an interactive SVG flame graph.
    Flamegraph(cmd::flamegraph::Args),
    /// A self-contained HTML report of a heap or CPU recording or a leak-test report.
    Html(cmd::html::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => cmd::record::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Dump(args) => cmd::dump::run(args),
        Command::Leaks(args) => cmd::leaks::run(args),
        Command::Retrace(args) => cmd::retrace::run(*args),
        Command::Leaktest(args) => cmd::leaktest::run(args),
        Command::Sample(args) => cmd::sample::run(*args),
        Command::Annotate(args) => cmd::annotate::run(args),
        Command::Export(args) => cmd::export::run(args),
        Command::Flamegraph(args) => cmd::flamegraph::run(args),
        Command::Html(args) => cmd::html::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if output::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("tansa: error: {}", error_text(&err));
            ExitCode::from(exit::status_of(&err))
        }
    }
}

/// The error and its causes, `: `-separated, leaving out a cause whose text the message
/// before it already ends with (library errors often show their source in their own text).
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn error_text_leaves_out_causes_already_shown() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let shown = io.to_string();
        let err = anyhow::Error::new(io).context(format!("cannot run x: {shown}"));
        assert_eq!(super::error_text(&err), format!("cannot run x: {shown}"));
        let err = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::error_text(&err), "outer: inner");
    }

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
