//! The session: this process image's shared-memory segments, rings and control socket.
//!
//! See `tansa_wire::layout` for the memory layout and `tansa_wire::control` for the
//! messages. Everything here is built from system calls and the agent's own allocator; the
//! hook path only claims rings, writes records and publishes ring heads.

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use tansa_wire::control::{HELLO_MAGIC, HELLO_SEGMENT, HELLO_SESSION, Hello};
use tansa_wire::event::ByteSink;
use tansa_wire::layout::{
    CMDLINE_CAPACITY, ClockKind, EXE_CAPACITY, Geometry, LossCause, RING_ACTIVE, RING_CLOSED,
    RING_FREE, Ring, SEGMENT_MAGIC, SegmentHeader, segment_ring_count,
};

use crate::reach::CONTACT;
use crate::spin::SpinLock;
use crate::{clock, sys};

/// Most segments a session may create. Segments double in ring count up to 1024 rings
/// (`tansa_wire::layout::segment_ring_count`), so 64 segments hold about 59,000 thread
/// rings: a thread that finds none free (after the rings of exited threads are reclaimed)
/// is counted as a loss, never silently.
pub const MAX_SEGMENTS: usize = 64;

/// How long a thread that found every ring in use waits for the collector to free the rings
/// of threads that are gone before its events count as lost.
const RING_WAIT_US: u64 = 200_000;

/// Session settings read from the environment at start.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The inherited control socket.
    pub listener: c_int,
    /// `FLAG_*` bits for the header.
    pub flags: u32,
    /// Ring data size.
    pub ring_size: u32,
    /// Rings of segment 0 (later segments have more, see `segment_ring_count`).
    pub ring_count: u32,
    /// Most thread rings the session may use at once (0: no limit but the segment count).
    /// Only tests set it (`TANSA_TEST_MAX_RINGS`), to force the no-ring loss.
    pub ring_limit: u32,
}

/// The process-wide session.
#[derive(Debug)]
pub struct Session {
    generation: AtomicU32,
    active: AtomicBool,
    listener: AtomicI32,
    private: AtomicI32,
    ring_size: AtomicU32,
    ring_count: AtomicU32,
    flags: AtomicU32,
    ring_limit: AtomicU32,
    /// Changes whenever a ring may have become claimable (a ring given back, a thread
    /// retired, a segment added): a thread that found no ring retries only then.
    ring_epoch: AtomicU32,
    seg_base: [AtomicPtr<u8>; MAX_SEGMENTS],
    seg_count: AtomicU32,
    seg_lock: SpinLock,
    meta_lock: SpinLock,
    meta_head: AtomicU64,
    collector_pid: AtomicU32,
    /// Names the session's segment files (see `segdir`).
    seg_token: AtomicU64,
}

/// The session of this process image.
pub static SESSION: Session = Session {
    generation: AtomicU32::new(0),
    active: AtomicBool::new(false),
    listener: AtomicI32::new(-1),
    private: AtomicI32::new(-1),
    ring_size: AtomicU32::new(0),
    ring_count: AtomicU32::new(0),
    flags: AtomicU32::new(0),
    ring_limit: AtomicU32::new(0),
    ring_epoch: AtomicU32::new(0),
    seg_base: [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_SEGMENTS],
    seg_count: AtomicU32::new(0),
    seg_lock: SpinLock::new(),
    meta_lock: SpinLock::new(),
    meta_head: AtomicU64::new(0),
    collector_pid: AtomicU32::new(0),
    seg_token: AtomicU64::new(0),
};

/// A thread's claim on a ring, with its private copy of the head.
#[derive(Debug)]
pub struct RingWriter {
    /// The ring.
    pub ring: Ring,
    /// Bytes written (and published) so far.
    pub head: u64,
    /// Session generation the ring belongs to.
    pub generation: u32,
}

/// Bytes a [`RingSink`] gathers before copying them into the ring.
const SINK_BUFFER: usize = 128;

/// Streams a record into a ring range its writer reserved. Small pieces (a stack
/// definition is two varints per frame) are gathered in a buffer and copied into the ring
/// together: a copy per piece, each checking for the ring's wrap, cost as much as the
/// encoding.
pub struct RingSink<'a> {
    ring: &'a Ring,
    /// Where the buffer's bytes go.
    pos: u64,
    buf: [u8; SINK_BUFFER],
    len: usize,
}

