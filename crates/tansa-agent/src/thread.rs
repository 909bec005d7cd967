//! Per-thread state.
//!
//! Each thread has a tiny [`ThreadState`] in thread-local storage (nesting depth, whether it
//! is inside the real allocator, and a pointer to its [`ThreadCtx`], the larger per-thread
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

use crate::sys;

/// Per-thread flags, reachable without a TLS lookup after initialization.
#[derive(Debug)]
pub struct ThreadState {
    /// Nesting depth of hooks on this thread that are recording (0 outside hooks). A hook
    /// entered while this is non-zero and `in_real` is zero interrupted our own code from a
    /// signal handler.
    pub depth: Cell<u32>,
    /// Non-zero while this thread runs the real allocator or a C library function called by
    /// the agent: hooks entered then are internal calls and pass straight through.
    pub in_real: Cell<u32>,
    /// The thread's context, or null before its first recorded event and after its exit.
    pub ctx: Cell<*mut crate::ThreadCtx>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            depth: Cell::new(0),
            in_real: Cell::new(0),
            ctx: Cell::new(core::ptr::null_mut()),
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
        let p = (sys::thread_pointer() as isize + OFFSET.load(Ordering::Relaxed)) as *const ThreadState;
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

/// Marks the calling thread as inside the real allocator (or a libc call that may allocate)
/// for the lifetime of the returned guard.
#[derive(Debug)]
pub struct InReal(&'static ThreadState);

impl InReal {
    /// Enters.
    #[inline]
    pub fn enter() -> InReal {
        let st = current();
        st.in_real.set(st.in_real.get() + 1);
        InReal(st)
    }
}

impl Drop for InReal {
    #[inline]
    fn drop(&mut self) {
        self.0.in_real.set(self.0.in_real.get() - 1);
    }
}
