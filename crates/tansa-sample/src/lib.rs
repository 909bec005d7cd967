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
//! * [`checkpoint`]: [`RecordingOut`], the recording written as it grows (checkpoint
//!   groups while sampling), and [`complete_leftover`], which completes the file a
//!   recorder killed outright left, from its last checkpoint.
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
//! * [`phases`]: where a run's time goes, phase by phase.
//! * [`SamplerChoice`]: which of the two samplers records (`--source`), and when perf's
//!   refusal falls back to the agent.

pub mod agent;
pub mod builder;
pub mod checkpoint;
mod complete;
mod finish;
mod jit;
pub mod kernel;
pub mod perf;
pub mod phases;
pub mod procfs;
mod resolve;
mod sources;
pub mod unwind;
mod warm;

pub use builder::{CpuRecordingBuilder, MappingInfo, ProcessId, ProcessInfo, SampleInput};
pub use checkpoint::RecordingOut;
pub use complete::{CpuCompleted, complete_leftover};
pub use finish::Finished;

use perf::Target;

/// Which sampler the user asked for (`tansa sample --source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplerChoice {
    /// `perf_event_open`, and the agent where perf is not permitted (commands only).
    #[default]
    Auto,
    /// `perf_event_open` only.
    Perf,
    /// The agent's in-process `SIGPROF` timers only (commands only).
    Agent,
}

/// One of the two samplers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampler {
    /// [`perf::record`].
    Perf,
    /// [`agent::record`].
    Agent,
}

impl SamplerChoice {
    /// The sampler to try first for `target`, or why this choice cannot sample it (the
    /// agent only samples a command it starts).
    ///
    /// # Errors
    ///
    /// A message for people when the agent is asked to sample running processes.
    pub fn first(self, target: &Target) -> Result<Sampler, &'static str> {
        match (self, target) {
            (SamplerChoice::Agent, Target::Command(_)) => Ok(Sampler::Agent),
            (SamplerChoice::Agent, _) => {
                Err("--source agent samples a command it starts; -p and -a need perf")
            }
            _ => Ok(Sampler::Perf),
        }
    }

    /// Whether perf's failure `err` on `target` hands over to the agent: the kernel's
    /// refusal (the reason, to tell the user), with `Auto`, for a command. Any other
    /// failure, or another choice, stays an error.
    pub fn fallback<'e>(self, target: &Target, err: &'e SampleError) -> Option<&'e str> {
        match (self, target, err) {
            (
                SamplerChoice::Auto,
                Target::Command(_),
                SampleError::PermissionDenied { reason, .. },
            ) => Some(reason),
            _ => None,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn denied() -> SampleError {
        SampleError::PermissionDenied {
            what: "perf_event_open".into(),
            reason: "perf_event_paranoid is 3".into(),
        }
    }

    #[test]
    fn agent_samples_commands_only() {
        let command = Target::Command(vec!["true".into()]);
        assert_eq!(SamplerChoice::Agent.first(&command), Ok(Sampler::Agent));
        assert!(SamplerChoice::Agent.first(&Target::Pids(vec![1])).is_err());
        assert!(SamplerChoice::Agent.first(&Target::System).is_err());
        assert_eq!(
            SamplerChoice::Auto.first(&Target::System),
            Ok(Sampler::Perf)
        );
        assert_eq!(SamplerChoice::Perf.first(&command), Ok(Sampler::Perf));
    }

    #[test]
    fn only_a_refusal_of_a_command_under_auto_falls_back() {
        let command = Target::Command(vec!["true".into()]);
        let err = denied();
        assert_eq!(
            SamplerChoice::Auto.fallback(&command, &err),
            Some("perf_event_paranoid is 3")
        );
        assert_eq!(SamplerChoice::Perf.fallback(&command, &err), None);
        assert_eq!(
            SamplerChoice::Auto.fallback(&Target::Pids(vec![1]), &err),
            None
        );
        assert_eq!(SamplerChoice::Auto.fallback(&Target::System, &err), None);
        let other = SampleError::NoSuchProcess(1);
        assert_eq!(SamplerChoice::Auto.fallback(&command, &other), None);
    }
}
