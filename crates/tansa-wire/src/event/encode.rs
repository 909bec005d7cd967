//! The encoder: records into an [`EventBuf`] (events) or a [`ByteSink`] (thread
//! starts and names, stacks, modules). Never allocates.

use super::*;
use crate::varint;

/// Largest encoded size of any event record (everything except thread start/name and the
/// meta records).
pub const MAX_EVENT_LEN: usize = 1 + 6 * varint::MAX_LEN;

/// Capacity of an [`EventBuf`]: a power of two at least [`MAX_EVENT_LEN`], so that indexing
/// with a masked position needs no bounds check.
pub const EVENT_BUF_LEN: usize = 64;
const _: () = assert!(EVENT_BUF_LEN >= MAX_EVENT_LEN && EVENT_BUF_LEN.is_power_of_two());

/// Where an [`EventBuf`] keeps its bytes: a block of [`EVENT_BUF_LEN`] bytes, owned (the
/// default) or borrowed (for instance the free space of a ring, so that the record is encoded
/// where it will be published, with no copy).
pub trait EventStorage {
    /// The block.
    fn block(&self) -> &[u8; EVENT_BUF_LEN];
    /// The block, to write into.
    fn block_mut(&mut self) -> &mut [u8; EVENT_BUF_LEN];
}

impl EventStorage for [u8; EVENT_BUF_LEN] {
    #[inline]
    fn block(&self) -> &[u8; EVENT_BUF_LEN] {
        self
    }
    #[inline]
    fn block_mut(&mut self) -> &mut [u8; EVENT_BUF_LEN] {
        self
    }
}

impl EventStorage for &mut [u8; EVENT_BUF_LEN] {
    #[inline]
    fn block(&self) -> &[u8; EVENT_BUF_LEN] {
        self
    }
    #[inline]
    fn block_mut(&mut self) -> &mut [u8; EVENT_BUF_LEN] {
        self
    }
}

/// A fixed buffer holding one encoded event: its own bytes by default, or a borrowed block
/// ([`EventBuf::in_place`]).
#[derive(Debug, Clone)]
pub struct EventBuf<S: EventStorage = [u8; EVENT_BUF_LEN]> {
    bytes: S,
    len: usize,
}

impl Default for EventBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBuf {
    /// An empty buffer.
    pub const fn new() -> Self {
        EventBuf {
            bytes: [0; EVENT_BUF_LEN],
            len: 0,
        }
    }

    /// The whole buffer (the record, then unspecified bytes up to its capacity), for writers
    /// that copy a constant size.
    pub fn raw(&self) -> &[u8; EVENT_BUF_LEN] {
        &self.bytes
    }
}

/// An [`EventBuf`] encoding into a borrowed block.
pub type EventSlot<'a> = EventBuf<&'a mut [u8; EVENT_BUF_LEN]>;

impl<'a> EventBuf<&'a mut [u8; EVENT_BUF_LEN]> {
    /// An empty buffer encoding into `block`, whose previous contents are overwritten only
    /// as far as the record goes.
    #[inline]
    pub fn in_place(block: &'a mut [u8; EVENT_BUF_LEN]) -> Self {
        EventBuf {
            bytes: block,
            len: 0,
        }
    }
}

impl<S: EventStorage> EventBuf<S> {
    /// The encoded bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes.block()[..self.len.min(EVENT_BUF_LEN)]
    }

    /// The length of the encoded record.
    #[inline]
    pub fn len(&self) -> usize {
        self.len.min(EVENT_BUF_LEN)
    }

    /// Whether nothing was encoded.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn start(&mut self, tag: Tag) {
        self.bytes.block_mut()[0] = tag as u8;
        self.len = 1;
    }

    #[inline]
    fn varint(&mut self, mut value: u64) {
        // Written in place (a copy of a temporary of variable length would be a memcpy call),
        // at a masked position (no bounds check; an event never exceeds MAX_EVENT_LEN).
        let bytes = self.bytes.block_mut();
        let mut at = self.len;
        while value >= 0x80 {
            bytes[at & (EVENT_BUF_LEN - 1)] = (value as u8) | 0x80;
            value >>= 7;
            at += 1;
        }
        bytes[at & (EVENT_BUF_LEN - 1)] = value as u8;
        self.len = at + 1;
    }
}

