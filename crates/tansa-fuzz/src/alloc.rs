//! A counting global allocator with a per-input memory bound.
//!
//! A harness installs [`Counting`] as its `#[global_allocator]` and runs each input inside
//! [`bounded`]: an allocation that would take the bytes allocated during the run beyond
//! the bound calls the hook set with [`on_exceeded`] (after lifting the bound, so the hook
//! may allocate) and aborts, the way libFuzzer expects a crash. The peak is returned
//! otherwise.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

// Per thread: tests run their targets on parallel threads, and one thread's allocations
// must neither count against another's bound nor hide its own. (Memory freed on another
// thread than the one that allocated it makes a thread's count drift; the targets run on
// one thread.)
thread_local! {
    /// Bytes this thread has allocated and not freed (may drift below zero).
    static CURRENT: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
    /// Largest value of `CURRENT` allowed (`i64::MAX`: no bound).
    static LIMIT: Cell<i64> = const { Cell::new(i64::MAX) };
}
static HOOK: std::sync::OnceLock<fn(usize)> = std::sync::OnceLock::new();

fn size(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The system allocator, counting the bytes allocated.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting;

impl Counting {
    fn grow(n: usize) {
        // A thread being torn down has no counters any more: its allocations are not counted.
        let _ = CURRENT.try_with(|c| {
            let now = c.get().saturating_add(size(n));
            c.set(now);
            let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
            if LIMIT.try_with(Cell::get).is_ok_and(|limit| now > limit) {
                exceeded(now);
            }
        });
    }

    fn shrink(n: usize) {
        let _ = CURRENT.try_with(|c| c.set(c.get().saturating_sub(size(n))));
    }
}

#[cold]
fn exceeded(now: i64) -> ! {
    let limit = LIMIT.with(|l| l.replace(i64::MAX));
    let beyond = usize::try_from(now.saturating_sub(limit)).unwrap_or(0);
    if let Some(hook) = HOOK.get() {
        hook(beyond);
    }
    eprintln!(
        "tansa-fuzz: memory bound exceeded: an allocation brought the input's memory {beyond} bytes beyond its bound"
    );
    std::process::abort();
}

// SAFETY: every method forwards to `System` with the same arguments, so the allocator
// contract is `System`'s; the counters are const-initialized thread-locals (no allocation,
// no destructor) and the bound check allocates nothing
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
        Self::shrink(layout.size());
        // SAFETY: `ptr` was allocated by `System` with `layout` (through this allocator).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::grow(new_size - layout.size());
        } else {
            Self::shrink(layout.size() - new_size);
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

/// Runs `f` with at most `limit` more bytes allocated by this thread at any time than
/// before it (when [`Counting`] is the global allocator), and returns its result and the
/// peak.
pub fn bounded<R>(limit: usize, f: impl FnOnce() -> R) -> (R, usize) {
    let base = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(base));
    LIMIT.with(|l| l.set(base.saturating_add(size(limit))));
    let r = f();
    LIMIT.with(|l| l.set(i64::MAX));
    let peak = PEAK.with(Cell::get).saturating_sub(base);
    (r, usize::try_from(peak).unwrap_or(0))
}

/// Runs `f` with this thread's bound lifted, and puts the bound back raised by what `f`
/// kept allocated: for the harness's own work during a run, such as a panic hook that
/// symbolizes a backtrace (whose caches would otherwise count against the input).
pub fn unbounded<R>(f: impl FnOnce() -> R) -> R {
    let saved = LIMIT.with(|l| l.replace(i64::MAX));
    let before = CURRENT.with(Cell::get);
    let r = f();
    let kept = CURRENT.with(Cell::get).saturating_sub(before).max(0);
    LIMIT.with(|l| l.set(saved.saturating_add(kept)));
    r
}

/// Whether [`Counting`] is counting (it is the global allocator).
pub fn counting() -> bool {
    let before = CURRENT.with(Cell::get);
    let v = std::hint::black_box(vec![0u8; 4096]);
    let after = CURRENT.with(Cell::get);
    drop(v);
    after >= before + 4096
}