impl core::fmt::Debug for RingSink<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingSink")
            .field("pos", &self.pos)
            .field("buffered", &self.len)
            .finish()
    }
}

impl<'a> RingSink<'a> {
    fn new(ring: &'a Ring, pos: u64) -> RingSink<'a> {
        RingSink {
            ring,
            pos,
            buf: [0; SINK_BUFFER],
            len: 0,
        }
    }

    /// Copies `bytes` into `ring` at `*pos` and moves `pos` past them.
    fn copy(ring: &Ring, pos: &mut u64, bytes: &[u8]) {
        // SAFETY: the writer reserved `[pos, pos + len)` for the whole record before
        // streaming into it and holds the ring (thread ring owner, or meta lock holder).
        unsafe { ring.write_at(*pos, bytes) };
        *pos += bytes.len() as u64;
    }

    /// Copies what the buffer holds into the ring; returns the position after the record's
    /// bytes so far.
    fn flush(&mut self) -> u64 {
        let n = core::mem::take(&mut self.len);
        Self::copy(self.ring, &mut self.pos, &self.buf[..n]);
        self.pos
    }
}

impl ByteSink for RingSink<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > SINK_BUFFER {
            self.flush();
            if bytes.len() > SINK_BUFFER {
                Self::copy(self.ring, &mut self.pos, bytes);
                return;
            }
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    #[inline]
    fn put_varint(&mut self, value: u64) {
        if self.len + tansa_wire::varint::MAX_LEN > SINK_BUFFER {
            self.flush();
        }
        let at: &mut [u8; tansa_wire::varint::MAX_LEN] = (&mut self.buf
            [self.len..self.len + tansa_wire::varint::MAX_LEN])
            .try_into()
            .expect("a slice of MAX_LEN bytes");
        self.len += tansa_wire::varint::encode(value, at);
    }
}

impl Session {
    /// Geometry of segment 0.
    fn geometry(&self) -> Geometry {
        self.segment_geometry(0)
    }

    /// Geometry of segment `index`.
    fn segment_geometry(&self, index: usize) -> Geometry {
        Geometry {
            ring_count: segment_ring_count(self.ring_count.load(Ordering::Relaxed), index as u32),
            ring_data_size: self.ring_size.load(Ordering::Relaxed),
        }
    }

    /// Tells the collector that this process started `child` running `path` with
    /// `posix_spawn` or `vfork` (`how`): a child that never runs the agent (statically
    /// linked, set-uid) is then listed as unrecorded, not forgotten. Nothing is sent without
    /// a session.
    pub fn note_spawned(
        &self,
        child: u32,
        path: &core::ffi::CStr,
        how: tansa_wire::control::Spawn,
    ) {
        let private = self.private.load(Ordering::Relaxed);
        if !self.is_active() || private < 0 {
            return;
        }
        let mut message = [0u8; Hello::SIZE + tansa_wire::control::SPAWNED_PATH_MAX];
        message[..Hello::SIZE]
            .copy_from_slice(&Hello::spawned(sys::getpid(), child, how).to_bytes());
        let path = path.to_bytes();
        let n = path.len().min(tansa_wire::control::SPAWNED_PATH_MAX);
        message[Hello::SIZE..Hello::SIZE + n].copy_from_slice(&path[..n]);
        // Lost only with the collector (the private socket is gone): the session's
        // losses say so then.
        let _ = sys::send_with_fds(private, &message[..Hello::SIZE + n], &[]);
    }

    /// Whether events can be recorded.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The current session generation (changes in a forked child).
    #[inline]
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// The session's `FLAG_*` bits.
    #[inline]
    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    /// Stops recording for good (the collector is gone).
    pub fn disable(&self) {
        self.active.store(false, Ordering::Release);
    }

    /// Segment 0's header.
    pub fn header(&self) -> Option<&SegmentHeader> {
        let base = self.seg_base[0].load(Ordering::Acquire);
        // SAFETY: segment 0 stays mapped for the life of the session.
        (!base.is_null()).then(|| unsafe { &*(base as *const SegmentHeader) })
    }

    /// Starts a session: creates segment 0, fills its header and announces it to the
    /// collector. Returns false if the collector cannot be reached.
    pub fn start(&self, settings: Settings) -> bool {
        self.start_with(settings, -1, None)
    }

