//! Layout of the shared-memory segments and the byte-ring protocol.
//!
//! A *session* is one agent instance, i.e. one process image (a fork or an exec starts a
//! new session). Its memory is one or more *segments*, each a `memfd` created by the agent
//! and handed to the collector over the control socket. Every segment starts with a
//! [`SegmentHeader`] page followed by `ring_count` rings (segment `k` has
//! [`segment_ring_count`]`(first, k)` of them: each segment doubles the previous one, up to
//! [`MAX_RINGS_PER_SEGMENT`]). Ring 0 of segment 0 is the *meta ring* (stack definitions and
//! module loads, written by any thread under the ring's spin lock); every other ring is a
//! *thread ring* owned by one thread at a time, and reused by another thread once its owner
//! is gone and the collector has drained it (see [`RING_CLOSED`]). The header's `claimed`
//! bitmap lets both sides find the rings in use without reading every ring header.
//!
//! A ring is a byte ring of `ring_data_size` bytes (a power of two). The writer appends
//! encoded records (see [`crate::event`]) at `head`, wrapping at the end of the data area,
//! and publishes them by storing the new `head` with release ordering. The collector copies
//! `[tail, head)` out and stores the new `tail`. Both counters grow without bound; positions
//! in the data area are taken modulo the ring size. A record is never visible half-written,
//! so a target that dies at any instant leaves only complete records behind.

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Magic number at the start of every segment (`"TANSASG1"`).
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"TANSASG1");
/// Size of the segment header area; rings start at this offset.
pub const SEGMENT_HEADER_SIZE: usize = 4096;
/// Size of a ring header; the ring's data follows it.
pub const RING_HEADER_SIZE: usize = 128;
/// Capacity of the executable path stored in the session header.
pub const EXE_CAPACITY: usize = 1024;
/// Capacity of the command line stored in the session header.
pub const CMDLINE_CAPACITY: usize = 2048;

/// Ring state: not owned by any thread; the agent may claim it.
pub const RING_FREE: u32 = 0;
/// Ring state: owned by the thread whose id is in [`RingHeader::tid`].
pub const RING_ACTIVE: u32 = 1;
/// Ring state: its thread is done; the collector drains it and sets it back to free.
pub const RING_CLOSED: u32 = 2;

/// How timestamps in a session are expressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ClockKind {
    /// Nanoseconds of `CLOCK_MONOTONIC`.
    Monotonic = 0,
    /// Raw time-stamp counter ticks; the collector stores calibration points that map them
    /// to `CLOCK_MONOTONIC` nanoseconds.
    Tsc = 1,
}

impl ClockKind {
    /// Parses the value stored in a header.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(Self::Monotonic),
            1 => Some(Self::Tsc),
            _ => None,
        }
    }
}

/// Session flag: the collector aggregates online; the agent keeps a table of live blocks and
/// refuses to pass unknown pointers to the real `free`/`realloc`.
pub const FLAG_ONLINE: u32 = 1 << 0;
/// Session flag: free events carry their call stack.
pub const FLAG_FREE_STACKS: u32 = 1 << 1;
/// Session flag: the agent takes CPU samples (and records no heap events).
pub const FLAG_SAMPLING: u32 = 1 << 2;

/// Session flag: leak-cause mode. The agent watches the allocation sites the collector
/// lists in [`SegmentHeader::trace_sites`] and hands the thread of each such allocation to
/// the collector's path follower through [`SegmentHeader::trace`].
pub const FLAG_LEAK_CAUSE: u32 = 1 << 3;

/// Session flag: the process's environment sends CPython's object allocator to `malloc`
/// (`PYTHONMALLOC=malloc` or `malloc_debug`), so a Python interpreter in it allocates each
/// object with `malloc`, where the agent records it, and not from pymalloc's arenas.
pub const FLAG_PYTHON_MALLOC: u32 = 1 << 4;

