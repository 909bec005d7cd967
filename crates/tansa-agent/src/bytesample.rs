//! Sampled heap mode (`tansa record --sample-rate BYTES`): record only some allocations,
//! chosen by bytes, as tcmalloc, jemalloc and Go do.
//!
//! Each thread counts down the bytes it allocates; when the count crosses zero, that
//! allocation is sampled and the next count is drawn from an exponential distribution with
//! mean `BYTES`. Sampling is thereby a Poisson process over allocated bytes: a block of `s`
//! bytes is sampled with probability `1 - exp(-s / BYTES)`, whatever the sizes around it,
//! which the analysis undoes (every figure is scaled by the inverse of that probability).
//!
//! A sampled block's address goes into the live-block table ([`crate::livetable::LIVE`]);
//! a release is recorded only for an address found there, so the frees of blocks that
//! were not sampled cost one table lookup and no record. Everything here runs on the hook
//! path: no allocation, no blocking lock but the live table's shard spin lock, which a
//! signal handler never takes while its thread holds it (the thread is marked busy).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::livetable::LIVE;
use crate::thread::{Busy, ThreadState, current};

/// Mean bytes between two samples; 0: every allocation is recorded.
static RATE: AtomicU64 = AtomicU64::new(0);

/// Switches sampled mode on with `rate` mean bytes between samples (0: off).
pub fn set_rate(rate: u64) {
    RATE.store(rate, Ordering::Relaxed);
}

/// The mean bytes between samples, 0 when every allocation is recorded.
#[inline]
pub fn rate() -> u64 {
    RATE.load(Ordering::Relaxed)
}

/// A uniform draw in (0, 1] from the thread's xorshift state (seeded on first use from
/// the state's address and the clock, so threads differ).
fn uniform(st: &ThreadState) -> f64 {
    let mut x = st.sample_rng.get();
    if x == 0 {
        x = (st as *const ThreadState as u64) ^ crate::clock::now().rotate_left(29) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    st.sample_rng.set(x);
    // 53 random bits, plus one so that the draw is never 0.
    ((x >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// Bytes until the next sample: exponential with mean `rate`.
fn next_gap(st: &ThreadState, rate: u64) -> i64 {
    // libm's `log`, not `f64::ln`: the agent links no libm.so (see its Cargo.toml).
    let gap = -libm::log(uniform(st)) * rate as f64;
    gap.min(i64::MAX as f64 / 2.0) as i64
}

/// Whether an allocation of `size` bytes by this thread is sampled (always true outside
/// sampled mode).
#[inline(always)]
pub fn take(size: usize) -> bool {
    // Outside sampled mode (the default) one load and a branch, inline in the hook.
    let rate = rate();
    rate == 0 || take_sampled(size, rate)
}

/// [`take`] in sampled mode.
#[inline(never)]
fn take_sampled(size: usize, rate: u64) -> bool {
    let st = current();
    if st.sample_rng.get() == 0 {
        let first = next_gap(st, rate);
        st.sample_left.set(first);
    }
    let left = st
        .sample_left
        .get()
        .saturating_sub(i64::try_from(size).unwrap_or(i64::MAX));
    if left > 0 {
        st.sample_left.set(left);
        return false;
    }
    // Crossing zero samples this block; the count restarts (the overshoot is not carried:
    // the exponential is memoryless).
    st.sample_left.set(next_gap(st, rate));
    true
}

/// Whether the release of `ptr` must be recorded: always outside sampled mode; in sampled
/// mode when `ptr` is a sampled block, or when the table cannot be looked at now (a signal
/// handler that interrupted its thread inside the table; the analysis ignores releases of
/// blocks it never saw allocated in sampled mode).
#[inline]
pub fn release_recorded(ptr: u64) -> bool {
    if rate() == 0 || ptr == 0 {
        return true;
    }
    if !LIVE.may_contain(ptr) {
        return false;
    }
    let st = current();
    if st.busy.get() != 0 {
        return true;
    }
    let _busy = Busy::enter(st);
    LIVE.contains(ptr)
}
