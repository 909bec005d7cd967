//! Event timestamps: the time-stamp counter when the collector says it is reliable, else
//! `CLOCK_MONOTONIC`. The collector stores calibration points that convert either to
//! nanoseconds.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

static USE_TSC: AtomicBool = AtomicBool::new(false);

/// Selects the time-stamp counter (true) or `CLOCK_MONOTONIC` (false).
pub fn set_tsc(tsc: bool) {
    USE_TSC.store(tsc, Ordering::Relaxed);
}

/// Whether timestamps are TSC ticks.
pub fn is_tsc() -> bool {
    USE_TSC.load(Ordering::Relaxed)
}

/// The current timestamp.
#[inline]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        sys::rdtsc_ordered()
    } else {
        sys::monotonic_ns()
    }
}
