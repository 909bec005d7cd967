//! CPU sampling inside the process: the fallback of `tansa sample` where `perf_event_open`
//! is not permitted.
//!
//! Each thread gets a POSIX timer on its own CPU-time clock that sends it `SIGPROF` every
//! period; the handler unwinds the interrupted stack (the first frame is the interrupted
//! instruction) and records a `Sample`. POSIX timers, unlike `setitimer`, are deleted by
//! `execve` and not inherited by `fork`, so a freshly exec'd image (whose handler does not
//! exist yet) is never killed by a pending `SIGPROF`; the child of a `fork` re-arms its timer,
//! and new threads arm theirs in a trampoline (`pthread_create` is interposed).
//!
//! A thread that ends between two expiries of its timer leaves a partial period that no
//! sample stands for (and the kernel checks CPU-time timers only at its tick, so a thread
//! shorter than a tick may get no sample at all). That time is not dropped silently: each
//! thread counts the periods signalled to it, and when it ends (or the process exits) the
//! CPU time beyond them is added to the session's `unsampled_ns`, which reports state.
//! Threads still running when the process exits never end by themselves: each also keeps
//! its CPU time at arming and its periods in a slot of a process-wide table, and the exit
//! reads their CPU clocks and counts them. Whoever empties a slot (the thread ending, or
//! the exit) counts that thread, so none is counted twice.
//!
//! The handler takes no lock that the interrupted code could hold: when the interrupted
//! thread is inside the agent (depth, busy or internal), the sample is counted as lost. It
//! never scans the loader's list either (the interrupted code may be changing it): code in a
//! module the map does not know yet asks the next ordinary hook call to rescan.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::{sys, thread};

static SAMPLING: AtomicBool = AtomicBool::new(false);
static PERIOD_NS: AtomicU64 = AtomicU64::new(0);
static RESCAN_WANTED: AtomicBool = AtomicBool::new(false);

/// Every running thread with a timer has a slot (see [`slot_of`]) where the exit finds
/// its CPU time at arming and its periods: the slot of thread id `tid` is `tid` itself,
/// since no two running threads of a process share an id and ids stay below the kernel's
/// `PID_MAX_LIMIT` (2^22 on 64-bit). Slots come in chunks mapped when a thread first needs
/// one, so a process pays only for the ranges of ids its threads have: no thread count
/// leaves a thread out (an earlier fixed table of 8192 slots left the unsampled time of
/// every further thread running at the exit uncounted, and unsaid).
const TID_LIMIT: usize = 1 << 22;
/// Slots per chunk (24 KiB).
const CHUNK_SLOTS: usize = 1024;
const CHUNKS: usize = TID_LIMIT / CHUNK_SLOTS;
const CHUNK_BYTES: usize = CHUNK_SLOTS * core::mem::size_of::<Slot>();
/// A slot's `tid` while its thread fills it in.
const CLAIMING: u32 = u32::MAX;

/// A running thread's sampling state, for the exit.
struct Slot {
    /// Its thread id; 0 for a free slot.
    tid: AtomicU32,
    /// Its CPU time when its timer was armed.
    armed: AtomicU64,
    /// The periods signalled to it since.
    periods: AtomicU64,
}

/// The mapped chunks (null where no thread has had a slot yet).
static CHUNK: [AtomicPtr<Slot>; CHUNKS] = [const { AtomicPtr::new(core::ptr::null_mut()) }; CHUNKS];
/// Threads that got no slot (a chunk could not be mapped): at the exit, those still
/// running are not counted, and the exit says how many there may be.
static SLOTLESS: AtomicU64 = AtomicU64::new(0);

