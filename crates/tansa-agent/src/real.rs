//! The real allocator: the next definitions of the malloc family after this library.
//!
//! They are found with `dlsym(RTLD_NEXT, ...)` during initialization, so the program keeps
//! whatever allocator it would have used without us (glibc's, or jemalloc/tcmalloc linked
//! into it). `dlsym` itself may call `calloc`/`malloc` before the real functions are
//! known; those calls are served from a small static bootstrap arena whose blocks are never
//! freed (a `free` of one is ignored; a `realloc` of one copies it out).

use core::ffi::{CStr, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sys;

/// `malloc`
pub type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
/// `free`
pub type FreeFn = unsafe extern "C" fn(*mut c_void);
/// `calloc`
pub type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
/// `realloc`
pub type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
/// `memalign` and `aligned_alloc`
pub type MemalignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
/// `posix_memalign`
pub type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int;
/// `dlclose`
pub type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// A thread's start routine.
pub type StartFn = extern "C" fn(*mut c_void) -> *mut c_void;
/// `pthread_create`
pub type PthreadCreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartFn,
    *mut c_void,
) -> c_int;

/// Indices into the function table.
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
pub enum Func {
    /// `malloc`
    Malloc,
    /// `free`
    Free,
    /// `calloc`
    Calloc,
    /// `realloc`
    Realloc,
    /// `reallocarray`
    ReallocArray,
    /// `memalign`
    Memalign,
    /// `posix_memalign`
    PosixMemalign,
    /// `aligned_alloc`
    AlignedAlloc,
    /// `valloc`
    Valloc,
    /// `pvalloc`
    Pvalloc,
    /// `dlclose`
    Dlclose,
    /// `pthread_create`
    PthreadCreate,
    /// `posix_spawn`
    PosixSpawn,
    /// `posix_spawnp`
    PosixSpawnp,
    /// `vfork`
    Vfork,
}

const NAMES: [&CStr; 15] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"reallocarray",
    c"memalign",
    c"posix_memalign",
    c"aligned_alloc",
    c"valloc",
    c"pvalloc",
    c"dlclose",
    c"pthread_create",
    c"posix_spawn",
    c"posix_spawnp",
    c"vfork",
];

static TABLE: [AtomicUsize; 15] = [const { AtomicUsize::new(0) }; 15];

/// Resolves every real function. Returns false if `malloc`, `free`, `calloc` or `realloc`
/// cannot be found (the agent then cannot work at all).
pub fn resolve() -> bool {
    for (slot, name) in TABLE.iter().zip(NAMES) {
        let p = sys::dlsym_next(name);
        slot.store(p as usize, Ordering::Release);
    }
    [Func::Malloc, Func::Free, Func::Calloc, Func::Realloc]
        .iter()
        .all(|&f| TABLE[f as usize].load(Ordering::Acquire) != 0)
}

/// Whether the real functions are known.
pub fn resolved() -> bool {
    TABLE[Func::Free as usize].load(Ordering::Acquire) != 0
}

fn get(f: Func) -> usize {
    TABLE[f as usize].load(Ordering::Acquire)
}

/// The address of real function `f`, looked up now if the agent has not resolved its
/// functions yet (a library constructor that runs before the agent's own); `None` if it
/// cannot be found.
pub fn address(f: Func) -> Option<usize> {
    let mut p = get(f);
    if p == 0 {
        p = sys::dlsym_next(NAMES[f as usize]) as usize;
        TABLE[f as usize].store(p, Ordering::Release);
    }
    (p != 0).then_some(p)
}

/// Calls the real `malloc` (or the bootstrap arena before resolution).
///
/// # Safety
///
/// As for C `malloc`.
pub unsafe fn malloc(size: usize) -> *mut c_void {
    let f = get(Func::Malloc);
    if f == 0 {
        return bootstrap_alloc(size, 16);
    }
    // SAFETY: `f` is the address of the real malloc, found by dlsym.
    unsafe { core::mem::transmute::<usize, MallocFn>(f)(size) }
}

/// Calls the real `free`; ignores bootstrap blocks.
///
/// # Safety
///
/// As for C `free`.
pub unsafe fn free(p: *mut c_void) {
    if is_bootstrap(p) {
        return;
    }
    let f = get(Func::Free);
    if f != 0 {
        // SAFETY: `f` is the real free.
        unsafe { core::mem::transmute::<usize, FreeFn>(f)(p) }
    }
}

/// Calls the real `calloc` (or the zeroed bootstrap arena).
///
/// # Safety
///
/// As for C `calloc`.
pub unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    let f = get(Func::Calloc);
    if f == 0 {
        return match n.checked_mul(size) {
            Some(total) => bootstrap_alloc(total, 16),
            None => core::ptr::null_mut(),
        };
    }
    // SAFETY: `f` is the real calloc.
    unsafe { core::mem::transmute::<usize, CallocFn>(f)(n, size) }
}

/// Calls the real `realloc`; moves bootstrap blocks out of the arena.
///
/// # Safety
///
/// As for C `realloc`.
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if is_bootstrap(p) {
        // SAFETY: `p` is a bootstrap block; its size is stored just before it.
        let old = unsafe { bootstrap_size(p) };
        // SAFETY: plain allocation.
        let q = unsafe { malloc(size) };
        if !q.is_null() {
            // SAFETY: both blocks are at least `min(old, size)` bytes.
            unsafe { core::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
        }
        return q;
    }
    let f = get(Func::Realloc);
    if f == 0 {
        return bootstrap_alloc(size, 16);
    }
    // SAFETY: `f` is the real realloc.
    unsafe { core::mem::transmute::<usize, ReallocFn>(f)(p, size) }
}

