//! The decoder: records out of one stream's bytes, bounded by what the bytes hold.

use super::*;
use crate::varint::{self, DecodeError as VarintError};

/// A cursor over a record's fields (also used by the lazy [`Frames`] and [`Segments`]).
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub(super) fn varint(&mut self) -> Result<u64, VarintError> {
        let (v, n) = varint::decode(&self.bytes[self.pos..])?;
        self.pos += n;
        Ok(v)
    }

    pub(super) fn u32(&mut self) -> Result<u32, VarintError> {
        u32::try_from(self.varint()?).map_err(|_| VarintError::Overflow)
    }

    pub(super) fn bytes(&mut self, len: u64) -> Result<&'a [u8], VarintError> {
        let len = usize::try_from(len).map_err(|_| VarintError::Overflow)?;
        let end = self.pos.checked_add(len).ok_or(VarintError::Overflow)?;
        if end > self.bytes.len() {
            return Err(VarintError::Truncated);
        }
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

/// Decodes the records of one stream.
///
/// The decoder stops (returns `None`) at the end of the input; an incomplete last record
/// yields [`DecodeError::Truncated`] and an unknown byte [`DecodeError::Corrupt`], after
/// which it yields nothing more.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
    state: StreamState,
    failed: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder over `input` with a fresh delta state.
    pub fn new(input: &'a [u8]) -> Self {
        Self::with_state(input, StreamState::default())
    }

    /// A decoder over `input` continuing from `state` (a stream split across buffers).
    pub fn with_state(input: &'a [u8], state: StreamState) -> Self {
        Decoder {
            input,
            pos: 0,
            state,
            failed: false,
        }
    }

    /// Offset of the next record.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The delta state after the records decoded so far.
    pub fn state(&self) -> StreamState {
        self.state
    }

    fn decode_one(&mut self) -> Result<Record<'a>, VarintError> {
        let mut r = Reader::new(self.input);
        r.pos = self.pos;
        let tag_byte = r.bytes(1)?[0];
        let Some(tag) = Tag::from_u8(tag_byte) else {
            return Err(VarintError::Overflow);
        };
        // Work on a copy of the state so that a truncated record leaves it untouched.
        let mut st = self.state;
        let rec = match tag {
            Tag::ThreadStart => {
                let pid = r.u32()?;
                let tid = r.u32()?;
                let ts = r.varint()?;
                let len = r.varint()?;
                let name = r.bytes(len)?;
                st = StreamState {
                    prev_ts: ts,
                    prev_ptr: 0,
                };
                Record::ThreadStart { pid, tid, ts, name }
            }
            Tag::ThreadName => {
                let len = r.varint()?;
                Record::ThreadName {
                    name: r.bytes(len)?,
                }
            }
            Tag::ThreadEnd => Record::ThreadEnd {
                ts: st.ts_undelta(r.varint()?),
            },
            Tag::Malloc
            | Tag::Calloc
            | Tag::Memalign
            | Tag::PosixMemalign
            | Tag::AlignedAlloc
            | Tag::Valloc
            | Tag::Pvalloc => {
                let op = match tag {
                    Tag::Malloc => AllocOp::Malloc,
                    Tag::Calloc => AllocOp::Calloc,
                    Tag::Memalign => AllocOp::Memalign,
                    Tag::PosixMemalign => AllocOp::PosixMemalign,
                    Tag::AlignedAlloc => AllocOp::AlignedAlloc,
                    Tag::Valloc => AllocOp::Valloc,
                    _ => AllocOp::Pvalloc,
                };
                let ts = st.ts_undelta(r.varint()?);
                let ptr = st.ptr_undelta(r.varint()?);
                let size = r.varint()?;
                let stack = r.u32()?;
                let align = if op.has_alignment() { r.varint()? } else { 0 };
                Record::Alloc(AllocEvent {
                    op,
                    ts,
                    ptr,
                    size,
                    align,
                    stack,
                })
            }
            Tag::Realloc | Tag::ReallocArray => {
                let ts_begin = st.ts_undelta(r.varint()?);
                let ts_end = ts_begin.wrapping_add(r.varint()?);
                let old_ptr = st.ptr_undelta(r.varint()?);
                let new_ptr = st.ptr_undelta(r.varint()?);
                let size = r.varint()?;
                let stack = r.u32()?;
                Record::Realloc(ReallocEvent {
                    array: tag == Tag::ReallocArray,
                    ts_begin,
                    ts_end,
                    old_ptr,
                    new_ptr,
                    size,
                    stack,
                })
            }
            Tag::Free => {
                let ts = st.ts_undelta(r.varint()?);
                let ptr = st.ptr_undelta(r.varint()?);
                let stack = r.u32()?;
                Record::Free(FreeEvent { ts, ptr, stack })
            }
            Tag::ImproperFree | Tag::ImproperRealloc => {
                let op = if tag == Tag::ImproperFree {
                    ImproperOp::Free
                } else {
                    ImproperOp::Realloc
                };
                let ts = st.ts_undelta(r.varint()?);
                let ptr = r.varint()?;
                let size = if op == ImproperOp::Realloc {
                    r.varint()?
                } else {
                    0
                };
                let stack = r.u32()?;
                Record::Improper(ImproperEvent {
                    op,
                    ts,
                    ptr,
                    size,
                    stack,
                })
            }
            Tag::Lost => Record::Lost { count: r.varint()? },
            Tag::StackDef => {
                let id = r.u32()?;
                let count = r.u32()?;
                let start = r.pos;
                for _ in 0..count {
                    r.u32()?;
                    r.varint()?;
                }
                Record::StackDef {
                    id,
                    frames: Frames {
                        bytes: &self.input[start..r.pos],
                        count,
                    },
                }
            }
            Tag::ModuleLoad => {
                let id = r.u32()?;
                let ts = r.varint()?;
                let bias = r.varint()?;
                let flags = r.u32()?;
                let len = r.varint()?;
                let build_id = r.bytes(len)?;
                let len = r.varint()?;
                let path = r.bytes(len)?;
                let count = r.u32()?;
                let start = r.pos;
                for _ in 0..count {
                    r.varint()?;
                    r.varint()?;
                    r.varint()?;
                    r.u32()?;
                }
                Record::ModuleLoad(ModuleLoad {
                    id,
                    ts,
                    bias,
                    flags,
                    build_id,
                    path,
                    segments: Segments {
                        bytes: &self.input[start..r.pos],
                        count,
                    },
                })
            }
            Tag::ModuleUnload => Record::ModuleUnload {
                id: r.u32()?,
                ts: r.varint()?,
            },
            Tag::Sample => Record::Sample {
                ts: st.ts_undelta(r.varint()?),
                stack: r.u32()?,
                weight: r.u32()?,
            },
            Tag::Unreached => {
                let ptr = r.varint()?;
                let class = LeakClass::from_code(r.varint()?).ok_or(VarintError::Overflow)?;
                Record::Unreached { ptr, class }
            }
            Tag::LeakScan => Record::LeakScan(LeakScan {
                ts: st.ts_undelta(r.varint()?),
                blocks: r.varint()?,
                reachable: r.varint()?,
                root_bytes: r.varint()?,
                status: r.u32()?,
            }),
        };
        self.state = st;
        self.pos = r.pos;
        Ok(rec)
    }
}

impl<'a> Iterator for Decoder<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.input.len() {
            return None;
        }
        let offset = self.pos;
        match self.decode_one() {
            Ok(rec) => Some(Ok(rec)),
            Err(e) => {
                self.failed = true;
                Some(Err(match e {
                    VarintError::Truncated => DecodeError::Truncated { offset },
                    VarintError::Overflow => DecodeError::Corrupt { offset },
                }))
            }
        }
    }
}
