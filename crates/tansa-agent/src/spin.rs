//! The agent's own locks.
//!
//! These are the only locks the hook path takes. None of them is ever held by the measured
//! program, none is held while calling into the program or the real allocator, and every
//! one is taken in `pthread_atfork`'s prepare handler so a forked child never inherits one
//! half-held. Readers of [`RwSpin`] wait only a bounded time: a hook that cannot get the
//! module map quickly records its event without a stack instead of waiting.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::sys;

/// A test-and-test-and-set spin lock that yields the CPU while waiting.
#[derive(Debug)]
pub struct SpinLock {
    locked: AtomicU32,
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new()
    }
}

impl SpinLock {
    /// An unlocked lock.
    pub const fn new() -> Self {
        SpinLock {
            locked: AtomicU32::new(0),
        }
    }

    /// Takes the lock.
    pub fn lock(&self) {
        let mut spins = 0u32;
        loop {
            if self.locked.load(Ordering::Relaxed) == 0
                && self
                    .locked
                    .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                sys::yield_now();
            }
        }
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> bool {
        self.locked
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the lock.
    pub fn unlock(&self) {
        self.locked.store(0, Ordering::Release);
    }

    /// Forces the lock open (forked child, where the holder no longer exists).
    pub fn reset(&self) {
        self.locked.store(0, Ordering::Release);
    }
}

const WRITER: u32 = 1 << 31;
const WAITING: u32 = 1 << 30;
const READERS: u32 = WAITING - 1;

/// A writer-preferring reader-writer spin lock around a value.
#[derive(Debug)]
pub struct RwSpin<T> {
    state: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `state` as for a reader-writer lock.
unsafe impl<T: Send> Send for RwSpin<T> {}
// SAFETY: shared access hands out `&T` only to readers and `&mut T` only to the single writer.
unsafe impl<T: Send + Sync> Sync for RwSpin<T> {}

/// Shared access; releases the read lock on drop.
#[derive(Debug)]
pub struct ReadGuard<'a, T> {
    lock: &'a RwSpin<T>,
}

/// Exclusive access; releases the write lock on drop.
#[derive(Debug)]
pub struct WriteGuard<'a, T> {
    lock: &'a RwSpin<T>,
}

impl<T> RwSpin<T> {
    /// A lock around `value`.
    pub const fn new(value: T) -> Self {
        RwSpin {
            state: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the read lock, giving up after about `max_wait_us` microseconds of waiting.
    pub fn try_read_for(&self, max_wait_us: u64) -> Option<ReadGuard<'_, T>> {
        let mut waited_us = 0u64;
        let mut spins = 0u32;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & (WRITER | WAITING) == 0 && s & READERS < READERS {
                if self
                    .state
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Some(ReadGuard { lock: self });
                }
                continue;
            }
            spins += 1;
            if spins < 128 {
                core::hint::spin_loop();
            } else {
                if waited_us >= max_wait_us {
                    return None;
                }
                sys::sleep_us(20);
                waited_us += 20;
            }
        }
    }

    /// Takes the write lock, waiting as long as needed.
    pub fn write(&self) -> WriteGuard<'_, T> {
        // Announce the writer so that new readers hold off, then wait for readers to leave.
        let mut spins = 0u32;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & (WRITER | WAITING) == 0 {
                if self
                    .state
                    .compare_exchange_weak(s, s | WAITING, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
                continue;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                sys::yield_now();
            }
        }
        let mut spins = 0u32;
        while self
            .state
            .compare_exchange_weak(WAITING, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                sys::yield_now();
            }
        }
        WriteGuard { lock: self }
    }

    /// Forces the lock open (forked child).
    pub fn reset(&self) {
        self.state.store(0, Ordering::Release);
    }

    /// Releases a write lock taken with [`RwSpin::write`] whose guard was forgotten (used by
    /// the fork handlers, which lock in one function and unlock in another).
    ///
    /// # Safety
    ///
    /// The caller must own the write lock.
    pub unsafe fn force_write_unlock(&self) {
        self.state.store(0, Ordering::Release);
    }
}

impl<T> core::ops::Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the read lock excludes writers while the guard lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.state.fetch_sub(1, Ordering::Release);
    }
}

impl<T> core::ops::Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write lock is exclusive while the guard lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> core::ops::DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the write lock is exclusive while the guard lives.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.state.store(0, Ordering::Release);
    }
}
