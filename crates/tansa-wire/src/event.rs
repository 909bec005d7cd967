//! The records that travel through the rings and are stored, byte for byte, in recordings.
//!
//! Every record starts with a tag byte followed by LEB128 fields. Records in a *thread
//! stream* (one thread ring) are delta-encoded against the previous record of the same
//! stream: timestamps and pointers are stored as zig-zag differences, which keeps a typical
//! allocation event under ten bytes. The delta state ([`StreamState`]) is reset by every
//! [`Tag::ThreadStart`], so a decoder can start at any `ThreadStart`. Records in the *meta
//! stream* (stack definitions, module loads) use absolute values only.
//!
//! Encoding never allocates: small records are built in a fixed array
//! ([`EventBuf`]) and large ones are streamed into a [`ByteSink`].

use crate::varint::{self, DecodeError as VarintError};

/// Record tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// A thread starts writing to a stream: `pid, tid, ts (absolute), name`.
    ThreadStart = 0x01,
    /// The thread's name changed: `name`.
    ThreadName = 0x02,
    /// The thread stops writing to this stream (it exits): `ts`.
    ThreadEnd = 0x03,
    /// `malloc`: `ts, ptr, size, stack`.
    Malloc = 0x10,
    /// `calloc`: `ts, ptr, size (nmemb * size), stack`.
    Calloc = 0x11,
    /// `memalign`: `ts, ptr, size, stack, alignment`.
    Memalign = 0x12,
    /// `posix_memalign`: as `Memalign`.
    PosixMemalign = 0x13,
    /// `aligned_alloc`: as `Memalign`.
    AlignedAlloc = 0x14,
    /// `valloc`: as `Memalign` (alignment is the page size).
    Valloc = 0x15,
    /// `pvalloc`: as `Memalign` (size rounded up to pages).
    Pvalloc = 0x16,
    /// `realloc`: `ts_begin, duration, old_ptr, new_ptr, size, stack`.
    Realloc = 0x18,
    /// `reallocarray`: as `Realloc` (size is `nmemb * size`).
    ReallocArray = 0x19,
    /// `free`: `ts, ptr, stack`.
    Free = 0x1c,
    /// A `free` of a pointer the agent never saw allocated (online mode refuses it):
    /// `ts, ptr, stack`.
    ImproperFree = 0x1d,
    /// A `realloc` of a pointer the agent never saw allocated: `ts, ptr, size, stack`.
    ImproperRealloc = 0x1e,
    /// Events the thread could not record: `count`.
    Lost = 0x1f,
    /// Meta: a call stack: `id, n, n x (module, offset)`.
    StackDef = 0x20,
    /// Meta: a module (executable or shared object) was mapped.
    ModuleLoad = 0x21,
    /// Meta: a module was unmapped: `id, ts`.
    ModuleUnload = 0x22,
    /// A CPU sample taken by the agent's timer (the fallback of `tansa sample`):
    /// `ts, stack, weight`. The stack's first frame is the interrupted instruction, not a
    /// return address; `weight` is the number of sampling periods the sample stands for (the
    /// kernel may deliver one signal for several expired periods).
    Sample = 0x30,
}

impl Tag {
    /// Parses a tag byte.
    pub fn from_u8(byte: u8) -> Option<Tag> {
        use Tag::*;
        Some(match byte {
            0x01 => ThreadStart,
            0x02 => ThreadName,
            0x03 => ThreadEnd,
            0x10 => Malloc,
            0x11 => Calloc,
            0x12 => Memalign,
            0x13 => PosixMemalign,
            0x14 => AlignedAlloc,
            0x15 => Valloc,
            0x16 => Pvalloc,
            0x18 => Realloc,
            0x19 => ReallocArray,
            0x1c => Free,
            0x1d => ImproperFree,
            0x1e => ImproperRealloc,
            0x1f => Lost,
            0x20 => StackDef,
            0x21 => ModuleLoad,
            0x22 => ModuleUnload,
            0x30 => Sample,
            _ => return None,
        })
    }
}

/// The allocating entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AllocOp {
    /// `malloc`
    Malloc,
    /// `calloc`
    Calloc,
    /// `memalign`
    Memalign,
    /// `posix_memalign`
    PosixMemalign,
    /// `aligned_alloc`
    AlignedAlloc,
    /// `valloc`
    Valloc,
    /// `pvalloc`
    Pvalloc,
}

