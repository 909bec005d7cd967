//! A structure-aware mutator.
//!
//! Recordings are mutated where their readers look: frame headers (types, flags, lengths
//! set to interesting values), payloads (decompressed, edited, stored again compressed or
//! not: LEB128 fields replaced by interesting integers such as `0xFFFFFFFF` stack ids or
//! sizes of `2^63` and more, bytes flipped, inserted, deleted), whole frames (removed,
//! duplicated, swapped, spliced from another input) and the end of the file (cut
//! anywhere). Checksums are recomputed afterwards, except now and then for the container
//! target, so the mutations reach the decoders. Payloads (the frame-decoder target) get
//! the payload mutations; plans (TOML) get token insertions and replacements.

use crate::Target;
use crate::craft::{self, Located, RawFrame, Recording};
use tansa_format::container::{FRAME_HEADER_LEN, FrameEncoder, FrameType, HEADER_LEN};
use tansa_format::{cpu, memory, retrace};
use tansa_wire::varint;

/// Integers that break readers: limits of every width, sizes beyond `i64::MAX`.
const INTERESTING: [u64; 20] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0xffff_fffe,
    0xffff_ffff,
    0x1_0000_0000,
    1 << 30,
    1 << 62,
    1 << 63,
    (1 << 63) + 5,
    i64::MAX as u64,
    u64::MAX - 1,
    u64::MAX,
];

/// Frame types a header may be changed to.
const TYPES: [FrameType; 32] = [
    FrameType::META,
    FrameType::CALIBRATION,
    FrameType::SYMBOLS,
    FrameType::END,
    memory::SESSION,
    memory::META_CHUNK,
    memory::THREAD_CHUNK,
    memory::SESSION_END,
    memory::SESSION_PLACE,
    memory::VOLATILE_SEGMENT,
    memory::OWN_ALLOCATORS,
    cpu::INFO,
    cpu::PROCESSES,
    cpu::MODULES,
    cpu::ADDRESSES,
    cpu::STACKS,
    cpu::STACK_COUNTS,
    cpu::TIMELINE,
    cpu::SOURCES,
    cpu::SUMMARY,
    cpu::UNSAMPLED,
    cpu::CHECKPOINT,
    cpu::COMPLETED,
    cpu::SHORT_STACK_COPIES,
    cpu::WITHHELD_SOURCES,
    cpu::NEWER_SOURCES,
    retrace::INFO,
    retrace::CODE,
    retrace::EXECUTIONS,
    retrace::GROUND_TRUTH,
    retrace::SUMMARY,
    FrameType(0x7777),
];

/// Tokens inserted into plans.
const PLAN_TOKENS: [&str; 36] = [
    "18446744073709551615",
    "-1",
    "0",
    "9223372036854775807",
    "\"18446744073709551615s\"",
    "\"1ns\"",
    "\"99999999999999h\"",
    "\"\"",
    "\"1EiB\"",
    "[[item]]\n",
    "[[process]]\n",
    "[[item.param]]\n",
    "[idle]\n",
    "[settings]\n",
    "[thresholds]\n",
    "[[log]]\n",
    "name = \"a\"\n",
    "command = \"true {n}\"\n",
    "command = []\n",
    "pid = 1\n",
    "match = \"x\"\n",
    "timeout = ",
    "duration = ",
    "interval = ",
    "start_timeout = ",
    "min = ",
    "max = ",
    "steps = [1, 2, 3]\n",
    "step = ",
    "sweep = \"linear\"\n",
    "default = ",
    "readings = ",
    "retest_limit = ",
    "error = '(?i)",
    "id = '(",
    "{n}",
];

/// Mutates inputs of the targets.
#[derive(Debug)]
pub struct Mutator {
    rng: fastrand::Rng,
}