/// The slot of thread id `tid` (mapping its chunk if `map`), if there is one.
fn slot_of(tid: u32, map: bool) -> Option<&'static Slot> {
    let (chunk, at) = (tid as usize / CHUNK_SLOTS, tid as usize % CHUNK_SLOTS);
    let cell = CHUNK.get(chunk)?;
    let mut base = cell.load(Ordering::Acquire);
    if base.is_null() {
        if !map {
            return None;
        }
        let fresh = sys::map_anonymous(CHUNK_BYTES)? as *mut Slot;
        base = match cell.compare_exchange(
            core::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(theirs) => {
                // SAFETY: `fresh` was mapped above and never published.
                unsafe { sys::unmap(fresh as *mut u8, CHUNK_BYTES) };
                theirs
            }
        };
    }
    // SAFETY: a published chunk is a mapping of CHUNK_SLOTS zero-initialised slots (all
    // zeros is a valid `Slot`), never unmapped; `at < CHUNK_SLOTS`.
    Some(unsafe { &*base.add(at) })
}

/// The slots of every mapped chunk.
fn slots() -> impl Iterator<Item = &'static Slot> {
    CHUNK.iter().flat_map(|cell| {
        let base = cell.load(Ordering::Acquire);
        let chunk: &'static [Slot] = if base.is_null() {
            &[]
        } else {
            // SAFETY: as in `slot_of`.
            unsafe { core::slice::from_raw_parts(base, CHUNK_SLOTS) }
        };
        chunk.iter()
    })
}

/// A thread's `timer_slot` when it has a timer but no slot.
const NO_SLOT: usize = usize::MAX;

/// Takes the slot of the calling thread `tid`, armed at CPU time `armed`: `tid` plus one,
/// or [`NO_SLOT`]. A slot still holding `tid` belonged to an earlier thread with
/// this id that ended without its key destructors (nothing counts it any more): it is
/// taken over.
fn take_slot(tid: u32, armed: u64) -> usize {
    let Some(slot) = slot_of(tid, true) else {
        SLOTLESS.fetch_add(1, Ordering::Relaxed);
        return NO_SLOT;
    };
    slot.tid.store(CLAIMING, Ordering::Release);
    slot.armed.store(armed, Ordering::Relaxed);
    slot.periods.store(0, Ordering::Relaxed);
    slot.tid.store(tid, Ordering::Release);
    tid as usize + 1
}

/// Whether the agent samples (and records no heap events).
#[inline]
pub fn is_sampling() -> bool {
    SAMPLING.load(Ordering::Relaxed)
}

/// Asks the next ordinary hook call to bring the module map up to date.
pub fn want_rescan() {
    RESCAN_WANTED.store(true, Ordering::Relaxed);
}

/// Whether a rescan was asked for (and clears the request).
#[inline]
pub fn take_rescan_request() -> bool {
    RESCAN_WANTED.load(Ordering::Relaxed) && RESCAN_WANTED.swap(false, Ordering::Relaxed)
}

/// Installs the handler and arms the calling thread's timer at `hz` samples per second of
/// its CPU time. Returns false if the handler cannot be installed.
pub fn start(hz: u64) -> bool {
    let period = 1_000_000_000 / hz.clamp(1, 100_000);
    PERIOD_NS.store(period, Ordering::Relaxed);
    // SAFETY: a zeroed sigaction with a valid handler and flags is a valid argument.
    let ok = unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGPROF, &sa, core::ptr::null_mut()) == 0
    };
    if ok {
        SAMPLING.store(true, Ordering::Release);
        arm_current_thread();
    }
    ok
}

