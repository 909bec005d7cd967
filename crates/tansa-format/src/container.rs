//! The container: a header followed by self-delimiting, checksummed, optionally compressed
//! frames.
//!
//! ```text
//! file   := header frame* end-frame
//! header := "TANSAREC" version:u16le kind:u16le reserved:u32le          (16 bytes)
//! frame  := type:u16le flags:u16le stored_len:u32le raw_len:u32le crc32:u32le payload
//! ```
//!
//! `payload` is `stored_len` bytes; when `flags & COMPRESSED` it is one zstd frame that
//! decompresses to `raw_len` bytes, otherwise it is the raw bytes. When `flags & KEYED`,
//! the payload's first [`KEY_LEN`] bytes (its key: what the frame is about, such as the
//! stream a chunk belongs to) are stored raw ahead of the rest, which alone is compressed
//! (when `COMPRESSED`); `raw_len` counts the key. A reader can then index a file by keys
//! without decompressing anything. `crc32` (IEEE) covers the first 12 header bytes and the
//! stored payload. Each frame stands alone, so a file cut short or damaged in the middle is
//! read up to the last intact frame, and a writer that dies loses at most the frame it was
//! writing. The last frame of a complete file has type [`FrameType::END`].
//!
//! # Untrusted input
//!
//! A recording may come from anywhere, so the reader trusts no length it reads before it
//! is bounded by what the file can hold: a frame's stored bytes are read as they arrive
//! (a header that claims more than the rest of the file costs no more memory than the
//! file), a compressed payload is decompressed into a buffer that grows with what the
//! decompressor really produces, never beyond the size the header claims, and a header
//! that claims more than [`MAX_EXPANSION`] times its stored size is damaged (the writer
//! stores such payloads uncompressed). The decompressor's window is limited to
//! 2^[`MAX_WINDOW_LOG`] bytes. Errors say which frame (by number and by what it holds)
//! and at which byte.

use std::io::{self, Read, Seek, SeekFrom, Write};

use serde::{Serialize, de::DeserializeOwned};

use crate::{Damage, FormatError, Place};

/// First bytes of every recording.
pub const MAGIC: [u8; 8] = *b"TANSAREC";
/// Version of the container and of the frame payloads defined in this crate.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the file header.
pub const HEADER_LEN: usize = 16;
/// Size of a frame header.
pub const FRAME_HEADER_LEN: usize = 16;
/// Frame flag: the payload (after the key, when keyed) is zstd-compressed.
pub const COMPRESSED: u16 = 1;
/// Frame flag: the payload's first [`KEY_LEN`] bytes are stored raw, ahead of the rest.
pub const KEYED: u16 = 2;
/// Length of a keyed frame's key.
pub const KEY_LEN: usize = 8;
/// Largest payload accepted (raw or stored); anything larger is treated as corruption.
pub const MAX_FRAME_LEN: u32 = 1 << 30;
/// Largest ratio of a compressed payload's size to its stored size. Highly repetitive
/// payloads that would compress better are stored uncompressed, so that a frame of `n`
/// bytes never decompresses to more than `n * MAX_EXPANSION` bytes (a "compression bomb"
/// is damage).
pub const MAX_EXPANSION: u64 = 1024;
/// Base-2 logarithm of the largest decompression window accepted (the writer's frames
/// need at most 2^19 bytes).
pub const MAX_WINDOW_LOG: u32 = 23;
/// Stored bytes are read in pieces of at least this size, growing with what arrives.
const READ_STEP: usize = 64 * 1024;

/// What a recording holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Heap events from `tansa record`.
    Memory,
    /// CPU samples from `tansa sample`.
    Cpu,
    /// Instruction samples from `tansa retrace record`.
    Retrace,
}

impl Kind {
    fn to_raw(self) -> u16 {
        match self {
            Kind::Memory => 1,
            Kind::Cpu => 2,
            Kind::Retrace => 3,
        }
    }

    fn from_raw(raw: u16) -> Option<Kind> {
        match raw {
            1 => Some(Kind::Memory),
            2 => Some(Kind::Cpu),
            3 => Some(Kind::Retrace),
            _ => None,
        }
    }

    /// A word for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Memory => "memory recording",
            Kind::Cpu => "CPU recording",
            Kind::Retrace => "instruction-trace recording",
        }
    }
}

/// The type of a frame. Values below 0x100 are common to all kinds; each kind owns a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameType(pub u16);

