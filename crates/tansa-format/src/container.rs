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

use std::io::{self, Read, Seek, SeekFrom, Write};

use serde::{Serialize, de::DeserializeOwned};

use crate::FormatError;

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
}

/// Builds frames; keeps a zstd context between frames.
pub struct FrameEncoder {
    compressor: zstd::bulk::Compressor<'static>,
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
        Ok(FrameEncoder { compressor })
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
        let (flags, stored) = if payload.len() >= 64 {
            let bound = zstd::zstd_safe::compress_bound(payload.len());
            let start = out.len();
            out.resize(start + bound, 0);
            let n = self
                .compressor
                .compress_to_buffer(payload, &mut out[start..])?;
            if n < payload.len() {
                out.truncate(start + n);
                (COMPRESSED, n)
            } else {
                out.truncate(start);
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

/// A frame read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Its type.
    pub ty: FrameType,
    /// Offset of its header in the file.
    pub offset: u64,
    /// The decompressed payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// Decodes a postcard payload.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, FormatError> {
        postcard::from_bytes(&self.payload).map_err(|source| FormatError::Payload {
            offset: self.offset,
            ty: self.ty.0,
            source,
        })
    }
}

/// Reads a recording frame by frame.
pub struct Reader<R> {
    input: R,
    kind: Kind,
    offset: u64,
    saw_end: bool,
    done: bool,
    /// Kept between frames: a decompression context and the stored bytes of the last
    /// frame, so that reading many frames allocates nothing per frame.
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    stored: Vec<u8>,
}

impl<R> std::fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .field("complete", &self.saw_end)
            .finish_non_exhaustive()
    }
}

