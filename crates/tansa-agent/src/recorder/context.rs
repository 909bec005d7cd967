//! The per-thread context: created on a thread's first recorded call, retired when the
//! thread exits, finished once the kernel says the thread is gone.

use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, Ordering};

use tansa_wire::event::{
    CountingSink, EventBuf, StreamState, encode_thread_name, encode_thread_start,
};
use tansa_wire::layout::LossCause;

use super::nested::flush_nested;
use crate::registry::{Link, REGISTRY};
use crate::session::{RingWriter, SESSION};
use crate::thread::{Busy, ThreadState};
use crate::unwind::{MAX_FRAMES, StackCache, UnwindCache};
use crate::{clock, sys};

/// Thread contexts created so far in this process.
static CREATED: AtomicU32 = AtomicU32::new(0);

/// Everything a thread needs to record events.
pub struct ThreadCtx {
    /// Links in the registry of thread contexts (see [`crate::registry`]).
    pub(crate) link: Link,
    pub(super) tid: u32,
    pub(super) writer: Option<RingWriter>,
    /// The ring epoch at which this thread last found no ring (`u32::MAX`: never): it
    /// retries only when the epoch has moved.
    pub(super) no_ring_epoch: u32,
    pub(super) stream: StreamState,
    pub(super) cache: UnwindCache,
    pub(super) stack_lo: u64,
    pub(super) stack_hi: u64,
    /// The last mapping below the stack found to be another stack (see
    /// `capture::stack_top`).
    pub(super) other_lo: u64,
    pub(super) other_hi: u64,
    pub(super) stacks: StackCache,
    /// Frames of the CPU sample being taken (preallocated: the signal handler never grows it).
    pub(super) sample_frames: Vec<u64>,
}

// Every thread that records has a context, from the agent's power-of-two size classes
// (`heap`): past 4 KiB it takes twice the memory, and a program that starts a thread per
// request (20,000 of them in `bench/`) ran 30 % slower under the recorder.
const _: () = assert!(core::mem::size_of::<ThreadCtx>() <= 4096);