/// Creates and starts the calling thread's sampling timer.
pub fn arm_current_thread() {
    if !is_sampling() {
        return;
    }
    let st = thread::current();
    // SAFETY: a zeroed sigevent, filled for SIGEV_THREAD_ID delivery of SIGPROF to this
    // thread; timer_create writes the new timer's id into `id`.
    unsafe {
        let mut ev: libc::sigevent = core::mem::zeroed();
        ev.sigev_notify = libc::SIGEV_THREAD_ID;
        ev.sigev_signo = libc::SIGPROF;
        ev.sigev_notify_thread_id = sys::gettid() as c_int;
        let mut id: libc::timer_t = core::ptr::null_mut();
        if libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut ev, &mut id) != 0 {
            return;
        }
        let period = PERIOD_NS.load(Ordering::Relaxed) as i64;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: period / 1_000_000_000,
                tv_nsec: period % 1_000_000_000,
            },
            it_value: libc::timespec {
                tv_sec: period / 1_000_000_000,
                tv_nsec: period % 1_000_000_000,
            },
        };
        let armed = sys::thread_cpu_ns();
        st.cpu_armed.set(armed);
        st.periods.set(0);
        st.timer_slot.set(take_slot(sys::gettid(), armed));
        libc::timer_settime(id, 0, &spec, core::ptr::null_mut());
        // Plus one: the first timer of a process has the id 0.
        st.timer.set((id as usize).wrapping_add(1));
    }
    crate::register_thread_exit(core::ptr::null_mut());
}

/// Counts the calling thread's CPU time that no sample stands for (since its timer was
/// armed or this was last called: the time beyond the periods signalled), and starts
/// counting afresh.
pub fn account_unsampled() {
    let st = thread::current();
    if st.timer.get() == 0 {
        return;
    }
    // The thread's slot goes: whoever empties it counts the thread. If the exit emptied it
    // first (this thread ran on while another one exited the process), it was counted.
    let taken = st.timer_slot.replace(0);
    if taken == NO_SLOT {
        SLOTLESS.fetch_sub(1, Ordering::Relaxed);
    } else if let Some(slot) = taken
        .checked_sub(1)
        .and_then(|tid| slot_of(tid as u32, false))
    {
        let tid = slot.tid.swap(0, Ordering::AcqRel);
        if tid == 0 || tid == CLAIMING {
            st.cpu_armed.set(sys::thread_cpu_ns());
            st.periods.set(0);
            return;
        }
    }
    let now = sys::thread_cpu_ns();
    let period = PERIOD_NS.load(Ordering::Relaxed);
    let covered = st.periods.get().saturating_mul(period);
    let spent = now.saturating_sub(st.cpu_armed.get());
    st.cpu_armed.set(now);
    st.periods.set(0);
    let unsampled = spent.saturating_sub(covered);
    if unsampled > 0 {
        crate::session::SESSION.add_unsampled(unsampled);
    }
}

/// Deletes the calling thread's timer, if it has one, counting its unsampled time.
pub fn disarm_current_thread() {
    account_unsampled();
    let st = thread::current();
    let id = st.timer.replace(0);
    if id != 0 {
        // SAFETY: `id - 1` is a timer this thread created and has not deleted.
        unsafe { libc::timer_delete((id - 1) as libc::timer_t) };
    }
}

/// At the process's exit (from the exiting thread): counts the unsampled CPU time of every
/// other thread that still runs (what [`account_unsampled`] counts for a thread that ends).
pub fn account_running_threads() {
    if !is_sampling() {
        return;
    }
    let me = sys::gettid();
    let period = PERIOD_NS.load(Ordering::Relaxed);
    for slot in slots() {
        let tid = slot.tid.load(Ordering::Acquire);
        if tid == 0
            || tid == CLAIMING
            || tid == me
            || slot
                .tid
                .compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        // A thread that is gone (it ended without running its key destructors) has no
        // clock left to read.
        let Some(now) = sys::thread_cpu_ns_of(tid) else {
            continue;
        };
        let spent = now.saturating_sub(slot.armed.load(Ordering::Relaxed));
        let covered = slot.periods.load(Ordering::Relaxed).saturating_mul(period);
        let unsampled = spent.saturating_sub(covered);
        if unsampled > 0 {
            crate::session::SESSION.add_unsampled(unsampled);
        }
    }
    let slotless = SLOTLESS.load(Ordering::Relaxed);
    if slotless > 0 {
        sys::Line::new()
            .text(b"tansa: ")
            .num(slotless)
            .text(b" thread(s) still running at the exit had no sampling slot (memory could not be mapped): their last partial periods, less than a period each, are not counted as unsampled")
            .write_stderr();
    }
}

