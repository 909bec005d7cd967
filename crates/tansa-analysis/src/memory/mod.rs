//! Heap accounting per unit smaller than a process (seed 000).
//!
//! * [`ids`]: typed ids of sessions, streams, stacks, modules and unit sets;
//! * [`model`]: modules, resolved stacks and the registry that builds them from a
//!   session's meta stream;
//! * [`classify`]: which unit a stack is charged to under each policy;
//! * [`merge`]: decoding thread streams and merging them into one time-ordered event
//!   sequence;
//! * [`atexit`]: the findings of the leak check at exit, per block and per image;
//! * [`lineage`]: the tree of process images, and the blocks a forked child inherited;
//! * [`aggregate`]: the accounting itself (net, maximum, minimum, allocated, call counts)
//!   per library, function, thread, library call or time interval;
//! * [`recording`]: reading a recording file in two passes;
//! * [`report`]: the result, the model every renderer consumes;
//! * [`live`]: what a live view of an online recording is handed while the program runs
//!   (reports so far, the heap over time) and the slot it is handed through.

pub mod aggregate;
pub mod atexit;
pub mod classify;
pub mod ids;
pub mod leaks;
pub mod lineage;
pub mod live;
pub mod merge;
pub mod model;
pub mod recording;
pub mod report;
#[cfg(test)]
mod testkit;

pub use aggregate::{Aggregator, Config};

/// The recording option (`RecordingMeta::options`) that holds the mean bytes between
/// samples of a sampled recording (`tansa record --sample-rate`).
pub const SAMPLE_RATE_OPTION: &str = "sample_rate";

/// The recording option that says whether the leak check at exit was made (`tansa record
/// --leak-check`: `true`).
pub const LEAK_CHECK_OPTION: &str = "leak_check";

/// Whether `meta` is that of a recording made with the leak check at exit
/// ([`LEAK_CHECK_OPTION`]).
pub fn asked_leak_check(meta: &tansa_format::meta::RecordingMeta) -> bool {
    meta.options
        .iter()
        .any(|(k, v)| k == LEAK_CHECK_OPTION && v == "true")
}

/// The recording option that gives the deepest stack the agent recorded, in frames
/// (`tansa record --max-frames`): a stack of that many frames may have been cut.
pub const MAX_FRAMES_OPTION: &str = "max_frames";

/// The frame limit `meta`'s recording was made with ([`MAX_FRAMES_OPTION`]).
pub fn max_frames(meta: &tansa_format::meta::RecordingMeta) -> Option<usize> {
    meta.options
        .iter()
        .find(|(k, _)| k == MAX_FRAMES_OPTION)
        .and_then(|(_, v)| v.parse().ok())
        .filter(|&n| n > 0)
}

/// The warning for `stacks` call stacks as deep as the frame limit `limit` (see
/// [`MAX_FRAMES_OPTION`]).
pub fn frame_limit_note(stacks: u64, limit: usize) -> String {
    format!(
        "{stacks} call stack(s) reached the recording's limit of {limit} frames (tansa record \
         --max-frames): their outermost frames may be cut, so what was allocated there is \
         charged from the outermost frame recorded, which may not be the library or function \
         the call came through"
    )
}

/// The recording option a durable recording (`tansa record --durable`) carries in its
/// `META` frame (`durable` = `true`).
pub const DURABLE_OPTION: &str = "durable";

/// Whether `meta` is that of a durable recording ([`DURABLE_OPTION`]).
pub fn is_durable(meta: &tansa_format::meta::RecordingMeta) -> bool {
    meta.options
        .iter()
        .any(|(k, v)| k == DURABLE_OPTION && v == "true")
}
pub use classify::{By, Charge, FreeTo};
pub use ids::{ModuleId, SessionId, StackId, StreamId, UnitSetId};
pub use report::MemoryReport;