    /// The path of the program this session runs (as `/proc/self/exe` read when it
    /// started), or `None` without a session.
    pub fn exe(&self) -> Option<&[u8]> {
        let h = self.header()?;
        Some(&h.exe[..(h.exe_len as usize).min(EXE_CAPACITY)])
    }

    /// [`Session::start`], for a forked child whose parent's private socket is
    /// `parent_private` (-1 if none): it may announce itself there when the inherited
    /// control socket is not the collector's any more.
    /// `program`: the program's path and command line when known (a forked child runs
    /// its parent's), else they are read from `/proc/self`.
    fn start_with(
        &self,
        settings: Settings,
        parent_private: core::ffi::c_int,
        program: Option<&Program>,
    ) -> bool {
        let geometry = Geometry {
            ring_count: settings.ring_count,
            ring_data_size: settings.ring_size,
        };
        if !geometry.is_valid() {
            return false;
        }
        self.listener.store(settings.listener, Ordering::Relaxed);
        self.ring_size.store(settings.ring_size, Ordering::Relaxed);
        self.ring_count
            .store(settings.ring_count, Ordering::Relaxed);
        self.flags.store(settings.flags, Ordering::Relaxed);
        self.ring_limit
            .store(settings.ring_limit, Ordering::Relaxed);
        self.seg_count.store(0, Ordering::Relaxed);
        self.meta_head.store(0, Ordering::Relaxed);
        // Names this session's segment files (a new session in a forked child or a new
        // image gets another).
        let token = sys::monotonic_ns();
        self.seg_token.store(token, Ordering::Relaxed);
        let Some((fd, base)) =
            crate::segdir::create_segment(c"tansa-session", token, 0, geometry.segment_size())
        else {
            return false;
        };
        // SAFETY: `base` is a fresh, zeroed, page-aligned mapping of the segment size.
        unsafe { init_header(base, geometry, 0, settings.flags, program) };
        let Some((mine, theirs)) = sys::seqpacket_pair() else {
            sys::close(fd);
            // SAFETY: nobody else saw this mapping.
            unsafe { sys::unmap(base, geometry.segment_size()) };
            return false;
        };
        let hello = Hello {
            magic: HELLO_MAGIC,
            version: tansa_wire::PROTOCOL_VERSION,
            kind: HELLO_SESSION,
            pid: sys::getpid(),
            segment_index: 0,
            ring_count: geometry.ring_count,
            ring_data_size: geometry.ring_data_size,
            reserved: 0,
        };
        // A pidfd of this process, with which the collector learns how it ended even when
        // its parent collects it first (and however soon that comes).
        let pidfd = sys::pidfd_of_self();
        let fds = [fd, theirs, pidfd];
        let fds = if pidfd >= 0 { &fds[..] } else { &fds[..2] };
        let sent = match CONTACT.socket(parent_private) {
            Ok(control) => sys::send_with_fds(control, &hello.to_bytes(), fds),
            Err(why) => {
                // SAFETY: `base` maps the header page, filled above.
                let h = unsafe { &*(base as *const SegmentHeader) };
                report_unreachable(h, why.text());
                false
            }
        };
        sys::close(fd);
        sys::close(theirs);
        if pidfd >= 0 {
            sys::close(pidfd);
        }
        if !sent {
            sys::close(mine);
            // SAFETY: the collector never received this mapping; nobody else uses it.
            unsafe { sys::unmap(base, geometry.segment_size()) };
            return false;
        }
        self.seg_base[0].store(base, Ordering::Release);
        self.seg_count.store(1, Ordering::Release);
        self.private.store(mine, Ordering::Relaxed);
        CONTACT.set_private(mine);
        if let Some(h) = self.header() {
            self.collector_pid.store(h.collector_pid, Ordering::Relaxed);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.active.store(true, Ordering::Release);
        true
    }

    /// Forgets the parent's session in a forked child (without touching its shared memory)
    /// and starts a new one.
    pub fn restart_in_child(&self) -> bool {
        self.active.store(false, Ordering::Release);
        let parent_private = self.private.swap(-1, Ordering::Relaxed);
        // The child runs its parent's program with its arguments: taken from the parent's
        // header before that is unmapped, they save every forked child reading
        // `/proc/self/exe` and `/proc/self/cmdline` (measured in a C program making a new
        // session's system calls in a fresh child: about 30 of 100 µs).
        let program = self.header().map(Program::of);
        let geometry = self.geometry();
        let count = self.seg_count.swap(0, Ordering::AcqRel) as usize;
        for (index, slot) in self.seg_base[..count.min(MAX_SEGMENTS)].iter().enumerate() {
            let p = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: the child no longer uses the parent's segments; every ring view
                // into them is dropped when thread contexts see the new generation.
                unsafe { sys::unmap(p, self.segment_geometry(index).segment_size()) };
            }
        }
        self.seg_lock.reset();
        self.meta_lock.reset();
        let settings = Settings {
            listener: self.listener.load(Ordering::Relaxed),
            flags: self.flags(),
            ring_size: geometry.ring_data_size,
            ring_count: geometry.ring_count,
            ring_limit: self.ring_limit.load(Ordering::Relaxed),
        };
        let ok = self.start_with(settings, parent_private, program.as_ref());
        if parent_private >= 0 {
            sys::close(parent_private);
        }
        ok
    }