/// Session flag: leak check at exit. The agent keeps the table of live blocks and, when the
/// process calls `exit` (or returns from `main`), finds which of them no pointer outside the
/// heap leads to ([`crate::event::Tag::Unreached`], [`crate::event::Tag::LeakScan`]).
pub const FLAG_LEAK_CHECK: u32 = 1 << 5;

/// How many allocation sites can be traced at once (seed 001 ¶0057 limits it).
pub const TRACE_SITES: usize = 16;

/// An allocation site whose next allocations the collector wants traced.
#[repr(C)]
#[derive(Debug)]
pub struct TraceSite {
    /// The allocation stack id (0: the entry is unused).
    pub stack: AtomicU32,
    /// Allocations still to trace at this site.
    pub remaining: AtomicU32,
    /// Where a trace ends if the block is not freed before: the return of the function this
    /// many frames above the allocating one (0: the allocating function itself).
    pub range_depth: AtomicU32,
    /// Allocations at this site that the agent saw and did not hand over: the trace slot
    /// was busy with another trace, no granted trace was left, or the collector did not
    /// take the request in time. The collector zeroes it before it lists a site here; an
    /// allocation of the entry's previous site may still add one. (Reserved and zero in
    /// earlier agents: same size and place.)
    pub passed: AtomicU32,
}

/// [`TraceSlot::state`]: no trace in flight; an agent may claim the slot.
pub const TRACE_IDLE: u32 = 0;
/// The agent is filling the slot.
pub const TRACE_FILLING: u32 = 1;
/// The agent filled the slot and waits (inside the allocator) for the collector.
pub const TRACE_REQUESTED: u32 = 2;
/// The collector took the request and is attaching to the thread.
pub const TRACE_ATTACHING: u32 = 3;
/// The collector follows the thread; the agent returns from the allocator.
pub const TRACE_FOLLOWING: u32 = 4;

/// [`TraceSlot::freed`]'s flag: the block was released. (Earlier agents stored 1: no
/// flag, no stack; the follower stops at any value other than 0.)
pub const TRACE_FREED: u32 = 1 << 31;

/// [`TraceSlot::freed`]'s flag: the release was made by another thread than the traced
/// one (the one in [`TraceSlot::tid`]): the traced path did not free the block, it was
/// only running when another thread did. (Earlier agents never set it.)
pub const TRACE_FREED_ELSEWHERE: u32 = 1 << 30;

/// The value of [`TraceSlot::freed`] for a release from `free_stack` (a stack id; 0 if
/// not captured), made by another thread than the traced one if `elsewhere`. A stack id
/// that does not fit in the low 30 bits is given as 0.
pub const fn trace_freed(free_stack: u32, elsewhere: bool) -> u32 {
    TRACE_FREED
        | if elsewhere { TRACE_FREED_ELSEWHERE } else { 0 }
        | if free_stack < TRACE_FREED_ELSEWHERE {
            free_stack
        } else {
            0
        }
}

/// The free stack a [`TraceSlot::freed`] value carries: 0 if none (not released, not
/// captured, or set by an agent that stored only 1).
pub const fn trace_free_stack(freed: u32) -> u32 {
    if freed & TRACE_FREED != 0 {
        freed & !(TRACE_FREED | TRACE_FREED_ELSEWHERE)
    } else {
        0
    }
}

/// Whether a [`TraceSlot::freed`] value says the block was released by another thread
/// than the traced one.
pub const fn trace_freed_elsewhere(freed: u32) -> bool {
    freed & TRACE_FREED != 0 && freed & TRACE_FREED_ELSEWHERE != 0
}

