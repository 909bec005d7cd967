//! Call stacks: unwinding the caller, interning the stack in the thread's and the
//! process's caches, writing new stack definitions; and CPU samples of the SIGPROF timer.

use tansa_wire::event::{StackFrame, encode_stack_def, stack_def_max_len};
use tansa_wire::layout::LossCause;

use crate::modules::{MODULES, rescan};
use crate::session::SESSION;
use crate::stacks::STACKS;
use crate::thread::{Busy, current};
use crate::unwind::{CallerRegs, key_extend, key_seed, table_key, unwind_from_ip};
use crate::{State, clock, state, sys};

use super::context::ThreadCtx;
use super::context::context;
use super::emit;

/// Unwinds the caller's stack and returns its id (0, counted, when it cannot be had). The
/// caller marks the thread busy: the context's unwinder cache and frame buffer are in use.
pub(super) fn capture(ctx: &mut ThreadCtx, regs: CallerRegs) -> u32 {
    let id = capture_inner(ctx, regs);
    if id == 0 {
        SESSION.add_stackless();
    }
    id
}

pub(super) fn capture_inner(ctx: &mut ThreadCtx, regs: CallerRegs) -> u32 {
    let hi = stack_top(ctx, regs.sp);
    // The common case: a stack this thread just had. No lock needed.
    if let Some(id) = ctx.stacks.lookup(regs, hi, crate::modules::generation()) {
        return id;
    }
    ctx.cache.widen_if_thrashing();
    for attempt in 0..2 {
        let Some(map) = MODULES.try_read_for(20_000) else {
            return 0;
        };
        let Some(unwinder) = map.unwinder.as_ref() else {
            return 0;
        };
        let c = ctx.stacks.capture(
            unwinder,
            &mut ctx.cache,
            regs,
            hi,
            crate::max_frames(),
            map.generation,
            map.epoch,
        );
        if let Some(id) = c.id {
            return id;
        }
        let mut key = table_key(c.key);
        if crate::test_thread_stacks() {
            key.1 ^= u64::from(ctx.tid).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        if let Some(id) = STACKS.lookup(key) {
            ctx.stacks.set_id(id);
            return id;
        }
        // A new stack. If it runs through code no module covers and the loader changed,
        // a library was loaded since the last scan: rescan and unwind again.
        if attempt == 0
            && ctx
                .stacks
                .frames()
                .any(|f| f != tansa_wire::event::SIGNAL_FRAME && map.find(f).is_none())
            && map.loader_changed()
        {
            drop(map);
            rescan();
            continue;
        }
        return match define_stack(&map, key, ctx.stacks.frames()) {
            Some(id) => {
                ctx.stacks.set_id(id);
                id
            }
            None => 0,
        };
    }
    0
}

/// Takes a CPU sample of the calling thread, interrupted at `ip` (from the `SIGPROF`
/// handler). Samples that land inside the agent's own code are counted as lost.
pub(crate) fn sample(ip: u64, sp: u64, bp: u64, weight: u32) {
    if !matches!(state(), State::Ready) || !SESSION.is_active() {
        return;
    }
    let st = current();
    if st.depth.get() != 0 || st.internal.get() != 0 || st.busy.get() != 0 {
        SESSION.add_lost(LossCause::Sample, 1);
        return;
    }
    st.depth.set(1);
    if let Some(p) = context(st) {
        // SAFETY: this thread's context; the interrupted code is not inside the agent.
        let ctx = unsafe { &mut *p };
        let stack = {
            let _busy = Busy::enter(st);
            sample_stack(ctx, CallerRegs { ra: ip, sp, bp })
        };
        match stack {
            Some(id) => emit(st, ctx, |stream, buf| {
                stream.encode_sample(clock::now(), id, weight, buf);
            }),
            None => SESSION.add_lost(LossCause::Sample, 1),
        }
    } else {
        SESSION.add_lost(LossCause::Sample, 1);
    }
    st.depth.set(0);
}

/// Unwinds and interns a sample's stack.
pub(super) fn sample_stack(ctx: &mut ThreadCtx, regs: CallerRegs) -> Option<u32> {
    let hi = stack_top(ctx, regs.sp);
    // Never wait in a signal handler: a writer of the map is another thread, mid-rescan.
    let map = MODULES.try_read_for(0)?;
    let unwinder = map.unwinder.as_ref()?;
    unwind_from_ip(unwinder, &mut ctx.cache, regs, hi, &mut ctx.sample_frames);
    let frames = &ctx.sample_frames;
    if frames.iter().any(|&f| map.find(f).is_none()) {
        crate::sampler::want_rescan();
    }
    // Sample stacks start with an instruction, not a return address: keep their keys apart
    // from allocation stacks'.
    let mut key = key_seed(map.epoch ^ 0x5a4d_504c_4553);
    for &f in frames.iter().rev() {
        key = key_extend(key, f);
    }
    let key = table_key(key);
    if let Some(id) = STACKS.lookup(key) {
        return Some(id);
    }
    define_stack(&map, key, frames.iter().copied())
}

/// Gives a new stack (absolute addresses, innermost first) an id, writes its definition —
/// frames as module-relative offsets — to the meta stream and interns it under `key`.
/// `None` when the meta stream has no room; the stack is then not interned.
pub(super) fn define_stack(
    map: &crate::modules::ModuleMap,
    key: (u64, u64),
    frames: impl ExactSizeIterator<Item = u64> + Clone,
) -> Option<u32> {
    let id = STACKS.next_id();
    // Neighbouring frames are mostly in one module: try the last one found first.
    let last = core::cell::Cell::new(None::<&crate::modules::ModuleEntry>);
    let find = |f: u64| match last.get() {
        Some(m) if m.start <= f && f < m.end => Some(m),
        _ => {
            let m = map.find(f);
            if m.is_some() {
                last.set(m);
            }
            m
        }
    };
    let normalized = frames.map(|f| match find(f) {
        Some(m) => StackFrame {
            module: m.id,
            offset: f - m.bias,
        },
        None => StackFrame {
            module: 0,
            offset: f,
        },
    });
    SESSION
        .write_meta(stack_def_max_len(normalized.len()), |sink| {
            encode_stack_def(sink, id, normalized)
        })
        .then(|| {
            STACKS.insert(key, id);
            id
        })
}

/// How far below the bounds read when the thread started its stack is looked for: the
/// main thread's stack grows on demand, to its `RLIMIT_STACK` (8 MiB by default).
const STACK_GROWTH: u64 = 1 << 30;

/// The top of the stack `sp` is on: the thread's stack, or the alternate signal stack.
pub(super) fn stack_top(ctx: &mut ThreadCtx, sp: u64) -> u64 {
    if sp >= ctx.stack_lo && sp < ctx.stack_hi {
        return ctx.stack_hi;
    }
    if let Some((lo, hi)) = sys::altstack_bounds()
        && sp >= lo
        && sp < hi
    {
        return hi;
    }
    // The main thread's stack mapping grows down as it is used, past the bounds read when
    // the thread started (about 132 KiB): an allocation below a recursion of some 3,000
    // frames was on no known stack, and recorded with its innermost frame alone. So a
    // stack pointer a little below them is looked up again (a system call once per page
    // the stack grew; a mapping found to be another one is remembered, not asked again).
    if sp < ctx.stack_lo
        && ctx.stack_lo - sp <= STACK_GROWTH
        && !(sp >= ctx.other_lo && sp < ctx.other_hi)
    {
        match sys::mapping_containing(sp) {
            Some((lo, hi)) if hi == ctx.stack_hi => {
                ctx.stack_lo = lo;
                return hi;
            }
            Some((lo, hi)) => (ctx.other_lo, ctx.other_hi) = (lo, hi),
            None => {}
        }
    }
    // Unknown stack (a coroutine, say): do not read beyond the caller's own frame.
    sp
}