impl FrameType {
    /// [`crate::meta::RecordingMeta`] (postcard).
    pub const META: FrameType = FrameType(0x0001);
    /// [`crate::meta::Calibration`] points (postcard).
    pub const CALIBRATION: FrameType = FrameType(0x0002);
    /// [`crate::symtab::SymbolTable`] (postcard).
    pub const SYMBOLS: FrameType = FrameType(0x0003);
    /// Last frame of a complete file (empty payload).
    pub const END: FrameType = FrameType(0xffff);

    /// What a frame of this type holds, in words for messages ("a thread event chunk").
    pub fn describe(self) -> &'static str {
        use crate::{cpu, memory, retrace};
        match self {
            FrameType::META => "the recording's description",
            FrameType::CALIBRATION => "the clock calibration",
            FrameType::SYMBOLS => "the symbol table",
            FrameType::END => "the end marker",
            memory::SESSION => "the start of a process",
            memory::META_CHUNK => "a chunk of module and stack definitions",
            memory::THREAD_CHUNK => "a thread event chunk",
            memory::SESSION_END => "the end of a process",
            memory::SESSION_LOSSES => "the events a process could not record",
            memory::UNRECORDED => "a process that ran unrecorded",
            memory::LEAK_CAUSE => "the leak-cause traces",
            cpu::INFO => "the sampling description",
            cpu::PROCESSES => "the process list",
            cpu::MODULES => "the module list",
            cpu::ADDRESSES => "sample counts per address",
            cpu::STACKS => "call chains",
            cpu::STACK_COUNTS => "sample counts per call chain",
            cpu::TIMELINE => "the sample timeline",
            cpu::SOURCES => "source files",
            cpu::SUMMARY => "the sampling totals",
            cpu::UNSAMPLED => "the CPU time in no sample",
            cpu::CHECKPOINT => "a checkpoint",
            cpu::COMPLETED => "how the recording was completed",
            retrace::INFO => "the region description",
            retrace::CODE => "the region's code",
            retrace::EXECUTIONS => "sampled executions",
            retrace::GROUND_TRUTH => "the true traces",
            retrace::SUMMARY => "the recording totals",
            _ => "a frame of an unknown type",
        }
    }
}

/// Builds frames; keeps a zstd context between frames.
pub struct FrameEncoder {
    compressor: zstd::bulk::Compressor<'static>,
    /// Whether payloads are compressed (see [`FrameEncoder::set_compress`]).
    compress: bool,
    /// Where zstd writes (its spare capacity: nothing to zero first).
    compressed: Vec<u8>,
}

impl std::fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameEncoder").finish_non_exhaustive()
    }
}

impl FrameEncoder {
    /// An encoder compressing at zstd `level` (1 is fast and is what recorders use).
    pub fn new(level: i32) -> io::Result<Self> {
        let mut compressor = zstd::bulk::Compressor::new(level)?;
        compressor.include_checksum(false)?;
        compressor.include_contentsize(true)?;
        Ok(FrameEncoder {
            compressor,
            compress: true,
            compressed: Vec::new(),
        })
    }

    /// Whether the frames encoded from now on compress their payload (the default) or
    /// store it as it is. Readers accept both in any mix: a recorder stores payloads raw
    /// while the compression would take CPU time from the program it records.
    pub fn set_compress(&mut self, on: bool) {
        self.compress = on;
    }

    /// Appends a whole frame (header and payload) to `out`.
    pub fn encode(&mut self, ty: FrameType, payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.encode_with(ty, payload, false, out)
    }

