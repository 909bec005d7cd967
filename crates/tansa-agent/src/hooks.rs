//! The exported malloc family and `dlclose`.
//!
//! The real allocator functions never call back into these hooks: glibc's allocator makes
//! no internal calls through its public entry points, except `reallocarray`, which calls
//! `realloc`; so `reallocarray` is implemented here as an overflow check and a call of the
//! real `realloc`. A hook entered while another hook of the same thread runs is therefore
//! always a signal handler's call.
//!
//! Each exported function is a three-instruction naked stub that passes the caller's stack
//! pointer (pointing at the return address) and frame pointer as extra arguments and jumps to
//! the Rust implementation, which then returns straight to the caller. Unwinding therefore
//! starts at the caller itself: no agent frame appears in any stack, whatever the compiler
//! does with the implementation's frame.

use core::ffi::{c_int, c_void};

use tansa_wire::event::{AllocOp, ImproperOp};

use crate::bytesample;
use crate::real::{self, Func};
use crate::recorder::{
    Live, Mode, enter, lost_alloc, lost_realloc, lost_release, nested_alloc, nested_free,
    nested_realloc,
};
use crate::sys;
use crate::unwind::CallerRegs;

#[inline]
fn regs(entry_sp: *const u64, bp: u64) -> CallerRegs {
    CallerRegs {
        // SAFETY: at the entry of an exported hook, the stack pointer points at the return
        // address pushed by the caller's `call`.
        ra: unsafe { *entry_sp },
        sp: entry_sp as u64 + 8,
        bp,
    }
}

macro_rules! entry_stub {
    // One to three C arguments; the stub appends (entry sp, rbp) after them.
    ($name:ident, $implementation:ident, 1) => {
        entry_stub!(@emit $name, $implementation, "mov rsi, rsp", "mov rdx, rbp");
    };
    ($name:ident, $implementation:ident, 2) => {
        entry_stub!(@emit $name, $implementation, "mov rdx, rsp", "mov rcx, rbp");
    };
    ($name:ident, $implementation:ident, 3) => {
        entry_stub!(@emit $name, $implementation, "mov rcx, rsp", "mov r8, rbp");
    };
    (@emit $name:ident, $implementation:ident, $sp:literal, $bp:literal) => {
        #[doc = concat!("Exported `", stringify!($name), "`; see the module documentation.")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub extern "C" fn $name() {
            core::arch::naked_asm!($sp, $bp, "jmp {imp}", imp = sym $implementation);
        }
    };
}

entry_stub!(malloc, malloc_impl, 1);
entry_stub!(free, free_impl, 1);
entry_stub!(calloc, calloc_impl, 2);
entry_stub!(realloc, realloc_impl, 2);
entry_stub!(reallocarray, reallocarray_impl, 3);
entry_stub!(memalign, memalign_impl, 2);
entry_stub!(aligned_alloc, aligned_alloc_impl, 2);
entry_stub!(posix_memalign, posix_memalign_impl, 3);
entry_stub!(valloc, valloc_impl, 1);
entry_stub!(pvalloc, pvalloc_impl, 1);

fn page_size() -> usize {
    4096
}

extern "C" fn malloc_impl(size: usize, sp: *const u64, bp: u64) -> *mut c_void {
    if !bytesample::take(size) {
        // SAFETY: forwarding the caller's arguments to the real malloc.
        return unsafe { real::malloc(size) };
    }
    match enter() {
        // SAFETY: forwarding the caller's arguments to the real malloc.
        Mode::Pass => unsafe { real::malloc(size) },
        Mode::Lost(st) => {
            // SAFETY: as above.
            let p = unsafe { real::malloc(size) };
            lost_alloc(st, p);
            p
        }
        Mode::Nested(st) => {
            // SAFETY: as above.
            let p = unsafe { real::malloc(size) };
            if !p.is_null() {
                nested_alloc(st, AllocOp::Malloc, p, size, 0, regs(sp, bp));
            }
            p
        }
        Mode::Record(mut a) => {
            // SAFETY: as above.
            let p = unsafe { real::malloc(size) };
            if !p.is_null() {
                a.alloc(AllocOp::Malloc, p, size, 0, regs(sp, bp));
            }
            p
        }
    }
}

