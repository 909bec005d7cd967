//! Reading and rewriting recordings frame by frame, below the container's checks: for the
//! mutator, the seed corpora, and tests that craft damaged files.
//!
//! Frames are located from their headers alone ([`frames`]), so damaged files can be
//! walked; [`fix_checksums`] recomputes every checksum so that a mutation reaches the
//! decoders instead of being stopped by the checksum. [`Recording`] is a whole recording
//! decoded (payloads decompressed) and [`Recording::encode`] writes it back, compressed
//! or not.

use std::io::Cursor;
use std::ops::Range;

use tansa_format::container::{
    COMPRESSED, FRAME_HEADER_LEN, FrameEncoder, FrameType, HEADER_LEN, KEY_LEN, KEYED,
    MAX_EXPANSION, Reader,
};
use tansa_format::memory;
use tansa_wire::event::{DecodeError, Decoder, Tag};
use tansa_wire::varint;

/// A frame located in a file: the range of its header and stored bytes (clipped to the
/// file), and its header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Bytes of the whole frame in the file.
    pub range: Range<usize>,
    /// Type.
    pub ty: u16,
    /// Flags.
    pub flags: u16,
    /// Stored length (as the header says).
    pub stored: u32,
    /// Decompressed length (as the header says).
    pub raw: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The frames of `data` after its file header, found from their headers (the last one
/// may be cut short).
pub fn frames(data: &[u8]) -> Vec<Located> {
    let mut out = Vec::new();
    let mut at = HEADER_LEN;
    while at + FRAME_HEADER_LEN <= data.len() {
        let stored = u32_at(data, at + 4);
        let end = (at + FRAME_HEADER_LEN).saturating_add(stored as usize);
        out.push(Located {
            range: at..end.min(data.len()),
            ty: u16_at(data, at),
            flags: u16_at(data, at + 2),
            stored,
            raw: u32_at(data, at + 8),
        });
        at = end;
    }
    out
}

/// CRC-32 of a frame as the container computes it.
pub fn frame_crc(header_fields: &[u8], stored: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header_fields);
    h.update(stored);
    h.finalize()
}

/// Recomputes the checksum of every frame of `data` (over the stored bytes present).
pub fn fix_checksums(data: &mut [u8]) {
    for f in frames(data) {
        let h = f.range.start;
        let crc = frame_crc(&data[h..h + 12], &data[h + FRAME_HEADER_LEN..f.range.end]);
        data[h + 12..h + 16].copy_from_slice(&crc.to_le_bytes());
    }
}

/// An upper bound of the bytes the frames of `data` may decompress to (what the reader
/// accepts: a frame's decompressed size is at most its stored size times
/// [`MAX_EXPANSION`]).
pub fn payload_bound(data: &[u8]) -> u64 {
    frames(data)
        .iter()
        .map(|f| {
            let present = (f.range.len() - FRAME_HEADER_LEN) as u64;
            u64::from(f.raw).min(present.saturating_mul(MAX_EXPANSION))
        })
        .sum()
}

/// One frame, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// Its type.
    pub ty: FrameType,
    /// Whether its first [`KEY_LEN`] bytes are a key stored raw.
    pub keyed: bool,
    /// Its payload, decompressed.
    pub payload: Vec<u8>,
}

/// A recording decoded frame by frame (up to its end frame, or its first damaged frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    /// The file header.
    pub header: [u8; HEADER_LEN],
    /// The frames, without the end frame.
    pub frames: Vec<RawFrame>,
    /// Whether it ended with an end frame.
    pub complete: bool,
}

impl Recording {
    /// Decodes `data`; `None` when it is not a recording at all.
    pub fn decode(data: &[u8]) -> Option<Recording> {
        let mut reader = Reader::new(Cursor::new(data)).ok()?;
        let header: [u8; HEADER_LEN] = data.get(..HEADER_LEN)?.try_into().ok()?;
        let located = frames(data);
        let mut out = Vec::new();
        while let Ok(Some(f)) = reader.next_frame() {
            let keyed = located
                .get(out.len())
                .is_some_and(|l| l.flags & KEYED != 0 && f.payload.len() >= KEY_LEN);
            out.push(RawFrame {
                ty: f.ty,
                keyed,
                payload: f.payload,
            });
        }
        Some(Recording {
            header,
            frames: out,
            complete: reader.is_complete(),
        })
    }

    /// The file: frames compressed as the recorder does (`compress`), or every payload
    /// stored as it is, so that byte mutations reach the decoders.
    pub fn encode(&self, compress: bool) -> Vec<u8> {
        let mut out = self.header.to_vec();
        let mut encoder = FrameEncoder::new(1).expect("a zstd context");
        for f in &self.frames {
            encode_frame(&mut encoder, f, compress, &mut out);
        }
        if self.complete {
            encode_frame(
                &mut encoder,
                &RawFrame {
                    ty: FrameType::END,
                    keyed: false,
                    payload: Vec::new(),
                },
                false,
                &mut out,
            );
        }
        out
    }

    /// Joins the chunks of every event stream into one chunk each (at the place of its
    /// first chunk), so that no record spans two frames and records can be rewritten.
    pub fn unchunk(&mut self) {
        let mut frames: Vec<RawFrame> = Vec::new();
        let mut first: std::collections::HashMap<Vec<u8>, usize> = Default::default();
        for f in std::mem::take(&mut self.frames) {
            let key_len = match f.ty {
                memory::META_CHUNK => 4,
                memory::THREAD_CHUNK => 8,
                _ => 0,
            };
            if key_len == 0 || f.payload.len() < key_len {
                frames.push(f);
                continue;
            }
            let mut key = f.ty.0.to_le_bytes().to_vec();
            key.extend_from_slice(&f.payload[..key_len]);
            match first.get(&key) {
                Some(&i) => frames[i].payload.extend_from_slice(&f.payload[key_len..]),
                None => {
                    first.insert(key, frames.len());
                    frames.push(f);
                }
            }
        }
        self.frames = frames;
    }

