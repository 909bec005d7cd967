//! One module per subcommand. Each has an `Args` (clap) and a `run(Args) -> Result<ExitCode>`.

pub mod leaktest;
pub mod record;
pub mod report;
