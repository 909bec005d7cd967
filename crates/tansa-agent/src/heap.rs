//! The agent's own allocator.
//!
//! The agent is a Rust library living inside `malloc`. Its few heap objects (the module
//! list and unwind tables, per-thread unwinder caches) must not come from the allocator it
//! hooks: calling the real `malloc` from inside a hook can deadlock when a signal handler
//! interrupts it, and recursing into our own hooks would record the agent's allocations as
//! the program's. So the `#[global_allocator]` of this library takes memory straight from
//! `mmap`: power-of-two size classes up to 64 KiB carved from 1 MiB chunks, with free lists
//! under one spin lock, and larger blocks mapped individually.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ptr::null_mut;

use crate::spin::SpinLock;
use crate::sys;

const MIN_CLASS_SHIFT: u32 = 4;
const MAX_CLASS_SHIFT: u32 = 16;
const CLASSES: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;
const CHUNK: usize = 1 << 20;
const PAGE: usize = 4096;

struct State {
    free: [*mut u8; CLASSES],
    chunk_next: *mut u8,
    chunk_end: *mut u8,
}

/// The allocator; see the module documentation.
#[derive(Debug)]
pub struct AgentAllocator {
    lock: SpinLock,
    state: UnsafeCell<State>,
}

impl core::fmt::Debug for State {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("State")
    }
}

// SAFETY: `state` is only touched with `lock` held.
unsafe impl Sync for AgentAllocator {}

impl Default for AgentAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentAllocator {
    /// An empty allocator.
    pub const fn new() -> Self {
        AgentAllocator {
            lock: SpinLock::new(),
            state: UnsafeCell::new(State {
                free: [null_mut(); CLASSES],
                chunk_next: null_mut(),
                chunk_end: null_mut(),
            }),
        }
    }

    /// The lock, for the fork handlers.
    pub fn lock(&self) -> &SpinLock {
        &self.lock
    }
}

fn class_of(layout: Layout) -> Option<usize> {
    let need = layout.size().max(layout.align()).max(1 << MIN_CLASS_SHIFT);
    let shift = need.next_power_of_two().trailing_zeros();
    (shift <= MAX_CLASS_SHIFT && layout.align() <= PAGE).then(|| (shift - MIN_CLASS_SHIFT) as usize)
}

fn large_len(layout: Layout) -> usize {
    layout.size().div_ceil(PAGE) * PAGE
}

// SAFETY: blocks are disjoint, sized and aligned per their layout (classes are powers of
// two carved at multiples of their size from page-aligned chunks; large blocks are whole
// pages), and a block is reused only after `dealloc` returned it.
unsafe impl GlobalAlloc for AgentAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            if layout.align() > PAGE {
                return null_mut();
            }
            return sys::map_anonymous(large_len(layout)).unwrap_or(null_mut());
        };
        let size = 1usize << (class as u32 + MIN_CLASS_SHIFT);
        self.lock.lock();
        // SAFETY: the lock is held.
        let st = unsafe { &mut *self.state.get() };
        let head = st.free[class];
        let p = if !head.is_null() {
            // SAFETY: free blocks store the next free block in their first word.
            st.free[class] = unsafe { *(head as *mut *mut u8) };
            head
        } else {
            let mut start = (st.chunk_next as usize).next_multiple_of(size.min(PAGE));
            if st.chunk_next.is_null() || start + size > st.chunk_end as usize {
                match sys::map_anonymous(CHUNK) {
                    Some(c) => {
                        st.chunk_next = c;
                        // SAFETY: `c` maps CHUNK bytes.
                        st.chunk_end = unsafe { c.add(CHUNK) };
                        start = c as usize;
                    }
                    None => {
                        self.lock.unlock();
                        return null_mut();
                    }
                }
            }
            st.chunk_next = (start + size) as *mut u8;
            start as *mut u8
        };
        self.lock.unlock();
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            // SAFETY: large blocks are whole mappings of `large_len` bytes.
            unsafe { sys::unmap(ptr, large_len(layout)) };
            return;
        };
        self.lock.lock();
        // SAFETY: the lock is held; `ptr` is a block of this class no longer in use.
        unsafe {
            let st = &mut *self.state.get();
            *(ptr as *mut *mut u8) = st.free[class];
            st.free[class] = ptr;
        }
        self.lock.unlock();
    }
}
