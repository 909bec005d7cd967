//! tansa's in-process heap agent (`libtansa_agent.so`).
//!
//! `tansa record` starts the measured program with this library in `LD_PRELOAD`. The agent
//! interposes `malloc`, `calloc`, `realloc`, `reallocarray`, `free`, `memalign`,
//! `posix_memalign`, `aligned_alloc`, `valloc` and `pvalloc` (C++ `new`/`delete` reach them
//! through libstdc++), forwards each call to the next definition (normally glibc's), and
//! records it with a timestamp, the thread, the address, the size and the call stack. Stacks
//! are unwound in-process from DWARF CFI (`.eh_frame`, with framehop), so code without frame
//! pointers unwinds correctly; each distinct stack is sent once. Records go into
//! shared-memory rings that the collector drains from another process (`tansa-wire`), so a
//! crash or a `SIGKILL` of the program loses nothing the hooks had already recorded.
//!
//! # Invariants of the hook path
//!
//! These hold for every hooked call, and each has a test in `tansa-cli/tests/agent_*.rs`:
//!
//! 1. **No allocation through the hooked allocator.** The agent's own heap objects come from
//!    its own `mmap`-backed allocator ([`heap`]); its records go to shared memory; it reads
//!    `/proc` with raw system calls into fixed buffers. The only calls into the real
//!    allocator are the forwarded program calls. (Test: a spy allocator preloaded behind the
//!    agent sees exactly the program's calls, each recorded.)
//! 2. **No lock the program might hold.** The hook path takes only the agent's own spin
//!    locks ([`spin`]), never while calling the program or the allocator; readers of the
//!    module map wait a bounded time and record the event without a stack rather than wait
//!    longer. No pthread cancellation point is called (system calls go through `syscall(2)`).
//! 3. **Re-entrancy is decided without allocation or TLS lookups.** A per-thread depth in
//!    static TLS, reached from `%fs:0` ([`thread`]), tells a signal handler that interrupted
//!    a hook (its event is recorded without a stack, queued, and written when the interrupted
//!    hook finishes) from an ordinary call; the real allocator never calls back into the
//!    hooks (see [`hooks`]). (Test: `malloc` and `free` from a signal handler firing
//!    continuously during an allocation loop: every call is recorded.)
//! 4. **`fork` is safe in any state.** `pthread_atfork` handlers hold every agent lock across
//!    `fork`; the child starts its own session (its own stream) and re-announces the module
//!    map. The children of `vfork` and `posix_spawn`, which run no such handler, are named
//!    to the collector by the parent ([`vfork`], [`posix_spawn`]). (Tests: `fork` while
//!    other threads allocate, child records its own events; `sh -c` and `posix_spawn`
//!    running a static program.)
//! 5. **Modules may come and go.** The module map follows `dlopen`/`dlclose`; unwind data of
//!    libraries that can be unloaded is copied, so unwinding never reads unmapped memory.
//!    (Test: a `dlopen`/`dlclose` storm while other threads allocate inside the library.)
//! 6. **Threads may exit at any time, in any number.** A thread keeps its context and ring
//!    through its exit (glibc frees thread memory after the key destructors run); the
//!    context is reaped and the ring reused once the kernel says the thread is gone
//!    ([`registry`]). Segments grow to tens of thousands of rings. (Tests: threads exiting
//!    while others allocate, frees in TLS destructors; 100,000 short-lived threads one after
//!    another and 8 at a time, and 10,000 alive at once, recorded exactly.)
//! 7. **Nothing is lost on a crash.** Records are published one at a time in shared memory;
//!    the collector drains them after the process died. (Test: `SIGKILL` and `SIGSEGV`
//!    midway.)
//! 8. **A loss is never silent.** An event that cannot be recorded (no ring, a full
//!    signal-handler queue, a collector that is gone) is counted by cause in the session
//!    header, which the recording carries; a process that outlives its collector says so
//!    on stderr; a process that cannot reach it at all says so too. (Tests: each cause
//!    forced, `tests/agent_losses.rs`.)
//! 9. **The inherited descriptor is never trusted by number.** Its identity is checked
//!    before anything is sent ([`reach`]); a program's own socket at that number receives
//!    nothing. (Test: a program that reuses the number, forks and execs.)
//! 10. **Time order is causal order.** A release's timestamp is earlier than that of the
//!     allocation, in any thread, that reuses its address ([`clock`]), so the collector's
//!     merge by time never sees an address handed out twice. (Test: blocks released by one
//!     thread and handed out again to another, after a stretch with one thread only.)
//! 11. **The agent brings no library of its own.** It needs only libc and the dynamic
//!     loader: every process it is preloaded into would map, relocate and initialise any
//!     other (`libgcc_s` alone, with its `cpuid` constructor, cost 90 µs per `exec`). The
//!     unwinder the standard library refers to is linked in from `libgcc_eh.a`, private
//!     to the agent (`build.rs`), and `log` comes from the `libm` crate. (Test: the
//!     mappings of a program under the agent, and the agent's exported symbols.)
//!
//! `free(NULL)` does nothing and is neither recorded nor counted.
//!
//! Layout: [`hooks`] (the exported entry stubs) call [`recorder`] (entering a hook and
//! writing its events; per-thread [`recorder::ThreadCtx`] in `recorder/context.rs`,
//! signal-handler events in `recorder/nested.rs`, stacks and CPU samples in
//! `recorder/capture.rs`), which writes through [`session`] (the shared segments and
//! rings) and unwinds with [`unwind`]; [`registry`] reclaims the contexts of exited
//! threads; [`reach`] finds the collector; [`sampler`] is the `SIGPROF` sampler; [`sys`]
//! holds every raw system call.

