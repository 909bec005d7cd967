//! Online mode's table of live blocks (seed 000's size table, reduced to membership: the
//! collector keeps the sizes).
//!
//! In online mode the agent refuses to pass a pointer it never saw allocated to the real
//! `free` or `realloc`: the call is reported as improper use and the program goes on, as seed
//! 000 prescribes. The table is split into shards, each an open-addressing set of addresses
//! in its own mapping under its own spin lock.
//!
//! A second table, [`UNRECORDED`], holds the blocks the program got while recording could
//! not follow them (a thread that found no ring): they are the program's own, so their
//! release is passed on, not refused; it is counted as lost with them.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU16, Ordering};

use crate::spin::SpinLock;
use crate::sys;

const SHARDS: usize = 64;
const EMPTY: u64 = 0;
const TOMB: u64 = 1;

#[derive(Debug)]
struct Inner {
    keys: *mut u64,
    cap: usize,
    used: usize,
    tombs: usize,
}

#[derive(Debug)]
struct Shard {
    lock: SpinLock,
    inner: UnsafeCell<Inner>,
}

/// The table.
#[derive(Debug)]
pub struct LiveTable {
    shards: [Shard; SHARDS],
    /// Whether the table keeps [`FILTER`] (the sampled mode's test of membership).
    filtered: bool,
}

// SAFETY: each shard's `inner` is only touched with its lock held.
unsafe impl Sync for LiveTable {}

/// The process-wide table of recorded live blocks.
pub static LIVE: LiveTable = LiveTable::new(true);

/// Online mode: the live blocks whose allocation was not recorded.
pub static UNRECORDED: LiveTable = LiveTable::new(false);

