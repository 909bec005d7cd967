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
pub mod input;
pub mod memory;
pub mod meta;
pub mod output;
pub mod retrace;
pub mod symtab;

pub use container::{Frame, FrameEncoder, FramePos, FrameType, Kind, Reader, Writer};

/// Where in a recording something is: a byte offset, and the frame there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Offset of the frame's header in the file (0: the file header).
    pub offset: u64,
    /// Number of the frame, from 1 (0: the file header).
    pub frame: u64,
    /// Its type, when its header could be read that far.
    pub ty: Option<FrameType>,
}

impl Place {
    /// The file header.
    pub fn file_header() -> Place {
        Place {
            offset: 0,
            frame: 0,
            ty: None,
        }
    }
}

impl std::fmt::Display for Place {
    /// `byte 4096 (frame 12, a thread event chunk)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.frame, self.ty) {
            (0, _) => write!(f, "byte {} (the file header)", self.offset),
            (n, Some(ty)) => write!(f, "byte {} (frame {n}, {})", self.offset, ty.describe()),
            (n, None) => write!(f, "byte {} (the header of frame {n})", self.offset),
        }
    }
}

/// What is wrong with a damaged frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// Unknown flags, or lengths that contradict each other.
    #[error("a damaged frame header")]
    Header,
    /// A length beyond [`container::MAX_FRAME_LEN`].
    #[error("a frame header that claims {claimed} bytes, more than a frame may hold")]
    TooLarge {
        /// The length claimed.
        claimed: u64,
    },
    /// A decompressed size beyond [`container::MAX_EXPANSION`] times the stored size.
    #[error(
        "a frame header that claims {claimed} bytes, more than its {stored} stored bytes can hold"
    )]
    Expansion {
        /// The decompressed size claimed.
        claimed: u64,
        /// The stored size.
        stored: u64,
    },
    /// The checksum does not match the bytes.
    #[error("damaged data (its checksum does not match)")]
    Checksum,
    /// The compressed bytes do not decompress.
    #[error("damaged compressed data")]
    Decompress,
    /// The payload is not as long as its header says.
    #[error("damaged compressed data (not the size its header gives)")]
    Size,
}

/// Errors reading a recording. Their text says what is wrong in words and where (byte
/// offset, frame number, what the frame holds); whoever shows it adds the file name and
/// what the reader can do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// An I/O error.
    #[error("cannot read the file: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with the recording magic.
    #[error("not a tansa recording (it does not start with the TANSAREC signature)")]
    NotARecording,
    /// The file holds no byte at all.
    #[error(
        "not a tansa recording: the file is empty (nothing was ever written to it; a recorder killed as it started leaves such a file, having recorded nothing)"
    )]
    Empty,
    /// Written by a newer or older, incompatible tansa.
    #[error(
        "written in recording format {found}, which this tansa does not read (it reads format {supported})"
    )]
    UnsupportedVersion {
        /// Version in the file.
        found: u16,
        /// Version this build reads.
        supported: u16,
    },
    /// The file header names a kind of recording this tansa does not know.
    #[error("an unknown kind of recording ({raw}) at byte 10 (the file header)")]
    UnknownKind {
        /// The kind number in the file.
        raw: u16,
    },
    /// The file ends inside a frame (or inside its header).
    #[error("the file ends in the middle of a frame at {at}")]
    Truncated {
        /// The incomplete frame.
        at: Place,
    },
    /// A frame failed its checks.
    #[error("{problem} at {at}")]
    Corrupt {
        /// The bad frame.
        at: Place,
        /// What is wrong with it.
        problem: Damage,
    },
    /// A frame's payload does not decode as the value its type promises.
    #[error("contents that do not decode at {at}")]
    Payload {
        /// The frame.
        at: Place,
        /// The decoder's complaint (for debugging; not part of the message).
        cause: postcard::Error,
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

    /// Where the damage is, for damage.
    pub fn place(&self) -> Option<Place> {
        match self {
            FormatError::Truncated { at }
            | FormatError::Corrupt { at, .. }
            | FormatError::Payload { at, .. } => Some(*at),
            _ => None,
        }
    }
}