impl AllocOp {
    /// The record tag of this operation.
    pub fn tag(self) -> Tag {
        match self {
            AllocOp::Malloc => Tag::Malloc,
            AllocOp::Calloc => Tag::Calloc,
            AllocOp::Memalign => Tag::Memalign,
            AllocOp::PosixMemalign => Tag::PosixMemalign,
            AllocOp::AlignedAlloc => Tag::AlignedAlloc,
            AllocOp::Valloc => Tag::Valloc,
            AllocOp::Pvalloc => Tag::Pvalloc,
        }
    }

    /// Whether the record carries an alignment field.
    pub fn has_alignment(self) -> bool {
        !matches!(self, AllocOp::Malloc | AllocOp::Calloc)
    }

    /// The C name of the function.
    pub fn name(self) -> &'static str {
        match self {
            AllocOp::Malloc => "malloc",
            AllocOp::Calloc => "calloc",
            AllocOp::Memalign => "memalign",
            AllocOp::PosixMemalign => "posix_memalign",
            AllocOp::AlignedAlloc => "aligned_alloc",
            AllocOp::Valloc => "valloc",
            AllocOp::Pvalloc => "pvalloc",
        }
    }
}

/// An allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocEvent {
    /// Which function.
    pub op: AllocOp,
    /// Timestamp, taken after the allocator returned.
    pub ts: u64,
    /// Returned address (never null: failed allocations are not recorded).
    pub ptr: u64,
    /// Bytes requested.
    pub size: u64,
    /// Requested alignment (0 for `malloc` and `calloc`).
    pub align: u64,
    /// Stack id, 0 when the stack is unknown.
    pub stack: u32,
}

/// A `realloc` or `reallocarray`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReallocEvent {
    /// `true` for `reallocarray`.
    pub array: bool,
    /// Timestamp taken before the allocator was called: the old block is released here.
    pub ts_begin: u64,
    /// Timestamp taken after the allocator returned: the new block exists from here.
    pub ts_end: u64,
    /// The block passed in (0 for a `realloc(NULL, n)`).
    pub old_ptr: u64,
    /// The block returned; 0 when the call freed the block (`size == 0`) or failed.
    pub new_ptr: u64,
    /// Bytes requested.
    pub size: u64,
    /// Stack id, 0 when unknown.
    pub stack: u32,
}

/// A `free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeEvent {
    /// Timestamp, taken before the allocator was called.
    pub ts: u64,
    /// The block released (0 for `free(NULL)`).
    pub ptr: u64,
    /// Stack id, 0 when unknown or when free stacks are not recorded.
    pub stack: u32,
}

/// Which function was misused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImproperOp {
    /// `free` of an unknown pointer.
    Free,
    /// `realloc` of an unknown pointer.
    Realloc,
}

/// A call the online agent refused because the pointer was never allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImproperEvent {
    /// Which function.
    pub op: ImproperOp,
    /// Timestamp.
    pub ts: u64,
    /// The unknown pointer.
    pub ptr: u64,
    /// Requested size (`realloc` only).
    pub size: u64,
    /// Stack id.
    pub stack: u32,
}

/// Module flag: the main executable.
pub const MODULE_MAIN: u32 = 1 << 0;
/// Module flag: the vDSO (not backed by a file).
pub const MODULE_VDSO: u32 = 1 << 1;
/// Module flag: tansa's agent itself (its frames are never part of a reported stack).
pub const MODULE_AGENT: u32 = 1 << 2;

/// A loaded module as announced by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleLoad<'a> {
    /// Agent-assigned id, unique within the session, never 0.
    pub id: u32,
    /// Timestamp.
    pub ts: u64,
    /// Load bias: runtime address = address in the file's program headers + bias.
    pub bias: u64,
    /// `MODULE_*` flags.
    pub flags: u32,
    /// GNU build id (may be empty).
    pub build_id: &'a [u8],
    /// Path of the file as the dynamic loader knows it.
    pub path: &'a [u8],
    /// The `PT_LOAD` segments.
    pub segments: Segments<'a>,
}

/// One `PT_LOAD` program header of a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_vaddr`
    pub vaddr: u64,
    /// `p_memsz`
    pub memsz: u64,
    /// `p_offset`
    pub file_offset: u64,
    /// `p_flags` (`PF_X` = 1, `PF_W` = 2, `PF_R` = 4)
    pub flags: u32,
}

/// Lazily decoded list of [`LoadSegment`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segments<'a> {
    bytes: &'a [u8],
    count: u32,
}

