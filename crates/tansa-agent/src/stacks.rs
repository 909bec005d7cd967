//! Stack deduplication: each distinct call stack is sent to the collector once.
//!
//! A stack is identified by a 128-bit key of its return addresses (see `unwind::key_extend`;
//! it includes the module-map epoch, so that addresses reused by a different module after an unload form a new stack).
//! The table maps hashes to stack ids without locks: open addressing over levels of growing
//! size, each slot claimed with a compare-and-swap. A slot becomes visible (its id non-zero)
//! only after the stack's definition was written to the meta ring, so every event that
//! refers to an id is written after that id's definition. Two threads meeting the same new
//! stack at the same moment may both define it under different ids; the reader gives every
//! event the first of them (`tansa_analysis::memory::model::StackAliases`). Waiting here
//! for the other thread's id instead would make a hook wait on another thread.

use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sys;

const LEVELS: usize = 20;
const FIRST_SHIFT: u32 = 12;
const MAX_PROBES: usize = 64;

#[repr(C)]
struct Slot {
    lo: AtomicU64,
    hi: AtomicU64,
    id: AtomicU32,
    _pad: u32,
}

#[repr(C)]
struct Level {
    mask: usize,
    used: AtomicUsize,
    bytes: usize,
}

impl Level {
    fn slots(&self) -> &[Slot] {
        // SAFETY: the slots follow the header in the same mapping (see `Level::create`).
        unsafe {
            core::slice::from_raw_parts((self as *const Level).add(1) as *const Slot, self.mask + 1)
        }
    }

    fn create(shift: u32) -> *mut Level {
        let n = 1usize << shift;
        let bytes = core::mem::size_of::<Level>() + n * core::mem::size_of::<Slot>();
        match sys::map_anonymous(bytes) {
            Some(p) => {
                let level = p as *mut Level;
                // SAFETY: fresh zeroed mapping large enough for the header and slots.
                unsafe {
                    (*level).mask = n - 1;
                    (*level).bytes = bytes;
                }
                level
            }
            None => core::ptr::null_mut(),
        }
    }
}

/// The stack table.
#[derive(Debug)]
pub struct StackTable {
    levels: [AtomicPtr<Level>; LEVELS],
    next_id: AtomicU32,
}

impl core::fmt::Debug for Level {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Level")
            .field("slots", &(self.mask + 1))
            .finish()
    }
}

/// The process-wide stack table.
pub static STACKS: StackTable = StackTable {
    levels: [const { AtomicPtr::new(core::ptr::null_mut()) }; LEVELS],
    next_id: AtomicU32::new(1),
};

impl StackTable {
    /// The id of a known stack.
    #[inline]
    pub fn lookup(&self, key: (u64, u64)) -> Option<u32> {
        for level in self.levels.iter().rev() {
            let p = level.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: levels stay mapped until `reset`, which only runs in a forked child
            // before any other thread exists.
            let slots = unsafe { &*p }.slots();
            let mask = slots.len() - 1;
            let mut i = key.0 as usize & mask;
            for _ in 0..MAX_PROBES {
                let s = &slots[i];
                let lo = s.lo.load(Ordering::Acquire);
                if lo == 0 {
                    break;
                }
                if lo == key.0 {
                    let id = s.id.load(Ordering::Acquire);
                    if id != 0 && s.hi.load(Ordering::Relaxed) == key.1 {
                        return Some(id);
                    }
                }
                i = (i + 1) & mask;
            }
        }
        None
    }

    /// Allocates a new stack id.
    pub fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes `id` findable under `key` (after its definition was written).
    pub fn insert(&self, key: (u64, u64), id: u32) {
        for _attempt in 0..4 {
            let Some((index, level)) = self.current_level() else {
                return;
            };
            let slots = level.slots();
            let mask = slots.len() - 1;
            if level.used.load(Ordering::Relaxed) * 4 >= slots.len() * 3 {
                self.grow(index);
                continue;
            }
            let mut i = key.0 as usize & mask;
            for _ in 0..MAX_PROBES {
                let s = &slots[i];
                if s.lo
                    .compare_exchange(0, key.0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    s.hi.store(key.1, Ordering::Relaxed);
                    s.id.store(id, Ordering::Release);
                    level.used.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                i = (i + 1) & mask;
            }
            self.grow(index);
        }
    }

    fn current_level(&self) -> Option<(usize, &Level)> {
        for (i, level) in self.levels.iter().enumerate().rev() {
            let p = level.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: see `lookup`.
                return Some((i, unsafe { &*p }));
            }
        }
        self.grow(usize::MAX);
        let p = self.levels[0].load(Ordering::Acquire);
        // SAFETY: see `lookup`.
        (!p.is_null()).then(|| (0, unsafe { &*p }))
    }

    fn grow(&self, after: usize) {
        let next = after.wrapping_add(1);
        if next >= LEVELS {
            return;
        }
        if !self.levels[next].load(Ordering::Acquire).is_null() {
            return;
        }
        let level = Level::create(FIRST_SHIFT + next as u32);
        if level.is_null() {
            return;
        }
        if self.levels[next]
            .compare_exchange(
                core::ptr::null_mut(),
                level,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: our level lost the race and was never published.
            unsafe { sys::unmap(level as *mut u8, (*level).bytes) };
        }
    }

    /// Empties the table and restarts ids at 1 (a forked child's new session).
    pub fn reset(&self) {
        for level in &self.levels {
            let p = level.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: only called in a forked child before other threads exist, so no
                // reader holds the level.
                unsafe { sys::unmap(p as *mut u8, (*p).bytes) };
            }
        }
        self.next_id.store(1, Ordering::Relaxed);
    }
}
