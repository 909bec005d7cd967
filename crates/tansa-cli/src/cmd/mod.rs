//! One module per subcommand. Each has an `Args` (clap) and a `run(Args) -> Result<ExitCode>`.
//! [`options`] holds the option groups and helpers several of them share; [`report_cpu`]
//! is `tansa report` on a CPU recording.

pub mod annotate;
pub mod dump;
pub mod leaks;
pub mod leaktest;
pub mod live;
pub mod options;
pub mod record;
pub mod report;
pub mod report_cpu;
pub mod retrace;
pub mod sample;
