//! tansa's sampling CPU recorder (seed 003).
//!
//! * [`builder`]: [`CpuRecordingBuilder`], the source-agnostic part. A sampler declares
//!   processes, their mappings and threads, and feeds samples (absolute addresses,
//!   innermost first); the builder normalizes every address to a module and an address in
//!   that module's file and reduces in real time: one count per distinct
//!   `(process, address, caller)` and per distinct `(process, thread, call chain)`.
//!   [`CpuRecordingBuilder::finish`] resolves symbols, keeps the code of every function
//!   hit and the text of its source files, and writes a self-contained recording. The
//!   perf recorder below uses it, and so can an in-process `SIGPROF` sampler.
//! * [`perf`]: the `perf_event_open` recorder: per-CPU clock events (hardware cycles when
//!   the machine has a PMU), following a command's children, given processes, or the
//!   whole system; process tracking from side-band records and a `/proc` scan.
//! * [`agent`]: the in-process fallback where perf is not permitted: the heap agent's
//!   `SIGPROF` timers (per-thread CPU time), drained by the heap collector and fed to
//!   the builder.
//! * [`unwind`]: DWARF CFI unwinding of user stacks from the sampled registers and stack
//!   copy, with framehop.
//! * [`procfs`] and [`kernel`]: reading `/proc` (processes, mappings) and
//!   `/proc/kallsyms`.

pub mod agent;
pub mod builder;
mod finish;
pub mod kernel;
pub mod perf;
pub mod procfs;
mod sources;
pub mod unwind;

pub use builder::{CpuRecordingBuilder, MappingInfo, ProcessId, ProcessInfo, SampleInput};

/// Errors of the recorder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SampleError {
    /// The kernel refused to let us sample.
    #[error("{what}: {reason}")]
    PermissionDenied {
        /// What was refused.
        what: String,
        /// What to change, for people.
        reason: String,
    },
    /// A perf event could not be used.
    #[error(transparent)]
    Perf(#[from] tansa_perf::PerfError),
    /// A process to sample does not exist.
    #[error("no process with id {0}")]
    NoSuchProcess(u32),
    /// The command could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Writing the recording failed.
    #[error("writing the recording failed: {0}")]
    Write(#[source] std::io::Error),
    /// Another I/O error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}