pub mod bytesample;
pub mod clock;
pub mod heap;
pub mod hooks;
pub mod leakcause;
pub mod leakcheck;
pub mod livetable;
pub mod modules;
pub mod reach;
pub mod real;
pub mod recorder;
pub mod registry;
pub mod sampler;
pub mod segdir;
pub mod session;
pub mod spin;
pub mod stacks;
pub mod sys;
pub mod thread;
pub mod unwind;

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use tansa_wire::control::{
    ENV_CLOCK, ENV_FD, ENV_FREE_STACKS, ENV_LEAK_CAUSE, ENV_LEAK_CHECK, ENV_MAX_FRAMES, ENV_ONLINE,
    ENV_RING_KB, ENV_SAMPLE_HZ, ENV_SAMPLE_RATE, ENV_SEGMENT_DIR, Spawn,
};
use tansa_wire::layout::{
    EXIT_IMMEDIATE, EXIT_NORMAL, FLAG_FREE_STACKS, FLAG_LEAK_CAUSE, FLAG_LEAK_CHECK, FLAG_ONLINE,
    FLAG_PYTHON_MALLOC, FLAG_SAMPLING,
};

pub use recorder::ThreadCtx;

#[global_allocator]
static ALLOC: heap::AgentAllocator = heap::AgentAllocator::new();

const UNINIT: u32 = 0;
const INITIALIZING: u32 = 1;
const READY: u32 = 2;
const PASSTHROUGH: u32 = 3;

static STATE: AtomicU32 = AtomicU32::new(UNINIT);
static INIT_THREAD: AtomicUsize = AtomicUsize::new(0);
static KEY: AtomicU32 = AtomicU32::new(u32::MAX);
static MAX_FRAMES: AtomicUsize = AtomicUsize::new(unwind::MAX_FRAMES);
static TEST_QUEUE_NESTED: AtomicBool = AtomicBool::new(false);
static TEST_THREAD_STACKS: AtomicBool = AtomicBool::new(false);

/// Test setting (`TANSA_TEST_QUEUE_NESTED=1`): signal-handler events always go through the
/// per-thread queue, as when they interrupt the agent itself, so that tests can overflow it
/// deterministically.
#[inline]
pub fn test_queue_nested() -> bool {
    TEST_QUEUE_NESTED.load(Ordering::Relaxed)
}

/// Test setting (`TANSA_TEST_THREAD_STACKS=1`): each thread defines the allocation stacks
/// it meets under ids of its own, as two threads do that meet a new stack at the same
/// moment, so that tests can make that race happen at will.
#[inline]
pub fn test_thread_stacks() -> bool {
    TEST_THREAD_STACKS.load(Ordering::Relaxed)
}

