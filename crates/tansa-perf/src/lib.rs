//! A small, general wrapper around Linux `perf_event_open(2)`.
//!
//! * [`EventAttr`] builds a `perf_event_attr`: which event ([`EventKind`]), how often to
//!   sample (a fixed period or a frequency), what each sample carries ([`SampleFormat`]),
//!   and the usual filters (`exclude_kernel`, `disabled`, `enable_on_exec`, ...).
//! * [`Event`] is an open event: enable, disable, reset, read its count.
//! * [`Ring`] maps the event's ring buffer and yields its [`Record`]s.
//! * [`Sample::parse`] decodes a `PERF_RECORD_SAMPLE` for the sample format you asked for;
//!   [`SampleRef::parse`] does it in place, with call chains, user registers and user
//!   stack copies, for readers that must not allocate per sample ([`Ring::visit`]).
//! * [`SideBand::parse`] decodes the records that describe processes (mappings, names,
//!   forks, exits) and losses.
//!
//! All system calls live in the private `sys` module. Events that this machine cannot
//! count (for example hardware counters in a VM without a virtual PMU) fail to open with
//! an error for which [`PerfError::is_unsupported`] is true, so callers can fall back.

mod attr;
mod ring;
mod sample;
mod sampleref;
mod sideband;
mod sys;

pub use attr::{EventAttr, EventKind, HardwareEvent, SampleFormat, SoftwareEvent};
pub use ring::{Event, Record, RecordKind, RecordRef, Ring, poll};
pub use sample::Sample;
pub use sampleref::{
    CONTEXT_KERNEL, CONTEXT_MAX, CONTEXT_USER, SampleLayout, SampleRef, X86_REG_BP, X86_REG_IP,
    X86_REG_SP, X86_UNWIND_REGS,
};
pub use sideband::{MmapRecord, SampleId, SideBand, TaskRecord, sample_id_len};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfError {
    /// `perf_event_open` failed.
    #[error("perf_event_open({what}) failed: {error}")]
    Open {
        /// The event, for messages.
        what: String,
        /// The system error.
        error: std::io::Error,
    },
    /// An ioctl, `read` or `mmap` on an event failed.
    #[error("{op} on a perf event failed: {error}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The system error.
        error: std::io::Error,
    },
    /// The requested sample format has fields this crate does not decode.
    #[error(
        "sample format {0:#x} has fields that are not decoded (supported: IP, TID, TIME, ADDR, ID, STREAM_ID, CPU, PERIOD, CALLCHAIN, IDENTIFIER)"
    )]
    UnsupportedFormat(u64),
    /// A record is shorter than its format requires.
    #[error("a sample record of {0} bytes is shorter than its format requires")]
    Truncated(usize),
}

impl PerfError {
    /// Whether the event is not available on this machine (no such PMU event, not
    /// supported by the CPU or kernel), as opposed to a permission or usage error.
    pub fn is_unsupported(&self) -> bool {
        match self {
            PerfError::Open { error, .. } => matches!(
                error.raw_os_error(),
                Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::ENOSYS)
            ),
            _ => false,
        }
    }
}
