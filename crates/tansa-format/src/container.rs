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
//! decompresses to `raw_len` bytes, otherwise it is the raw bytes. `crc32` (IEEE) covers
//! the first 12 header bytes and the stored payload. Each frame stands alone, so a file cut short or damaged in the
//! middle is read up to the last intact frame, and a writer that dies loses at most the
//! frame it was writing. The last frame of a complete file has type [`FrameType::END`].

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
/// Frame flag: the payload is zstd-compressed.
pub const COMPRESSED: u16 = 1;
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
        if payload.len() as u64 > u64::from(MAX_FRAME_LEN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame payload too large",
            ));
        }
        let header_at = out.len();
        out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
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
        h[2..4].copy_from_slice(&flags.to_le_bytes());
        h[4..8].copy_from_slice(&(stored as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
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
#[derive(Debug)]
pub struct Reader<R> {
    input: R,
    kind: Kind,
    offset: u64,
    saw_end: bool,
    done: bool,
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
        if self.done {
            return Ok(None);
        }
        let result = self.read_one();
        match &result {
            Ok(Some(f)) if f.ty == FrameType::END => {
                self.saw_end = true;
                self.done = true;
                return Ok(None);
            }
            Ok(None) | Err(_) => self.done = true,
            Ok(Some(_)) => {}
        }
        result
    }

    fn read_one(&mut self) -> Result<Option<Frame>, FormatError> {
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
        let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        if stored > MAX_FRAME_LEN || raw > MAX_FRAME_LEN || flags & !COMPRESSED != 0 {
            return Err(FormatError::Corrupt {
                offset,
                reason: "implausible frame header",
            });
        }
        let mut stored_bytes = vec![0u8; stored as usize];
        let n = read_full(&mut self.input, &mut stored_bytes)?;
        if n < stored as usize {
            return Err(FormatError::Truncated { offset });
        }
        if frame_crc(&header[..12], &stored_bytes) != crc {
            return Err(FormatError::Corrupt {
                offset,
                reason: "checksum mismatch",
            });
        }
        let payload = if flags & COMPRESSED != 0 {
            let out = zstd::bulk::decompress(&stored_bytes, raw as usize).map_err(|_| {
                FormatError::Corrupt {
                    offset,
                    reason: "compressed payload does not decompress",
                }
            })?;
            if out.len() != raw as usize {
                return Err(FormatError::Corrupt {
                    offset,
                    reason: "decompressed size differs from header",
                });
            }
            out
        } else {
            stored_bytes
        };
        self.offset += (FRAME_HEADER_LEN + stored as usize) as u64;
        Ok(Some(Frame {
            ty,
            offset,
            payload,
        }))
    }
}

impl<R: Read + Seek> Reader<R> {
    /// Reads the frame whose header is at `offset` (from an earlier pass), without
    /// disturbing sequential reading.
    pub fn frame_at(&mut self, offset: u64) -> Result<Frame, FormatError> {
        let (saved_offset, saved_done) = (self.offset, self.done);
        self.input.seek(SeekFrom::Start(offset))?;
        self.offset = offset;
        let result = self.read_one();
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
        w.finish().unwrap()
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
        assert_eq!(r.next_frame().unwrap(), None);
        assert!(r.is_complete());
        let again = r.frame_at(b.offset).unwrap();
        assert_eq!(again, b);
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
                !(r.is_complete() && frames == 3),
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