/// Whether hooks record.
#[derive(Debug, Clone, Copy)]
pub enum State {
    /// Recording.
    Ready,
    /// Forwarding only.
    Pass,
}

/// The agent's state, initializing it on first use.
#[inline]
pub fn state() -> State {
    match STATE.load(Ordering::Acquire) {
        READY => State::Ready,
        PASSTHROUGH => State::Pass,
        _ => slow_state(),
    }
}

#[cold]
fn slow_state() -> State {
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => return State::Ready,
            PASSTHROUGH => return State::Pass,
            UNINIT => {
                if STATE
                    .compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    INIT_THREAD.store(sys::thread_pointer(), Ordering::Release);
                    let ok = initialize();
                    STATE.store(if ok { READY } else { PASSTHROUGH }, Ordering::Release);
                    return if ok { State::Ready } else { State::Pass };
                }
            }
            _ => {
                // Initialization in progress: re-entrant calls from the initializing thread
                // pass through; other threads wait for it.
                if INIT_THREAD.load(Ordering::Acquire) == sys::thread_pointer() {
                    return State::Pass;
                }
                sys::yield_now();
            }
        }
    }
}

/// The configured frame limit.
pub fn max_frames() -> usize {
    MAX_FRAMES.load(Ordering::Relaxed)
}

fn env_flag(name: &core::ffi::CStr, default: bool) -> bool {
    match sys::getenv(name) {
        Some(b"1") | Some(b"yes") | Some(b"true") => true,
        Some(b"0") | Some(b"no") | Some(b"false") => false,
        _ => default,
    }
}

fn cstr(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap_or_default()
}