/// `reallocarray` as an overflow check and the real `realloc` (glibc's own `reallocarray`
/// would call back into our `realloc` hook).
///
/// # Safety
///
/// As for C `reallocarray`.
pub unsafe fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded contract.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            sys::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// Calls the real function of the memalign family identified by `which` (`Memalign`,
/// `AlignedAlloc`, `Valloc`, `Pvalloc`).
///
/// # Safety
///
/// As for the C function.
pub unsafe fn memalign_family(which: Func, align: usize, size: usize) -> *mut c_void {
    let f = get(which);
    match which {
        Func::Valloc | Func::Pvalloc => {
            if f == 0 {
                return bootstrap_alloc(size, 4096);
            }
            // SAFETY: `f` is the real valloc/pvalloc, which takes one size argument.
            unsafe { core::mem::transmute::<usize, MallocFn>(f)(size) }
        }
        _ => {
            if f == 0 {
                return bootstrap_alloc(size, align);
            }
            // SAFETY: `f` is the real memalign/aligned_alloc.
            unsafe { core::mem::transmute::<usize, MemalignFn>(f)(align, size) }
        }
    }
}

/// Calls the real `posix_memalign`.
///
/// # Safety
///
/// As for C `posix_memalign`.
pub unsafe fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    let f = get(Func::PosixMemalign);
    if f == 0 {
        let p = bootstrap_alloc(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: `out` is the caller's out-pointer.
        unsafe { *out = p };
        return 0;
    }
    // SAFETY: `f` is the real posix_memalign.
    unsafe { core::mem::transmute::<usize, PosixMemalignFn>(f)(out, align, size) }
}

/// Calls the real `dlclose`.
///
/// # Safety
///
/// As for C `dlclose`.
pub unsafe fn dlclose(handle: *mut c_void) -> c_int {
    let f = get(Func::Dlclose);
    if f == 0 {
        return -1;
    }
    // SAFETY: `f` is the real dlclose.
    unsafe { core::mem::transmute::<usize, DlcloseFn>(f)(handle) }
}

/// Calls the real `pthread_create`.
///
/// # Safety
///
/// As for C `pthread_create`.
pub unsafe fn pthread_create(
    out: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartFn,
    arg: *mut c_void,
) -> c_int {
    let Some(f) = address(Func::PthreadCreate) else {
        return libc::EAGAIN;
    };
    // SAFETY: `f` is the real pthread_create.
    unsafe { core::mem::transmute::<usize, PthreadCreateFn>(f)(out, attr, start, arg) }
}

/// `posix_spawn` and `posix_spawnp`
pub type PosixSpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const core::ffi::c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut core::ffi::c_char,
    *const *mut core::ffi::c_char,
) -> c_int;

/// The real `posix_spawn` (`Func::PosixSpawn`) or `posix_spawnp`; `None` if it cannot be
/// found.
pub fn posix_spawn_fn(f: Func) -> Option<PosixSpawnFn> {
    // SAFETY: the address of the real function of that name, whose type is `PosixSpawnFn`.
    address(f).map(|p| unsafe { core::mem::transmute::<usize, PosixSpawnFn>(p) })
}

const ARENA_SIZE: usize = 256 * 1024;

#[repr(C, align(4096))]
struct Arena([u8; ARENA_SIZE]);

static ARENA: ArenaCell = ArenaCell(core::cell::UnsafeCell::new(Arena([0; ARENA_SIZE])));
static ARENA_NEXT: AtomicUsize = AtomicUsize::new(0);

struct ArenaCell(core::cell::UnsafeCell<Arena>);
// SAFETY: disjoint ranges of the arena are handed out by an atomic bump pointer.
unsafe impl Sync for ArenaCell {}

fn arena_base() -> usize {
    ARENA.0.get() as usize
}

/// Whether `p` points into the bootstrap arena.
pub fn is_bootstrap(p: *mut c_void) -> bool {
    let p = p as usize;
    p >= arena_base() && p < arena_base() + ARENA_SIZE
}

unsafe fn bootstrap_size(p: *mut c_void) -> usize {
    // SAFETY: every bootstrap block is preceded by its size.
    unsafe { *((p as *mut usize).sub(1)) }
}

fn bootstrap_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(16).next_power_of_two();
    loop {
        let cur = ARENA_NEXT.load(Ordering::Relaxed);
        let start = (arena_base() + cur + 8).next_multiple_of(align);
        let end = start + size;
        if end > arena_base() + ARENA_SIZE {
            sys::write_stderr(b"tansa: bootstrap arena exhausted during initialization\n");
            return core::ptr::null_mut();
        }
        if ARENA_NEXT
            .compare_exchange(cur, end - arena_base(), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: `start - 8 .. end` lies inside the arena and was just reserved; the
            // arena is zero-initialised and never reused, so calloc semantics hold.
            unsafe { *((start - 8) as *mut usize) = size };
            return start as *mut c_void;
        }
    }
}
