//! CPU-time profiles from a CPU recording (seed 003).
//!
//! * [`recording`]: reading the recording (its reduced counts, chains and symbols);
//! * [`names`]: naming addresses from the recording's own symbol table;
//! * [`aggregate`]: the report per process, address space, library, function, source
//!   line or instruction ([`mod@report`] is the model every renderer consumes);
//! * [`annotate`]: a function's disassembly and source with per-instruction and
//!   per-line samples.
//!
//! Nothing here depends on how the samples were taken (perf or an in-process timer).

pub mod aggregate;
pub mod annotate;
pub mod names;
pub mod recording;
pub mod report;

pub use aggregate::{Options, report};
pub use recording::{CpuRecording, CpuRecordingError};
pub use report::{By, CpuReport};
