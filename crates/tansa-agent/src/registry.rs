//! Every thread context of the process, so that the rings of threads that are gone are
//! reclaimed and reused.
//!
//! A thread's context (its ring, delta-encoder state and unwinder caches) is created at its
//! first recorded event and registered here as *live*. When the thread exits, the agent's
//! pthread-key destructor *retires* it: the context and its ring stay the thread's, because
//! glibc still releases thread memory after the key destructors have run
//! (`__libc_thread_freeres`, the dynamic TLS blocks of a detached thread), and those calls
//! are recorded in the same stream like any other. A retired context is *reaped* (its end
//! record written, its ring handed back to the collector, its memory freed) once the kernel
//! says its thread no longer exists: `tgkill(pid, tid, 0)` fails with `ESRCH` only after the
//! thread has run its last instruction, so a reaped context is never touched again.
//!
//! Retired contexts are checked whenever a thread creates its context (a thread that starts
//! usually follows one that ended). Live contexts of threads that exited without running
//! key destructors (raw `SYS_exit`, a thread whose first event came after its destructors)
//! are checked when no free ring is left, and whenever the number of contexts has doubled
//! since the last such sweep, so memory stays proportional to the threads alive.
//!
//! The lists are intrusive (links inside [`ThreadCtx`]) under one spin lock, taken only when
//! a thread starts or ends and by the fork handlers. Code holding it never waits for another
//! thread and never runs on a signal handler's behalf (the hooks of a thread that is inside
//! the agent never reach it).

use core::cell::UnsafeCell;
use core::ptr::null_mut;

use crate::recorder::{ThreadCtx, finish_dead};
use crate::spin::SpinLock;
use crate::sys;

/// Links of a context in one of the registry's lists.
#[derive(Debug)]
pub struct Link {
    prev: *mut ThreadCtx,
    next: *mut ThreadCtx,
    /// Which list the context is on.
    list: ListId,
}

impl Link {
    /// Links of a context not yet registered.
    pub const fn new() -> Link {
        Link {
            prev: null_mut(),
            next: null_mut(),
            list: ListId::None,
        }
    }
}

impl Default for Link {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListId {
    None,
    Live,
    Retired,
}

struct Lists {
    live: *mut ThreadCtx,
    retired: *mut ThreadCtx,
    /// Contexts on either list.
    count: usize,
    /// `count` after the last sweep of the live list.
    swept_at: usize,
}

/// The registry of thread contexts; see the module documentation.
pub struct Registry {
    lock: SpinLock,
    lists: UnsafeCell<Lists>,
}

impl core::fmt::Debug for Registry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Registry")
    }
}

// SAFETY: `lists` and every link of a registered context are only touched with `lock` held.
unsafe impl Sync for Registry {}

/// The process's registry.
pub static REGISTRY: Registry = Registry {
    lock: SpinLock::new(),
    lists: UnsafeCell::new(Lists {
        live: null_mut(),
        retired: null_mut(),
        count: 0,
        swept_at: 0,
    }),
};

impl Registry {
    /// The lock, for the fork handlers.
    pub fn lock(&self) -> &SpinLock {
        &self.lock
    }

    fn with<R>(&self, f: impl FnOnce(&mut Lists) -> R) -> R {
        self.lock.lock();
        // SAFETY: the lock is held.
        let r = f(unsafe { &mut *self.lists.get() });
        self.lock.unlock();
        r
    }

    /// Registers a new context as live. Reaps retired contexts of dead threads first (and
    /// sweeps the live list when it has doubled).
    ///
    /// # Safety
    ///
    /// `ctx` must be a context made with `Box::into_raw`, not registered yet, whose memory
    /// is released only through this registry.
    pub unsafe fn insert(&self, ctx: *mut ThreadCtx) {
        let sweep = self.with(|l| l.count >= 64 && l.count >= 2 * l.swept_at.max(1));
        self.reap(sweep);
        self.with(|l| {
            // SAFETY: guaranteed by the caller; the lock is held.
            unsafe { push(&mut l.live, ctx, ListId::Live) };
            l.count += 1;
        });
    }

    /// Moves the calling thread's context to the retired list (its thread is exiting).
    ///
    /// # Safety
    ///
    /// `ctx` must be a registered context of the calling thread.
    pub unsafe fn retire(&self, ctx: *mut ThreadCtx) {
        self.with(|l| {
            // SAFETY: registered contexts are valid; the lock is held.
            unsafe {
                if (*ctx).link.list == ListId::Live {
                    unlink(&mut l.live, ctx);
                    push(&mut l.retired, ctx, ListId::Retired);
                }
            }
        });
        // Its ring will be claimable once the thread is gone and reaped.
        crate::session::SESSION.bump_ring_epoch();
    }