impl ThreadCtx {
    /// The thread id of the context's thread.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl core::fmt::Debug for ThreadCtx {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadCtx")
            .field("tid", &self.tid)
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

/// Why a thread has no context to record with: no ring was free, or the collector is gone.
pub(super) fn no_context_cause() -> LossCause {
    if SESSION.is_active() {
        LossCause::NoRing
    } else {
        LossCause::CollectorGone
    }
}

/// The calling thread's name.
pub(super) fn name_of_thread(buf: &mut [u8; 16]) -> usize {
    sys::thread_name(buf)
}

/// The calling thread's context, created on first use; reclaims a ring when the thread has
/// none or its ring belongs to a previous session (the parent's, after `fork`).
///
/// The order matters for signal handlers that fire meanwhile: the context is published
/// first, then the ring is claimed (cheap), and only then the slow setup runs (reading
/// `/proc`), during which a handler can already write its events to the ring.
///
/// The common case (a context with a ring of this session) is inlined into the hooks; the
/// rest, whose frame holds the unwinder's large state, is a separate cold function so that
/// the hooks do not set up that frame on every call.
#[inline]
pub(super) fn context(st: &'static ThreadState) -> Option<*mut ThreadCtx> {
    let p = st.ctx.get();
    if !p.is_null() {
        // SAFETY: as below; a shared borrow that ends before `context_setup` runs.
        let ctx = unsafe { &*p };
        if ctx
            .writer
            .as_ref()
            .is_some_and(|w| w.generation == SESSION.generation())
        {
            return Some(p);
        }
    }
    context_setup(st)
}

#[cold]
#[inline(never)]
pub(super) fn context_setup(st: &'static ThreadState) -> Option<*mut ThreadCtx> {
    let mut p = st.ctx.get();
    if p.is_null() {
        let ctx = Box::new(ThreadCtx {
            link: Link::new(),
            tid: sys::gettid(),
            writer: None,
            no_ring_epoch: u32::MAX,
            stream: StreamState::default(),
            cache: UnwindCache::new(),
            stack_lo: 0,
            stack_hi: 0,
            other_lo: 0,
            other_hi: 0,
            stacks: StackCache::default(),
            sample_frames: Vec::with_capacity(MAX_FRAMES),
        });
        p = Box::into_raw(ctx);
        if CREATED.fetch_add(1, Ordering::SeqCst) != 0 {
            clock::another_thread_records();
        }
        // SAFETY: a new context, released only through the registry.
        unsafe { REGISTRY.insert(p) };
        st.ctx.set(p);
    }
    // SAFETY: `p` is this thread's context, only ever used by this thread (and by its signal
    // handlers while it is suspended and not busy).
    let ctx = unsafe { &mut *p };
    let generation = SESSION.generation();
    if ctx
        .writer
        .as_ref()
        .is_none_or(|w| w.generation != generation)
    {
        if let Some(old) = ctx.writer.take() {
            SESSION.release_ring(&old);
        }
        ctx.tid = sys::gettid();
        let epoch = SESSION.ring_epoch();
        if ctx.no_ring_epoch == epoch {
            return None;
        }
        let Some(mut w) = SESSION.acquire_ring(ctx.tid) else {
            ctx.no_ring_epoch = epoch;
            return None;
        };
        ctx.no_ring_epoch = u32::MAX;
        let ts = clock::now();
        let pid = sys::getpid();
        let mut count = CountingSink::default();
        let mut scratch = StreamState::default();
        encode_thread_start(&mut count, &mut scratch, pid, ctx.tid, ts, b"");
        let busy = Busy::enter(st);
        let stream = &mut ctx.stream;
        let ok = SESSION.write_streamed(&mut w, count.0, |sink| {
            encode_thread_start(sink, stream, pid, ctx.tid, ts, b"");
        });
        drop(busy);
        if !ok {
            return None;
        }
        ctx.writer = Some(w);
        // The slow part: the thread's name and, the first time, its stack bounds.
        let mut name = [0u8; 16];
        let n = name_of_thread(&mut name);
        write_name(st, ctx, &name[..n]);
        if ctx.stack_hi == 0 {
            // The stack is the mapping containing our own frame.
            let here = 0u64;
            let (lo, hi) = sys::mapping_containing(&here as *const u64 as u64).unwrap_or((0, 1));
            ctx.stack_lo = lo;
            ctx.stack_hi = hi;
            crate::register_thread_exit(p as *mut c_void);
        }
    }
    Some(p)
}

/// Writes a thread-name record.
pub(super) fn write_name(st: &'static ThreadState, ctx: &mut ThreadCtx, name: &[u8]) {
    let _busy = Busy::enter(st);
    let Some(w) = ctx.writer.as_mut() else {
        return;
    };
    let mut count = CountingSink::default();
    encode_thread_name(&mut count, name);
    SESSION.write_streamed(w, count.0, |sink| encode_thread_name(sink, name));
}

/// The calling thread is exiting (its pthread-key destructor runs): writes its final name,
/// drains its signal queue and retires its context. The context and its ring stay in use
/// for what the thread still does (glibc releases thread memory after the key destructors);
/// the registry finishes them once the thread is gone (`finish_dead`).
///
/// # Safety
///
/// `ctx` must be the calling thread's context.
pub unsafe fn retire_thread(st: &'static ThreadState, ctx: *mut ThreadCtx) {
    st.depth.set(st.depth.get() + 1);
    // SAFETY: guaranteed by the caller.
    let c = unsafe { &mut *ctx };
    if c.writer
        .as_ref()
        .is_some_and(|w| w.generation == SESSION.generation())
    {
        let mut name = [0u8; 16];
        let n = name_of_thread(&mut name);
        write_name(st, c, &name[..n]);
        flush_nested(st, c);
    }
    // SAFETY: `ctx` is this thread's registered context.
    unsafe { REGISTRY.retire(ctx) };
    st.depth.set(st.depth.get() - 1);
}

/// Ends the recording of a thread that no longer exists: writes its end record, gives its
/// ring back to the collector and frees its context.
///
/// # Safety
///
/// `ctx` must be an unregistered context (from `Box::into_raw`) whose thread is gone.
pub(crate) unsafe fn finish_dead(ctx: *mut ThreadCtx) {
    // SAFETY: guaranteed by the caller.
    let mut ctx = unsafe { Box::from_raw(ctx) };
    if let Some(mut w) = ctx.writer.take()
        && w.generation == SESSION.generation()
    {
        let mut buf = EventBuf::new();
        ctx.stream.encode_thread_end(clock::now(), &mut buf);
        // The thread is gone: we are the ring's only writer now. An end record that cannot
        // be written (collector gone) loses no event.
        SESSION.write_event(&mut w, &buf);
        SESSION.release_ring(&w);
    }
}
