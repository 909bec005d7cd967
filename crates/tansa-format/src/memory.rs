//! Frames of a memory (heap) recording.
//!
//! ```text
//! META CALIBRATION? (SESSION | META_CHUNK | THREAD_CHUNK | SESSION_END)* CALIBRATION SYMBOLS END
//! ```
//!
//! A *session* is one process image (fork and exec start new sessions). `META_CHUNK` and
//! `THREAD_CHUNK` payloads are a small binary prefix followed by raw `tansa-wire` records,
//! exactly as the agent wrote them into its rings; a record may span two consecutive
//! chunks of the same stream. Chunks of one stream appear in stream order.

use serde::{Deserialize, Serialize};

use crate::container::FrameType;
use crate::meta::ExitStatus;

/// [`SessionInfo`] (postcard).
pub const SESSION: FrameType = FrameType(0x0100);
/// `session:u32le` + meta-stream bytes.
pub const META_CHUNK: FrameType = FrameType(0x0101);
/// `session:u32le stream:u32le` + thread-stream bytes. Written keyed (the prefix is the
/// frame's key), so that a reader indexes the chunks of a file without decompressing them.
pub const THREAD_CHUNK: FrameType = FrameType(0x0102);
/// [`SessionEnd`] (postcard).
pub const SESSION_END: FrameType = FrameType(0x0103);

/// A process image that ran under the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Session number, unique in the recording, in order of appearance.
    pub session: u32,
    /// Process id.
    pub pid: u32,
    /// Parent process id when the session started.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Session start timestamp (recording clock).
    pub start_ticks: u64,
    /// Whether free events carry stacks.
    pub free_stacks: bool,
    /// Whether the session ran in online mode.
    pub online: bool,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// Session number.
    pub session: u32,
    /// How the process (image) ended.
    pub exit: ExitStatus,
    /// Events the agent reported as lost.
    pub lost_events: u64,
    /// Last timestamp seen in the session.
    pub end_ticks: u64,
}

/// Splits a `META_CHUNK` payload into its session and stream bytes.
pub fn split_meta_chunk(payload: &[u8]) -> Option<(u32, &[u8])> {
    let session = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    Some((session, &payload[4..]))
}

/// Splits a `THREAD_CHUNK` payload into session, stream and stream bytes.
pub fn split_thread_chunk(payload: &[u8]) -> Option<(u32, u32, &[u8])> {
    let session = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let stream = u32::from_le_bytes(payload.get(4..8)?.try_into().ok()?);
    Some((session, stream, &payload[8..]))
}

/// Builds a `META_CHUNK` payload prefix.
pub fn meta_chunk_prefix(session: u32) -> [u8; 4] {
    session.to_le_bytes()
}

/// Builds a `THREAD_CHUNK` payload prefix.
pub fn thread_chunk_prefix(session: u32, stream: u32) -> [u8; 8] {
    let mut p = [0u8; 8];
    p[..4].copy_from_slice(&session.to_le_bytes());
    p[4..].copy_from_slice(&stream.to_le_bytes());
    p
}