    /// The locks the fork handlers must hold across `fork`.
    pub fn locks(&self) -> [&SpinLock; 2] {
        [&self.seg_lock, &self.meta_lock]
    }

    /// Claims a free thread ring for thread `tid`. When every ring is in use it first
    /// reclaims the rings of threads that are gone, then adds a segment, and at the segment
    /// limit waits a bounded time for the collector to free reclaimed rings. `None` (the
    /// caller counts the event as lost) only when all of that fails or recording is off.
    pub fn acquire_ring(&self, tid: u32) -> Option<RingWriter> {
        if !self.is_active() {
            return None;
        }
        let generation = self.generation();
        let limit = self.ring_limit.load(Ordering::Relaxed);
        let mut reclaimed = false;
        let mut waited_us = 0u64;
        loop {
            let count = self.seg_count.load(Ordering::Acquire) as usize;
            let mut before = 0u32;
            for index in 0..count {
                if let Some(w) = self.claim_in(index, tid, generation, before, limit) {
                    return Some(w);
                }
                before += self.thread_rings(index);
            }
            if !reclaimed {
                reclaimed = true;
                crate::registry::REGISTRY.reap_all();
            }
            let at_limit = limit != 0 && before >= limit;
            if !at_limit && self.add_segment(count) {
                continue;
            }
            if !self.is_active() || waited_us >= RING_WAIT_US || !self.closed_rings_pending() {
                return None;
            }
            sys::sleep_us(100);
            waited_us += 100;
        }
    }

    /// Number of thread rings of segment `index` (segment 0 also holds the meta ring).
    fn thread_rings(&self, index: usize) -> u32 {
        self.segment_geometry(index).ring_count - u32::from(index == 0)
    }

    /// Claims a free ring of segment `index`, whose first thread ring is the session's
    /// thread ring number `before`; rings numbered `limit` and above are not used (0: no
    /// limit).
    fn claim_in(
        &self,
        index: usize,
        tid: u32,
        generation: u32,
        before: u32,
        limit: u32,
    ) -> Option<RingWriter> {
        let base = self.seg_base[index].load(Ordering::Acquire);
        if base.is_null() || (limit != 0 && before >= limit) {
            return None;
        }
        let geometry = self.segment_geometry(index);
        // SAFETY: every segment starts with its header and stays mapped for the session.
        let header = unsafe { &*(base as *const SegmentHeader) };
        let first = u32::from(index == 0);
        // Rings past the limit: from ring `first + limit - before` on.
        let end = if limit == 0 {
            geometry.ring_count
        } else {
            (first + limit - before).min(geometry.ring_count)
        };
        for word in 0..end.div_ceil(64) {
            let candidates = ring_mask(word, end, first) & !header.claimed_word(word as usize);
            if let Some(w) =
                self.claim_bits(base, header, geometry, word, candidates, tid, generation)
            {
                return Some(w);
            }
        }
        None
    }

    /// Tries to claim one of the rings whose bits are set in `candidates` (word `word` of the
    /// segment at `base`).
    #[allow(clippy::too_many_arguments)]
    fn claim_bits(
        &self,
        base: *mut u8,
        header: &SegmentHeader,
        geometry: Geometry,
        word: u32,
        mut candidates: u64,
        tid: u32,
        generation: u32,
    ) -> Option<RingWriter> {
        while candidates != 0 {
            let r = word * 64 + candidates.trailing_zeros();
            candidates &= candidates - 1;
            // SAFETY: `base` maps a whole segment of this geometry; `r < ring_count`.
            let ring = unsafe { Ring::at(base, geometry, r) };
            let h = ring.header();
            if h.state
                .compare_exchange(RING_FREE, RING_ACTIVE, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                header.mark_claimed(r);
                h.tid.store(tid, Ordering::Relaxed);
                h.generation.fetch_add(1, Ordering::Relaxed);
                let head = h.head.load(Ordering::Relaxed);
                return Some(RingWriter {
                    ring,
                    head,
                    generation,
                });
            }
        }
        None
    }

