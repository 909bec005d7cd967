//! One module per subcommand. Each has an `Args` (clap) and a `run(Args) -> Result<ExitCode>`.

pub mod annotate;
pub mod cpureport;
pub mod dump;
pub mod leaks;
pub mod leaktest;
pub mod memopts;
pub mod record;
pub mod report;
pub mod retrace;
pub mod sample;