/// The one trace in flight of a process: its thread, the traced block, and where the
/// allocator returns to (where following starts).
#[repr(C)]
#[derive(Debug)]
pub struct TraceSlot {
    /// `TRACE_*`.
    pub state: AtomicU32,
    /// The allocating thread.
    pub tid: AtomicU32,
    /// Index of the site in [`SegmentHeader::trace_sites`].
    pub site: AtomicU32,
    /// Set by the agent when the traced block is released (by any thread), to
    /// [`trace_freed`] of the release's stack: the trace's result then carries the free
    /// stack it reached, whenever the collector reads the release event. 0: not released.
    pub freed: AtomicU32,
    /// The traced block.
    pub ptr: AtomicU64,
    /// The return address of the allocator call.
    pub resume_at: AtomicU64,
    /// The stack pointer after that return.
    pub resume_sp: AtomicU64,
    /// Incremented by the agent for each request.
    pub sequence: AtomicU64,
}

/// Most rings one segment may hold (the size of [`SegmentHeader::claimed`] in bits).
pub const MAX_RINGS_PER_SEGMENT: u32 = 1024;

/// Number of rings of segment `index` of a session whose segment 0 has `first` rings: each
/// segment doubles the previous one up to [`MAX_RINGS_PER_SEGMENT`], so a process with
/// thousands of threads needs few segments while a small one stays small.
pub const fn segment_ring_count(first: u32, index: u32) -> u32 {
    let shift = if index < 7 { index } else { 7 };
    let n = (first as u64) << shift;
    if n > MAX_RINGS_PER_SEGMENT as u64 {
        MAX_RINGS_PER_SEGMENT
    } else {
        n as u32
    }
}

/// Why the agent could not record an event: the index of its counter in
/// [`SegmentHeader::lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum LossCause {
    /// A thread found no ring to write to (every ring of every segment in use).
    NoRing = 0,
    /// More signal-handler events piled up inside one hook than its queue holds.
    SignalQueue = 1,
    /// The collector was gone (killed, or its socket unusable): recording stopped.
    CollectorGone = 2,
    /// A CPU sample interrupted the agent itself (or found no usable stack) and was dropped.
    Sample = 3,
}

impl LossCause {
    /// Every cause, in counter order.
    pub const ALL: [LossCause; 4] = [
        LossCause::NoRing,
        LossCause::SignalQueue,
        LossCause::CollectorGone,
        LossCause::Sample,
    ];
}

/// Number of loss counters in the header (room for more causes).
pub const LOSS_COUNTERS: usize = 8;

/// [`SegmentHeader::exit_how`]: the agent saw no exit.
pub const EXIT_NONE: u32 = 0;
/// [`SegmentHeader::exit_how`]: `exit` was called (or `main` returned) with
/// [`SegmentHeader::exit_code`]; exit handlers ran.
pub const EXIT_NORMAL: u32 = 1;
/// [`SegmentHeader::exit_how`]: `_exit` or `_Exit` was called with
/// [`SegmentHeader::exit_code`]; exit handlers were skipped.
pub const EXIT_IMMEDIATE: u32 = 2;