fn initialize() -> bool {
    if !real::resolve() {
        sys::write_stderr(b"tansa agent: cannot find the real malloc/free; not recording\n");
        return false;
    }
    thread::init_fast_access();
    let Some(fd) = sys::getenv(&cstr(ENV_FD)).and_then(sys::parse_u64) else {
        // Preloaded without a collector (e.g. the variable was cleared): just forward.
        return false;
    };
    reach::CONTACT.configure(fd as i32);
    clock::set_tsc(sys::getenv(&cstr(ENV_CLOCK)) == Some(b"tsc"));
    segdir::set(sys::getenv(&cstr(ENV_SEGMENT_DIR)));
    let ring_kb = sys::getenv(&cstr(ENV_RING_KB))
        .and_then(sys::parse_u64)
        .filter(|k| k.is_power_of_two() && (4..=262_144).contains(k))
        .unwrap_or(2048);
    if let Some(n) = sys::getenv(&cstr(ENV_MAX_FRAMES)).and_then(sys::parse_u64) {
        MAX_FRAMES.store((n as usize).clamp(1, unwind::MAX_FRAMES), Ordering::Relaxed);
    }
    let mut flags = 0;
    if env_flag(&cstr(ENV_ONLINE), false) {
        flags |= FLAG_ONLINE;
    }
    if env_flag(&cstr(ENV_FREE_STACKS), true) {
        flags |= FLAG_FREE_STACKS;
    }
    if env_flag(&cstr(ENV_LEAK_CAUSE), false) {
        flags |= FLAG_LEAK_CAUSE;
    }
    if env_flag(&cstr(ENV_LEAK_CHECK), false) {
        flags |= FLAG_LEAK_CHECK;
    }
    // Said to the collector, which warns about a CPython interpreter that keeps its small
    // objects in its own arenas (pymalloc) unless told otherwise here.
    if matches!(
        sys::getenv(c"PYTHONMALLOC"),
        Some(b"malloc") | Some(b"malloc_debug")
    ) {
        flags |= FLAG_PYTHON_MALLOC;
    }
    let sample_hz = sys::getenv(&cstr(ENV_SAMPLE_HZ))
        .and_then(sys::parse_u64)
        .filter(|&hz| hz > 0);
    if sample_hz.is_some() {
        flags |= FLAG_SAMPLING;
    }
    // Sampled heap mode; not with online mode, whose live table holds every block.
    if flags & FLAG_ONLINE == 0
        && let Some(rate) = sys::getenv(&cstr(ENV_SAMPLE_RATE))
            .and_then(sys::parse_u64)
            .filter(|&r| r > 0)
    {
        bytesample::set_rate(rate);
    }
    // Test settings, to force the causes of loss that a test cannot provoke on demand.
    let ring_limit = sys::getenv(c"TANSA_TEST_MAX_RINGS")
        .and_then(sys::parse_u64)
        .map_or(0, |n| n.clamp(1, u64::from(u32::MAX)) as u32);
    TEST_QUEUE_NESTED.store(
        env_flag(c"TANSA_TEST_QUEUE_NESTED", false),
        Ordering::Relaxed,
    );
    TEST_THREAD_STACKS.store(
        env_flag(c"TANSA_TEST_THREAD_STACKS", false),
        Ordering::Relaxed,
    );
    if let Some(n) = sys::getenv(c"TANSA_TEST_FILE_SEGMENTS").and_then(sys::parse_u64) {
        segdir::set_file_limit(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let settings = session::Settings {
        listener: fd as i32,
        flags,
        ring_size: (ring_kb * 1024) as u32,
        ring_count: 8,
        ring_limit,
    };
    if !session::SESSION.start(settings) {
        return false;
    }
    modules::rescan();
    // The C library's signal-return trampoline, for unwinding a handler's stack through
    // the signal frame into the code it interrupted (`unwind`, "Signal frames").
    if let Some(trampoline) = sys::libc_signal_trampoline() {
        unwind::set_sigreturn_trampoline(trampoline);
    }
    {
        let _r = thread::Internal::enter();
        if let Some(key) = sys::key_create(thread_exit) {
            KEY.store(key, Ordering::Release);
        }
        sys::atfork(fork_prepare, fork_parent, fork_child);
        // Learn the exit code of `exit` and of a return from `main` (glibc calls `exit`
        // internally there, which no interposed symbol sees).
        sys::on_exit(on_exit_handler);
    }
    if let Some(hz) = sample_hz {
        let _r = thread::Internal::enter();
        sampler::start(hz);
    }
    true
}

/// Arranges for `ctx` to be finished when the calling thread exits.
pub(crate) fn register_thread_exit(ctx: *mut c_void) {
    let key = KEY.load(Ordering::Acquire);
    if key == u32::MAX {
        return;
    }
    // glibc keeps the values of the first 32 keys in the thread descriptor: setting one never
    // allocates. A later key may allocate a second-level array; that allocation is ours.
    if key < 32 {
        sys::key_set(key, ctx as usize);
    } else {
        let _r = thread::Internal::enter();
        sys::key_set(key, ctx as usize);
    }
}

unsafe extern "C" fn thread_exit(value: *mut c_void) {
    sampler::disarm_current_thread();
    let st = thread::current();
    let ctx = st.ctx.get();
    if ctx.is_null() || ctx as *mut c_void != value {
        return;
    }
    // SAFETY: `ctx` is this exiting thread's context.
    unsafe { recorder::retire_thread(st, ctx) };
}

extern "C" fn on_exit_handler(code: c_int, _arg: *mut c_void) {
    // The child of `vfork` (which should have called `_exit`) shares its parent's memory
    // and this thread's static TLS: what it noted or checked would be the parent's. It
    // only tells the parent that it ended without executing a program.
    let st = thread::current();
    if st.vfork_return.get() != 0 {
        st.vfork_child_ended.set(true);
        return;
    }
    sampler::account_unsampled();
    sampler::account_running_threads();
    if session::SESSION.flags() & FLAG_LEAK_CHECK != 0 {
        leakcheck::at_exit();
    }
    session::SESSION.note_exit(EXIT_NORMAL, code);
}

/// Exported `_exit`: notes the exit code (the process skips its exit handlers, so this is
/// the agent's only chance to see it), then ends the process as glibc's `_exit` does.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(code: c_int) -> ! {
    // The child of `vfork` (whose `exec` failed, or that never meant to exec) shares its
    // parent's memory and this thread's static TLS: what it noted would be the parent's.
    // It only tells the parent, through that shared TLS, that it ended without executing
    // a program (so the parent does not name it as a child that ran one unrecorded).
    let st = thread::current();
    if st.vfork_return.get() != 0 {
        st.vfork_child_ended.set(true);
        sys::exit_group(code)
    }
    sampler::account_unsampled();
    sampler::account_running_threads();
    session::SESSION.note_exit(EXIT_IMMEDIATE, code);
    session::SESSION.warn_if_orphaned();
    sys::exit_group(code)
}

/// Exported `vfork`: the real `vfork`, and then, in the parent, a word to the collector
/// about the child ([`session::Session::note_spawned`]), as for [`posix_spawn`]. The child
/// of `vfork` shares the parent's memory until it calls `execve` or `_exit` and runs no
/// `pthread_atfork` handler: the collector hears of it only when the program it runs loads
/// the agent. A static or set-uid program it ran went unrecorded without a word (`sh -c`
/// runs its commands so: dash uses `vfork`); named here, it is listed as unrecorded.
/// A child that ends with `_exit` without executing anything (a failed `exec`, or a
/// `vfork` used only to run a few async-signal-safe calls) ran no program: it says so to
/// its parent through the thread's static TLS, which they share, and the parent tells the
/// collector ([`Spawn::VforkNoExec`]), which lists nothing for it.
///
/// A function that calls `vfork` cannot return normally: the child returns first, through
/// the same stack, and overwrites the frame the parent returns through later. So this is a
/// stub without a frame, as sanitizers do it: it keeps the caller's return address in the
/// thread's static TLS (which the child shares but leaves alone: it may only call `execve`
/// or `_exit`), calls the real `vfork` with the caller's stack, and jumps back to the
/// caller. The parent resumes only once the child executed another program or ended, so
/// by then the child's program can be read from `/proc`.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub extern "C" fn vfork() {
    core::arch::naked_asm!(
        // Keep the return address; the stack is then as the caller left it (16-byte
        // aligned), so calls made from here see the usual alignment.
        "pop rdi",
        "call {keep}",
        "call {real}",
        "call rax",
        // rax: the child's pid in the parent, 0 in the child, -1 on failure.
        "push rax",
        "sub rsp, 8",
        "mov rdi, rax",
        "call {after}",
        "add rsp, 8",
        "pop rdx",
        "mov rcx, rax",
        "mov rax, rdx",
        "jmp rcx",
        keep = sym vfork_keep_return,
        real = sym vfork_real,
        after = sym vfork_after,
    );
}

