//! Leak-cause mode (seed 001): handing the thread of a traced allocation to the collector.
//!
//! The collector judges allocation sites as leaking while the program runs and lists them,
//! with how many of their next allocations to trace and where each trace ends, in the
//! session header (`trace_sites`). After recording an allocation at such a site (by
//! `malloc`, `calloc`, the memalign family, or `realloc` and `reallocarray`, whose new
//! block, moved or not, is an allocation at the reallocation's stack), the hook claims the
//! process's one trace slot, fills it (the thread, the block, where the
//! allocator returns) and waits until the collector's path follower has attached to the
//! thread; then it returns, and the follower steps the thread from the allocator's return
//! on. When the traced block is released, by any thread, the release hook says so in the
//! slot: the trace ends there with "freed".
//!
//! An allocation at a listed site that is not handed over (the slot busy with another
//! trace, no granted trace left, a request not taken in time) is counted in the entry's
//! `passed`: the collector tells a site that met only busy moments from one whose
//! allocations never came here (those a signal handler makes inside a hook).
//!
//! Costs: one load of `tracing` per allocation and per release when the mode is on; the
//! wait only for the few traced allocations. A collector that does not answer within half
//! a second gets the request back (the allocation is not traced, the program goes on), and
//! so does one that stops tracing the site meanwhile, at once.

use core::sync::atomic::Ordering;

use tansa_wire::layout::{
    FLAG_LEAK_CAUSE, SegmentHeader, TRACE_ATTACHING, TRACE_FILLING, TRACE_FOLLOWING, TRACE_IDLE,
    TRACE_REQUESTED, trace_freed,
};

use crate::session::SESSION;
use crate::sys;
use crate::unwind::CallerRegs;

/// How long a request may wait for the collector to take it (`CLOCK_MONOTONIC`).
const TAKE_WAIT_NS: u64 = 500_000_000;
/// How long the collector may take to attach once it took a request.
const ATTACH_WAIT_NS: u64 = 5_000_000_000;

fn header() -> Option<&'static SegmentHeader> {
    if SESSION.flags() & FLAG_LEAK_CAUSE == 0 {
        return None;
    }
    SESSION
        .header()
        .filter(|h| h.tracing.load(Ordering::Relaxed) != 0)
}

/// After an allocation at `stack` returned `ptr` to the caller described by `regs`: if the
/// collector asked for this site to be traced, hands the thread to it (and returns once
/// the path follower has attached).
#[inline(always)]
pub fn after_allocation(stack: u32, ptr: u64, regs: CallerRegs) {
    // Outside leak-cause mode (nearly always) one load and a branch, inline in the hook.
    if SESSION.flags() & FLAG_LEAK_CAUSE != 0 {
        after_allocation_traced(stack, ptr, regs);
    }
}

/// [`after_allocation`] in leak-cause mode.
#[cold]
#[inline(never)]
fn after_allocation_traced(stack: u32, ptr: u64, regs: CallerRegs) {
    let Some(h) = header() else {
        return;
    };
    if stack == 0 {
        return;
    }
    // Under its first id or another: threads that met the site's stack at the same moment
    // each defined it, and each keeps its own id.
    let Some(site) = (0..h.trace_sites.len()).find(|&i| h.trace_site_holds(i, stack)) else {
        return;
    };
    let slot = &h.trace;
    let entry = &h.trace_sites[site];
    if slot
        .state
        .compare_exchange(
            TRACE_IDLE,
            TRACE_FILLING,
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_err()
    {
        // Another trace is in flight: this allocation goes untraced, and the collector
        // learns why.
        entry.passed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let took = entry
        .remaining
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok();
    if !took || !h.trace_site_holds(site, stack) {
        slot.state.store(TRACE_IDLE, Ordering::Release);
        if !took {
            entry.passed.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    slot.tid.store(sys::gettid(), Ordering::Relaxed);
    slot.site.store(site as u32, Ordering::Relaxed);
    slot.freed.store(0, Ordering::Relaxed);
    slot.ptr.store(ptr, Ordering::Relaxed);
    slot.resume_at.store(regs.ra, Ordering::Relaxed);
    slot.resume_sp.store(regs.sp, Ordering::Relaxed);
    h.trace_stack.store(stack, Ordering::Relaxed);
    slot.sequence.fetch_add(1, Ordering::Relaxed);
    slot.state.store(TRACE_REQUESTED, Ordering::Release);
    // The tracer sleeps on the slot's state while nothing is asked of it.
    sys::futex_wake_shared(&slot.state);
    // Waits are measured on the clock: a sleep of 20 µs takes several times that (timer
    // slack, scheduling), and counting sleeps made the half second two and a half.
    let start = sys::monotonic_ns();
    loop {
        let waited = sys::monotonic_ns().saturating_sub(start);
        match slot.state.load(Ordering::Acquire) {
            TRACE_FOLLOWING => return,
            TRACE_REQUESTED => {
                // The collector stops tracing a site (it saw enough) without looking at a
                // request that came meanwhile, and its tracer takes no request once no
                // site is traced: such a request is withdrawn at once, not after the wait.
                let wanted =
                    h.tracing.load(Ordering::Acquire) != 0 && h.trace_site_holds(site, stack);
                if (!wanted || waited >= TAKE_WAIT_NS)
                    && slot
                        .state
                        .compare_exchange(
                            TRACE_REQUESTED,
                            TRACE_IDLE,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                {
                    // Not taken: give the trace back to the site, if it is still traced.
                    if wanted {
                        entry.remaining.fetch_add(1, Ordering::AcqRel);
                        entry.passed.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
            }
            TRACE_ATTACHING if waited >= ATTACH_WAIT_NS => return,
            TRACE_IDLE => return,
            _ => {}
        }
        sys::sleep_us(20);
    }
}

/// Before the release of `ptr` (by `free` or `realloc`, from the stack `free_stack`, 0 if
/// not captured): ends a trace of that block, and tells the collector which free stack the
/// trace reached (it may read the release event before the trace's result) and whether
/// the release was made by another thread than the traced one.
#[inline]
pub fn before_release(ptr: u64, free_stack: u32) {
    // Not `header()`: a trace in flight must see its block's release even after the
    // collector stopped asking for new traces (`tracing` back to 0).
    if SESSION.flags() & FLAG_LEAK_CAUSE == 0 {
        return;
    }
    let Some(h) = SESSION.header() else {
        return;
    };
    let slot = &h.trace;
    let state = slot.state.load(Ordering::Acquire);
    if (state == TRACE_ATTACHING || state == TRACE_FOLLOWING)
        && slot.ptr.load(Ordering::Acquire) == ptr
    {
        // Released by another thread than the traced one: its path did not free the
        // block (a queue's consumer, say), which the trace must not take for a freeing
        // path. Only for the traced block's release: one system call, rarely.
        let elsewhere = sys::gettid() != slot.tid.load(Ordering::Relaxed);
        slot.freed
            .store(trace_freed(free_stack, elsewhere), Ordering::Release);
    }
}
