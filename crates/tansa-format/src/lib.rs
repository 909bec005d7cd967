//! tansa's recording file format.
//!
//! A recording is a [`container`]: a 16-byte header naming the format version and the
//! [`Kind`] of recording, then independent frames, each checksummed and (when it helps)
//! zstd-compressed, then an end frame. Frames carry either raw bytes (event streams exactly
//! as the agent wrote them, see `tansa-wire`) or postcard-serialized values defined here:
//! [`meta`] (who recorded what, clock calibration, how processes ended), [`symtab`] (every
//! address used, resolved to function, file, line and inlined frames at the end of
//! recording, so a report needs no binaries), [`memory`] (the frames of a heap
//! recording), [`cpu`] (the frames of a CPU sampling recording) and [`retrace`] (the frames
//! of an instruction-trace recording).
//!
//! Readers stop at the first damaged frame and report it; everything before it stays usable.

pub mod container;
pub mod cpu;
pub mod memory;
pub mod meta;
pub mod retrace;
pub mod symtab;

pub use container::{Frame, FrameEncoder, FrameType, Kind, Reader, Writer};

/// Errors reading a recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// An I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with the recording magic.
    #[error("not a tansa recording (bad magic number)")]
    NotARecording,
    /// Written by a newer or older, incompatible tansa.
    #[error(
        "recording format version {found} is not supported (this tansa reads version {supported})"
    )]
    UnsupportedVersion {
        /// Version in the file.
        found: u16,
        /// Version this build reads.
        supported: u16,
    },
    /// The file ends inside a frame.
    #[error("recording is truncated at byte {offset}")]
    Truncated {
        /// Offset of the incomplete frame.
        offset: u64,
    },
    /// A frame failed its checks.
    #[error("recording is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// Offset of the bad frame.
        offset: u64,
        /// What was wrong.
        reason: &'static str,
    },
    /// A frame's payload does not decode as the value its type promises.
    #[error("frame of type {ty:#06x} at byte {offset} does not decode: {source}")]
    Payload {
        /// Offset of the frame.
        offset: u64,
        /// Its type.
        ty: u16,
        /// The decoding error.
        source: postcard::Error,
    },
}

impl FormatError {
    /// Whether this error means the data ended early or was damaged (as opposed to an I/O
    /// failure or a file that is not a recording at all).
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            FormatError::Truncated { .. }
                | FormatError::Corrupt { .. }
                | FormatError::Payload { .. }
        )
    }
}