/// [`vfork`]: keeps the caller's return address.
extern "C" fn vfork_keep_return(ra: u64) {
    thread::current().vfork_return.set(ra);
}

/// [`vfork`]: the address of the real `vfork` (or of `fork`, if it cannot be found).
extern "C" fn vfork_real() -> usize {
    real::address(real::Func::Vfork).unwrap_or(libc::fork as *const () as usize)
}

/// [`vfork`]: returns the caller's return address; in the parent, first tells the collector
/// of the child.
extern "C" fn vfork_after(pid: libc::pid_t) -> u64 {
    let st = thread::current();
    let ra = st.vfork_return.get();
    // Set while the child runs (see `_exit`); the parent clears it once resumed.
    let mut ran_no_program = false;
    if pid != 0 {
        st.vfork_return.set(0);
        ran_no_program = st.vfork_child_ended.replace(false);
    }
    if pid > 0 && matches!(state(), State::Ready) {
        let mut program = [0u8; 256];
        let program = sys::proc_program(pid as u32, &mut program);
        let how = if ran_no_program {
            Spawn::VforkNoExec
        } else {
            Spawn::Vfork
        };
        session::SESSION.note_spawned(pid as u32, program, how);
    }
    ra
}

/// Exported `posix_spawn`: the real one, then, for a child started, a word to the collector
/// ([`session::Session::note_spawned`]). glibc starts the child as `vfork` does and runs no
/// `pthread_atfork` handler, so the collector hears of the child only when its program
/// runs the agent; told here, it lists a child that does not as unrecorded.
///
/// # Safety
///
/// As for C `posix_spawn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const core::ffi::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut core::ffi::c_char,
    envp: *const *mut core::ffi::c_char,
) -> core::ffi::c_int {
    // SAFETY: forwarding the caller's arguments, with the caller's guarantees.
    unsafe { spawn(real::Func::PosixSpawn, pid, path, actions, attr, argv, envp) }
}