impl Mutator {
    /// A mutator whose choices follow `seed`.
    pub fn new(seed: u64) -> Mutator {
        Mutator {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    fn interesting(&mut self) -> u64 {
        match self.rng.u8(..4) {
            0 => self.rng.u64(..),
            1 => self.rng.u64(..1 << 16),
            _ => INTERESTING[self.rng.usize(..INTERESTING.len())],
        }
    }

    /// Mutates `data` (an input of `target`) in place, to at most `max_len` bytes, with
    /// `other` (another input) to splice from.
    pub fn mutate(&mut self, target: Target, data: &mut Vec<u8>, other: &[u8], max_len: usize) {
        let rounds = 1 + self.rng.usize(..3);
        for _ in 0..rounds {
            match target {
                Target::Plan | Target::PerfMap => self.text(data, other),
                Target::Frames | Target::Segment => self.bytes(data, other),
                _ => self.recording(data, other),
            }
        }
        if target.takes_recordings() && !(target == Target::Container && self.rng.u8(..8) == 0) {
            craft::fix_checksums(data);
        }
        data.truncate(max_len);
    }

    /// A mutation of a recording.
    fn recording(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        let frames = craft::frames(data);
        if frames.is_empty() || data.len() < HEADER_LEN {
            self.bytes(data, other);
            return;
        }
        let pick = self.rng.usize(..frames.len());
        let f = frames[pick].clone();
        match self.rng.u8(..16) {
            0 | 1 => self.flip(data, HEADER_LEN),
            2 | 3 => self.header_field(data, &f),
            4..=8 => self.payload(data, &f, other),
            9 => {
                let cut = self.rng.usize(HEADER_LEN..=data.len());
                data.truncate(cut);
            }
            10 => {
                data.drain(f.range.clone());
            }
            11 => {
                let copy = data[f.range.clone()].to_vec();
                let at = frames[self.rng.usize(..frames.len())].range.start;
                data.splice(at..at, copy);
            }
            12 if frames.len() >= 2 => {
                let g = frames[self.rng.usize(..frames.len())].clone();
                let (a, b) = if f.range.start <= g.range.start {
                    (f, g)
                } else {
                    (g, f)
                };
                if a.range.end <= b.range.start {
                    let mut out = data[..a.range.start].to_vec();
                    out.extend_from_slice(&data[b.range.clone()]);
                    out.extend_from_slice(&data[a.range.end..b.range.start]);
                    out.extend_from_slice(&data[a.range.clone()]);
                    out.extend_from_slice(&data[b.range.end..]);
                    *data = out;
                }
            }
            13 => {
                let theirs = craft::frames(other);
                if !theirs.is_empty() {
                    let g = &theirs[self.rng.usize(..theirs.len())];
                    let copy = other[g.range.clone()].to_vec();
                    data.splice(f.range.start..f.range.start, copy);
                }
            }
            14 => self.recompress(data, &f),
            _ => self.bytes(data, other),
        }
    }

    fn flip(&mut self, data: &mut [u8], from: usize) {
        if data.len() > from {
            let i = self.rng.usize(from..data.len());
            data[i] ^= 1 << self.rng.u8(..8);
        }
    }

    /// Sets a header field of frame `f` to an interesting value.
    fn header_field(&mut self, data: &mut [u8], f: &Located) {
        let h = f.range.start;
        match self.rng.u8(..4) {
            0 => {
                let ty = TYPES[self.rng.usize(..TYPES.len())];
                data[h..h + 2].copy_from_slice(&ty.0.to_le_bytes());
            }
            1 => {
                let flags = self.rng.u16(..8);
                data[h + 2..h + 4].copy_from_slice(&flags.to_le_bytes());
            }
            k => {
                let at = h + if k == 2 { 4 } else { 8 };
                let v = match self.rng.u8(..3) {
                    0 => (self.interesting() & 0xffff_ffff) as u32,
                    1 => f.stored.wrapping_add(self.rng.u32(..16)).wrapping_sub(8),
                    _ => f.raw.wrapping_mul(2),
                };
                data[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// Decodes frame `f`, mutates its payload, and stores it again (compressed or not).
    fn payload(&mut self, data: &mut Vec<u8>, f: &Located, other: &[u8]) {
        let Some(mut frame) = decode_one(data, f) else {
            self.flip(data, f.range.start);
            return;
        };
        self.bytes(&mut frame.payload, other);
        if frame.keyed && frame.payload.len() < tansa_format::container::KEY_LEN {
            frame.keyed = false;
        }
        let compress = self.rng.u8(..4) == 0;
        let mut encoded = Vec::new();
        let mut encoder = FrameEncoder::new(1).expect("a zstd context");
        craft::encode_frame(&mut encoder, &frame, compress, &mut encoded);
        data.splice(f.range.clone(), encoded);
    }

    /// Stores frame `f` the other way: compressed if it was not, and the reverse.
    fn recompress(&mut self, data: &mut Vec<u8>, f: &Located) {
        let Some(frame) = decode_one(data, f) else {
            return;
        };
        let mut encoded = Vec::new();
        let mut encoder = FrameEncoder::new(1).expect("a zstd context");
        craft::encode_frame(&mut encoder, &frame, !craft::is_compressed(f), &mut encoded);
        data.splice(f.range.clone(), encoded);
    }

    /// A mutation of plain bytes (a payload): LEB128 fields replaced by interesting
    /// values, flips, insertions, deletions, duplications, cuts, splices.
    pub fn bytes(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        if data.is_empty() {
            data.extend_from_slice(&craft::leb128(self.interesting()));
            return;
        }
        let at = self.rng.usize(..data.len());
        match self.rng.u8(..10) {
            0..=3 => {
                // The varint at `at` (or the byte there) becomes an interesting value.
                let len = varint::decode(&data[at..]).map_or(1, |(_, n)| n);
                let v = craft::leb128(self.interesting());
                data.splice(at..at + len, v);
            }
            4 => self.flip(data, 0),
            5 => data[at] = [0, 0xff, 0x7f, 0x80, 0x01][self.rng.usize(..5)],
            6 => {
                let n = self.rng.usize(1..=16.min(data.len() - at));
                data.drain(at..at + n);
            }
            7 => {
                let n = self.rng.usize(1..=64.min(data.len() - at));
                let copy = data[at..at + n].to_vec();
                data.splice(at..at, copy);
            }
            8 => data.truncate(at),
            _ => {
                if !other.is_empty() {
                    let from = self.rng.usize(..other.len());
                    let n = self.rng.usize(1..=256.min(other.len() - from));
                    data.splice(at..at, other[from..from + n].iter().copied());
                }
            }
        }
    }

    /// A mutation of a text (a plan).
    fn text(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        let token = PLAN_TOKENS[self.rng.usize(..PLAN_TOKENS.len())].as_bytes();
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(
                data.iter()
                    .enumerate()
                    .filter(|b| *b.1 == b'\n')
                    .map(|b| b.0 + 1),
            )
            .filter(|&i| i <= data.len())
            .collect();
        match self.rng.u8(..6) {
            0 | 1 => {
                let at = line_starts[self.rng.usize(..line_starts.len())];
                data.splice(at..at, token.iter().copied());
            }
            2 => {
                // The value after a `=` becomes a token.
                let eqs: Vec<usize> = data
                    .iter()
                    .enumerate()
                    .filter(|b| *b.1 == b'=')
                    .map(|b| b.0)
                    .collect();
                if let Some(&eq) = eqs.get(self.rng.usize(..eqs.len().max(1))) {
                    let end = data[eq..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(data.len(), |p| eq + p);
                    let mut value = b" ".to_vec();
                    value.extend_from_slice(token);
                    data.splice(eq + 1..end, value);
                }
            }
            3 if line_starts.len() >= 2 => {
                let i = self.rng.usize(..line_starts.len() - 1);
                let line = data[line_starts[i]..line_starts[i + 1]].to_vec();
                if self.rng.bool() {
                    data.drain(line_starts[i]..line_starts[i + 1]);
                } else {
                    data.splice(line_starts[i]..line_starts[i], line);
                }
            }
            _ => self.bytes(data, other),
        }
    }
}

/// Decodes the single frame `f` of `data`.
fn decode_one(data: &[u8], f: &Located) -> Option<RawFrame> {
    if f.range.len() < FRAME_HEADER_LEN {
        return None;
    }
    let mut mini = data[..HEADER_LEN].to_vec();
    mini.extend_from_slice(&data[f.range.clone()]);
    Recording::decode(&mini)?.frames.pop()
}

/// The custom mutator of a libFuzzer target: the structure-aware mutations three times
/// out of four, libFuzzer's own (`default`, followed by the checksum fix for recordings)
/// otherwise. Returns the new size.
pub fn libfuzzer(
    target: Target,
    data: &mut [u8],
    size: usize,
    max_size: usize,
    seed: u32,
    default: impl FnOnce(&mut [u8], usize, usize) -> usize,
) -> usize {
    let mut m = Mutator::new(u64::from(seed));
    let size = size.min(data.len());
    if m.rng.u8(..4) == 0 {
        let n = default(data, size, max_size).min(data.len());
        if target.takes_recordings() && target != Target::Container {
            craft::fix_checksums(&mut data[..n]);
        }
        return n;
    }
    let mut v = data[..size].to_vec();
    m.mutate(target, &mut v, &[], max_size.min(data.len()));
    data[..v.len()].copy_from_slice(&v);
    v.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tansa_format::container::{Kind, Writer};

    #[test]
    fn mutations_keep_frames_readable_often() {
        let mut w = Writer::new(Vec::new(), Kind::Memory).unwrap();
        for i in 0..8u8 {
            w.keyed_frame(memory::THREAD_CHUNK, &[i; 100]).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut m = Mutator::new(7);
        let mut readable = 0;
        for _ in 0..200 {
            let mut d = bytes.clone();
            m.mutate(Target::Memory, &mut d, &bytes, 1 << 20);
            if Recording::decode(&d).is_some_and(|r| !r.frames.is_empty()) {
                readable += 1;
            }
        }
        // Checksums are fixed: most mutants still have readable frames.
        assert!(readable > 100, "{readable}");
    }
}