/// The header page at the start of every segment. Fields after `first_thread_ring` are only
/// meaningful in segment 0, where they describe the session.
#[repr(C)]
#[derive(Debug)]
pub struct SegmentHeader {
    /// [`SEGMENT_MAGIC`].
    pub magic: u64,
    /// [`crate::PROTOCOL_VERSION`].
    pub version: u32,
    /// Index of this segment within its session (0 for the first).
    pub segment_index: u32,
    /// Number of rings in this segment.
    pub ring_count: u32,
    /// Size in bytes of each ring's data area (a power of two).
    pub ring_data_size: u32,
    /// Index of the first thread ring (1 in segment 0, whose ring 0 is the meta ring).
    pub first_thread_ring: u32,
    /// Written by the collector, in segment 0, when it has received the session: the
    /// session's number in the recording plus one (0: not received yet). Read back by the
    /// salvage of a recording whose collector was killed (segments backed by files).
    pub collector_session: AtomicU32,
    /// Process id of the session's process.
    pub pid: u32,
    /// Parent process id at session start.
    pub ppid: u32,
    /// [`ClockKind`] of every timestamp in the session.
    pub clock: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Timestamp taken when the session started.
    pub start_ticks: u64,
    /// Incremented by the collector while it is alive; the agent watches it when a ring
    /// is full (and before it reports a process as unreachable) to tell a slow collector
    /// from a dead one.
    pub heartbeat: AtomicU64,
    /// Set to 1 by the agent when the process runs its exit handlers (a normal `exit`).
    pub exited_normally: AtomicU32,
    /// Process id of the collector.
    pub collector_pid: u32,
    /// How the process ended, as the agent saw it (`EXIT_*`).
    pub exit_how: AtomicU32,
    /// The exit code passed to `exit`/`_exit` (valid when `exit_how` is not `EXIT_NONE`).
    pub exit_code: AtomicI32,
    /// Events the agent could not record, by [`LossCause`].
    pub lost: [AtomicU64; LOSS_COUNTERS],
    /// Events recorded without their call stack (the module map was busy for too long, or
    /// the meta ring had no room for a new stack): counted, not lost.
    pub stackless: AtomicU64,
    /// Leak-cause mode: the number of used entries of `trace_sites` (a quick test for the
    /// allocation hook).
    pub tracing: AtomicU32,
    /// Leak-cause mode: the sites to trace.
    pub trace_sites: [TraceSite; TRACE_SITES],
    /// Leak-cause mode: the trace in flight.
    pub trace: TraceSlot,
    /// Which rings of this segment are claimed: bit `r` of word `r / 64` is set by the agent
    /// after it claims ring `r`, and cleared by the collector just before it frees the ring
    /// again, so both sides find rings without touching every ring header.
    pub claimed: [AtomicU64; (MAX_RINGS_PER_SEGMENT / 64) as usize],
    /// Bytes used in `exe`.
    pub exe_len: u32,
    /// Bytes used in `cmdline`.
    pub cmdline_len: u32,
    /// Path of the executable, as read from `/proc/self/exe`.
    pub exe: [u8; EXE_CAPACITY],
    /// NUL-separated command line, as read from `/proc/self/cmdline` (possibly truncated).
    pub cmdline: [u8; CMDLINE_CAPACITY],
    /// Index + 1 in [`crate::place::RANK_VARS`] of the variable that named the process's
    /// rank; 0 when the process is not a rank of a parallel job.
    pub place_source: u32,
    /// The process's rank (valid when `place_source` is not 0).
    pub place_rank: u32,
    /// The number of ranks of the job, 0 when unknown.
    pub place_size: u32,
    /// Bytes used in `place_job`.
    pub place_job_len: u32,
    /// The job's id, when the environment names one.
    pub place_job: [u8; crate::place::JOB_CAPACITY],
    /// CPU sampling in the agent: CPU time, in nanoseconds, that no sample stands for,
    /// because its thread ended (or the process exited) between two expiries of the
    /// thread's CPU-time timer. Not an event count: not in `lost`.
    pub unsampled_ns: AtomicU64,
    /// CPU sampling in the agent: the threads whose unsampled time is in `unsampled_ns`.
    pub unsampled_threads: AtomicU64,
    /// How the process ended, as its collector learned it (from `waitpid`, its zombie or
    /// its pidfd), written as soon as it is known: [`ENDED_KNOWN`] plus the raw wait
    /// status in the low 16 bits; 0 while not known. A recording whose recorder is killed
    /// before it writes the session's end keeps it here, for the salvage.
    pub ended_status: AtomicU32,
    /// When the collector learned `ended_status` (the session's clock; valid with it).
    pub ended_ticks: AtomicU64,
    /// When the agent saw the exit in `exit_how` (the session's clock), written before
    /// `exit_code`; 0 when not known.
    pub exit_ticks: AtomicU64,
    /// Leak-cause mode, part of the request in `trace` (here, not in [`TraceSlot`], so that
    /// the fields before it keep their places): the allocation stack the request was made
    /// for. The collector may stop tracing a site, and give its `trace_sites` entry to
    /// another, while a request for it waits; the tracer follows a request only if its
    /// entry still holds this stack.
    pub trace_stack: AtomicU32,
    /// Reserved, zero.
    pub reserved_trace: u32,
    /// Leak-cause mode: the other ids of each traced site's stack (0: none), by
    /// `trace_sites` index. Two threads that meet a new stack at the same moment both
    /// define it, and each keeps its own id: an allocation at the site under any of them is
    /// the site's. Written before the entry's `stack` when a site is listed, cleared after
    /// it; an id learned later is added while the site is traced. (Here, at the end, so
    /// that the fields before it keep their places.)
    pub trace_aliases: [[AtomicU32; TRACE_ALIASES]; TRACE_SITES],
}