    /// Rewrites field `field` (0 is the first after the tag) of every record with one of
    /// `tags` in the event streams of the frames of type `ty` (after [`Recording::unchunk`]):
    /// `f` gets the field's value and returns the new one, or `None` to keep it.
    pub fn rewrite_field(
        &mut self,
        ty: FrameType,
        tags: &[Tag],
        field: usize,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> usize {
        let prefix = if ty == memory::META_CHUNK { 4 } else { 8 };
        let mut rewritten = 0;
        for frame in self.frames.iter_mut().filter(|fr| fr.ty == ty) {
            if frame.payload.len() < prefix {
                continue;
            }
            let (head, stream) = frame.payload.split_at(prefix);
            let (stream, n) = rewrite_stream(stream, tags, field, &mut f);
            rewritten += n;
            let mut payload = head.to_vec();
            payload.extend_from_slice(&stream);
            frame.payload = payload;
        }
        rewritten
    }
}

/// Appends frame `f` to `out`, compressed (when it helps) or stored as it is.
pub fn encode_frame(encoder: &mut FrameEncoder, f: &RawFrame, compress: bool, out: &mut Vec<u8>) {
    if compress {
        let r = if f.keyed {
            encoder.encode_keyed(f.ty, &f.payload, out)
        } else {
            encoder.encode(f.ty, &f.payload, out)
        };
        r.expect("a frame the container can hold");
        return;
    }
    let len = f.payload.len() as u32;
    let flags = if f.keyed { KEYED } else { 0 };
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[0..2].copy_from_slice(&f.ty.0.to_le_bytes());
    h[2..4].copy_from_slice(&flags.to_le_bytes());
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..12].copy_from_slice(&len.to_le_bytes());
    let crc = frame_crc(&h[..12], &f.payload);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(&f.payload);
}

/// Whether a located frame is compressed.
pub fn is_compressed(f: &Located) -> bool {
    f.flags & COMPRESSED != 0
}

/// Rewrites a field of the matching records of one event stream; returns the stream and
/// how many fields changed. Records are found with the decoder; the field is the
/// `field`-th LEB128 value after the tag (delta-encoded fields are rewritten as deltas).
pub fn rewrite_stream(
    stream: &[u8],
    tags: &[Tag],
    field: usize,
    f: &mut impl FnMut(u64) -> Option<u64>,
) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(stream.len());
    let mut d = Decoder::new(stream);
    let mut at = 0;
    let mut n = 0;
    loop {
        let start = d.position();
        match d.next() {
            Some(Ok(_)) => {}
            Some(Err(DecodeError::Truncated { .. } | DecodeError::Corrupt { .. })) | None => break,
        }
        let end = d.position();
        let is_match = tags.iter().any(|&t| t as u8 == stream[start]);
        if !is_match {
            continue;
        }
        // Walk to the field.
        let mut pos = start + 1;
        let mut ok = true;
        for _ in 0..field {
            match varint::decode(&stream[pos..end]) {
                Ok((_, len)) => pos += len,
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        let Ok((value, len)) = varint::decode(&stream[pos.min(end)..end]) else {
            continue;
        };
        if !ok {
            continue;
        }
        if let Some(new) = f(value) {
            out.extend_from_slice(&stream[at..pos]);
            let mut buf = [0u8; varint::MAX_LEN];
            let k = varint::encode(new, &mut buf);
            out.extend_from_slice(&buf[..k]);
            at = pos + len;
            n += 1;
        }
    }
    out.extend_from_slice(&stream[at..]);
    (out, n)
}

/// A varint encoded.
pub fn leb128(value: u64) -> Vec<u8> {
    let mut buf = [0u8; varint::MAX_LEN];
    let n = varint::encode(value, &mut buf);
    buf[..n].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tansa_format::container::{Kind, Writer};

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), Kind::Memory).unwrap();
        w.frame(
            FrameType::META,
            b"meta meta meta meta meta meta meta meta meta meta meta meta meta",
        )
        .unwrap();
        w.keyed_frame(memory::THREAD_CHUNK, &[0u8; 200]).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn decode_encode_round_trips_compressed_or_not() {
        let bytes = sample();
        let rec = Recording::decode(&bytes).unwrap();
        assert_eq!(rec.frames.len(), 2);
        assert!(rec.complete && rec.frames[1].keyed);
        assert_eq!(rec.encode(true), bytes);
        let plain = rec.encode(false);
        assert_eq!(Recording::decode(&plain).unwrap(), rec);
        assert!(frames(&plain).iter().all(|f| !is_compressed(f)));
    }

    #[test]
    fn checksums_are_fixed_after_a_change() {
        let mut plain = Recording::decode(&sample()).unwrap().encode(false);
        let at = frames(&plain)[0].range.start + FRAME_HEADER_LEN + 2;
        plain[at] = b'X';
        assert_ne!(Recording::decode(&plain).unwrap().frames.len(), 2);
        fix_checksums(&mut plain);
        let rec = Recording::decode(&plain).unwrap();
        assert_eq!(rec.frames.len(), 2);
        assert_eq!(rec.frames[0].payload[2], b'X');
    }
}
