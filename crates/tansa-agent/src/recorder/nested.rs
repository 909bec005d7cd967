//! Events of signal handlers that interrupt a hook of the same thread: recorded at once
//! when the thread is not busy, else queued for the interrupted hook to write in order.

use core::ffi::c_void;
use core::sync::atomic::Ordering;

use tansa_wire::event::{AllocEvent, AllocOp, EventSlot, FreeEvent, ReallocEvent, StreamState};
use tansa_wire::layout::{FLAG_FREE_STACKS, LossCause};

use crate::clock;
use crate::livetable::LIVE;
use crate::session::SESSION;
use crate::thread::{Busy, NESTED_CAPACITY, NestedEvent as Nested, ThreadState};
use crate::unwind::CallerRegs;

use super::capture::capture;
use super::context::ThreadCtx;
use super::emit;

/// Reads the queue's tail as a signal handler may have left it.
#[inline]
pub(super) fn nested_tail(st: &ThreadState) -> usize {
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    st.nested_tail.get()
}

/// Writes the events signal handlers queued.
pub(super) fn flush_nested(st: &'static ThreadState, ctx: &mut ThreadCtx) {
    let _busy = Busy::enter(st);
    while st.nested_head.get() != nested_tail(st) {
        let head = st.nested_head.get();
        let ev = st.nested[head % NESTED_CAPACITY].take();
        st.nested_head.set(head + 1);
        if let Some(ev) = ev {
            apply_nested(st, ctx, &ev);
        }
    }
}

/// Records one signal-handler event: its live-table update (online) and its record.
pub(super) fn apply_nested(st: &'static ThreadState, ctx: &mut ThreadCtx, ev: &Nested) {
    if super::tracks_live() {
        let _busy = Busy::enter(st);
        match *ev {
            Nested::Alloc(a) => LIVE.insert(a.ptr),
            Nested::Realloc(r) => {
                LIVE.remove(r.old_ptr);
                LIVE.insert(r.new_ptr);
            }
            Nested::Free(f) => {
                LIVE.remove(f.ptr);
            }
        }
    }
    emit(st, ctx, |stream, buf| encode_nested(ev, stream, buf));
}

pub(super) fn encode_nested(ev: &Nested, stream: &mut StreamState, buf: &mut EventSlot<'_>) {
    match ev {
        Nested::Alloc(a) => stream.encode_alloc(a, buf),
        Nested::Realloc(r) => stream.encode_realloc(r, buf),
        Nested::Free(f) => stream.encode_free(f, buf),
    }
}

/// For a signal handler that interrupted a hook: runs `f` on the thread's context, after
/// writing what handlers queued before, when the interrupted code is not in a busy section
/// (the context is then consistent and unused) and can write. Returns whether it ran.
pub(super) fn with_quiet_context(st: &'static ThreadState, f: impl FnOnce(&mut ThreadCtx)) -> bool {
    let p = st.ctx.get();
    if p.is_null() || st.busy.get() != 0 || crate::test_queue_nested() {
        return false;
    }
    // SAFETY: the interrupted code of this same thread is suspended while the handler runs
    // and is not in a busy section, so the context is consistent and unused.
    let ctx = unsafe { &mut *p };
    if ctx.writer.is_none() {
        return false;
    }
    flush_nested(st, ctx);
    f(ctx);
    true
}

/// Records an event of a signal handler that interrupted a hook: directly when the thread
/// is not busy (draining what was queued before it first, to keep the order), else into the
/// thread's queue for the interrupted hook to write.
pub(super) fn queue_nested(st: &'static ThreadState, mut ev: Nested, regs: CallerRegs) {
    let written = with_quiet_context(st, |ctx| {
        let stack = {
            let _busy = Busy::enter(st);
            capture(ctx, regs)
        };
        match &mut ev {
            Nested::Alloc(a) => a.stack = stack,
            Nested::Realloc(r) => r.stack = stack,
            Nested::Free(f) => {
                if SESSION.flags() & FLAG_FREE_STACKS != 0 {
                    f.stack = stack;
                }
            }
        }
        apply_nested(st, ctx, &ev);
    });
    if written {
        return;
    }
    let tail = st.nested_tail.get();
    if tail - st.nested_head.get() < NESTED_CAPACITY {
        st.nested[tail % NESTED_CAPACITY].set(Some(ev));
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        st.nested_tail.set(tail + 1);
        // Queued events are written without their stack.
        SESSION.add_stackless();
    } else {
        SESSION.add_lost(LossCause::SignalQueue, 1);
    }
}

/// Records an allocation made in a signal handler that interrupted a hook.
pub fn nested_alloc(
    st: &'static ThreadState,
    op: AllocOp,
    ptr: *mut c_void,
    size: usize,
    align: usize,
    regs: CallerRegs,
) {
    queue_nested(
        st,
        Nested::Alloc(AllocEvent {
            op,
            ts: clock::ordered(),
            ptr: ptr as u64,
            size: size as u64,
            align: align as u64,
            stack: 0,
        }),
        regs,
    );
}

/// Records a release made in a signal handler that interrupted a hook.
pub fn nested_free(st: &'static ThreadState, ptr: *mut c_void, regs: CallerRegs) {
    queue_nested(
        st,
        Nested::Free(FreeEvent {
            ts: clock::ordered(),
            ptr: ptr as u64,
            stack: 0,
        }),
        regs,
    );
}

/// Records a reallocation made in a signal handler that interrupted a hook.
pub fn nested_realloc(
    st: &'static ThreadState,
    array: bool,
    old: *mut c_void,
    new: *mut c_void,
    size: usize,
    regs: CallerRegs,
) {
    let ts = clock::ordered();
    queue_nested(
        st,
        Nested::Realloc(ReallocEvent {
            array,
            ts_begin: ts,
            ts_end: ts,
            old_ptr: old as u64,
            new_ptr: new as u64,
            size: size as u64,
            stack: 0,
        }),
        regs,
    );
}