/// How many other ids of a traced site's stack [`SegmentHeader::trace_aliases`] holds.
pub const TRACE_ALIASES: usize = 3;

/// [`SegmentHeader::ended_status`]: set once the collector knows how the process ended.
pub const ENDED_KNOWN: u32 = 1 << 31;

const _: () = assert!(core::mem::size_of::<SegmentHeader>() <= SEGMENT_HEADER_SIZE);

impl SegmentHeader {
    /// Whether the `trace_sites` entry `site` lists the allocation stack `stack`, under its
    /// id or one of its other ids. An entry whose `stack` is 0 is unused, whatever its
    /// other ids still say (they are cleared after it).
    pub fn trace_site_holds(&self, site: usize, stack: u32) -> bool {
        let (Some(entry), Some(aliases)) =
            (self.trace_sites.get(site), self.trace_aliases.get(site))
        else {
            return false;
        };
        let first = entry.stack.load(Ordering::Acquire);
        stack != 0
            && first != 0
            && (first == stack || aliases.iter().any(|a| a.load(Ordering::Acquire) == stack))
    }

    /// Marks ring `r` of this segment as claimed (the agent, after claiming it).
    pub fn mark_claimed(&self, r: u32) {
        if let Some(word) = self.claimed.get((r / 64) as usize) {
            word.fetch_or(1 << (r % 64), Ordering::Release);
        }
    }

    /// Clears ring `r`'s claimed bit (the collector, just before it frees the ring).
    pub fn clear_claimed(&self, r: u32) {
        if let Some(word) = self.claimed.get((r / 64) as usize) {
            word.fetch_and(!(1 << (r % 64)), Ordering::AcqRel);
        }
    }

    /// Word `w` of the claimed-ring bitmap.
    pub fn claimed_word(&self, w: usize) -> u64 {
        self.claimed
            .get(w)
            .map_or(0, |word| word.load(Ordering::Acquire))
    }

    /// The total of the loss counters.
    pub fn lost_total(&self) -> u64 {
        self.lost
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .fold(0u64, u64::saturating_add)
    }
}

/// Header of one ring. The first cache line is written by the producer, the second by the
/// collector, so they never share a line.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RingHeader {
    /// Bytes published so far (monotonic).
    pub head: AtomicU64,
    /// `RING_FREE`, `RING_ACTIVE` or `RING_CLOSED`.
    pub state: AtomicU32,
    /// Thread id of the owner while active.
    pub tid: AtomicU32,
    /// Non-zero while the owner is between taking an event's timestamp and publishing it:
    /// a lower bound of that timestamp. The online collector never emits events at or
    /// after a pending bound, which keeps its merge of thread rings in time order.
    pub pending: AtomicU64,
    /// Spin lock serialising writers of the meta ring (unused by thread rings).
    pub lock: AtomicU32,
    /// Incremented each time the ring is claimed.
    pub generation: AtomicU32,
    padding0: [u8; 32],
    /// Bytes consumed by the collector (monotonic). With segments backed by files
    /// (durable recordings), only bytes already written to the recording are consumed.
    pub tail: AtomicU64,
    /// Written by the collector when it opens a stream for the ring's current owner: the
    /// owner's `generation`, for which `stream` and `stream_base` are valid.
    pub stream_generation: AtomicU32,
    /// The stream number (in its session) the collector gave the owner, plus one (0: none).
    pub stream: AtomicU32,
    /// The ring position of the stream's first byte: the recording holds the stream from
    /// there on, so a salvage appends from `stream_base` + the bytes the recording holds.
    pub stream_base: AtomicU64,
    padding1: [u8; 40],
}

