//! tansa's stack profiles ([`tansa_analysis::profile::Profile`]) in other tools' formats,
//! and as flame graphs.
//!
//! Each format is a sink over the same model; adding one never touches analysis:
//! * [`pprof`]: gzipped `profile.proto`, as `go tool pprof` and the Pyroscope/Parca
//!   ecosystem read it;
//! * [`collapsed`]: one line per stack, `frame;frame;frame value`, as Brendan Gregg's
//!   flame graph scripts and inferno read it;
//! * [`speedscope`]: speedscope's JSON file format;
//! * [`flamegraph`]: interactive SVG flame graphs drawn by inferno, coloured by library.

pub mod collapsed;
pub mod flamegraph;
pub mod pprof;
pub mod speedscope;

use tansa_analysis::profile::heap::LOST_VALUE_TYPES;
use tansa_analysis::profile::{Profile, ProfileKind};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Io(#[from] std::io::Error),
    /// The weight asked for does not exist for this kind of recording.
    #[error("there is no weight `{name}` for a {kind} recording (choose one of: {choices})")]
    UnknownWeight {
        /// The name asked for.
        name: String,
        /// `heap` or `CPU`.
        kind: &'static str,
        /// The names that exist.
        choices: String,
    },
    /// A weight of the leak check at exit, for a recording made without it.
    #[error(
        "the weight `{name}` is what the leak check at exit found lost, and the recording was \
         made without it (tansa record --leak-check)"
    )]
    NoLeakCheck {
        /// The name asked for.
        name: String,
    },
    /// Two profiles of different kinds cannot be compared.
    #[error("cannot compare a heap recording with a CPU recording")]
    KindMismatch,
}

/// The weights a flame graph or a collapsed export can be drawn by, for a kind of
/// recording: `(name, value type, description)`; the first is the default.
pub fn weights(kind: ProfileKind) -> &'static [(&'static str, &'static str, &'static str)] {
    match kind {
        ProfileKind::Heap => &[
            ("peak", "peak_space", "bytes live when the heap peaked"),
            ("allocated", "alloc_space", "bytes allocated"),
            ("live", "inuse_space", "bytes never freed (live at the end)"),
            ("count", "alloc_objects", "allocations"),
            ("live-count", "inuse_objects", "blocks never freed"),
            (
                "temporary",
                "temporary_objects",
                "temporary allocations (freed by their own thread before it allocated again)",
            ),
            (
                "lost",
                "lost_space",
                "bytes lost at exit (recordings made with record --leak-check)",
            ),
            ("lost-count", "lost_objects", "blocks lost at exit"),
        ],
        ProfileKind::Cpu => &[
            ("samples", "samples", "samples"),
            ("cpu", "cpu", "CPU time (samples times the period)"),
        ],
    }
}

/// The value index of weight `name` (a name of [`weights`], or a value type's own name,
/// e.g. `alloc_space`); the kind's default when `None`.
pub fn weight_index(profile: &Profile, name: Option<&str>) -> Result<usize, ExportError> {
    let table = weights(profile.kind);
    let value = match name {
        None => table[0].1,
        Some(n) => table.iter().find(|w| w.0 == n).map(|w| w.1).unwrap_or(n),
    };
    let of_leak_check = LOST_VALUE_TYPES.iter().any(|t| t.name == value);
    if of_leak_check && profile.value_index(value).is_none() {
        return Err(ExportError::NoLeakCheck {
            name: name.unwrap_or(value).to_string(),
        });
    }
    profile
        .value_index(value)
        .ok_or_else(|| ExportError::UnknownWeight {
            name: name.unwrap_or(value).to_string(),
            kind: kind_name(profile.kind),
            choices: table.iter().map(|w| w.0).collect::<Vec<_>>().join(", "),
        })
}

/// The unit of a weight's values: `bytes`, `count` or `nanoseconds`.
pub fn weight_unit(profile: &Profile, index: usize) -> &'static str {
    profile.value_types.get(index).map_or("count", |v| v.unit)
}

fn kind_name(kind: ProfileKind) -> &'static str {
    match kind {
        ProfileKind::Heap => "heap",
        ProfileKind::Cpu => "CPU",
    }
}