impl<'a> Iterator for Segments<'a> {
    type Item = LoadSegment;
    fn next(&mut self) -> Option<LoadSegment> {
        if self.count == 0 {
            return None;
        }
        let mut r = Reader::new(self.bytes);
        // The record was validated when it was decoded, so these reads succeed.
        let seg = LoadSegment {
            vaddr: r.varint().ok()?,
            memsz: r.varint().ok()?,
            file_offset: r.varint().ok()?,
            flags: r.varint().ok()? as u32,
        };
        self.bytes = &self.bytes[r.pos..];
        self.count -= 1;
        Some(seg)
    }
}

/// A normalised frame: a module id and the address relative to the module's load bias
/// (the address as it appears in the file). Module id 0 means "no module"; the offset is
/// then the absolute address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackFrame {
    /// Module id, or 0.
    pub module: u32,
    /// Address relative to the module's load bias (a return address: the call site + 1
    /// instruction).
    pub offset: u64,
}

/// Lazily decoded frames of a stack definition, innermost (the caller of the allocator)
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frames<'a> {
    bytes: &'a [u8],
    count: u32,
}

impl Frames<'_> {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there are no frames.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl Iterator for Frames<'_> {
    type Item = StackFrame;
    fn next(&mut self) -> Option<StackFrame> {
        if self.count == 0 {
            return None;
        }
        let mut r = Reader::new(self.bytes);
        let frame = StackFrame {
            module: r.varint().ok()? as u32,
            offset: r.varint().ok()?,
        };
        self.bytes = &self.bytes[r.pos..];
        self.count -= 1;
        Some(frame)
    }
}

/// A decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// See [`Tag::ThreadStart`].
    ThreadStart {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Absolute timestamp.
        ts: u64,
        /// Thread name (`/proc` comm) when the thread started writing.
        name: &'a [u8],
    },
    /// See [`Tag::ThreadName`].
    ThreadName {
        /// New name.
        name: &'a [u8],
    },
    /// See [`Tag::ThreadEnd`].
    ThreadEnd {
        /// Timestamp.
        ts: u64,
    },
    /// An allocation.
    Alloc(AllocEvent),
    /// A reallocation.
    Realloc(ReallocEvent),
    /// A release.
    Free(FreeEvent),
    /// A refused call.
    Improper(ImproperEvent),
    /// Lost events.
    Lost {
        /// How many.
        count: u64,
    },
    /// A stack definition.
    StackDef {
        /// Stack id (never 0).
        id: u32,
        /// Frames, innermost first.
        frames: Frames<'a>,
    },
    /// A module load.
    ModuleLoad(ModuleLoad<'a>),
    /// A module unload.
    ModuleUnload {
        /// Module id.
        id: u32,
        /// Timestamp.
        ts: u64,
    },
    /// A CPU sample.
    Sample {
        /// Timestamp.
        ts: u64,
        /// Stack id (first frame: the interrupted instruction).
        stack: u32,
        /// Sampling periods this sample stands for (1 + timer overruns).
        weight: u32,
    },
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The stream ends inside a record (a normal condition at the end of a live ring or of
    /// a truncated file).
    Truncated {
        /// Offset of the incomplete record.
        offset: usize,
    },
    /// A byte that is not a known tag, or a malformed field.
    Corrupt {
        /// Offset of the bad record.
        offset: usize,
    },
}

/// Delta state of a thread stream, shared by the encoder and the decoder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamState {
    /// Timestamp of the previous timed record.
    pub prev_ts: u64,
    /// Previous pointer field.
    pub prev_ptr: u64,
}

impl StreamState {
    fn ts_delta(&mut self, ts: u64) -> u64 {
        let d = varint::zigzag(ts.wrapping_sub(self.prev_ts) as i64);
        self.prev_ts = ts;
        d
    }

    fn ptr_delta(&mut self, ptr: u64) -> u64 {
        let d = varint::zigzag(ptr.wrapping_sub(self.prev_ptr) as i64);
        self.prev_ptr = ptr;
        d
    }

    fn ts_undelta(&mut self, d: u64) -> u64 {
        self.prev_ts = self.prev_ts.wrapping_add(varint::unzigzag(d) as u64);
        self.prev_ts
    }

    fn ptr_undelta(&mut self, d: u64) -> u64 {
        self.prev_ptr = self.prev_ptr.wrapping_add(varint::unzigzag(d) as u64);
        self.prev_ptr
    }
}

/// Largest encoded size of any event record (everything except thread start/name and the
/// meta records).
pub const MAX_EVENT_LEN: usize = 1 + 6 * varint::MAX_LEN;