extern "C" fn calloc_impl(n: usize, size: usize, sp: *const u64, bp: u64) -> *mut c_void {
    let total = n.saturating_mul(size);
    if !bytesample::take(total) {
        // SAFETY: forwarding the caller's arguments to the real calloc.
        return unsafe { real::calloc(n, size) };
    }
    match enter() {
        // SAFETY: forwarding the caller's arguments to the real calloc.
        Mode::Pass => unsafe { real::calloc(n, size) },
        Mode::Lost(st) => {
            // SAFETY: as above.
            let p = unsafe { real::calloc(n, size) };
            lost_alloc(st, p);
            p
        }
        Mode::Nested(st) => {
            // SAFETY: as above.
            let p = unsafe { real::calloc(n, size) };
            if !p.is_null() {
                nested_alloc(st, AllocOp::Calloc, p, total, 0, regs(sp, bp));
            }
            p
        }
        Mode::Record(mut a) => {
            // SAFETY: as above.
            let p = unsafe { real::calloc(n, size) };
            if !p.is_null() {
                a.alloc(AllocOp::Calloc, p, total, 0, regs(sp, bp));
            }
            p
        }
    }
}

/// Shared body of the memalign family.
fn aligned(
    op: AllocOp,
    align: usize,
    size: usize,
    sp: *const u64,
    bp: u64,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    if !bytesample::take(size) {
        return call();
    }
    match enter() {
        Mode::Pass => call(),
        Mode::Lost(st) => {
            let p = call();
            lost_alloc(st, p);
            p
        }
        Mode::Nested(st) => {
            let p = call();
            if !p.is_null() {
                nested_alloc(st, op, p, size, align, regs(sp, bp));
            }
            p
        }
        Mode::Record(mut a) => {
            let p = call();
            if !p.is_null() {
                a.alloc(op, p, size, align, regs(sp, bp));
            }
            p
        }
    }
}

extern "C" fn memalign_impl(align: usize, size: usize, sp: *const u64, bp: u64) -> *mut c_void {
    // SAFETY: forwarding the caller's arguments.
    aligned(AllocOp::Memalign, align, size, sp, bp, || unsafe {
        real::memalign_family(Func::Memalign, align, size)
    })
}

extern "C" fn aligned_alloc_impl(
    align: usize,
    size: usize,
    sp: *const u64,
    bp: u64,
) -> *mut c_void {
    // SAFETY: forwarding the caller's arguments.
    aligned(AllocOp::AlignedAlloc, align, size, sp, bp, || unsafe {
        real::memalign_family(Func::AlignedAlloc, align, size)
    })
}

extern "C" fn valloc_impl(size: usize, sp: *const u64, bp: u64) -> *mut c_void {
    // SAFETY: forwarding the caller's argument.
    aligned(AllocOp::Valloc, page_size(), size, sp, bp, || unsafe {
        real::memalign_family(Func::Valloc, page_size(), size)
    })
}

extern "C" fn pvalloc_impl(size: usize, sp: *const u64, bp: u64) -> *mut c_void {
    // SAFETY: forwarding the caller's argument.
    aligned(AllocOp::Pvalloc, page_size(), size, sp, bp, || unsafe {
        real::memalign_family(Func::Pvalloc, page_size(), size)
    })
}

extern "C" fn posix_memalign_impl(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    sp: *const u64,
    bp: u64,
) -> c_int {
    let mut result = 0;
    let call = || {
        // SAFETY: forwarding the caller's arguments; `out` is the caller's out-pointer.
        result = unsafe { real::posix_memalign(out, align, size) };
        if result == 0 {
            // SAFETY: posix_memalign succeeded and stored the block in `*out`.
            unsafe { *out }
        } else {
            core::ptr::null_mut()
        }
    };
    aligned(AllocOp::PosixMemalign, align, size, sp, bp, call);
    result
}

