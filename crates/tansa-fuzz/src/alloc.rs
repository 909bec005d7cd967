//! A counting global allocator with a per-input memory bound.
//!
//! A harness installs [`Counting`] as its `#[global_allocator]` and runs each input inside
//! [`bounded`]: an allocation that would take the bytes allocated during the run beyond
//! the bound calls the hook set with [`on_exceeded`] (after lifting the bound, so the hook
//! may allocate) and aborts, the way libFuzzer expects a crash. The peak is returned
//! otherwise.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Largest value of `CURRENT` allowed (0: no bound).
static LIMIT: AtomicUsize = AtomicUsize::new(0);
static HOOK: std::sync::OnceLock<fn(usize)> = std::sync::OnceLock::new();

/// The system allocator, counting the bytes allocated.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting;

impl Counting {
    fn grow(size: usize) {
        let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
        let limit = LIMIT.load(Ordering::Relaxed);
        if limit != 0 && now > limit {
            exceeded(now);
        }
    }
}

#[cold]
fn exceeded(now: usize) -> ! {
    let limit = LIMIT.swap(0, Ordering::Relaxed);
    if let Some(hook) = HOOK.get() {
        hook(now.saturating_sub(limit));
    }
    eprintln!(
        "tansa-fuzz: memory bound exceeded: an allocation brought the input's memory {} bytes beyond its bound",
        now.saturating_sub(limit)
    );
    std::process::abort();
}

// SAFETY: every method forwards to `System` with the same arguments, so the allocator
// contract is `System`'s; the counters are atomics and the bound check allocates nothing
// (its failure path lifts the bound before it allocates, and never returns).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::grow(layout.size());
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::grow(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout` (through this allocator).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::grow(new_size - layout.size());
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Sets what to do, once, when an input exceeds its bound (save it, say); it is given how
/// far beyond the bound the allocation went.
pub fn on_exceeded(hook: fn(usize)) {
    let _ = HOOK.set(hook);
}

/// Runs `f` with at most `limit` more bytes allocated at any time than before it (when
/// [`Counting`] is the global allocator), and returns its result and the peak.
pub fn bounded<R>(limit: usize, f: impl FnOnce() -> R) -> (R, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    LIMIT.store(base.saturating_add(limit), Ordering::Relaxed);
    let r = f();
    LIMIT.store(0, Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (r, peak)
}

/// Whether [`Counting`] is counting (it is the global allocator).
pub fn counting() -> bool {
    let before = CURRENT.load(Ordering::Relaxed);
    let v = std::hint::black_box(vec![0u8; 4096]);
    let after = CURRENT.load(Ordering::Relaxed);
    drop(v);
    after >= before + 4096
}