/// Forgets a timer inherited by a forked child (timers are not inherited; the id is stale),
/// and the slots of the parent's threads, which do not run in the child.
pub fn forget_inherited_timer() {
    let st = thread::current();
    st.timer.set(0);
    st.timer_slot.set(0);
    if !is_sampling() {
        return;
    }
    SLOTLESS.store(0, Ordering::Relaxed);
    for slot in slots() {
        // Only slots in use: a store to an untouched page would make it resident.
        if slot.tid.load(Ordering::Relaxed) != 0 {
            slot.tid.store(0, Ordering::Relaxed);
        }
    }
}

extern "C" fn on_sigprof(_sig: c_int, info: *mut libc::siginfo_t, uctx: *mut c_void) {
    let saved = sys::errno();
    // The kernel checks CPU-time timers at its tick: periods that expired since the last
    // signal are reported as overruns, and the sample stands for all of them.
    let mut weight = 1u32;
    if !info.is_null() {
        // SAFETY: `info` is the kernel's siginfo; for a POSIX timer (SI_TIMER) the union holds
        // the timer id and the overrun count at byte offsets 16 and 20 on x86-64.
        unsafe {
            if (*info).si_code == libc::SI_TIMER {
                let overrun = *((info as *const u8).add(20) as *const i32);
                weight += overrun.max(0) as u32;
                let st = thread::current();
                st.periods.set(st.periods.get() + u64::from(weight));
                if let Some(slot) = Some(st.timer_slot.get())
                    .filter(|&s| s != NO_SLOT)
                    .and_then(|s| s.checked_sub(1))
                    .and_then(|tid| slot_of(tid as u32, false))
                {
                    slot.periods.fetch_add(u64::from(weight), Ordering::Relaxed);
                }
            }
        }
    }
    if !uctx.is_null() {
        // SAFETY: with SA_SIGINFO the third argument is the interrupted context.
        let gregs = unsafe { &(*(uctx as *const libc::ucontext_t)).uc_mcontext.gregs };
        let ip = gregs[libc::REG_RIP as usize] as u64;
        let sp = gregs[libc::REG_RSP as usize] as u64;
        let bp = gregs[libc::REG_RBP as usize] as u64;
        crate::recorder::sample(ip, sp, bp, weight);
    }
    sys::set_errno(saved);
}

/// What a new thread runs first: arm its timer, then the program's start routine.
struct Trampoline {
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    let st = thread::current();
    st.depth.set(st.depth.get() + 1);
    // SAFETY: `p` is the Box made in `pthread_create` below, handed over to this thread.
    let t = unsafe { Box::from_raw(p as *mut Trampoline) };
    let (start, arg) = (t.start, t.arg);
    drop(t);
    st.depth.set(st.depth.get() - 1);
    arm_current_thread();
    let r = start(arg);
    disarm_current_thread();
    r
}

/// Exported `pthread_create`: when sampling, new threads first arm their timer.
///
/// # Safety
///
/// As for C `pthread_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread_out: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    // A thread created by a library constructor may come before the agent's own
    // constructor: start the agent now, so that the real function is known and, when
    // sampling, the new thread gets its timer.
    let _ = crate::state();
    if !is_sampling() {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { crate::real::pthread_create(thread_out, attr, start, arg) };
    }
    let st = thread::current();
    st.depth.set(st.depth.get() + 1);
    let boxed = Box::into_raw(Box::new(Trampoline { start, arg }));
    st.depth.set(st.depth.get() - 1);
    // SAFETY: forwarding, with our trampoline and its argument in place of the program's.
    let r =
        unsafe { crate::real::pthread_create(thread_out, attr, trampoline, boxed as *mut c_void) };
    if r != 0 {
        st.depth.set(st.depth.get() + 1);
        // SAFETY: the thread was not created; the box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
        st.depth.set(st.depth.get() - 1);
    }
    r
}