/// Capacity of an [`EventBuf`]: a power of two at least [`MAX_EVENT_LEN`], so that indexing
/// with a masked position needs no bounds check.
pub const EVENT_BUF_LEN: usize = 64;
const _: () = assert!(EVENT_BUF_LEN >= MAX_EVENT_LEN && EVENT_BUF_LEN.is_power_of_two());

/// A fixed buffer holding one encoded event.
#[derive(Debug, Clone)]
pub struct EventBuf {
    bytes: [u8; EVENT_BUF_LEN],
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

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len.min(EVENT_BUF_LEN)]
    }

    fn start(&mut self, tag: Tag) {
        self.bytes[0] = tag as u8;
        self.len = 1;
    }

    #[inline]
    fn varint(&mut self, mut value: u64) {
        // Written in place (a copy of a temporary of variable length would be a memcpy call),
        // at a masked position (no bounds check; an event never exceeds MAX_EVENT_LEN).
        let mut at = self.len;
        while value >= 0x80 {
            self.bytes[at & (EVENT_BUF_LEN - 1)] = (value as u8) | 0x80;
            value >>= 7;
            at += 1;
        }
        self.bytes[at & (EVENT_BUF_LEN - 1)] = value as u8;
        self.len = at + 1;
    }
}

impl StreamState {
    /// Encodes an allocation.
    pub fn encode_alloc(&mut self, ev: &AllocEvent, out: &mut EventBuf) {
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
    pub fn encode_realloc(&mut self, ev: &ReallocEvent, out: &mut EventBuf) {
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
    pub fn encode_free(&mut self, ev: &FreeEvent, out: &mut EventBuf) {
        out.start(Tag::Free);
        out.varint(self.ts_delta(ev.ts));
        out.varint(self.ptr_delta(ev.ptr));
        out.varint(u64::from(ev.stack));
    }

    /// Encodes a refused call.
    pub fn encode_improper(&mut self, ev: &ImproperEvent, out: &mut EventBuf) {
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
    pub fn encode_lost(&mut self, count: u64, out: &mut EventBuf) {
        out.start(Tag::Lost);
        out.varint(count);
    }

    /// Encodes a CPU sample.
    pub fn encode_sample(&mut self, ts: u64, stack: u32, weight: u32, out: &mut EventBuf) {
        out.start(Tag::Sample);
        out.varint(self.ts_delta(ts));
        out.varint(u64::from(stack));
        out.varint(u64::from(weight));
    }

    /// Encodes the end of a thread's stream.
    pub fn encode_thread_end(&mut self, ts: u64, out: &mut EventBuf) {
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

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, VarintError> {
        let (v, n) = varint::decode(&self.bytes[self.pos..])?;
        self.pos += n;
        Ok(v)
    }

    fn u32(&mut self) -> Result<u32, VarintError> {
        u32::try_from(self.varint()?).map_err(|_| VarintError::Overflow)
    }

    fn bytes(&mut self, len: u64) -> Result<&'a [u8], VarintError> {
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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    struct VecSink(Vec<u8>);
    impl ByteSink for VecSink {
        fn put(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    fn sample_stream() -> (Vec<u8>, Vec<Record<'static>>) {
        let mut sink = VecSink(Vec::new());
        let mut st = StreamState::default();
        encode_thread_start(&mut sink, &mut st, 42, 43, 1_000_000, b"worker");
        let mut out = Vec::new();
        let events = [
            Record::Alloc(AllocEvent {
                op: AllocOp::Malloc,
                ts: 1_000_100,
                ptr: 0x5555_0000_1000,
                size: 100,
                align: 0,
                stack: 1,
            }),
            Record::Alloc(AllocEvent {
                op: AllocOp::AlignedAlloc,
                ts: 1_000_200,
                ptr: 0x5555_0000_2000,
                size: 4096,
                align: 64,
                stack: 2,
            }),
            Record::Realloc(ReallocEvent {
                array: false,
                ts_begin: 1_000_300,
                ts_end: 1_000_350,
                old_ptr: 0x5555_0000_1000,
                new_ptr: 0x5555_0000_0800,
                size: 200,
                stack: 1,
            }),
            // A timestamp that goes backwards (clock skew between CPUs) must survive.
            Record::Free(FreeEvent {
                ts: 1_000_340,
                ptr: 0x5555_0000_0800,
                stack: 0,
            }),
            Record::Improper(ImproperEvent {
                op: ImproperOp::Realloc,
                ts: 1_000_400,
                ptr: 0xdead,
                size: 8,
                stack: 3,
            }),
            Record::Lost { count: 7 },
            Record::Sample {
                ts: 1_000_450,
                stack: 4,
                weight: 3,
            },
            Record::ThreadEnd { ts: 1_000_500 },
        ];
        for ev in events {
            let mut buf = EventBuf::new();
            match ev {
                Record::Alloc(a) => st.encode_alloc(&a, &mut buf),
                Record::Realloc(r) => st.encode_realloc(&r, &mut buf),
                Record::Free(f) => st.encode_free(&f, &mut buf),
                Record::Improper(i) => st.encode_improper(&i, &mut buf),
                Record::Lost { count } => st.encode_lost(count, &mut buf),
                Record::Sample { ts, stack, weight } => {
                    st.encode_sample(ts, stack, weight, &mut buf)
                }
                Record::ThreadEnd { ts } => st.encode_thread_end(ts, &mut buf),
                _ => unreachable!(),
            }
            sink.put(buf.as_bytes());
            out.push(ev);
        }
        (sink.0, out)
    }

    #[test]
    fn thread_stream_round_trips() {
        let (bytes, expected) = sample_stream();
        let decoded: Vec<_> = Decoder::new(&bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            decoded[0],
            Record::ThreadStart {
                pid: 42,
                tid: 43,
                ts: 1_000_000,
                name: b"worker"
            }
        );
        assert_eq!(&decoded[1..], &expected[..]);
    }

    #[test]
    fn every_truncation_is_reported_not_misread() {
        let (bytes, _) = sample_stream();
        let full: Vec<_> = Decoder::new(&bytes).map(Result::unwrap).collect();
        for cut in 0..bytes.len() {
            let mut ok = Vec::new();
            let mut err = None;
            for r in Decoder::new(&bytes[..cut]) {
                match r {
                    Ok(rec) => ok.push(rec),
                    Err(e) => err = Some(e),
                }
            }
            // Whatever decodes is a prefix of the full stream.
            assert_eq!(&full[..ok.len()], &ok[..], "cut at {cut}");
            if let Some(e) = err {
                assert!(
                    matches!(e, DecodeError::Truncated { .. }),
                    "cut at {cut}: {e:?}"
                );
            }
        }
    }

    #[test]
    fn unknown_tag_is_corrupt() {
        let bytes = [0x7fu8, 1, 2, 3];
        let mut d = Decoder::new(&bytes);
        assert_eq!(d.next(), Some(Err(DecodeError::Corrupt { offset: 0 })));
        assert_eq!(d.next(), None);
    }

    #[test]
    fn meta_records_round_trip() {
        let mut sink = VecSink(Vec::new());
        let frames = [
            StackFrame {
                module: 1,
                offset: 0x1234,
            },
            StackFrame {
                module: 0,
                offset: 0x7fff_0000_0000,
            },
        ];
        encode_stack_def(&mut sink, 9, frames.iter().copied());
        let segs = [LoadSegment {
            vaddr: 0,
            memsz: 0x2000,
            file_offset: 0,
            flags: 5,
        }];
        encode_module_load(
            &mut sink,
            3,
            77,
            0x7f00_0000_0000,
            MODULE_MAIN,
            &[0xab, 0xcd],
            b"/usr/bin/true",
            segs.iter().copied(),
        );
        encode_module_unload(&mut sink, 3, 99);
        let mut counted = CountingSink::default();
        encode_stack_def(&mut counted, 9, frames.iter().copied());
        let recs: Vec<_> = Decoder::new(&sink.0).map(Result::unwrap).collect();
        assert_eq!(recs.len(), 3);
        match recs[0] {
            Record::StackDef { id, frames: f } => {
                assert_eq!(id, 9);
                assert_eq!(f.len(), 2);
                assert_eq!(f.collect::<Vec<_>>(), frames);
            }
            other => panic!("{other:?}"),
        }
        match recs[1] {
            Record::ModuleLoad(m) => {
                assert_eq!(
                    (m.id, m.ts, m.bias, m.flags),
                    (3, 77, 0x7f00_0000_0000, MODULE_MAIN)
                );
                assert_eq!(m.build_id, &[0xab, 0xcd]);
                assert_eq!(m.path, b"/usr/bin/true");
                assert_eq!(m.segments.collect::<Vec<_>>(), segs);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(recs[2], Record::ModuleUnload { id: 3, ts: 99 });
        let mut d = Decoder::new(&sink.0);
        d.next();
        assert_eq!(counted.0, d.position(), "counting sink measures the record");
    }
}
