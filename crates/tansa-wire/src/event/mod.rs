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
//!
//! This module holds the tags, the record types and the delta state; `encode` the encoder
//! (used by the agent), `decode` the [`Decoder`] (used by the collector and the reports).

mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use decode::Decoder;
use decode::Reader;
pub use encode::*;

use crate::varint;

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
    /// A block the leak check at exit found unreachable: `ptr, class` (see
    /// [`LeakClass`]).
    Unreached = 0x24,
    /// The end of the leak check at exit: `ts, blocks, reachable, root_bytes, status` (see
    /// [`LeakScan`]); the [`Tag::Unreached`] records of the check precede it.
    LeakScan = 0x25,
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
            0x24 => Unreached,
            0x25 => LeakScan,
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
///
/// A signal handler's stack goes on through the code the signal interrupted: the agent
/// writes the frame of the signal-return trampoline the handler returns to as
/// [`SIGNAL_FRAME`] (module 0), and the frame after it (further out) is the interrupted
/// instruction *plus one*: it is no return address, and adding one lets every reader look
/// it up, like a return address, one byte back, at the instruction itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackFrame {
    /// Module id, or 0.
    pub module: u32,
    /// Address relative to the module's load bias (a return address: the call site + 1
    /// instruction).
    pub offset: u64,
}

/// The offset (module 0) of the frame that stands for a signal delivery in a stack: the
/// handler's caller, the kernel's signal frame. Never a return address (no call
/// instruction ends at the top of the address space).
pub const SIGNAL_FRAME: u64 = u64::MAX;

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
    /// A block the leak check at exit found unreachable.
    Unreached {
        /// The block.
        ptr: u64,
        /// How it was found.
        class: LeakClass,
    },
    /// The end of the leak check at exit.
    LeakScan(LeakScan),
}

/// How the leak check at exit found a block that no pointer in the program's memory
/// outside the heap leads to (Valgrind's terms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeakClass {
    /// No other unreachable block points to it either: the program lost its last pointer to
    /// it (for a group of blocks that point at one another, one of them).
    Definite,
    /// Only other unreachable blocks point to it: it goes with the block that lost them.
    Indirect,
    /// Not a live block any more: the allocator holds it as free, released by a call the
    /// hooks do not see (the C library frees some of its own blocks internally at exit).
    Released,
}

impl LeakClass {
    /// The byte that encodes it.
    pub fn code(self) -> u8 {
        match self {
            LeakClass::Definite => 1,
            LeakClass::Indirect => 2,
            LeakClass::Released => 3,
        }
    }

    /// Parses [`LeakClass::code`].
    pub fn from_code(code: u64) -> Option<LeakClass> {
        match code {
            1 => Some(LeakClass::Definite),
            2 => Some(LeakClass::Indirect),
            3 => Some(LeakClass::Released),
            _ => None,
        }
    }
}

/// What the leak check at exit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakScan {
    /// When it ended.
    pub ts: u64,
    /// Live blocks it looked at.
    pub blocks: u64,
    /// Of which reachable.
    pub reachable: u64,
    /// Bytes of memory outside the heap (globals, stacks, other mappings) it read for
    /// pointers.
    pub root_bytes: u64,
    /// [`SCAN_UNREADABLE`] and the other `SCAN_` bits: what kept it from being complete.
    pub status: u32,
}

/// [`LeakScan::status`]: some memory could not be read (a block or a mapping that went
/// away while the check ran); what it held was not followed.
pub const SCAN_UNREADABLE: u32 = 1 << 0;
/// [`LeakScan::status`]: the blocks' sizes could not be had (the program's allocator has
/// no `malloc_usable_size`); nothing was classified.
pub const SCAN_NO_SIZES: u32 = 1 << 1;
/// [`LeakScan::status`]: the agent's own mappings could not all be told apart (more than
/// its registry holds); nothing was classified.
pub const SCAN_OWN_MAPPINGS: u32 = 1 << 2;
/// [`LeakScan::status`]: the memory map could not be read; nothing was classified.
pub const SCAN_NO_MAPS: u32 = 1 << 3;
/// [`LeakScan::status`] bits for which no block was classified.
pub const SCAN_NOTHING_CLASSIFIED: u32 = SCAN_NO_SIZES | SCAN_OWN_MAPPINGS | SCAN_NO_MAPS;

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
    pub(super) fn ts_delta(&mut self, ts: u64) -> u64 {
        let d = varint::zigzag(ts.wrapping_sub(self.prev_ts) as i64);
        self.prev_ts = ts;
        d
    }

    pub(super) fn ptr_delta(&mut self, ptr: u64) -> u64 {
        let d = varint::zigzag(ptr.wrapping_sub(self.prev_ptr) as i64);
        self.prev_ptr = ptr;
        d
    }

    pub(super) fn ts_undelta(&mut self, d: u64) -> u64 {
        self.prev_ts = self.prev_ts.wrapping_add(varint::unzigzag(d) as u64);
        self.prev_ts
    }

    pub(super) fn ptr_undelta(&mut self, d: u64) -> u64 {
        self.prev_ptr = self.prev_ptr.wrapping_add(varint::unzigzag(d) as u64);
        self.prev_ptr
    }
}
