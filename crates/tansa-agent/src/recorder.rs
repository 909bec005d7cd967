//! Turning one hooked call into records: entering and leaving a hook, the per-thread
//! context, stack capture, and writing events.

use core::ffi::c_void;
use core::sync::atomic::Ordering;

use tansa_wire::event::{
    AllocEvent, AllocOp, CountingSink, EventBuf, FreeEvent, ImproperEvent, ImproperOp,
    ReallocEvent, StackFrame, StreamState, encode_stack_def, encode_thread_name,
    encode_thread_start,
};
use tansa_wire::layout::{FLAG_FREE_STACKS, FLAG_ONLINE, LossCause};

use crate::livetable::LIVE;
use crate::modules::{MODULES, rescan};
use crate::registry::{Link, REGISTRY};
use crate::session::{RingWriter, SESSION};
use crate::stacks::STACKS;
use crate::thread::{Busy, NESTED_CAPACITY, NestedEvent as Nested, ThreadState, current};
use crate::unwind::{
    CallerRegs, MAX_FRAMES, StackCache, UnwindCache, key_extend, key_seed, table_key,
    unwind_from_ip,
};
use crate::{State, clock, state, sys};

/// Everything a thread needs to record events.
pub struct ThreadCtx {
    /// Links in the registry of thread contexts (see [`crate::registry`]).
    pub(crate) link: Link,
    tid: u32,
    writer: Option<RingWriter>,
    /// The ring epoch at which this thread last found no ring (`u32::MAX`: never): it
    /// retries only when the epoch has moved.
    no_ring_epoch: u32,
    stream: StreamState,
    cache: UnwindCache,
    stack_lo: u64,
    stack_hi: u64,
    stacks: StackCache,
    /// Frames of the CPU sample being taken (preallocated: the signal handler never grows it).
    sample_frames: Vec<u64>,
}

impl ThreadCtx {
    /// The thread id of the context's thread.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl core::fmt::Debug for ThreadCtx {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadCtx")
            .field("tid", &self.tid)
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

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
}

/// A recording hook in progress; leaving it writes queued nested events.
#[derive(Debug)]
pub struct Active {
    st: &'static ThreadState,
    ctx: *mut ThreadCtx,
}

/// Decides how the current hook behaves.
#[inline]
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
        // Sampling records no heap events; an ordinary call is the safe place to bring the
        // module map up to date when a sample met unknown code.
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
        return Mode::Pass;
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
            Mode::Pass
        }
    }
}

/// Why a thread has no context to record with: no ring was free, or the collector is gone.
fn no_context_cause() -> LossCause {
    if SESSION.is_active() {
        LossCause::NoRing
    } else {
        LossCause::CollectorGone
    }
}

/// The calling thread's name.
fn name_of_thread(buf: &mut [u8; 16]) -> usize {
    sys::thread_name(buf)
}

/// The calling thread's context, created on first use; reclaims a ring when the thread has
/// none or its ring belongs to a previous session (the parent's, after `fork`).
///
/// The order matters for signal handlers that fire meanwhile: the context is published
/// first, then the ring is claimed (cheap), and only then the slow setup runs (reading
/// `/proc`), during which a handler can already write its events to the ring.
///
/// The common case (a context with a ring of this session) is inlined into the hooks; the
/// rest, whose frame holds the unwinder's large state, is a separate cold function so that
/// the hooks do not set up that frame on every call.
#[inline]
fn context(st: &'static ThreadState) -> Option<*mut ThreadCtx> {
    let p = st.ctx.get();
    if !p.is_null() {
        // SAFETY: as below; a shared borrow that ends before `context_setup` runs.
        let ctx = unsafe { &*p };
        if ctx
            .writer
            .as_ref()
            .is_some_and(|w| w.generation == SESSION.generation())
        {
            return Some(p);
        }
    }
    context_setup(st)
}