    /// Appends a whole keyed frame to `out`: the payload's first [`KEY_LEN`] bytes are
    /// stored raw (see [`Reader::next_frame_skimming`]). `payload` must be at least that
    /// long.
    pub fn encode_keyed(
        &mut self,
        ty: FrameType,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if payload.len() < KEY_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "keyed frame payload shorter than its key",
            ));
        }
        self.encode_with(ty, payload, true, out)
    }

    fn encode_with(
        &mut self,
        ty: FrameType,
        payload: &[u8],
        keyed: bool,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if payload.len() as u64 > u64::from(MAX_FRAME_LEN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame payload too large",
            ));
        }
        let header_at = out.len();
        out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
        let (key_flag, payload) = if keyed {
            out.extend_from_slice(&payload[..KEY_LEN]);
            (KEYED, &payload[KEY_LEN..])
        } else {
            (0, payload)
        };
        let key_len = if keyed { KEY_LEN } else { 0 };
        let (flags, stored) = if self.compress && payload.len() >= 64 {
            let compressed = &mut self.compressed;
            compressed.clear();
            compressed.reserve(zstd::zstd_safe::compress_bound(payload.len()));
            let n = self.compressor.compress_to_buffer(payload, compressed)?;
            // A payload that compresses beyond what readers accept is stored as it is.
            if n < payload.len() && payload.len() as u64 <= n as u64 * MAX_EXPANSION {
                out.extend_from_slice(compressed);
                (COMPRESSED, n)
            } else {
                out.extend_from_slice(payload);
                (0, payload.len())
            }
        } else {
            out.extend_from_slice(payload);
            (0, payload.len())
        };
        let h = &mut out[header_at..header_at + FRAME_HEADER_LEN];
        h[0..2].copy_from_slice(&ty.0.to_le_bytes());
        h[2..4].copy_from_slice(&(flags | key_flag).to_le_bytes());
        h[4..8].copy_from_slice(&((key_len + stored) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&((key_len + payload.len()) as u32).to_le_bytes());
        let crc = frame_crc(
            &out[header_at..header_at + 12],
            &out[header_at + FRAME_HEADER_LEN..],
        );
        out[header_at + 12..header_at + 16].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }
}

/// Writes a recording.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    encoder: FrameEncoder,
    scratch: Vec<u8>,
    written: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the file header and returns a writer for the frames.
    pub fn new(mut out: W, kind: Kind) -> io::Result<Self> {
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(&MAGIC);
        header[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        header[10..12].copy_from_slice(&kind.to_raw().to_le_bytes());
        out.write_all(&header)?;
        Ok(Writer {
            out,
            encoder: FrameEncoder::new(1)?,
            scratch: Vec::new(),
            written: HEADER_LEN as u64,
        })
    }

    /// Writes one frame.
    pub fn frame(&mut self, ty: FrameType, payload: &[u8]) -> io::Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        self.encoder.encode(ty, payload, &mut scratch)?;
        let result = self.raw(&scratch);
        self.scratch = scratch;
        result
    }

    /// Writes one keyed frame (see [`FrameEncoder::encode_keyed`]).
    pub fn keyed_frame(&mut self, ty: FrameType, payload: &[u8]) -> io::Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        self.encoder.encode_keyed(ty, payload, &mut scratch)?;
        let result = self.raw(&scratch);
        self.scratch = scratch;
        result
    }

    /// Writes frame bytes produced elsewhere by a [`FrameEncoder`] (for example on a
    /// compression thread).
    pub fn raw(&mut self, encoded: &[u8]) -> io::Result<()> {
        self.out.write_all(encoded)?;
        self.written += encoded.len() as u64;
        Ok(())
    }

    /// Serializes `value` with postcard and writes it as one frame.
    pub fn value<T: Serialize>(&mut self, ty: FrameType, value: &T) -> io::Result<()> {
        let bytes = postcard::to_stdvec(value)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.frame(ty, &bytes)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Writes the end frame, flushes, and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.frame(FrameType::END, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Where a frame is: the offset of its header in the file and its number (1 for the first
/// frame after the file header), for reading it again and for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FramePos {
    /// Offset of its header in the file.
    pub offset: u64,
    /// Its number, from 1.
    pub index: u64,
}

/// A frame read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Its type.
    pub ty: FrameType,
    /// Offset of its header in the file.
    pub offset: u64,
    /// Its number in the file, from 1.
    pub index: u64,
    /// The decompressed payload.
    pub payload: Vec<u8>,
    /// The bytes its payload takes in the file (its key included, when keyed): fewer
    /// than the payload's when it was compressed.
    pub stored_len: u32,
    /// Whether its payload was stored compressed.
    pub compressed: bool,
}

impl Frame {
    /// Where it is.
    pub fn pos(&self) -> FramePos {
        FramePos {
            offset: self.offset,
            index: self.index,
        }
    }

    /// Where it is, for messages.
    pub fn place(&self) -> Place {
        Place {
            offset: self.offset,
            frame: self.index,
            ty: Some(self.ty),
        }
    }

    /// Decodes a postcard payload.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, FormatError> {
        postcard::from_bytes(&self.payload).map_err(|cause| FormatError::Payload {
            at: self.place(),
            cause,
        })
    }
}