const _: () = assert!(core::mem::size_of::<RingHeader>() == RING_HEADER_SIZE);

/// Geometry of a segment, computed identically by both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Number of rings.
    pub ring_count: u32,
    /// Bytes of data per ring (a power of two).
    pub ring_data_size: u32,
}

impl Geometry {
    /// Distance between consecutive ring headers.
    pub const fn ring_stride(&self) -> usize {
        RING_HEADER_SIZE + self.ring_data_size as usize
    }

    /// Offset of ring `index`'s header from the start of the segment.
    pub const fn ring_offset(&self, index: u32) -> usize {
        SEGMENT_HEADER_SIZE + index as usize * self.ring_stride()
    }

    /// Total size of the segment in bytes.
    pub const fn segment_size(&self) -> usize {
        self.ring_offset(self.ring_count)
    }

    /// Whether the geometry is one both sides accept.
    pub const fn is_valid(&self) -> bool {
        self.ring_count > 0
            && self.ring_count <= MAX_RINGS_PER_SEGMENT
            && self.ring_data_size.is_power_of_two()
            && self.ring_data_size >= 4096
            && self.ring_data_size <= (1 << 28)
    }
}

/// A view of one ring inside a mapped segment.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    header: *const RingHeader,
    data: *mut u8,
    size: u64,
}

// SAFETY: a `Ring` is a pair of pointers into a shared mapping whose contents are only
// accessed through atomics (header) or under the ring protocol (data); it may move between
// threads like the mapping itself.
unsafe impl Send for Ring {}
// SAFETY: see above; concurrent use follows the single-producer/single-consumer protocol.
unsafe impl Sync for Ring {}

impl Ring {
    /// Returns the view of ring `index` of the segment mapped at `base`.
    ///
    /// # Safety
    ///
    /// `base` must point to a mapping of at least `geometry.segment_size()` bytes, aligned to
    /// 64 bytes, that stays mapped for as long as the returned value is used; `index` must
    /// be below `geometry.ring_count`.
    pub unsafe fn at(base: *mut u8, geometry: Geometry, index: u32) -> Ring {
        debug_assert!(index < geometry.ring_count);
        let offset = geometry.ring_offset(index);
        // SAFETY: the caller guarantees the mapping covers the ring.
        let header = unsafe { base.add(offset) } as *const RingHeader;
        // SAFETY: as above; the data area directly follows the header.
        let data = unsafe { base.add(offset + RING_HEADER_SIZE) };
        Ring {
            header,
            data,
            size: u64::from(geometry.ring_data_size),
        }
    }

    /// The ring's header.
    pub fn header(&self) -> &RingHeader {
        // SAFETY: `Ring::at` requires the mapping to outlive the view.
        unsafe { &*self.header }
    }

