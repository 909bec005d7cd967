//! Event timestamps: the time-stamp counter when the collector says it is reliable, else
//! `CLOCK_MONOTONIC`. The collector stores calibration points that convert either to
//! nanoseconds.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

static USE_TSC: AtomicBool = AtomicBool::new(false);
/// Whether the CPU has `rdtscp` (set with [`set_tsc`]).
static HAS_RDTSCP: AtomicBool = AtomicBool::new(false);

/// Selects the time-stamp counter (true) or `CLOCK_MONOTONIC` (false).
pub fn set_tsc(tsc: bool) {
    HAS_RDTSCP.store(sys::has_rdtscp(), Ordering::Relaxed);
    USE_TSC.store(tsc, Ordering::Relaxed);
}

/// Whether timestamps are TSC ticks.
pub fn is_tsc() -> bool {
    USE_TSC.load(Ordering::Relaxed)
}

/// The current timestamp, taken after every earlier instruction executed and every
/// earlier load was performed: the timestamp of an allocation, taken after the allocator
/// handed out the block, is later than the release (in any thread) that made the block
/// available, since the allocator learnt of the block by loading what the release stored.
/// `rdtscp` gives exactly that; where the CPU lacks it, `lfence; rdtsc`, which also holds
/// later instructions back: sqlite building its table of `bench/` took 2.6-3.4 % longer
/// under the recorder with it (three A/B runs of 7-9 rounds).
#[inline]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        if HAS_RDTSCP.load(Ordering::Relaxed) {
            sys::rdtscp()
        } else {
            sys::rdtsc_ordered()
        }
    } else {
        sys::monotonic_ns()
    }
}

/// The timestamp of a release, taken before the release is performed. No fence is needed:
/// the counter is read when `rdtsc` executes, which is before it retires, and the release's
/// stores (the allocator's unlock) become visible to other threads only after they retire,
/// in program order after `rdtsc`. An allocation elsewhere that reuses the block therefore
/// takes its (fenced) timestamp later. This saves a fence on every `free`.
#[inline]
pub fn now_before_release() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        sys::rdtsc()
    } else {
        sys::monotonic_ns()
    }
}
