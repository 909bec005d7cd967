//! Per-thread state.
//!
//! Each thread has a tiny [`ThreadState`] in thread-local storage (nesting depth, whether it
//! is inside the real allocator, and a pointer to its [`crate::ThreadCtx`], the larger per-thread
//! object holding its ring, delta-encoder state and unwinder cache).
//!
//! The hook path must not call `__tls_get_addr`: when a `dlopen` grows the TLS generation,
//! glibc's slow path of `__tls_get_addr` calls `malloc`, which would re-enter our hook and
//! recurse. The agent is always loaded with `LD_PRELOAD`, so its TLS block is in the static
//! TLS area at a constant offset from the thread pointer. We measure that offset once,
//! during initialization, and from then on reach the state from `%fs:0` plus the offset:
//! the initial-exec access that stable Rust cannot request for a `cdylib`.

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use tansa_wire::event::{AllocEvent, FreeEvent, ReallocEvent};

use crate::sys;

/// An event recorded by a signal handler that interrupted a hook of this thread.
#[derive(Debug, Clone, Copy)]
pub enum NestedEvent {
    /// An allocation.
    Alloc(AllocEvent),
    /// A reallocation.
    Realloc(ReallocEvent),
    /// A release.
    Free(FreeEvent),
}

/// Capacity of the per-thread queue of signal-handler events.
pub const NESTED_CAPACITY: usize = 32;

/// Per-thread flags, reachable without a TLS lookup after initialization.
#[derive(Debug)]
pub struct ThreadState {
    /// Nesting depth of hooks on this thread that are recording (0 outside hooks). A hook
    /// entered while this is non-zero was entered from a signal handler that interrupted a
    /// hook (its own code or the real allocator it called: the real allocator functions never
    /// call back into the hooks, see `hooks`).
    pub depth: Cell<u32>,
    /// Non-zero while the agent itself calls a C library function that may allocate: hooks
    /// entered then are the agent's own doing and pass straight through.
    pub internal: Cell<u32>,
    /// The thread's context, or null before its first recorded event and after its exit.
    pub ctx: Cell<*mut crate::ThreadCtx>,
    /// Queue of events recorded by signal handlers while a hook of this thread could not
    /// take them: the handler appends at `nested_tail`, the interrupted hook drains from
    /// `nested_head` when it finishes. Both run on this thread (a handler runs to completion
    /// before the code it interrupted resumes), so cells suffice; the counters are never
    /// reset, so a handler firing while the queue is drained is never overwritten. It lives
    /// here, in static TLS, because a handler may fire before the thread's context exists.
    pub nested: [Cell<Option<NestedEvent>>; NESTED_CAPACITY],
    /// Next queued event to write.
    pub nested_head: Cell<usize>,
    /// One past the last queued event.
    pub nested_tail: Cell<usize>,
    /// Non-zero while this thread is in a section a signal handler must not enter: writing a
    /// record, draining the queue, holding a lock of the live-block table.
    pub busy: Cell<u32>,
    /// The thread's CPU-sampling timer (`timer_t`) plus one, or 0 for none (the first timer
    /// of a process has the id 0).
    pub timer: Cell<usize>,
    /// CPU sampling: the thread's id plus one while it holds its slot among the running
    /// threads whose unsampled time the exit counts (`sampler`), `usize::MAX` when it has a
    /// timer but could get no slot, or 0.
    pub timer_slot: Cell<usize>,
    /// CPU sampling: the thread's CPU time when its timer was armed (or its time last
    /// accounted), in nanoseconds.
    pub cpu_armed: Cell<u64>,
    /// CPU sampling: the periods the timer signalled since then (overruns included).
    pub periods: Cell<u64>,
    /// Sampled heap mode: bytes this thread allocates before its next sample.
    pub sample_left: Cell<i64>,
    /// Sampled heap mode: the thread's random state (0 until first used).
    pub sample_rng: Cell<u64>,
    /// The return address of the thread's `vfork` call in progress (see `crate::vfork`).
    pub vfork_return: Cell<u64>,
    /// Set by the child of the thread's `vfork` call in progress when it ends without
    /// executing a program (`_exit`); read and cleared by the parent once resumed.
    pub vfork_child_ended: Cell<bool>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            depth: Cell::new(0),
            internal: Cell::new(0),
            ctx: Cell::new(core::ptr::null_mut()),
            nested: [const { Cell::new(None) }; NESTED_CAPACITY],
            nested_head: Cell::new(0),
            nested_tail: Cell::new(0),
            busy: Cell::new(0),
            timer: Cell::new(0),
            timer_slot: Cell::new(0),
            cpu_armed: Cell::new(0),
            periods: Cell::new(0),
            sample_left: Cell::new(0),
            sample_rng: Cell::new(0),
            vfork_return: Cell::new(0),
            vfork_child_ended: Cell::new(false),
        }
    };
}

static OFFSET: AtomicIsize = AtomicIsize::new(0);
static OFFSET_KNOWN: AtomicBool = AtomicBool::new(false);

/// Measures the static-TLS offset of our state from the thread pointer. Called once, on the
/// initializing thread.
pub fn init_fast_access() {
    let addr = STATE.with(|s| s as *const ThreadState as isize);
    OFFSET.store(addr - sys::thread_pointer() as isize, Ordering::Relaxed);
    OFFSET_KNOWN.store(true, Ordering::Release);
}

/// The calling thread's state.
#[inline]
pub fn current() -> &'static ThreadState {
    if OFFSET_KNOWN.load(Ordering::Acquire) {
        let p =
            (sys::thread_pointer() as isize + OFFSET.load(Ordering::Relaxed)) as *const ThreadState;
        // SAFETY: the agent is preloaded, so its TLS block lives in static TLS at the same
        // offset from every thread's thread pointer; `p` is this thread's `STATE`, which
        // lives as long as the thread. `ThreadState` is not `Sync`, so the reference cannot
        // escape to another thread.
        unsafe { &*p }
    } else {
        // SAFETY: same object reached through the regular TLS access; the reference does
        // not outlive the thread for the same reason.
        STATE.with(|s| unsafe { &*(s as *const ThreadState) })
    }
}

/// Marks the calling thread busy (see [`ThreadState::busy`]) for the guard's lifetime.
#[derive(Debug)]
pub struct Busy(&'static ThreadState);

impl Busy {
    /// Enters a busy section.
    #[inline]
    pub fn enter(st: &'static ThreadState) -> Busy {
        st.busy.set(st.busy.get() + 1);
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        Busy(st)
    }
}

impl Drop for Busy {
    #[inline]
    fn drop(&mut self) {
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.0.busy.set(self.0.busy.get() - 1);
    }
}

/// Marks the calling thread as running a C library call made by the agent itself (one that
/// may allocate) for the lifetime of the returned guard.
#[derive(Debug)]
pub struct Internal(&'static ThreadState);

impl Internal {
    /// Enters.
    #[inline]
    pub fn enter() -> Internal {
        let st = current();
        st.internal.set(st.internal.get() + 1);
        Internal(st)
    }
}

impl Drop for Internal {
    #[inline]
    fn drop(&mut self) {
        self.0.internal.set(self.0.internal.get() - 1);
    }
}