    /// Size of the data area in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Copies `bytes` into the data area at stream position `pos` (wrapping).
    ///
    /// # Safety
    ///
    /// Only the ring's producer may call this, for positions in `[head, tail + size)` that it
    /// has not yet published.
    pub unsafe fn write_at(&self, pos: u64, bytes: &[u8]) {
        let start = (pos & (self.size - 1)) as usize;
        let first = bytes.len().min(self.size as usize - start);
        // SAFETY: `start + first <= size`, and the caller owns this unpublished range.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data.add(start), first);
        }
        if first < bytes.len() {
            // SAFETY: the remainder wraps to the start of the data area and is shorter than
            // the ring because the caller reserved space for the whole record.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    bytes.as_ptr().add(first),
                    self.data,
                    bytes.len() - first,
                );
            }
        }
    }

    /// Copies a whole `N`-byte buffer into the data area at stream position `pos` if it fits
    /// there without wrapping, and returns whether it did. Only the first bytes (the record)
    /// will be published; the rest are scratch that later records overwrite. A copy of a
    /// constant size compiles to a few vector stores instead of a `memcpy` call.
    ///
    /// # Safety
    ///
    /// Only the ring's producer may call this, with `N` bytes free after `pos` (positions in
    /// `[pos, tail + size)`).
    #[inline]
    pub unsafe fn write_block_at<const N: usize>(&self, pos: u64, block: &[u8; N]) -> bool {
        let start = (pos & (self.size - 1)) as usize;
        if start + N > self.size as usize {
            return false;
        }
        // SAFETY: `start + N <= size`, inside the data area, and the caller guarantees these N
        // positions are free (unpublished and already consumed).
        unsafe { (self.data.add(start) as *mut [u8; N]).write_unaligned(*block) };
        true
    }

    /// The `N` bytes of the data area at stream position `pos`, to encode a record in place,
    /// if they lie there without wrapping. Only the first bytes (the record) will be
    /// published; the rest are scratch that later records overwrite.
    ///
    /// # Safety
    ///
    /// Only the ring's producer may call this, with `N` bytes free after `pos` (positions in
    /// `[pos, tail + size)`), and it must not keep the block beyond publishing the record.
    #[inline]
    #[allow(
        clippy::mut_from_ref,
        reason = "the ring is shared memory: the producer protocol, not a borrow, makes the block exclusive"
    )]
    pub unsafe fn block_at<const N: usize>(&self, pos: u64) -> Option<&mut [u8; N]> {
        let start = (pos & (self.size - 1)) as usize;
        if start + N > self.size as usize {
            return None;
        }
        // SAFETY: `start + N <= size`, inside the data area; the caller guarantees these N
        // positions are free (unpublished and already consumed), so the consumer does not
        // read them and no other reference to them exists.
        Some(unsafe { &mut *(self.data.add(start) as *mut [u8; N]) })
    }

    /// Returns the published but unconsumed bytes as at most two slices, oldest first.
    ///
    /// # Safety
    ///
    /// Only the ring's consumer may call this; the slices stay valid until it advances
    /// `tail` past them.
    pub unsafe fn readable(&self, tail: u64, head: u64) -> (&[u8], &[u8]) {
        let len = head.wrapping_sub(tail).min(self.size) as usize;
        let start = (tail & (self.size - 1)) as usize;
        let first = len.min(self.size as usize - start);
        // SAFETY: both ranges lie inside the data area and were published by the producer
        // (release store of `head`, paired with the caller's acquire load).
        unsafe {
            (
                core::slice::from_raw_parts(self.data.add(start), first),
                core::slice::from_raw_parts(self.data, len - first),
            )
        }
    }

    /// Free space from the producer's point of view, given its current `head`.
    pub fn free_space(&self, head: u64) -> u64 {
        let tail = self.header().tail.load(Ordering::Acquire);
        self.size - head.wrapping_sub(tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_trace_slot_carries_its_free_stack() {
        for stack in [1, 3, 0x3fff_ffff] {
            for elsewhere in [false, true] {
                let v = trace_freed(stack, elsewhere);
                assert_ne!(v, 0, "released");
                assert_eq!(trace_free_stack(v), stack);
                assert_eq!(trace_freed_elsewhere(v), elsewhere);
            }
        }
        // Released, stack unknown: not captured, too large an id, or an older agent's 1.
        for v in [
            trace_freed(0, false),
            trace_freed(TRACE_FREED_ELSEWHERE, false),
            trace_freed(TRACE_FREED, true),
            trace_freed(u32::MAX, false),
            1,
        ] {
            assert_ne!(v, 0);
            assert_eq!(trace_free_stack(v), 0, "{v:#x}");
        }
        assert!(!trace_freed_elsewhere(1), "an older agent's 1");
        assert!(!trace_freed_elsewhere(0));
        assert_eq!(trace_free_stack(0), 0);
    }
}