impl StreamState {
    /// Encodes an allocation.
    pub fn encode_alloc<S: EventStorage>(&mut self, ev: &AllocEvent, out: &mut EventBuf<S>) {
        out.start(ev.op.tag());
        out.varint(self.ts_delta(ev.ts));
        out.varint(self.ptr_delta(ev.ptr));
        out.varint(ev.size);
        out.varint(u64::from(ev.stack));
        if ev.op.has_alignment() {
            out.varint(ev.align);
        }
    }

    /// Encodes a reallocation.
    pub fn encode_realloc<S: EventStorage>(&mut self, ev: &ReallocEvent, out: &mut EventBuf<S>) {
        out.start(if ev.array {
            Tag::ReallocArray
        } else {
            Tag::Realloc
        });
        out.varint(self.ts_delta(ev.ts_begin));
        out.varint(ev.ts_end.wrapping_sub(ev.ts_begin));
        out.varint(self.ptr_delta(ev.old_ptr));
        out.varint(self.ptr_delta(ev.new_ptr));
        out.varint(ev.size);
        out.varint(u64::from(ev.stack));
    }

    /// Encodes a release.
    pub fn encode_free<S: EventStorage>(&mut self, ev: &FreeEvent, out: &mut EventBuf<S>) {
        out.start(Tag::Free);
        out.varint(self.ts_delta(ev.ts));
        out.varint(self.ptr_delta(ev.ptr));
        out.varint(u64::from(ev.stack));
    }

    /// Encodes a refused call.
    pub fn encode_improper<S: EventStorage>(&mut self, ev: &ImproperEvent, out: &mut EventBuf<S>) {
        out.start(match ev.op {
            ImproperOp::Free => Tag::ImproperFree,
            ImproperOp::Realloc => Tag::ImproperRealloc,
        });
        out.varint(self.ts_delta(ev.ts));
        out.varint(ev.ptr);
        if ev.op == ImproperOp::Realloc {
            out.varint(ev.size);
        }
        out.varint(u64::from(ev.stack));
    }

    /// Encodes a count of lost events.
    pub fn encode_lost<S: EventStorage>(&mut self, count: u64, out: &mut EventBuf<S>) {
        out.start(Tag::Lost);
        out.varint(count);
    }

    /// Encodes a CPU sample.
    pub fn encode_sample<S: EventStorage>(
        &mut self,
        ts: u64,
        stack: u32,
        weight: u32,
        out: &mut EventBuf<S>,
    ) {
        out.start(Tag::Sample);
        out.varint(self.ts_delta(ts));
        out.varint(u64::from(stack));
        out.varint(u64::from(weight));
    }

    /// Encodes a block the leak check found unreachable.
    pub fn encode_unreached<S: EventStorage>(
        &mut self,
        ptr: u64,
        class: LeakClass,
        out: &mut EventBuf<S>,
    ) {
        out.start(Tag::Unreached);
        out.varint(ptr);
        out.varint(u64::from(class.code()));
    }

    /// Encodes the end of the leak check.
    pub fn encode_leak_scan<S: EventStorage>(&mut self, scan: &LeakScan, out: &mut EventBuf<S>) {
        out.start(Tag::LeakScan);
        out.varint(self.ts_delta(scan.ts));
        out.varint(scan.blocks);
        out.varint(scan.reachable);
        out.varint(scan.root_bytes);
        out.varint(u64::from(scan.status));
    }

    /// Encodes the end of a thread's stream.
    pub fn encode_thread_end<S: EventStorage>(&mut self, ts: u64, out: &mut EventBuf<S>) {
        out.start(Tag::ThreadEnd);
        out.varint(self.ts_delta(ts));
    }
}