impl<R: Read> Reader<R> {
    /// Checks the file header.
    pub fn new(mut input: R) -> Result<Self, FormatError> {
        let mut header = [0u8; HEADER_LEN];
        let n = read_full(&mut input, &mut header)?;
        if n < 8 || header[..8] != MAGIC {
            return Err(FormatError::NotARecording);
        }
        if n < HEADER_LEN {
            return Err(FormatError::Truncated { offset: 0 });
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let raw_kind = u16::from_le_bytes([header[10], header[11]]);
        let kind = Kind::from_raw(raw_kind).ok_or(FormatError::Corrupt {
            offset: 10,
            reason: "unknown recording kind",
        })?;
        Ok(Reader {
            input,
            kind,
            offset: HEADER_LEN as u64,
            saw_end: false,
            done: false,
            decompressor: None,
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
        let offset = self.offset;
        let mut payload = Vec::new();
        let result = self.read_one(&key_only, &mut payload);
        match result {
            Ok(Some(ty)) if ty == FrameType::END => {
                self.saw_end = true;
                self.done = true;
                Ok(None)
            }
            Ok(Some(ty)) => Ok(Some(Frame {
                ty,
                offset,
                payload,
            })),
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

    /// Reads the frame at the current offset into `out` (its payload, or only its key as
    /// `key_only` decides), returning its type; `None` at a clean end of input.
    fn read_one(
        &mut self,
        key_only: &dyn Fn(FrameType) -> bool,
        out: &mut Vec<u8>,
    ) -> Result<Option<FrameType>, FormatError> {
        let offset = self.offset;
        let mut header = [0u8; FRAME_HEADER_LEN];
        let n = read_full(&mut self.input, &mut header)?;
        if n == 0 {
            return Ok(None);
        }
        if n < FRAME_HEADER_LEN {
            return Err(FormatError::Truncated { offset });
        }
        let ty = FrameType(u16::from_le_bytes([header[0], header[1]]));
        let flags = u16::from_le_bytes([header[2], header[3]]);
        let stored = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let raw = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        let keyed = flags & KEYED != 0;
        if stored > MAX_FRAME_LEN
            || raw > MAX_FRAME_LEN
            || flags & !(COMPRESSED | KEYED) != 0
            || (keyed && (stored as usize) < KEY_LEN)
        {
            return Err(FormatError::Corrupt {
                offset,
                reason: "implausible frame header",
            });
        }
        let mut stored_bytes = std::mem::take(&mut self.stored);
        stored_bytes.clear();
        stored_bytes.resize(stored as usize, 0);
        let result = self.decode_stored(
            offset,
            &header,
            &mut stored_bytes,
            raw as usize,
            keyed,
            keyed && key_only(ty),
            out,
        );
        self.stored = stored_bytes;
        result?;
        self.offset += (FRAME_HEADER_LEN + stored as usize) as u64;
        Ok(Some(ty))
    }

    /// Reads a frame's stored bytes into `stored` (sized by the caller), checks them and
    /// decodes them into `out`.
    #[allow(clippy::too_many_arguments)]
    fn decode_stored(
        &mut self,
        offset: u64,
        header: &[u8; FRAME_HEADER_LEN],
        stored: &mut [u8],
        raw: usize,
        keyed: bool,
        key_only: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), FormatError> {
        let n = read_full(&mut self.input, stored)?;
        if n < stored.len() {
            return Err(FormatError::Truncated { offset });
        }
        let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        if frame_crc(&header[..12], stored) != crc {
            return Err(FormatError::Corrupt {
                offset,
                reason: "checksum mismatch",
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
            let corrupt = |reason| FormatError::Corrupt { offset, reason };
            if self.decompressor.is_none() {
                self.decompressor = Some(
                    zstd::bulk::Decompressor::new()
                        .map_err(|_| corrupt("cannot create a decompression context"))?,
                );
            }
            let d = self.decompressor.as_mut().expect("created above");
            out.reserve_exact(raw.saturating_sub(out.len()));
            let mut cursor = io::Cursor::new(&mut *out);
            cursor.set_position(key.len() as u64);
            d.decompress_to_buffer(body, &mut cursor)
                .map_err(|_| corrupt("compressed payload does not decompress"))?;
        }
        if out.len() != raw {
            return Err(FormatError::Corrupt {
                offset,
                reason: "decompressed size differs from header",
            });
        }
        Ok(())
    }
}

impl<R: Read + Seek> Reader<R> {
    /// Reads the frame whose header is at `offset` (from an earlier pass), without
    /// disturbing sequential reading.
    pub fn frame_at(&mut self, offset: u64) -> Result<Frame, FormatError> {
        let mut payload = Vec::new();
        let ty = self.payload_at(offset, &mut payload)?;
        Ok(Frame {
            ty,
            offset,
            payload,
        })
    }

    /// Reads the payload of the frame whose header is at `offset` into `out` (replacing
    /// its contents; its allocation is reused) and returns the frame's type.
    pub fn payload_at(&mut self, offset: u64, out: &mut Vec<u8>) -> Result<FrameType, FormatError> {
        let (saved_offset, saved_done) = (self.offset, self.done);
        self.input.seek(SeekFrom::Start(offset))?;
        self.offset = offset;
        let result = self.read_one(&|_| false, out);
        self.input.seek(SeekFrom::Start(saved_offset))?;
        self.offset = saved_offset;
        self.done = saved_done;
        result?.ok_or(FormatError::Truncated { offset })
    }
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
        assert_eq!(r.next_frame().unwrap(), None);
        assert!(r.is_complete());
        let again = r.frame_at(b.offset).unwrap();
        assert_eq!(again, b);
        let mut buf = vec![1, 2, 3];
        assert_eq!(r.payload_at(d.offset, &mut buf).unwrap(), FrameType(0x103));
        assert_eq!(buf, keyed_payload());
    }

    #[test]
    fn keyed_frames_skim_to_their_keys() {
        let bytes = sample();
        assert!(bytes.len() < 15_000, "the keyed body is compressed too");
        let mut r = Reader::new(Cursor::new(&bytes)).unwrap();
        let mut got = Vec::new();
        while let Some(f) = r.next_frame_skimming(|ty| ty == FrameType(0x103)).unwrap() {
            got.push((f.ty, f.payload.len(), f.offset));
        }
        assert!(r.is_complete());
        let lens: Vec<usize> = got.iter().map(|g| g.1).collect();
        // Unkeyed frames come whole; keyed frames of the skimmed type come as their key.
        assert_eq!(lens, vec![5, 40_000, lens[2], KEY_LEN, KEY_LEN]);
        let whole = r.frame_at(got[3].2).unwrap();
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

    #[test]
    fn garbage_is_not_a_recording() {
        assert!(matches!(
            Reader::new(Cursor::new(b"#!/bin/sh\necho hi\n".to_vec())),
            Err(FormatError::NotARecording)
        ));
        assert!(matches!(
            Reader::new(Cursor::new(Vec::new())),
            Err(FormatError::NotARecording)
        ));
    }
}