    /// Reaps the contexts of every thread that is gone, live or retired. Returns how many.
    pub fn reap_all(&self) -> usize {
        self.reap(true)
    }

    /// Reaps the retired contexts of threads that are gone and, with `sweep`, the live ones
    /// too. Their end records are written and their rings given back outside the lock.
    fn reap(&self, sweep: bool) -> usize {
        let pid = sys::getpid();
        let mut dead: *mut ThreadCtx = null_mut();
        let n = self.with(|l| {
            let mut n = 0;
            // SAFETY: the lock is held; every listed context is valid.
            unsafe {
                n += collect_dead(&mut l.retired, pid, &mut dead);
                if sweep {
                    n += collect_dead(&mut l.live, pid, &mut dead);
                }
            }
            l.count -= n;
            if sweep {
                l.swept_at = l.count;
            }
            n
        });
        while !dead.is_null() {
            // SAFETY: `dead` holds contexts unlinked above, of threads that no longer exist:
            // nobody else can reach them.
            let next = unsafe { (*dead).link.next };
            // SAFETY: as above; `finish_dead` takes ownership.
            unsafe { finish_dead(dead) };
            dead = next;
        }
        n
    }

    /// In a forked child: forgets (and frees) every context but `keep`. Their threads do not
    /// exist in the child and their rings belong to the parent's session, which the child
    /// never touches.
    ///
    /// # Safety
    ///
    /// Only in the child of `fork`, before any other thread exists, with the agent's
    /// allocator usable.
    pub unsafe fn forget_others(&self, keep: *mut ThreadCtx) {
        self.lock.reset();
        let mut others: *mut ThreadCtx = null_mut();
        self.with(|l| {
            for head in [&mut l.live, &mut l.retired] {
                let mut p = *head;
                while !p.is_null() {
                    // SAFETY: listed contexts are valid.
                    let next = unsafe { (*p).link.next };
                    if p != keep {
                        // SAFETY: as above; the lock is held.
                        unsafe {
                            unlink(head, p);
                            (*p).link.next = others;
                        }
                        others = p;
                        l.count -= 1;
                    }
                    p = next;
                }
            }
            l.swept_at = l.count;
        });
        while !others.is_null() {
            // SAFETY: unlinked above; made with `Box::into_raw`; no thread uses it.
            let next = unsafe { (*others).link.next };
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(others) });
            others = next;
        }
    }
}

/// Pushes `ctx` at the head of `head`'s list.
///
/// # Safety
///
/// The registry lock is held, `ctx` is valid and on no list.
unsafe fn push(head: &mut *mut ThreadCtx, ctx: *mut ThreadCtx, list: ListId) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        (*ctx).link = Link {
            prev: null_mut(),
            next: *head,
            list,
        };
        if !head.is_null() {
            (**head).link.prev = ctx;
        }
    }
    *head = ctx;
}

/// Unlinks `ctx` from the list `head` points to.
///
/// # Safety
///
/// The registry lock is held and `ctx` is on that list.
unsafe fn unlink(head: &mut *mut ThreadCtx, ctx: *mut ThreadCtx) {
    // SAFETY: guaranteed by the caller; neighbours on the list are valid.
    unsafe {
        let Link { prev, next, .. } = (*ctx).link;
        if prev.is_null() {
            *head = next;
        } else {
            (*prev).link.next = next;
        }
        if !next.is_null() {
            (*next).link.prev = prev;
        }
        (*ctx).link = Link::new();
    }
}

/// Moves the contexts of `head`'s list whose thread is gone onto the singly linked list
/// `dead` (through `link.next`). Returns how many.
///
/// # Safety
///
/// The registry lock is held.
unsafe fn collect_dead(head: &mut *mut ThreadCtx, pid: u32, dead: &mut *mut ThreadCtx) -> usize {
    let mut n = 0;
    let mut p = *head;
    while !p.is_null() {
        // SAFETY: listed contexts are valid while the lock is held.
        let (next, tid) = unsafe { ((*p).link.next, (*p).tid()) };
        if !sys::thread_alive(pid, tid) {
            // SAFETY: `p` is on this list; the lock is held.
            unsafe {
                unlink(head, p);
                (*p).link.next = *dead;
            }
            *dead = p;
            n += 1;
        }
        p = next;
    }
    n
}