/// Reads a recording frame by frame.
pub struct Reader<R> {
    input: R,
    kind: Kind,
    offset: u64,
    /// Frames read so far (the number of the last one).
    frames: u64,
    saw_end: bool,
    done: bool,
    /// Kept between frames: a decompression context and the stored bytes of the last
    /// frame, so that reading many frames allocates nothing per frame.
    dctx: Option<zstd::zstd_safe::DCtx<'static>>,
    stored: Vec<u8>,
}

impl<R> std::fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .field("frames", &self.frames)
            .field("complete", &self.saw_end)
            .finish_non_exhaustive()
    }
}

impl<R: Read> Reader<R> {
    /// Checks the file header.
    pub fn new(mut input: R) -> Result<Self, FormatError> {
        let mut header = [0u8; HEADER_LEN];
        let n = read_full(&mut input, &mut header)?;
        if n == 0 {
            return Err(FormatError::Empty);
        }
        if n < 8 || header[..8] != MAGIC {
            return Err(FormatError::NotARecording);
        }
        if n < HEADER_LEN {
            return Err(FormatError::Truncated {
                at: Place::file_header(),
            });
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let raw_kind = u16::from_le_bytes([header[10], header[11]]);
        let kind = Kind::from_raw(raw_kind).ok_or(FormatError::UnknownKind { raw: raw_kind })?;
        Ok(Reader {
            input,
            kind,
            offset: HEADER_LEN as u64,
            frames: 0,
            saw_end: false,
            done: false,
            dctx: None,
            stored: Vec::new(),
        })
    }

    /// What the recording holds.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether the end frame has been read (the file is complete).
    pub fn is_complete(&self) -> bool {
        self.saw_end
    }

    /// Offset of the next frame.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Where the next frame is (the place an error of the next read refers to).
    pub fn next_pos(&self) -> FramePos {
        FramePos {
            offset: self.offset,
            index: self.frames + 1,
        }
    }

    /// Reads the next frame. `Ok(None)` after the end frame or at a clean end of input.
    /// A truncated or corrupt frame is an error; the reader then yields nothing more.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FormatError> {
        self.next_with(|_| false)
    }

    /// Like [`Reader::next_frame`], but a keyed frame of a type for which `key_only`
    /// holds comes back with only its key as payload: the rest is checked (its checksum)
    /// but not decompressed. This indexes a file cheaply; [`Reader::frame_at`] reads such
    /// a frame whole later.
    pub fn next_frame_skimming(
        &mut self,
        key_only: impl Fn(FrameType) -> bool,
    ) -> Result<Option<Frame>, FormatError> {
        self.next_with(key_only)
    }