#[cold]
#[inline(never)]
fn context_setup(st: &'static ThreadState) -> Option<*mut ThreadCtx> {
    let mut p = st.ctx.get();
    if p.is_null() {
        let ctx = Box::new(ThreadCtx {
            link: Link::new(),
            tid: sys::gettid(),
            writer: None,
            no_ring_epoch: u32::MAX,
            stream: StreamState::default(),
            cache: UnwindCache::new_in(),
            stack_lo: 0,
            stack_hi: 0,
            stacks: StackCache::default(),
            sample_frames: Vec::with_capacity(MAX_FRAMES),
        });
        p = Box::into_raw(ctx);
        // SAFETY: a new context, released only through the registry.
        unsafe { REGISTRY.insert(p) };
        st.ctx.set(p);
    }
    // SAFETY: `p` is this thread's context, only ever used by this thread (and by its signal
    // handlers while it is suspended and not busy).
    let ctx = unsafe { &mut *p };
    let generation = SESSION.generation();
    if ctx
        .writer
        .as_ref()
        .is_none_or(|w| w.generation != generation)
    {
        if let Some(old) = ctx.writer.take() {
            SESSION.release_ring(&old);
        }
        ctx.tid = sys::gettid();
        let epoch = SESSION.ring_epoch();
        if ctx.no_ring_epoch == epoch {
            return None;
        }
        let Some(mut w) = SESSION.acquire_ring(ctx.tid) else {
            ctx.no_ring_epoch = epoch;
            return None;
        };
        ctx.no_ring_epoch = u32::MAX;
        let ts = clock::now();
        let pid = sys::getpid();
        let mut count = CountingSink::default();
        let mut scratch = StreamState::default();
        encode_thread_start(&mut count, &mut scratch, pid, ctx.tid, ts, b"");
        let busy = Busy::enter(st);
        let stream = &mut ctx.stream;
        let ok = SESSION.write_streamed(&mut w, count.0, |sink| {
            encode_thread_start(sink, stream, pid, ctx.tid, ts, b"");
        });
        drop(busy);
        if !ok {
            return None;
        }
        ctx.writer = Some(w);
        // The slow part: the thread's name and, the first time, its stack bounds.
        let mut name = [0u8; 16];
        let n = name_of_thread(&mut name);
        write_name(st, ctx, &name[..n]);
        if ctx.stack_hi == 0 {
            // The stack is the mapping containing our own frame.
            let here = 0u64;
            let (lo, hi) = sys::mapping_containing(&here as *const u64 as u64).unwrap_or((0, 1));
            ctx.stack_lo = lo;
            ctx.stack_hi = hi;
            crate::register_thread_exit(p as *mut c_void);
        }
    }
    Some(p)
}

/// Writes a thread-name record.
fn write_name(st: &'static ThreadState, ctx: &mut ThreadCtx, name: &[u8]) {
    let _busy = Busy::enter(st);
    let Some(w) = ctx.writer.as_mut() else {
        return;
    };
    let mut count = CountingSink::default();
    encode_thread_name(&mut count, name);
    SESSION.write_streamed(w, count.0, |sink| encode_thread_name(sink, name));
}

/// The calling thread is exiting (its pthread-key destructor runs): writes its final name,
/// drains its signal queue and retires its context. The context and its ring stay in use
/// for what the thread still does (glibc releases thread memory after the key destructors);
/// the registry finishes them once the thread is gone (`finish_dead`).
///
/// # Safety
///
/// `ctx` must be the calling thread's context.
pub unsafe fn retire_thread(st: &'static ThreadState, ctx: *mut ThreadCtx) {
    st.depth.set(st.depth.get() + 1);
    // SAFETY: guaranteed by the caller.
    let c = unsafe { &mut *ctx };
    if c.writer
        .as_ref()
        .is_some_and(|w| w.generation == SESSION.generation())
    {
        let mut name = [0u8; 16];
        let n = name_of_thread(&mut name);
        write_name(st, c, &name[..n]);
        flush_nested(st, c);
    }
    // SAFETY: `ctx` is this thread's registered context.
    unsafe { REGISTRY.retire(ctx) };
    st.depth.set(st.depth.get() - 1);
}