extern "C" fn free_impl(p: *mut c_void, sp: *const u64, bp: u64) {
    if p.is_null() {
        // `free(NULL)` does nothing: it is passed on (an allocator behind us may count it)
        // but neither recorded nor counted as a release. glibc alone makes dozens of them
        // at every thread exit.
        // SAFETY: forwarding the caller's (null) pointer.
        unsafe { real::free(p) };
        return;
    }
    if real::is_bootstrap(p) {
        return;
    }
    if !bytesample::release_recorded(p as u64) {
        // Sampled mode, and not a sampled block.
        // SAFETY: forwarding the caller's pointer to the real free.
        unsafe { real::free(p) };
        return;
    }
    match enter() {
        // SAFETY: forwarding the caller's pointer to the real free.
        Mode::Pass => unsafe { real::free(p) },
        Mode::Lost(st) => {
            lost_release(st, p);
            // SAFETY: as above.
            unsafe { real::free(p) };
        }
        Mode::Nested(st) => {
            // SAFETY: as above.
            unsafe { real::free(p) };
            nested_free(st, p, regs(sp, bp));
        }
        Mode::Record(mut a) => {
            let r = regs(sp, bp);
            match a.check_live(ImproperOp::Free, p, 0, r) {
                // SAFETY: as above.
                Live::Recorded => a.free(p, r, || unsafe { real::free(p) }),
                // SAFETY: as above.
                Live::Unrecorded => a.unrecorded_free(p, || unsafe { real::free(p) }),
                Live::Refused => {}
            }
        }
    }
}

/// Shared body of `realloc` and `reallocarray`.
fn reallocate(
    array: bool,
    p: *mut c_void,
    size: usize,
    sp: *const u64,
    bp: u64,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    if bytesample::rate() != 0 {
        let old_sampled = !p.is_null() && bytesample::release_recorded(p as u64);
        let new_sampled = size != 0 && bytesample::take(size);
        if !new_sampled {
            if !old_sampled {
                return call();
            }
            // Only the release half concerns a sampled block: it is recorded as a free.
            return released_by_realloc(p, sp, bp, call);
        }
    }
    match enter() {
        Mode::Pass => call(),
        Mode::Lost(st) => lost_realloc(st, p, size, call),
        Mode::Nested(st) => {
            let q = call();
            if !q.is_null() || size == 0 {
                nested_realloc(st, array, p, q, size, regs(sp, bp));
            }
            q
        }
        Mode::Record(mut a) => {
            let r = regs(sp, bp);
            if real::is_bootstrap(p) {
                // A bootstrap block leaves the arena: to the program it is a new block.
                let q = call();
                if !q.is_null() {
                    a.alloc(AllocOp::Malloc, q, size, 0, r);
                }
                return q;
            }
            match a.check_live(ImproperOp::Realloc, p, size, r) {
                Live::Recorded => a.realloc(array, p, size, r, call),
                Live::Unrecorded => a.unrecorded_realloc(p, size, call),
                Live::Refused => {
                    sys::set_errno(libc::ENOMEM);
                    core::ptr::null_mut()
                }
            }
        }
    }
}

/// Sampled mode: a `realloc` of a sampled block whose new block is not sampled, recorded as
/// the release of the old block. (Should the real `realloc` fail, the old block, still
/// valid, is then no longer followed: it counts as released.)
fn released_by_realloc(
    p: *mut c_void,
    sp: *const u64,
    bp: u64,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    match enter() {
        Mode::Pass => call(),
        Mode::Lost(st) => {
            lost_release(st, p);
            call()
        }
        Mode::Nested(st) => {
            let q = call();
            nested_free(st, p, regs(sp, bp));
            q
        }
        Mode::Record(mut a) => {
            let mut q = core::ptr::null_mut();
            a.free(p, regs(sp, bp), || q = call());
            q
        }
    }
}

extern "C" fn realloc_impl(p: *mut c_void, size: usize, sp: *const u64, bp: u64) -> *mut c_void {
    // SAFETY: forwarding the caller's arguments to the real realloc.
    reallocate(false, p, size, sp, bp, || unsafe { real::realloc(p, size) })
}

extern "C" fn reallocarray_impl(
    p: *mut c_void,
    n: usize,
    size: usize,
    sp: *const u64,
    bp: u64,
) -> *mut c_void {
    let total = n.saturating_mul(size);
    // SAFETY: forwarding the caller's arguments to the real reallocarray.
    reallocate(true, p, total, sp, bp, || unsafe {
        real::reallocarray(p, n, size)
    })
}

/// Exported `dlclose`: closes the library, then brings the module map up to date so that
/// no unwinder consults the unloaded module.
///
/// # Safety
///
/// As for C `dlclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    // SAFETY: forwarding the caller's handle.
    let r = unsafe { real::dlclose(handle) };
    if matches!(crate::state(), crate::State::Ready) && crate::thread::current().internal.get() == 0
    {
        crate::modules::rescan();
    }
    r
}
