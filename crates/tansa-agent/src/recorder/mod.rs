//! Turning one hooked call into records. Its parts:
//!
//! * this module: entering and leaving a hook ([`enter`], [`Mode`], [`Active`]) and writing
//!   the hook's events;
//! * [`context`]: the per-thread context (ring writer, delta state, unwinder caches), its
//!   creation on a thread's first call, and its retirement when the thread exits;
//! * [`nested`]: events of signal handlers that interrupt a hook, queued per thread and
//!   written by the interrupted hook in order;
//! * [`capture`]: unwinding and interning call stacks, and CPU samples.

mod capture;
mod context;
mod nested;

pub(crate) use capture::sample;
pub(crate) use context::finish_dead;
pub use context::{ThreadCtx, retire_thread};
pub use nested::{nested_alloc, nested_free, nested_realloc};

use capture::capture;
use context::{context, no_context_cause};
use nested::{flush_nested, nested_tail};

use core::ffi::c_void;
use core::sync::atomic::Ordering;

use tansa_wire::event::{
    AllocEvent, AllocOp, EventSlot, FreeEvent, ImproperEvent, ImproperOp, LeakClass, LeakScan,
    ReallocEvent, StreamState,
};
use tansa_wire::layout::{FLAG_FREE_STACKS, FLAG_LEAK_CHECK, FLAG_ONLINE, LossCause};

use crate::livetable::{LIVE, LiveTable, UNRECORDED};
use crate::modules::{MODULES, rescan};
use crate::session::SESSION;
use crate::thread::{Busy, ThreadState, current};
use crate::unwind::CallerRegs;
use crate::{State, clock, state};