/// Ends the recording of a thread that no longer exists: writes its end record, gives its
/// ring back to the collector and frees its context.
///
/// # Safety
///
/// `ctx` must be an unregistered context (from `Box::into_raw`) whose thread is gone.
pub(crate) unsafe fn finish_dead(ctx: *mut ThreadCtx) {
    // SAFETY: guaranteed by the caller.
    let mut ctx = unsafe { Box::from_raw(ctx) };
    if let Some(mut w) = ctx.writer.take()
        && w.generation == SESSION.generation()
    {
        let mut buf = EventBuf::new();
        ctx.stream.encode_thread_end(clock::now(), &mut buf);
        // The thread is gone: we are the ring's only writer now. An end record that cannot
        // be written (collector gone) loses no event.
        SESSION.write_event(&mut w, &buf);
        SESSION.release_ring(&w);
    }
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

/// Reads the queue's tail as a signal handler may have left it.
#[inline]
fn nested_tail(st: &ThreadState) -> usize {
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    st.nested_tail.get()
}

/// Writes the events signal handlers queued.
fn flush_nested(st: &'static ThreadState, ctx: &mut ThreadCtx) {
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
fn apply_nested(st: &'static ThreadState, ctx: &mut ThreadCtx, ev: &Nested) {
    if SESSION.flags() & FLAG_ONLINE != 0 {
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

/// Encodes an event with the thread's delta state and writes it, marking the thread busy
/// for signal handlers meanwhile.
fn emit(
    st: &'static ThreadState,
    ctx: &mut ThreadCtx,
    encode: impl FnOnce(&mut StreamState, &mut EventBuf),
) {
    let _busy = Busy::enter(st);
    let mut buf = EventBuf::new();
    encode(&mut ctx.stream, &mut buf);
    let written = match ctx.writer.as_mut() {
        Some(w) => SESSION.write_event(w, &buf),
        None => false,
    };
    if !written {
        SESSION.add_lost(LossCause::CollectorGone, 1);
    }
}

fn encode_nested(ev: &Nested, stream: &mut StreamState, buf: &mut EventBuf) {
    match ev {
        Nested::Alloc(a) => stream.encode_alloc(a, buf),
        Nested::Realloc(r) => stream.encode_realloc(r, buf),
        Nested::Free(f) => stream.encode_free(f, buf),
    }
}

/// Records an event of a signal handler that interrupted a hook: directly when the thread
/// is not busy (draining what was queued before it first, to keep the order), else into the
/// thread's queue for the interrupted hook to write.
fn queue_nested(st: &'static ThreadState, mut ev: Nested, regs: CallerRegs) {
    let p = st.ctx.get();
    if !p.is_null() && st.busy.get() == 0 && !crate::test_queue_nested() {
        // SAFETY: the interrupted code of this same thread is suspended while the handler
        // runs and is not in a busy section, so the context is consistent and unused.
        let ctx = unsafe { &mut *p };
        if ctx.writer.is_some() {
            flush_nested(st, ctx);
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
            return;
        }
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
            ts: clock::now(),
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
            ts: clock::now(),
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
    let ts = clock::now();
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

impl Active {
    fn ctx(&mut self) -> &mut ThreadCtx {
        // SAFETY: the context belongs to this thread and lives while the hook runs.
        unsafe { &mut *self.ctx }
    }

    /// Whether the session runs online.
    #[inline]
    pub fn online(&self) -> bool {
        SESSION.flags() & FLAG_ONLINE != 0
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
        if self.online() {
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

    /// Checks a pointer about to be released or reallocated in online mode; returns false
    /// (after recording the improper use) if it was never allocated.
    #[inline]
    pub fn check_live(
        &mut self,
        op: ImproperOp,
        ptr: *mut c_void,
        size: usize,
        regs: CallerRegs,
    ) -> bool {
        if !self.online() || ptr.is_null() {
            return true;
        }
        let live = {
            let _busy = Busy::enter(self.st);
            LIVE.contains(ptr as u64)
        };
        if live {
            return true;
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
        false
    }

    /// Records a release around the call of the real `free` (`release` performs it).
    pub fn free(&mut self, ptr: *mut c_void, regs: CallerRegs, release: impl FnOnce()) {
        let stack = if SESSION.flags() & FLAG_FREE_STACKS != 0 {
            self.capture(regs)
        } else {
            0
        };
        if self.online() && !ptr.is_null() {
            let _busy = Busy::enter(self.st);
            LIVE.remove(ptr as u64);
        }
        crate::leakcause::before_release(ptr as u64);
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
            crate::leakcause::before_release(old as u64);
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
        if self.online() {
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
        new
    }
}

/// Unwinds the caller's stack and returns its id (0, counted, when it cannot be had). The
/// caller marks the thread busy: the context's unwinder cache and frame buffer are in use.
fn capture(ctx: &mut ThreadCtx, regs: CallerRegs) -> u32 {
    let id = capture_inner(ctx, regs);
    if id == 0 {
        SESSION.add_stackless();
    }
    id
}

fn capture_inner(ctx: &mut ThreadCtx, regs: CallerRegs) -> u32 {
    let hi = stack_top(ctx, regs.sp);
    // The common case: a stack this thread just had. No lock needed.
    if let Some(id) = ctx.stacks.lookup(regs, hi, crate::modules::generation()) {
        return id;
    }
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
        let key = table_key(c.key);
        if let Some(id) = STACKS.lookup(key) {
            ctx.stacks.set_id(id);
            return id;
        }
        // A new stack. If it runs through code no module covers and the loader changed,
        // a library was loaded since the last scan: rescan and unwind again.
        if attempt == 0
            && ctx.stacks.frames().any(|f| map.find(f).is_none())
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
fn sample_stack(ctx: &mut ThreadCtx, regs: CallerRegs) -> Option<u32> {
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
fn define_stack(
    map: &crate::modules::ModuleMap,
    key: (u64, u64),
    frames: impl ExactSizeIterator<Item = u64> + Clone,
) -> Option<u32> {
    let id = STACKS.next_id();
    let normalized = frames.map(|f| match map.find(f) {
        Some(m) => StackFrame {
            module: m.id,
            offset: f - m.bias,
        },
        None => StackFrame {
            module: 0,
            offset: f,
        },
    });
    let mut count = CountingSink::default();
    encode_stack_def(&mut count, id, normalized.clone());
    SESSION
        .write_meta(count.0, |sink| encode_stack_def(sink, id, normalized))
        .then(|| {
            STACKS.insert(key, id);
            id
        })
}

/// The top of the stack `sp` is on: the thread's stack, or the alternate signal stack.
fn stack_top(ctx: &ThreadCtx, sp: u64) -> u64 {
    if sp >= ctx.stack_lo && sp < ctx.stack_hi {
        return ctx.stack_hi;
    }
    match sys::altstack_bounds() {
        Some((lo, hi)) if sp >= lo && sp < hi => hi,
        // Unknown stack (a coroutine, say): do not read beyond the caller's own frame.
        _ => sp,
    }
}