/// Exported `posix_spawnp`: as [`posix_spawn`], the program found on `PATH`.
///
/// # Safety
///
/// As for C `posix_spawnp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const core::ffi::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut core::ffi::c_char,
    envp: *const *mut core::ffi::c_char,
) -> core::ffi::c_int {
    // SAFETY: as above.
    unsafe {
        spawn(
            real::Func::PosixSpawnp,
            pid,
            file,
            actions,
            attr,
            argv,
            envp,
        )
    }
}

/// The body of [`posix_spawn`] and [`posix_spawnp`].
///
/// # Safety
///
/// As for C `posix_spawn`.
unsafe fn spawn(
    which: real::Func,
    pid: *mut libc::pid_t,
    path: *const core::ffi::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut core::ffi::c_char,
    envp: *const *mut core::ffi::c_char,
) -> core::ffi::c_int {
    let Some(real) = real::posix_spawn_fn(which) else {
        return libc::ENOSYS;
    };
    // The caller may pass no pid; the child's is needed here.
    let mut child: libc::pid_t = 0;
    let out = if pid.is_null() { &mut child } else { pid };
    // SAFETY: forwarding the caller's arguments (and a valid pid pointer).
    let r = unsafe { real(out, path, actions, attr, argv, envp) };
    if r == 0 && matches!(state(), State::Ready) && !path.is_null() {
        // SAFETY: `out` was written by the successful call; `path` is the caller's
        // NUL-terminated string (checked non-null).
        let (child, path) = unsafe { (*out, core::ffi::CStr::from_ptr(path)) };
        if let Ok(child) = u32::try_from(child) {
            session::SESSION.note_spawned(child, path, Spawn::PosixSpawn);
        }
    }
    r
}

/// Exported `_Exit`: the same as [`_exit`].
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn _Exit(code: c_int) -> ! {
    _exit(code)
}

/// Locks held across `fork` (taken in this order, released in reverse). The forking thread
/// counts as inside the agent meanwhile, so a signal handler never waits for them.
unsafe extern "C" fn fork_prepare() {
    if !matches!(state(), State::Ready) {
        return;
    }
    let st = thread::current();
    st.depth.set(st.depth.get() + 1);
    registry::REGISTRY.lock().lock();
    core::mem::forget(modules::MODULES.write());
    for l in session::SESSION.locks() {
        l.lock();
    }
    for l in livetable::locks() {
        l.lock();
    }
    ALLOC.lock().lock();
}

unsafe extern "C" fn fork_parent() {
    if !matches!(state(), State::Ready) {
        return;
    }
    ALLOC.lock().unlock();
    for l in livetable::locks() {
        l.unlock();
    }
    for l in session::SESSION.locks() {
        l.unlock();
    }
    // SAFETY: `fork_prepare` took the write lock on this thread.
    unsafe { modules::MODULES.force_write_unlock() };
    registry::REGISTRY.lock().unlock();
    let st = thread::current();
    st.depth.set(st.depth.get() - 1);
}

unsafe extern "C" fn fork_child() {
    if !matches!(state(), State::Ready) {
        return;
    }
    ALLOC.lock().reset();
    for l in livetable::locks() {
        l.reset();
    }
    for l in session::SESSION.locks() {
        l.reset();
    }
    modules::MODULES.reset();
    // Only the forking thread exists in the child: the other threads' contexts go.
    let st = thread::current();
    // SAFETY: in the child of fork, before any other thread exists; the allocator's lock
    // was reset above.
    unsafe { registry::REGISTRY.forget_others(st.ctx.get()) };
    // The child is a new process: a new session, new stack ids, the same modules.
    stacks::STACKS.reset();
    if session::SESSION.restart_in_child()
        && let Some(map) = modules::MODULES.try_read_for(1_000_000)
    {
        map.announce_all();
    }
    // Timers are not inherited by a child: the forking thread (the child's only one) arms a
    // new one.
    sampler::forget_inherited_timer();
    sampler::arm_current_thread();
    st.depth.set(st.depth.get() - 1);
}

extern "C" fn on_load() {
    let _ = state();
}

extern "C" fn on_unload() {
    session::SESSION.mark_exit();
    session::SESSION.warn_if_orphaned();
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = on_load;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = on_unload;