    /// Whether some ring was given back and waits for the collector to free it.
    fn closed_rings_pending(&self) -> bool {
        let count = self.seg_count.load(Ordering::Acquire) as usize;
        (0..count).any(|index| {
            let base = self.seg_base[index].load(Ordering::Acquire);
            if base.is_null() {
                return false;
            }
            let geometry = self.segment_geometry(index);
            // SAFETY: as in `claim_in`.
            let header = unsafe { &*(base as *const SegmentHeader) };
            (0..geometry.ring_count.div_ceil(64)).any(|word| {
                let mut bits = header.claimed_word(word as usize);
                while bits != 0 {
                    let r = word * 64 + bits.trailing_zeros();
                    bits &= bits - 1;
                    // SAFETY: as above.
                    let ring = unsafe { Ring::at(base, geometry, r) };
                    if ring.header().state.load(Ordering::Relaxed) == RING_CLOSED {
                        return true;
                    }
                }
                false
            })
        })
    }

    /// Creates segment number `expected` unless another thread already did.
    fn add_segment(&self, expected: usize) -> bool {
        self.seg_lock.lock();
        let count = self.seg_count.load(Ordering::Acquire) as usize;
        if count != expected {
            self.seg_lock.unlock();
            return true;
        }
        if count >= MAX_SEGMENTS {
            self.seg_lock.unlock();
            return false;
        }
        let geometry = self.segment_geometry(count);
        let ok = match crate::segdir::create_segment(
            c"tansa-segment",
            self.seg_token.load(Ordering::Relaxed),
            count as u32,
            geometry.segment_size(),
        ) {
            Some((fd, base)) => {
                // SAFETY: fresh zeroed mapping of the segment size.
                unsafe { init_header(base, geometry, count as u32, self.flags(), None) };
                let hello = Hello {
                    magic: HELLO_MAGIC,
                    version: tansa_wire::PROTOCOL_VERSION,
                    kind: HELLO_SEGMENT,
                    pid: sys::getpid(),
                    segment_index: count as u32,
                    ring_count: geometry.ring_count,
                    ring_data_size: geometry.ring_data_size,
                    reserved: 0,
                };
                let sent = sys::send_with_fds(
                    self.private.load(Ordering::Relaxed),
                    &hello.to_bytes(),
                    &[fd],
                );
                sys::close(fd);
                if sent {
                    self.seg_base[count].store(base, Ordering::Release);
                    self.seg_count.store(count as u32 + 1, Ordering::Release);
                    self.bump_ring_epoch();
                } else {
                    // SAFETY: nobody else saw this mapping.
                    unsafe { sys::unmap(base, geometry.segment_size()) };
                    self.disable();
                }
                sent
            }
            None => false,
        };
        self.seg_lock.unlock();
        ok
    }

    /// Gives a thread ring back: the collector drains it and frees it.
    pub fn release_ring(&self, writer: &RingWriter) {
        if writer.generation == self.generation() {
            writer
                .ring
                .header()
                .state
                .store(RING_CLOSED, Ordering::Release);
            self.bump_ring_epoch();
        }
    }

    /// The current ring epoch (see [`Session::bump_ring_epoch`]).
    #[inline]
    pub fn ring_epoch(&self) -> u32 {
        self.ring_epoch.load(Ordering::Acquire)
    }

