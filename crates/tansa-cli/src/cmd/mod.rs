//! One module per subcommand. Each has an `Args` (clap) and a `run(Args) -> Result<ExitCode>`.
//! [`options`] holds the option groups and helpers several of them share; [`report_cpu`]
//! is `tansa report` on a CPU recording.

pub mod annotate;
pub mod diff;
pub mod dump;
pub mod export;
pub mod flamegraph;
pub mod html;
pub mod leaks;
pub mod leaktest;
pub mod live;
pub mod options;
pub mod profile;
pub mod record;
pub mod report;
pub mod report_cpu;
pub mod retrace;
pub mod sample;