/// How a hook should behave.
#[derive(Debug)]
pub enum Mode {
    /// Call the real function and record nothing (internal call, initialization, or
    /// recording is off).
    Pass,
    /// A signal handler interrupted a hook of this thread: call the real function and
    /// queue the event without a stack.
    Nested(&'static ThreadState),
    /// Record the event.
    Record(Active),
    /// Recording is on, but this thread has no ring: call the real function, and keep the
    /// live-block tables right with [`lost_alloc`], [`lost_release`] or [`lost_realloc`].
    /// The event is counted as lost.
    Lost(&'static ThreadState),
}

/// What [`Active::check_live`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// A recorded block (or not online mode): record the call.
    Recorded,
    /// Online mode, a block whose allocation was not recorded: pass the call on with
    /// [`Active::unrecorded_free`] or [`Active::unrecorded_realloc`].
    Unrecorded,
    /// Online mode, a pointer the program never got from the allocator: the improper use
    /// is recorded, and the call is not passed on.
    Refused,
}

/// A recording hook in progress; leaving it writes queued nested events.
#[derive(Debug)]
pub struct Active {
    st: &'static ThreadState,
    ctx: *mut ThreadCtx,
}

/// Decides how the current hook behaves.
#[inline(always)]
pub fn enter() -> Mode {
    match state() {
        State::Ready => {}
        State::Pass => return Mode::Pass,
    }
    let st = current();
    if st.internal.get() != 0 {
        return Mode::Pass;
    }
    if crate::sampler::is_sampling() {
        return enter_while_sampling(st);
    }
    if st.depth.get() != 0 {
        return Mode::Nested(st);
    }
    if !SESSION.is_active() {
        // Recording stopped because the collector is gone: the call is not recorded.
        SESSION.add_lost(LossCause::CollectorGone, 1);
        return Mode::Pass;
    }
    st.depth.set(1);
    match context(st) {
        Some(ctx) => Mode::Record(Active { st, ctx }),
        None => {
            st.depth.set(0);
            SESSION.add_lost(no_context_cause(), 1);
            Mode::Lost(st)
        }
    }
}

/// [`enter`] while the agent samples the CPU: sampling records no heap events; an
/// ordinary call is the safe place to bring the module map up to date when a sample met
/// unknown code.
#[cold]
#[inline(never)]
fn enter_while_sampling(st: &'static ThreadState) -> Mode {
    if st.depth.get() == 0 && crate::sampler::take_rescan_request() {
        st.depth.set(1);
        if MODULES
            .try_read_for(1000)
            .is_some_and(|m| m.loader_changed())
        {
            rescan();
        }
        st.depth.set(0);
    }
    Mode::Pass
}

/// Whether the session runs online.
#[inline]
fn online() -> bool {
    SESSION.flags() & FLAG_ONLINE != 0
}

/// Whether the live-block table follows this session's blocks: online mode and the leak
/// check at exit (every block) or sampled mode (the sampled ones).
#[inline]
pub(super) fn tracks_live() -> bool {
    SESSION.flags() & (FLAG_ONLINE | FLAG_LEAK_CHECK) != 0 || crate::bytesample::rate() != 0
}

/// Runs `f` on the live-block tables for a thread without a ring, when they are kept. Not
/// when a signal handler interrupted this thread inside the agent, which may hold a table
/// lock: the block is then left out (and, should another thread release it, refused).
#[inline]
fn lost_update(st: &'static ThreadState, f: impl FnOnce()) {
    if tracks_live() && st.busy.get() == 0 {
        let _busy = Busy::enter(st);
        f();
    }
}

/// An allocation of a thread without a ring: online, its block is one the program holds
/// (seed 000's check refuses only pointers the allocator never handed out), so it is kept
/// in [`UNRECORDED`] and its release is passed on. (Sampled mode checks no release: there
/// the block is simply not followed, like an unsampled one.)
#[cold]
#[inline(never)]
pub fn lost_alloc(st: &'static ThreadState, p: *mut c_void) {
    if !p.is_null() && crate::bytesample::rate() == 0 {
        lost_update(st, || UNRECORDED.insert(p as u64));
    }
}

/// A release by a thread without a ring (before the real `free`).
#[cold]
#[inline(never)]
pub fn lost_release(st: &'static ThreadState, p: *mut c_void) {
    if !p.is_null() {
        lost_update(st, || {
            if !LIVE.remove(p as u64) {
                UNRECORDED.remove(p as u64);
            }
        });
    }
}

/// A reallocation by a thread without a ring (`call` performs it).
#[cold]
#[inline(never)]
pub fn lost_realloc(
    st: &'static ThreadState,
    old: *mut c_void,
    size: usize,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    let mut from: Option<&'static LiveTable> = None;
    if !old.is_null() {
        lost_update(st, || {
            from = if LIVE.remove(old as u64) {
                Some(&LIVE)
            } else if UNRECORDED.remove(old as u64) {
                Some(&UNRECORDED)
            } else {
                None
            };
        });
    }
    let new = call();
    if new.is_null() && size != 0 {
        // Failed: the old block is still the program's.
        if let Some(table) = from {
            lost_update(st, || table.insert(old as u64));
        }
    } else {
        lost_alloc(st, new);
    }
    new
}

/// Writes the findings of the leak check at exit in the calling thread's stream: each
/// unreachable block, then the check's summary (stamped now). A thread that cannot record
/// writes nothing (the call is counted as lost, and the image reads as not checked).
pub fn write_leak_check(lost: &[(u64, LeakClass)], scan: &LeakScan) {
    let scan = LeakScan {
        ts: clock::now(),
        ..*scan
    };
    let records = lost.len() as u64 + 1;
    match enter() {
        Mode::Record(mut active) => write_findings(active.st, active.ctx(), lost, &scan),
        // `exit` called from a signal handler that interrupted a hook (Ctrl-C in a handler
        // that exits, say): the interrupted call never completes. Outside the agent's busy
        // sections its context is consistent: the findings are written there, after what
        // handlers queued. Inside one they cannot be, and are counted lost.
        Mode::Nested(st) => {
            if !nested::with_quiet_context(st, |ctx| write_findings(st, ctx, lost, &scan)) {
                SESSION.add_lost(LossCause::SignalQueue, records);
            }
        }
        // One record was counted lost already.
        Mode::Lost(_) => SESSION.add_lost(no_context_cause(), records - 1),
        Mode::Pass => {}
    }
}

/// Writes the leak check's findings on the calling thread's stream.
fn write_findings(
    st: &'static ThreadState,
    ctx: &mut ThreadCtx,
    lost: &[(u64, LeakClass)],
    scan: &LeakScan,
) {
    for &(ptr, class) in lost {
        emit(st, ctx, |stream, buf| {
            stream.encode_unreached(ptr, class, buf)
        });
    }
    emit(st, ctx, |stream, buf| stream.encode_leak_scan(scan, buf));
}

impl Drop for Active {
    fn drop(&mut self) {
        // SAFETY: the context belongs to this thread and lives while the hook runs.
        let ctx = unsafe { &mut *self.ctx };
        loop {
            flush_nested(self.st, ctx);
            self.st.depth.set(0);
            // A handler that fired between the last drain and the depth reset queued its
            // event while we still looked busy: drain again. Once the queue is seen empty at
            // depth 0, later handlers record directly.
            if self.st.nested_head.get() == nested_tail(self.st) {
                break;
            }
            self.st.depth.set(1);
        }
    }
}

/// Encodes an event with the thread's delta state and writes it, marking the thread busy
/// for signal handlers meanwhile.
pub(super) fn emit(
    st: &'static ThreadState,
    ctx: &mut ThreadCtx,
    encode: impl FnOnce(&mut StreamState, &mut EventSlot<'_>),
) {
    let _busy = Busy::enter(st);
    let stream = &mut ctx.stream;
    let written = match ctx.writer.as_mut() {
        Some(w) => SESSION.write_encoded(w, |buf| encode(stream, buf)),
        None => false,
    };
    if !written {
        SESSION.add_lost(LossCause::CollectorGone, 1);
    }
}

impl Active {
    fn ctx(&mut self) -> &mut ThreadCtx {
        // SAFETY: the context belongs to this thread and lives while the hook runs.
        unsafe { &mut *self.ctx }
    }

    /// Whether the session runs online.
    #[inline]
    pub fn online(&self) -> bool {
        online()
    }

    /// Whether the live-block table follows this session's blocks.
    #[inline]
    pub fn tracks_live(&self) -> bool {
        tracks_live()
    }

    /// Unwinds the caller's stack and returns its id (0 when it cannot be had).
    pub fn capture(&mut self, regs: CallerRegs) -> u32 {
        let _busy = Busy::enter(self.st);
        capture(self.ctx(), regs)
    }

    #[inline]
    fn begin_pending(&mut self) {
        if self.online() {
            let ctx = self.ctx();
            if let Some(w) = ctx.writer.as_ref() {
                w.ring
                    .header()
                    .pending
                    .store(ctx.stream.prev_ts.max(1), Ordering::SeqCst);
            }
        }
    }

    #[inline]
    fn end_pending(&mut self) {
        if self.online()
            && let Some(w) = self.ctx().writer.as_ref()
        {
            w.ring.header().pending.store(0, Ordering::Release);
        }
    }

    /// Records an allocation that succeeded.
    pub fn alloc(
        &mut self,
        op: AllocOp,
        ptr: *mut c_void,
        size: usize,
        align: usize,
        regs: CallerRegs,
    ) {
        let stack = self.capture(regs);
        if self.tracks_live() {
            let _busy = Busy::enter(self.st);
            LIVE.insert(ptr as u64);
        }
        self.begin_pending();
        let ev = AllocEvent {
            op,
            ts: clock::now(),
            ptr: ptr as u64,
            size: size as u64,
            align: align as u64,
            stack,
        };
        emit(self.st, self.ctx(), |stream, buf| {
            stream.encode_alloc(&ev, buf)
        });
        self.end_pending();
        crate::leakcause::after_allocation(stack, ptr as u64, regs);
    }

    /// Checks a pointer about to be released or reallocated in online mode; a pointer the
    /// program never got from the allocator is recorded as improper use.
    #[inline(always)]
    pub fn check_live(
        &mut self,
        op: ImproperOp,
        ptr: *mut c_void,
        size: usize,
        regs: CallerRegs,
    ) -> Live {
        // Offline (the default) one load and a branch, inline in the hook.
        if !self.online() || ptr.is_null() {
            return Live::Recorded;
        }
        self.check_live_online(op, ptr, size, regs)
    }

    /// [`Active::check_live`] in online mode.
    #[cold]
    #[inline(never)]
    fn check_live_online(
        &mut self,
        op: ImproperOp,
        ptr: *mut c_void,
        size: usize,
        regs: CallerRegs,
    ) -> Live {
        let found = {
            let _busy = Busy::enter(self.st);
            if LIVE.contains(ptr as u64) {
                Live::Recorded
            } else if UNRECORDED.contains(ptr as u64) {
                Live::Unrecorded
            } else {
                Live::Refused
            }
        };
        if found != Live::Refused {
            return found;
        }
        let stack = self.capture(regs);
        self.begin_pending();
        let ev = ImproperEvent {
            op,
            ts: clock::now(),
            ptr: ptr as u64,
            size: size as u64,
            stack,
        };
        emit(self.st, self.ctx(), |stream, buf| {
            stream.encode_improper(&ev, buf)
        });
        self.end_pending();
        Live::Refused
    }

    /// Online mode: releases a block whose allocation was not recorded (`release` performs
    /// it). The collector never knew the block, so the release is not recorded either: it
    /// is counted as lost, with the allocation, and the tables are kept as for a thread
    /// without a ring.
    #[cold]
    #[inline(never)]
    pub fn unrecorded_free(&mut self, ptr: *mut c_void, release: impl FnOnce()) {
        SESSION.add_lost(LossCause::NoRing, 1);
        lost_release(self.st, ptr);
        release();
    }

    /// Online mode: reallocates a block whose allocation was not recorded (`call` performs
    /// it); the new block is not recorded either, and the call is counted as lost.
    #[cold]
    #[inline(never)]
    pub fn unrecorded_realloc(
        &mut self,
        old: *mut c_void,
        size: usize,
        call: impl FnOnce() -> *mut c_void,
    ) -> *mut c_void {
        SESSION.add_lost(LossCause::NoRing, 1);
        lost_realloc(self.st, old, size, call)
    }

    /// Records a release around the call of the real `free` (`release` performs it).
    #[inline(always)]
    pub fn free(&mut self, ptr: *mut c_void, regs: CallerRegs, release: impl FnOnce()) {
        let stack = if SESSION.flags() & FLAG_FREE_STACKS != 0 {
            self.capture(regs)
        } else {
            0
        };
        if self.tracks_live() && !ptr.is_null() {
            let _busy = Busy::enter(self.st);
            LIVE.remove(ptr as u64);
        }
        crate::leakcause::before_release(ptr as u64, stack);
        self.begin_pending();
        let ts = clock::now_before_release();
        release();
        let ev = FreeEvent {
            ts,
            ptr: ptr as u64,
            stack,
        };
        emit(self.st, self.ctx(), |stream, buf| {
            stream.encode_free(&ev, buf)
        });
        self.end_pending();
    }

    /// Records a reallocation around the call of the real function (`call` performs it and
    /// returns the new block). Returns the new block.
    ///
    /// The new block, moved or grown in place, is an allocation at the `realloc`'s stack (the
    /// collector and the reader give it that site, as any allocation's): in leak-cause mode a
    /// traced site's thread is handed over at the `realloc`'s return, as at `malloc`'s.
    pub fn realloc(
        &mut self,
        array: bool,
        old: *mut c_void,
        size: usize,
        regs: CallerRegs,
        call: impl FnOnce() -> *mut c_void,
    ) -> *mut c_void {
        let stack = self.capture(regs);
        if !old.is_null() {
            crate::leakcause::before_release(old as u64, stack);
        }
        self.begin_pending();
        let ts_begin = clock::now_before_release();
        let new = call();
        let ts_end = clock::now();
        if new.is_null() && size != 0 {
            // Failed: the old block is untouched; nothing happened.
            self.end_pending();
            return new;
        }
        if self.tracks_live() {
            let _busy = Busy::enter(self.st);
            if !old.is_null() {
                LIVE.remove(old as u64);
            }
            if !new.is_null() {
                LIVE.insert(new as u64);
            }
        }
        let ev = ReallocEvent {
            array,
            ts_begin,
            ts_end,
            old_ptr: old as u64,
            new_ptr: new as u64,
            size: size as u64,
            stack,
        };
        emit(self.st, self.ctx(), |stream, buf| {
            stream.encode_realloc(&ev, buf)
        });
        self.end_pending();
        if !new.is_null() {
            crate::leakcause::after_allocation(stack, new as u64, regs);
        }
        new
    }
}