    /// Notes that a ring may have become claimable.
    pub fn bump_ring_epoch(&self) {
        self.ring_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits until `len` bytes are free in `ring` after `head`. Returns false if the
    /// collector is gone (recording is then disabled).
    pub fn wait_for_space(&self, ring: &Ring, head: u64, len: u64) -> bool {
        if len > ring.size() / 2 {
            return false;
        }
        let mut spins = 0u32;
        let mut waited_us = 0u64;
        let mut last_beat = u64::MAX;
        loop {
            if ring.free_space(head) >= len {
                return true;
            }
            if !self.is_active() {
                return false;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else if spins < 128 {
                sys::yield_now();
            } else {
                sys::sleep_us(50);
                waited_us += 50;
                if waited_us >= 1_000_000 {
                    waited_us = 0;
                    let beat = self
                        .header()
                        .map_or(0, |h| h.heartbeat.load(Ordering::Relaxed));
                    // The collector is gone, or it let go of this process: its end of
                    // our private socket is closed (it could not take our announcement,
                    // having no descriptor left for it, so it never drains this ring).
                    if beat == last_beat
                        && (!sys::process_alive(self.collector_pid.load(Ordering::Relaxed))
                            || sys::peer_closed(self.private.load(Ordering::Relaxed)))
                    {
                        self.disable();
                        return false;
                    }
                    last_beat = beat;
                }
            }
        }
    }

    /// Appends an encoded event to a thread ring and publishes it.
    #[inline]
    pub fn write_event(&self, w: &mut RingWriter, buf: &tansa_wire::event::EventBuf) -> bool {
        let len = buf.as_bytes().len() as u64;
        let block = tansa_wire::event::EVENT_BUF_LEN as u64;
        // SAFETY: this thread owns the ring; with a whole block free after the head, the
        // scratch bytes beyond the record land in free space.
        if w.ring.free_space(w.head) >= block && unsafe { w.ring.write_block_at(w.head, buf.raw()) }
        {
            w.head += len;
            w.ring.header().head.store(w.head, Ordering::Release);
            return true;
        }
        self.write(w, buf.as_bytes())
    }

    /// Encodes an event with `encode` straight into a thread ring's free space and publishes
    /// it. Encoding in place saves copying the record, and the copy's wide loads of bytes just
    /// written one at a time (which cannot be forwarded from the store buffer and stall until
    /// the stores reach the cache). Near the ring's end, or when the ring is nearly full, the
    /// record is encoded on the stack and written as usual.
    #[inline]
    pub fn write_encoded(
        &self,
        w: &mut RingWriter,
        encode: impl FnOnce(&mut tansa_wire::event::EventSlot<'_>),
    ) -> bool {
        const BLOCK: usize = tansa_wire::event::EVENT_BUF_LEN;
        if w.ring.free_space(w.head) >= BLOCK as u64 {
            // SAFETY: this thread owns the ring and a whole block is free after the head;
            // the block is not used after the record is published below.
            if let Some(block) = unsafe { w.ring.block_at::<BLOCK>(w.head) } {
                let mut buf = tansa_wire::event::EventBuf::in_place(block);
                encode(&mut buf);
                w.head += buf.len() as u64;
                w.ring.header().head.store(w.head, Ordering::Release);
                return true;
            }
        }
        let mut local = [0u8; BLOCK];
        let mut buf = tansa_wire::event::EventBuf::in_place(&mut local);
        encode(&mut buf);
        let len = buf.len();
        self.write(w, &local[..len])
    }

    /// Appends `bytes` to a thread ring and publishes them.
    #[inline]
    pub fn write(&self, w: &mut RingWriter, bytes: &[u8]) -> bool {
        let len = bytes.len() as u64;
        if w.ring.free_space(w.head) < len && !self.wait_for_space(&w.ring, w.head, len) {
            return false;
        }
        // SAFETY: this thread owns the ring and reserved the range above.
        unsafe { w.ring.write_at(w.head, bytes) };
        w.head += len;
        w.ring.header().head.store(w.head, Ordering::Release);
        true
    }

    /// Streams a record of `len` bytes into a thread ring (for records built with a
    /// [`ByteSink`]) and publishes it.
    pub fn write_streamed(
        &self,
        w: &mut RingWriter,
        len: usize,
        encode: impl FnOnce(&mut RingSink<'_>),
    ) -> bool {
        let len64 = len as u64;
        if !self.wait_for_space(&w.ring, w.head, len64) {
            return false;
        }
        let mut sink = RingSink::new(&w.ring, w.head);
        encode(&mut sink);
        let end = sink.flush();
        debug_assert_eq!(end - w.head, len64);
        w.head += len64;
        w.ring.header().head.store(w.head, Ordering::Release);
        true
    }

    /// Appends a record of at most `len` bytes, produced by `encode`, to the meta ring (a
    /// bound rather than the exact length spares sizing a record in a pass of its own).
    pub fn write_meta(&self, len: usize, encode: impl FnOnce(&mut RingSink<'_>)) -> bool {
        let base = self.seg_base[0].load(Ordering::Acquire);
        if base.is_null() || !self.is_active() {
            return false;
        }
        // SAFETY: segment 0 is mapped with the session geometry; ring 0 is the meta ring.
        let ring = unsafe { Ring::at(base, self.geometry(), 0) };
        self.meta_lock.lock();
        let head = self.meta_head.load(Ordering::Relaxed);
        let ok = self.wait_for_space(&ring, head, len as u64);
        if ok {
            let mut sink = RingSink::new(&ring, head);
            encode(&mut sink);
            let new_head = sink.flush();
            debug_assert!(new_head - head <= len as u64, "a record beyond its bound");
            self.meta_head.store(new_head, Ordering::Relaxed);
            ring.header().head.store(new_head, Ordering::Release);
        }
        self.meta_lock.unlock();
        ok
    }

    /// At exit: if the collector is gone, nobody will report what this process did after
    /// it went, so say it on stderr.
    pub fn warn_if_orphaned(&self) {
        let Some(h) = self.header() else {
            return;
        };
        let collector = self.collector_pid.load(Ordering::Relaxed);
        if h.pid != sys::getpid() || collector == 0 {
            return;
        }
        let alive = sys::process_alive(collector);
        if self.is_active() && alive {
            return;
        }
        let lost = h.lost[LossCause::CollectorGone as usize].load(Ordering::Relaxed);
        // A recorder still running let go of this process (it had no descriptor left to
        // take it): the recording names it, and says why.
        let what: &[u8] = if alive {
            b") let go of process "
        } else {
            b") ended before process "
        };
        sys::Line::new()
            .text(b"tansa: the recorder (pid ")
            .num(u64::from(collector))
            .text(what)
            .num(u64::from(h.pid))
            .text(b": ")
            .num(lost)
            .text(b" of its events were not recorded, nor what was still in its buffers")
            .write_stderr();
    }

    /// Marks that the process is running its exit handlers.
    pub fn mark_exit(&self) {
        if let Some(h) = self.header() {
            h.exited_normally.store(1, Ordering::Release);
        }
    }

    /// Adds to the count of events that could not be recorded, by cause.
    pub fn add_lost(&self, cause: LossCause, n: u64) {
        if let Some(h) = self.header() {
            h.lost[cause as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// CPU sampling: counts the CPU time of a thread's last partial period, which no sample
    /// stands for.
    pub fn add_unsampled(&self, ns: u64) {
        if let Some(h) = self.header() {
            h.unsampled_ns.fetch_add(ns, Ordering::Relaxed);
            h.unsampled_threads.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts an event recorded without its call stack.
    pub fn add_stackless(&self) {
        if let Some(h) = self.header() {
            h.stackless.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records how the process is ending (`exit_how` is an `EXIT_*` value). The first
    /// report wins: `exit` running its handlers and then calling `_exit` stays `exit`.
    pub fn note_exit(&self, exit_how: u32, code: i32) {
        // A `vfork` child shares our memory but is another process: not ours to report.
        if let Some(h) = self.header()
            && h.pid == sys::getpid()
            && h.exit_how
                .compare_exchange(
                    tansa_wire::layout::EXIT_NONE,
                    exit_how,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            h.exit_ticks
                .store(crate::clock::ordered(), Ordering::Relaxed);
            h.exit_code.store(code, Ordering::Release);
        }
    }
}

/// Says on stderr that this process runs unrecorded, and why: nothing else can (the
/// collector never heard of it).
fn report_unreachable(h: &SegmentHeader, why: &[u8]) {
    let exe = &h.exe[..(h.exe_len as usize).min(h.exe.len())];
    sys::Line::new()
        .text(b"tansa: process ")
        .num(u64::from(h.pid))
        .text(b" (")
        .text(exe)
        .text(b") cannot reach the recorder and is not recorded: ")
        .text(why)
        .write_stderr();
}

/// The bits of claimable rings in word `word` of the bitmap, for rings `first..rings`.
fn ring_mask(word: u32, rings: u32, first: u32) -> u64 {
    let lo = word * 64;
    let hi = (lo + 64).min(rings);
    if hi <= lo {
        return 0;
    }
    let n = hi - lo;
    let mut mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    if lo < first {
        mask &= !((1u64 << (first - lo)) - 1);
    }
    mask
}

/// A program's path and command line, as a session header holds them.
struct Program {
    exe: [u8; EXE_CAPACITY],
    exe_len: u32,
    cmdline: [u8; CMDLINE_CAPACITY],
    cmdline_len: u32,
}

impl Program {
    fn of(h: &SegmentHeader) -> Program {
        Program {
            exe: h.exe,
            exe_len: h.exe_len.min(EXE_CAPACITY as u32),
            cmdline: h.cmdline,
            cmdline_len: h.cmdline_len.min(CMDLINE_CAPACITY as u32),
        }
    }
}

/// Fills a new segment's header.
///
/// # Safety
///
/// `base` must be a zeroed, writable mapping of at least one page that nobody else uses yet.
unsafe fn init_header(
    base: *mut u8,
    geometry: Geometry,
    index: u32,
    flags: u32,
    program: Option<&Program>,
) {
    // SAFETY: guaranteed by the caller; the header fits in the first page.
    let h = unsafe { &mut *(base as *mut SegmentHeader) };
    h.magic = SEGMENT_MAGIC;
    h.version = tansa_wire::PROTOCOL_VERSION;
    h.segment_index = index;
    h.ring_count = geometry.ring_count;
    h.ring_data_size = geometry.ring_data_size;
    h.first_thread_ring = u32::from(index == 0);
    h.pid = sys::getpid();
    h.ppid = sys::getppid();
    h.clock = if clock::is_tsc() {
        ClockKind::Tsc as u32
    } else {
        ClockKind::Monotonic as u32
    };
    h.flags = flags;
    h.start_ticks = clock::now();
    if index == 0 {
        if let Some(p) = program {
            h.exe = p.exe;
            h.exe_len = p.exe_len;
            h.cmdline = p.cmdline;
            h.cmdline_len = p.cmdline_len;
        } else {
            h.exe_len = sys::readlink(c"/proc/self/exe", &mut h.exe) as u32;
            h.cmdline_len = sys::read_file(c"/proc/self/cmdline", &mut h.cmdline) as u32;
        }
        let pid_text = sys::getenv(c"TANSA_COLLECTOR_PID").and_then(sys::parse_u64);
        h.collector_pid = pid_text.unwrap_or(0) as u32;
        // The process's place in a parallel job, from its launcher's variables (this
        // image's environment: a rank exec'd by `mpiexec` has its own).
        let place = tansa_wire::place::Place::from_env(sys::getenv);
        if let (Some(rank), Some(source)) = (place.rank, place.rank_source) {
            h.place_source = source as u32 + 1;
            h.place_rank = rank;
        }
        h.place_size = place.size.unwrap_or(0);
        if let Some(job) = place.job() {
            h.place_job[..job.len()].copy_from_slice(job);
            h.place_job_len = job.len() as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory for one segment, 64-byte aligned.
    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);

    #[test]
    fn a_ring_sink_writes_pieces_of_every_size_across_the_wrap() {
        let geometry = Geometry {
            ring_count: 1,
            ring_data_size: 4096,
        };
        let mut mem = vec![Line([0; 64]); geometry.segment_size().div_ceil(64)];
        // SAFETY: `mem` covers the segment, is 64-byte aligned and outlives `ring`.
        let ring = unsafe { Ring::at(mem.as_mut_ptr() as *mut u8, geometry, 0) };
        let long: Vec<u8> = (0..=255u8).cycle().take(3 * SINK_BUFFER + 5).collect();
        let mut expected = Vec::new();
        // Starting 50 bytes before the wrap: the record ends beyond it.
        let start = 4096 * 3 - 50;
        let mut sink = RingSink::new(&ring, start);
        for round in 0..40u64 {
            let piece = &long[..(round as usize * 37) % long.len()];
            sink.put(piece);
            expected.extend_from_slice(piece);
            let value = round.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (round % 64);
            sink.put_varint(value);
            let mut tmp = [0u8; tansa_wire::varint::MAX_LEN];
            let n = tansa_wire::varint::encode(value, &mut tmp);
            expected.extend_from_slice(&tmp[..n]);
            if expected.len() > 3000 {
                break;
            }
        }
        let end = sink.flush();
        assert_eq!(end - start, expected.len() as u64, "bytes written");
        // SAFETY: nothing else uses the ring; the range was just written.
        let (a, b) = unsafe { ring.readable(start, end) };
        assert!(!b.is_empty(), "the record wraps");
        assert_eq!([a, b].concat(), expected);
    }
}