    fn next_with(
        &mut self,
        key_only: impl Fn(FrameType) -> bool,
    ) -> Result<Option<Frame>, FormatError> {
        if self.done {
            return Ok(None);
        }
        let pos = self.next_pos();
        let mut payload = Vec::new();
        let result = self.read_one(pos, &key_only, &mut payload);
        match result {
            Ok(Some(head)) => {
                self.frames = pos.index;
                if head.ty == FrameType::END {
                    self.saw_end = true;
                    self.done = true;
                    return Ok(None);
                }
                Ok(Some(head.frame(pos, payload)))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// Reads the frame at `pos` (the current offset) into `out` (its payload, or only its
    /// key as `key_only` decides), returning its header; `None` at a clean end of input.
    fn read_one(
        &mut self,
        pos: FramePos,
        key_only: &dyn Fn(FrameType) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<Option<Head>, FormatError> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        let n = read_full(&mut self.input, &mut header)?;
        if n == 0 {
            return Ok(None);
        }
        let mut at = Place {
            offset: pos.offset,
            frame: pos.index,
            ty: None,
        };
        if n >= 2 {
            at.ty = Some(FrameType(u16::from_le_bytes([header[0], header[1]])));
        }
        if n < FRAME_HEADER_LEN {
            return Err(FormatError::Truncated { at });
        }
        let ty = FrameType(u16::from_le_bytes([header[0], header[1]]));
        let flags = u16::from_le_bytes([header[2], header[3]]);
        let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let raw = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        check_header(flags, stored, raw).map_err(|problem| FormatError::Corrupt { at, problem })?;
        let keyed = flags & KEYED != 0;
        let mut stored_bytes = std::mem::take(&mut self.stored);
        let result = self.decode_stored(
            at,
            &header,
            &mut stored_bytes,
            raw as usize,
            keyed,
            keyed && key_only(ty),
            out,
        );
        self.stored = stored_bytes;
        result?;
        self.offset = pos.offset + (FRAME_HEADER_LEN as u64) + u64::from(stored);
        Ok(Some(Head {
            ty,
            stored,
            compressed: flags & COMPRESSED != 0,
        }))
    }

    /// Reads a frame's stored bytes into `stored`, checks them and decodes them into
    /// `out`.
    #[allow(clippy::too_many_arguments)]
    fn decode_stored(
        &mut self,
        at: Place,
        header: &[u8; FRAME_HEADER_LEN],
        stored: &mut Vec<u8>,
        raw: usize,
        keyed: bool,
        key_only: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), FormatError> {
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if !read_growing(&mut self.input, stored, len)? {
            return Err(FormatError::Truncated { at });
        }
        let crc = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        if frame_crc(&header[..12], stored) != crc {
            return Err(FormatError::Corrupt {
                at,
                problem: Damage::Checksum,
            });
        }
        let flags = u16::from_le_bytes([header[2], header[3]]);
        out.clear();
        let (key, body) = stored.split_at(if keyed { KEY_LEN } else { 0 });
        out.extend_from_slice(key);
        if key_only {
            return Ok(());
        }
        if flags & COMPRESSED == 0 {
            out.extend_from_slice(body);
        } else {
            let dctx = match &mut self.dctx {
                Some(d) => d,
                None => {
                    let mut d =
                        zstd::zstd_safe::DCtx::try_create().ok_or(FormatError::Corrupt {
                            at,
                            problem: Damage::Decompress,
                        })?;
                    d.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(MAX_WINDOW_LOG))
                        .map_err(|_| FormatError::Corrupt {
                            at,
                            problem: Damage::Decompress,
                        })?;
                    self.dctx.insert(d)
                }
            };
            decompress(dctx, body, out, raw)
                .map_err(|problem| FormatError::Corrupt { at, problem })?;
        }
        if out.len() != raw {
            return Err(FormatError::Corrupt {
                at,
                problem: Damage::Size,
            });
        }
        Ok(())
    }
}

/// Checks a frame header's flags and lengths before anything is read or allocated for it.
fn check_header(flags: u16, stored: u32, raw: u32) -> Result<(), Damage> {
    let keyed = flags & KEYED != 0;
    let compressed = flags & COMPRESSED != 0;
    if stored > MAX_FRAME_LEN || raw > MAX_FRAME_LEN {
        return Err(Damage::TooLarge {
            claimed: u64::from(stored.max(raw)),
        });
    }
    let key = if keyed { KEY_LEN as u32 } else { 0 };
    if flags & !(COMPRESSED | KEYED) != 0
        || stored < key
        || raw < key
        || (!compressed && stored != raw)
    {
        return Err(Damage::Header);
    }
    if compressed && u64::from(raw - key) > u64::from(stored - key) * MAX_EXPANSION {
        return Err(Damage::Expansion {
            claimed: u64::from(raw),
            stored: u64::from(stored),
        });
    }
    Ok(())
}

/// Decompresses one zstd frame `body` into `out` (after what it holds), which grows with
/// what the decompressor produces and must end up exactly `raw` bytes long.
fn decompress(
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    body: &[u8],
    out: &mut Vec<u8>,
    raw: usize,
) -> Result<(), Damage> {
    use zstd::zstd_safe::{InBuffer, OutBuffer, ResetDirective};
    dctx.reset(ResetDirective::SessionOnly)
        .map_err(|_| Damage::Decompress)?;
    let mut input = InBuffer::around(body);
    loop {
        if out.len() >= raw {
            // Everything the header announced is there: the frame must end without
            // producing more.
            let mut probe = [0u8; 1];
            let mut ob = OutBuffer::around(&mut probe[..]);
            let before = input.pos();
            let hint = dctx
                .decompress_stream(&mut ob, &mut input)
                .map_err(|_| Damage::Decompress)?;
            if ob.pos() > 0 {
                return Err(Damage::Size);
            }
            if hint == 0 {
                break;
            }
            if input.pos() == before {
                // No progress: the input ended before the frame did.
                return Err(Damage::Decompress);
            }
            continue;
        }
        if out.len() == out.capacity() {
            let grow = (raw - out.len()).min(out.len().max(READ_STEP));
            out.reserve_exact(grow);
        }
        let start = out.len();
        let before = input.pos();
        let mut ob = OutBuffer::around_pos(out, start);
        let hint = dctx
            .decompress_stream(&mut ob, &mut input)
            .map_err(|_| Damage::Decompress)?;
        let produced = ob.pos() - start;
        if hint == 0 {
            break;
        }
        if produced == 0 && input.pos() == before {
            // No progress with room to write: the input ended before the frame did.
            return Err(Damage::Decompress);
        }
    }
    if input.pos() != body.len() {
        return Err(Damage::Decompress);
    }
    Ok(())
}

impl<R: Read + Seek> Reader<R> {
    /// Reads the frame at `pos` (from an earlier pass), without disturbing sequential
    /// reading.
    pub fn frame_at(&mut self, pos: FramePos) -> Result<Frame, FormatError> {
        let mut payload = Vec::new();
        let head = self.head_and_payload_at(pos, &mut payload)?;
        Ok(head.frame(pos, payload))
    }

    /// Reads the payload of the frame at `pos` into `out` (replacing its contents; its
    /// allocation is reused) and returns the frame's type.
    pub fn payload_at(
        &mut self,
        pos: FramePos,
        out: &mut Vec<u8>,
    ) -> Result<FrameType, FormatError> {
        Ok(self.head_and_payload_at(pos, out)?.ty)
    }

    /// [`Reader::payload_at`], returning what the frame's header says.
    fn head_and_payload_at(
        &mut self,
        pos: FramePos,
        out: &mut Vec<u8>,
    ) -> Result<Head, FormatError> {
        let (saved_offset, saved_done) = (self.offset, self.done);
        self.input.seek(SeekFrom::Start(pos.offset))?;
        self.offset = pos.offset;
        let result = self.read_one(pos, &|_| false, out);
        self.input.seek(SeekFrom::Start(saved_offset))?;
        self.offset = saved_offset;
        self.done = saved_done;
        result?.ok_or(FormatError::Truncated {
            at: Place {
                offset: pos.offset,
                frame: pos.index,
                ty: None,
            },
        })
    }
}

/// What a frame's header says, once its payload has been read and checked.
struct Head {
    ty: FrameType,
    stored: u32,
    compressed: bool,
}

impl Head {
    fn frame(self, pos: FramePos, payload: Vec<u8>) -> Frame {
        Frame {
            ty: self.ty,
            offset: pos.offset,
            index: pos.index,
            payload,
            stored_len: self.stored,
            compressed: self.compressed,
        }
    }
}

/// Reads `len` bytes into `buf` (replacing its contents), growing it as the bytes arrive
/// so that a length that the input does not hold costs no more memory than the input.
/// Returns whether all `len` bytes were there.
fn read_growing(input: &mut impl Read, buf: &mut Vec<u8>, len: usize) -> io::Result<bool> {
    buf.clear();
    while buf.len() < len {
        let filled = buf.len();
        let want = (len - filled).min(filled.max(READ_STEP));
        buf.resize(filled + want, 0);
        let n = read_full(input, &mut buf[filled..])?;
        if n < want {
            buf.truncate(filled + n);
            return Ok(false);
        }
    }
    Ok(true)
}

/// CRC-32 of a frame: its header fields (without the CRC) and its stored payload.
fn frame_crc(header_fields: &[u8], stored: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header_fields);
    h.update(stored);
    h.finalize()
}

fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), Kind::Memory).unwrap();
        w.frame(FrameType(0x100), b"short").unwrap();
        let big: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 7).to_le_bytes()).collect();
        w.frame(FrameType(0x101), &big).unwrap();
        w.value(FrameType(0x102), &("hello", 42u64)).unwrap();
        w.keyed_frame(FrameType(0x103), &keyed_payload()).unwrap();
        w.keyed_frame(FrameType(0x103), b"12345678tiny").unwrap();
        w.finish().unwrap()
    }

    /// A key and a compressible body.
    fn keyed_payload() -> Vec<u8> {
        let mut p = b"KEY-0001".to_vec();
        p.extend((0..5_000u32).flat_map(|i| (i % 5).to_le_bytes()));
        p
    }

    #[test]
    fn round_trip_and_compression() {
        let bytes = sample();
        assert!(
            bytes.len() < 10_000,
            "the repetitive frame is compressed: {}",
            bytes.len()
        );
        let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
        assert_eq!(r.kind(), Kind::Memory);
        let a = r.next_frame().unwrap().unwrap();
        assert_eq!(
            (a.ty, a.payload.as_slice()),
            (FrameType(0x100), &b"short"[..])
        );
        let b = r.next_frame().unwrap().unwrap();
        assert_eq!(b.payload.len(), 40_000);
        let c = r.next_frame().unwrap().unwrap();
        assert_eq!(
            c.decode::<(String, u64)>().unwrap(),
            ("hello".to_string(), 42)
        );
        let d = r.next_frame().unwrap().unwrap();
        assert_eq!(d.payload, keyed_payload());
        let e = r.next_frame().unwrap().unwrap();
        assert_eq!(e.payload, b"12345678tiny");
        // What each frame takes in the file: the short ones as they are, the repetitive
        // ones compressed (a keyed one with its key stored raw ahead of the rest).
        assert_eq!((a.compressed, a.stored_len), (false, 5));
        assert!(b.compressed && b.stored_len < 1_000, "{}", b.stored_len);
        assert!(d.compressed && (KEY_LEN as u32) < d.stored_len && d.stored_len < 1_000);
        assert_eq!((e.compressed, e.stored_len), (false, 12));
        assert_eq!(r.next_frame().unwrap(), None);
        assert!(r.is_complete());
        let again = r.frame_at(b.pos()).unwrap();
        assert_eq!(again, b);
        assert_eq!((a.index, b.index, e.index), (1, 2, 5));
        let mut buf = vec![1, 2, 3];
        assert_eq!(r.payload_at(d.pos(), &mut buf).unwrap(), FrameType(0x103));
        assert_eq!(buf, keyed_payload());
    }

    #[test]
    fn keyed_frames_skim_to_their_keys() {
        let bytes = sample();
        assert!(bytes.len() < 15_000, "the keyed body is compressed too");
        let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
        let mut got = Vec::new();
        while let Some(f) = r.next_frame_skimming(|ty| ty == FrameType(0x103)).unwrap() {
            got.push((f.ty, f.payload.len(), f.pos()));
        }
        assert!(r.is_complete());
        let lens: Vec<usize> = got.iter().map(|g| g.1).collect();
        // Unkeyed frames come whole; keyed frames of the skimmed type come as their key.
        assert_eq!(lens, vec![5, 40_000, lens[2], KEY_LEN, KEY_LEN]);
        let whole = r.frame_at(got[3].2).unwrap();
        assert_eq!(whole.index, 4);
        assert_eq!(whole.payload, keyed_payload());
    }

    #[test]
    fn every_truncation_reads_a_prefix_then_reports() {
        let bytes = sample();
        let full = {
            let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
            let mut v = Vec::new();
            while let Some(f) = r.next_frame().unwrap() {
                v.push(f);
            }
            v
        };
        for cut in 0..bytes.len() {
            let r = Reader::new(Cursor::new(&bytes[..cut]));
            let mut r = match r {
                Ok(r) => r,
                Err(e) => {
                    assert!(cut < HEADER_LEN, "cut {cut}: {e}");
                    continue;
                }
            };
            let mut got = Vec::new();
            let end = loop {
                match r.next_frame() {
                    Ok(Some(f)) => got.push(f),
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            assert_eq!(&full[..got.len()], &got[..], "cut {cut}");
            assert!(!r.is_complete(), "cut {cut} must not look complete");
            if let Some(e) = end {
                assert!(matches!(e, FormatError::Truncated { .. }), "cut {cut}: {e}");
            }
        }
    }

    #[test]
    fn flipped_bytes_are_detected() {
        let bytes = sample();
        for i in HEADER_LEN..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            let mut r = Reader::new(Cursor::new(&bad)).unwrap();
            let mut frames = 0;
            loop {
                match r.next_frame() {
                    Ok(Some(_)) => frames += 1,
                    Ok(None) => break,
                    Err(_) => break,
                }
            }
            // A flipped byte never yields a complete file with all frames intact.
            assert!(
                !(r.is_complete() && frames == 5),
                "flip at {i} went unnoticed"
            );
        }
    }

    /// A file header and one frame header with these fields, then `body`.
    fn crafted(flags: u16, stored: u32, raw: u32, body: &[u8]) -> Vec<u8> {
        let mut bytes = Writer::new(Vec::new(), Kind::Memory).unwrap().out.clone();
        let mut h = [0u8; FRAME_HEADER_LEN];
        h[0..2].copy_from_slice(&0x100u16.to_le_bytes());
        h[2..4].copy_from_slice(&flags.to_le_bytes());
        h[4..8].copy_from_slice(&stored.to_le_bytes());
        h[8..12].copy_from_slice(&raw.to_le_bytes());
        let crc = frame_crc(&h[..12], body);
        h[12..16].copy_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&h);
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn a_header_claiming_a_gibibyte_costs_no_more_than_the_file() {
        // 1 GiB claimed, 100 bytes present: the reader must notice the truncation without
        // reserving (or zero-filling) the claimed size.
        let bytes = crafted(0, MAX_FRAME_LEN, MAX_FRAME_LEN, &[7u8; 100]);
        let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
        let e = r.next_frame().unwrap_err();
        assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "the file ends in the middle of a frame at byte 16 (frame 1, the start of a process)"
        );
        assert!(
            r.stored.capacity() <= 2 * READ_STEP,
            "{} bytes reserved for a {}-byte file",
            r.stored.capacity(),
            bytes.len()
        );
        // One byte more than a frame may hold is damage, not truncation.
        let bytes = crafted(0, MAX_FRAME_LEN + 1, MAX_FRAME_LEN + 1, &[]);
        let e = Reader::new(Cursor::new(&bytes))
            .unwrap()
            .next_frame()
            .unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::Corrupt {
                    problem: Damage::TooLarge { .. },
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn decompressed_sizes_are_bounded_by_the_stored_bytes() {
        // A compressed frame whose header claims far more than its bytes can hold.
        let body = zstd::bulk::compress(&[1u8; 1000], 1).unwrap();
        let claimed = (body.len() as u64 * MAX_EXPANSION + 1) as u32;
        let bytes = crafted(COMPRESSED, body.len() as u32, claimed, &body);
        let e = Reader::new(Cursor::new(&bytes))
            .unwrap()
            .next_frame()
            .unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::Corrupt {
                    problem: Damage::Expansion { .. },
                    ..
                }
            ),
            "{e}"
        );
        // A header that claims more (or less) than the data decompresses to.
        for raw in [999u32, 1001, 60_000] {
            let bytes = crafted(COMPRESSED, body.len() as u32, raw, &body);
            let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
            let e = r.next_frame().unwrap_err();
            assert!(matches!(e, FormatError::Corrupt { .. }), "raw {raw}: {e}");
        }
        // Exactly right: read.
        let bytes = crafted(COMPRESSED, body.len() as u32, 1000, &body);
        let f = Reader::new(Cursor::new(&bytes))
            .unwrap()
            .next_frame()
            .unwrap()
            .unwrap();
        assert_eq!(f.payload, vec![1u8; 1000]);
        // The writer stores what compresses beyond the bound as it is.
        let mut w = Writer::new(Vec::new(), Kind::Memory).unwrap();
        w.frame(FrameType(0x100), &vec![0u8; 1 << 20]).unwrap();
        let bytes = w.finish().unwrap();
        assert!(bytes.len() > 1 << 20);
        let f = Reader::new(Cursor::new(&bytes))
            .unwrap()
            .next_frame()
            .unwrap()
            .unwrap();
        assert_eq!(f.payload.len(), 1 << 20);
    }

    #[test]
    fn messages_name_the_frame_and_the_byte() {
        let bytes = sample();
        let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
        let first = r.next_frame().unwrap().unwrap();
        let second_at = r.offset();
        let mut bad = bytes.clone();
        bad[second_at as usize + FRAME_HEADER_LEN + 3] ^= 1;
        let mut r = Reader::new(Cursor::new(&bad)).unwrap();
        assert_eq!(r.next_frame().unwrap().unwrap(), first);
        let e = r.next_frame().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "damaged data (its checksum does not match) at byte {second_at} (frame 2, a chunk of module and stack definitions)"
            )
        );
        assert_eq!(
            Reader::new(Cursor::new(&bytes[..10]))
                .unwrap_err()
                .to_string(),
            "the file ends in the middle of a frame at byte 0 (the file header)"
        );
    }

    #[test]
    fn garbage_is_not_a_recording() {
        assert!(matches!(
            Reader::new(Cursor::new(b"#!/bin/sh\necho hi\n".to_vec())),
            Err(FormatError::NotARecording)
        ));
        assert!(matches!(
            Reader::new(Cursor::new(Vec::new())),
            Err(FormatError::Empty)
        ));
    }
}