/// A destination for streamed (possibly large) records.
pub trait ByteSink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);

    /// Appends a LEB128 value.
    fn put_varint(&mut self, value: u64) {
        let mut tmp = [0u8; varint::MAX_LEN];
        let n = varint::encode(value, &mut tmp);
        self.put(&tmp[..n]);
    }
}

/// A [`ByteSink`] that only counts bytes, to size a record before writing it.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingSink(pub usize);

impl ByteSink for CountingSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }

    fn put_varint(&mut self, value: u64) {
        self.0 += varint::encoded_len(value);
    }
}

/// Longest thread name kept (Linux `comm` is at most 15 bytes).
pub const MAX_NAME_LEN: usize = 64;

/// Streams a [`Tag::ThreadStart`] record and resets `state` to start a new delta chain.
pub fn encode_thread_start(
    sink: &mut (impl ByteSink + ?Sized),
    state: &mut StreamState,
    pid: u32,
    tid: u32,
    ts: u64,
    name: &[u8],
) {
    let name = &name[..name.len().min(MAX_NAME_LEN)];
    sink.put(&[Tag::ThreadStart as u8]);
    sink.put_varint(u64::from(pid));
    sink.put_varint(u64::from(tid));
    sink.put_varint(ts);
    sink.put_varint(name.len() as u64);
    sink.put(name);
    *state = StreamState {
        prev_ts: ts,
        prev_ptr: 0,
    };
}

/// Streams a [`Tag::ThreadName`] record.
pub fn encode_thread_name(sink: &mut (impl ByteSink + ?Sized), name: &[u8]) {
    let name = &name[..name.len().min(MAX_NAME_LEN)];
    sink.put(&[Tag::ThreadName as u8]);
    sink.put_varint(name.len() as u64);
    sink.put(name);
}

/// The most bytes [`encode_stack_def`] writes for a stack of `frames` frames (a bound that
/// needs no pass over the frames).
pub const fn stack_def_max_len(frames: usize) -> usize {
    // Tag, id and count, then per frame a module id and an offset.
    1 + 5 + varint::MAX_LEN + frames * (5 + varint::MAX_LEN)
}

/// Streams a [`Tag::StackDef`] record.
pub fn encode_stack_def(
    sink: &mut (impl ByteSink + ?Sized),
    id: u32,
    frames: impl ExactSizeIterator<Item = StackFrame>,
) {
    sink.put(&[Tag::StackDef as u8]);
    sink.put_varint(u64::from(id));
    sink.put_varint(frames.len() as u64);
    for f in frames {
        sink.put_varint(u64::from(f.module));
        sink.put_varint(f.offset);
    }
}

/// Streams a [`Tag::ModuleLoad`] record.
#[allow(clippy::too_many_arguments)]
pub fn encode_module_load(
    sink: &mut (impl ByteSink + ?Sized),
    id: u32,
    ts: u64,
    bias: u64,
    flags: u32,
    build_id: &[u8],
    path: &[u8],
    segments: impl ExactSizeIterator<Item = LoadSegment>,
) {
    sink.put(&[Tag::ModuleLoad as u8]);
    sink.put_varint(u64::from(id));
    sink.put_varint(ts);
    sink.put_varint(bias);
    sink.put_varint(u64::from(flags));
    sink.put_varint(build_id.len() as u64);
    sink.put(build_id);
    sink.put_varint(path.len() as u64);
    sink.put(path);
    sink.put_varint(segments.len() as u64);
    for s in segments {
        sink.put_varint(s.vaddr);
        sink.put_varint(s.memsz);
        sink.put_varint(s.file_offset);
        sink.put_varint(u64::from(s.flags));
    }
}

/// Streams a [`Tag::ModuleUnload`] record.
pub fn encode_module_unload(sink: &mut (impl ByteSink + ?Sized), id: u32, ts: u64) {
    sink.put(&[Tag::ModuleUnload as u8]);
    sink.put_varint(u64::from(id));
    sink.put_varint(ts);
}