#[inline]
fn mix(p: u64) -> u64 {
    (p >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// log2 of the number of counters of the membership filter.
const FILTER_BITS: u32 = 18;

/// A counting filter in front of the table: per hash slot, how many live blocks hash there
/// (saturating: a counter that reached `u16::MAX` stays there). A zero counter proves an
/// address is not in the table without taking a lock, which is what sampled mode needs on
/// every `free` (most blocks are not sampled). It lives in `.bss` (512 KiB, pages touched as
/// used). A block is counted before its address is handed to the program and uncounted after
/// it left the table, so a release always sees its own block counted.
static FILTER: [AtomicU16; 1 << FILTER_BITS] = [const { AtomicU16::new(0) }; 1 << FILTER_BITS];

#[inline]
fn filter_slot(p: u64) -> &'static AtomicU16 {
    &FILTER[((mix(p) >> 20) & ((1 << FILTER_BITS) - 1)) as usize]
}

impl Inner {
    fn slot(&self, p: u64) -> (usize, bool) {
        // Returns the index of `p` (true) or of the first free slot on its probe path (false).
        let mask = self.cap - 1;
        let mut i = (mix(p) >> 16) as usize & mask;
        let mut first_tomb = None;
        loop {
            // SAFETY: `i < cap` and `keys` maps `cap` entries.
            let k = unsafe { *self.keys.add(i) };
            if k == p {
                return (i, true);
            }
            if k == EMPTY {
                return (first_tomb.unwrap_or(i), false);
            }
            if k == TOMB && first_tomb.is_none() {
                first_tomb = Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) -> bool {
        let new_cap = if self.used * 2 >= self.cap {
            (self.cap * 2).max(1024)
        } else {
            self.cap.max(1024)
        };
        let Some(mem) = sys::map_anonymous(new_cap * 8) else {
            return false;
        };
        let old = Inner {
            keys: self.keys,
            cap: self.cap,
            used: self.used,
            tombs: self.tombs,
        };
        self.keys = mem as *mut u64;
        self.cap = new_cap;
        self.used = 0;
        self.tombs = 0;
        for i in 0..old.cap {
            // SAFETY: `i < old.cap`.
            let k = unsafe { *old.keys.add(i) };
            if k != EMPTY && k != TOMB {
                let (j, _) = self.slot(k);
                // SAFETY: `j < cap`.
                unsafe { *self.keys.add(j) = k };
                self.used += 1;
            }
        }
        if !old.keys.is_null() {
            // SAFETY: the old array is no longer referenced.
            unsafe { sys::unmap(old.keys as *mut u8, old.cap * 8) };
        }
        true
    }
}

impl LiveTable {
    const fn new(filtered: bool) -> LiveTable {
        LiveTable {
            shards: [const {
                Shard {
                    lock: SpinLock::new(),
                    inner: UnsafeCell::new(Inner {
                        keys: core::ptr::null_mut(),
                        cap: 0,
                        used: 0,
                        tombs: 0,
                    }),
                }
            }; SHARDS],
            filtered,
        }
    }

    fn shard(&self, p: u64) -> &Shard {
        &self.shards[(mix(p) >> 58) as usize % SHARDS]
    }

    /// Adds a live block.
    pub fn insert(&self, p: u64) {
        if p <= TOMB {
            return;
        }
        let s = self.shard(p);
        s.lock.lock();
        // SAFETY: the shard lock is held.
        let inner = unsafe { &mut *s.inner.get() };
        if (inner.used + inner.tombs + 1) * 4 > inner.cap * 3 && !inner.grow() {
            s.lock.unlock();
            return;
        }
        let (i, found) = inner.slot(p);
        if !found {
            // SAFETY: `i < cap`.
            unsafe {
                if *inner.keys.add(i) == TOMB {
                    inner.tombs -= 1;
                }
                *inner.keys.add(i) = p;
            }
            inner.used += 1;
            if self.filtered {
                let _ = filter_slot(p).fetch_update(Ordering::Release, Ordering::Relaxed, |c| {
                    (c != u16::MAX).then_some(c + 1)
                });
            }
        }
        s.lock.unlock();
    }

    /// Removes a block; false if it was not live.
    pub fn remove(&self, p: u64) -> bool {
        if p <= TOMB {
            return false;
        }
        let s = self.shard(p);
        s.lock.lock();
        // SAFETY: the shard lock is held.
        let inner = unsafe { &mut *s.inner.get() };
        let found = inner.cap > 0 && {
            let (i, found) = inner.slot(p);
            if found {
                // SAFETY: `i < cap`.
                unsafe { *inner.keys.add(i) = TOMB };
                inner.used -= 1;
                inner.tombs += 1;
                if self.filtered {
                    let _ =
                        filter_slot(p).fetch_update(Ordering::Release, Ordering::Relaxed, |c| {
                            (c != u16::MAX && c != 0).then(|| c - 1)
                        });
                }
            }
            found
        };
        s.lock.unlock();
        found
    }

    /// False when `p` is certainly not in the table (no lock taken); true when it may be.
    #[inline]
    pub fn may_contain(&self, p: u64) -> bool {
        p > TOMB && (!self.filtered || filter_slot(p).load(Ordering::Acquire) != 0)
    }

    /// Whether a block is live.
    pub fn contains(&self, p: u64) -> bool {
        if p <= TOMB {
            return false;
        }
        let s = self.shard(p);
        s.lock.lock();
        // SAFETY: the shard lock is held.
        let inner = unsafe { &*s.inner.get() };
        let found = inner.cap > 0 && inner.slot(p).1;
        s.lock.unlock();
        found
    }

    /// Calls `f` with every block in the table, one shard at a time under its lock (the
    /// caller keeps signal handlers out: `thread::Busy`).
    pub fn each(&self, mut f: impl FnMut(u64)) {
        for s in &self.shards {
            s.lock.lock();
            // SAFETY: the shard lock is held.
            let inner = unsafe { &*s.inner.get() };
            for i in 0..inner.cap {
                // SAFETY: `i < cap`.
                let k = unsafe { *inner.keys.add(i) };
                if k > TOMB {
                    f(k);
                }
            }
            s.lock.unlock();
        }
    }

    fn locks(&'static self) -> impl Iterator<Item = &'static SpinLock> {
        self.shards.iter().map(|s| &s.lock)
    }
}

/// Every shard lock of both tables, always in the same order, for the fork handlers.
pub fn locks() -> impl Iterator<Item = &'static SpinLock> {
    LIVE.locks().chain(UNRECORDED.locks())
}
