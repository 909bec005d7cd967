//! Event timestamps: the time-stamp counter when the collector says it is reliable, else
//! `CLOCK_MONOTONIC`. The collector stores calibration points that convert either to
//! nanoseconds.

use core::sync::atomic::{AtomicU8, Ordering};

use crate::sys;

/// `CLOCK_MONOTONIC`.
const MONOTONIC: u8 = 0;
/// The time-stamp counter, ordered reads with `lfence; rdtsc`.
const TSC_LFENCE: u8 = 1;
/// The time-stamp counter, ordered reads with `rdtscp`.
const TSC_RDTSCP: u8 = 2;
/// The bits of [`CLOCK`] that say which clock.
const KIND: u8 = 0b11;
/// The bit of [`CLOCK`] set once a second thread of the process records: until then, every
/// recorded release was made by the one recording thread, so its allocations need no
/// ordered read.
const SHARED: u8 = 1 << 7;

/// Which clock, how an ordered read is made, and whether a second thread records: one
/// load per timestamp.
static CLOCK: AtomicU8 = AtomicU8::new(MONOTONIC);

/// Called when a thread other than the first is about to record its first event, before
/// any release it makes is recorded.
pub fn another_thread_records() {
    CLOCK.fetch_or(SHARED, Ordering::SeqCst);
}

/// Selects the time-stamp counter (true) or `CLOCK_MONOTONIC` (false). Keeps [`SHARED`]:
/// both change the byte with a read-modify-write, so neither undoes the other.
pub fn set_tsc(tsc: bool) {
    let kind = match (tsc, sys::has_rdtscp()) {
        (false, _) => MONOTONIC,
        (true, true) => TSC_RDTSCP,
        (true, false) => TSC_LFENCE,
    };
    let _ = CLOCK.fetch_update(Ordering::SeqCst, Ordering::Relaxed, |c| {
        Some((c & SHARED) | kind)
    });
}

/// Whether timestamps are TSC ticks.
pub fn is_tsc() -> bool {
    CLOCK.load(Ordering::Relaxed) & KIND != MONOTONIC
}

/// The current timestamp, taken after every earlier instruction executed and every
/// earlier load was performed: the timestamp of an allocation, taken after the allocator
/// handed out the block, is later than the release (in any thread) that made the block
/// available, since the allocator learnt of the block by loading what the release stored.
/// `rdtscp` gives exactly that; where the CPU lacks it, `lfence; rdtsc`, which also holds
/// later instructions back: sqlite building its table of `bench/` took 2.6-3.4 % longer
/// under the recorder with it (three A/B runs of 7-9 rounds).
///
/// While only one thread records, no release of another thread can precede the
/// allocation, and the plain read is enough (about 4 % less time under the recorder on
/// sqlite). The thread that records second sets [`SHARED`] before it records a release;
/// an allocation that reuses a block it released loads that block after the release's
/// stores, and therefore (x86 keeps loads in order, and `SHARED` was stored first) sees
/// `SHARED` set.
///
/// A signal handler's events take [`ordered`]: the handler may run in the second thread
/// before that thread has set `SHARED`.
#[inline]
pub fn now() -> u64 {
    match CLOCK.load(Ordering::Acquire) {
        TSC_LFENCE | TSC_RDTSCP => sys::rdtsc(),
        c => ordered_by(c & KIND),
    }
}

/// The current timestamp, ordered as [`now`]'s whatever the number of recording threads.
#[inline]
pub fn ordered() -> u64 {
    ordered_by(CLOCK.load(Ordering::Relaxed) & KIND)
}

#[inline]
fn ordered_by(kind: u8) -> u64 {
    match kind {
        TSC_RDTSCP => sys::rdtscp(),
        TSC_LFENCE => sys::rdtsc_ordered(),
        _ => sys::monotonic_ns(),
    }
}

/// The timestamp of a release, taken before the release is performed. No fence is needed:
/// the counter is read when `rdtsc` executes, which is before it retires, and the release's
/// stores (the allocator's unlock) become visible to other threads only after they retire,
/// in program order after `rdtsc`. An allocation elsewhere that reuses the block therefore
/// takes its (fenced) timestamp later. This saves a fence on every `free`.
#[inline]
pub fn now_before_release() -> u64 {
    if CLOCK.load(Ordering::Relaxed) & KIND == MONOTONIC {
        sys::monotonic_ns()
    } else {
        sys::rdtsc()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one test of the process-wide clock state (tests run in threads of one process).
    #[test]
    fn a_second_thread_orders_reads_whatever_the_clock_is_set_to_later() {
        set_tsc(true);
        assert!(is_tsc());
        assert_eq!(CLOCK.load(Ordering::Relaxed) & SHARED, 0);
        let a = now();
        let b = now();
        assert!(b >= a, "{b} after {a}");
        another_thread_records();
        assert_ne!(CLOCK.load(Ordering::Relaxed) & SHARED, 0);
        // Choosing the clock again (a new session) keeps the reads ordered.
        set_tsc(true);
        assert_ne!(CLOCK.load(Ordering::Relaxed) & SHARED, 0);
        assert!(now() >= b);
        set_tsc(false);
        assert!(!is_tsc());
        assert_ne!(CLOCK.load(Ordering::Relaxed) & SHARED, 0);
        let m = now();
        assert!(ordered() >= m && now_before_release() >= m);
    }
}
