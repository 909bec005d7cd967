//! Per-stack figures for stack profiles (pprof, flame graphs): what each allocation stack
//! allocated, what of it is still live at the end, and what of it was live at the moment
//! the heap of the included processes peaked.
//!
//! The peak is the first moment the total live heap reached its maximum. Keeping every
//! stack's value at that moment must not cost a pass over every stack at each new peak (in
//! a growing heap nearly every allocation is one), so each stack keeps the sequence number
//! of its last change and, on its first change after the latest peak, saves its value. At
//! the end, a stack not changed since the peak still has its peak value; the others saved
//! it.

use rustc_hash::FxHashMap;

use crate::memory::ids::{SessionId, StackId};

/// What one allocation stack of one process image did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StackFigures {
    /// The process image.
    pub session: SessionId,
    /// Its process id.
    pub pid: u32,
    /// The allocation stack.
    pub stack: StackId,
    /// Blocks allocated (`malloc`, `calloc`, the aligned family, and each `realloc` that
    /// returned a block).
    pub alloc_objects: u64,
    /// Bytes allocated.
    pub alloc_bytes: u64,
    /// Blocks still live at the end.
    pub live_objects: u64,
    /// Bytes still live at the end.
    pub live_bytes: u64,
    /// Blocks live when the heap peaked.
    pub peak_objects: u64,
    /// Bytes live when the heap peaked.
    pub peak_bytes: u64,
    /// Temporary allocations: blocks released by their own thread before it allocated
    /// again (0 in sampled recordings).
    pub temporary_objects: u64,
    /// Blocks the leak check at exit found lost, definitely or indirectly (recordings made
    /// with `tansa record --leak-check`; 0 otherwise).
    pub lost_objects: u64,
    /// Their bytes.
    pub lost_bytes: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    alloc_objects: u64,
    alloc_bytes: u64,
    live_objects: u64,
    live_bytes: u64,
    saved_objects: u64,
    saved_bytes: u64,
    changed: u64,
    temporary_objects: u64,
}

/// The per-stack tally.
#[derive(Debug, Default)]
pub(super) struct StackTally {
    index: FxHashMap<(SessionId, StackId), u32>,
    keys: Vec<(SessionId, StackId)>,
    entries: Vec<Entry>,
    /// Sequence number of the latest change.
    seq: u64,
    /// Sequence number of the latest (highest) peak.
    peak_seq: u64,
    /// Live bytes at the peak.
    peak_bytes: i64,
    /// Timestamp (ticks) of the peak.
    pub(super) peak_ticks: u64,
    live_total: i64,
}

impl StackTally {
    fn entry(&mut self, session: SessionId, stack: StackId) -> &mut Entry {
        self.seq += 1;
        let i = match self.index.get(&(session, stack)) {
            Some(&i) => i as usize,
            None => {
                let i = self.entries.len();
                self.index.insert((session, stack), i as u32);
                self.keys.push((session, stack));
                self.entries.push(Entry::default());
                i
            }
        };
        let e = &mut self.entries[i];
        if e.changed <= self.peak_seq {
            e.saved_objects = e.live_objects;
            e.saved_bytes = e.live_bytes;
        }
        e.changed = self.seq;
        e
    }

    /// A block of `size` bytes, standing for `weight` blocks (1 unless sampled), allocated
    /// at `stack`, at `ticks`.
    pub(super) fn allocate(
        &mut self,
        session: SessionId,
        stack: StackId,
        size: u64,
        weight: u32,
        ticks: u64,
    ) {
        let e = self.entry(session, stack);
        let n = u64::from(weight);
        e.alloc_objects = e.alloc_objects.saturating_add(n);
        e.alloc_bytes = e.alloc_bytes.saturating_add(size);
        e.live_objects = e.live_objects.saturating_add(n);
        e.live_bytes = e.live_bytes.saturating_add(size);
        self.live_total = self.live_total.saturating_add(super::size_delta(size));
        if self.live_total > self.peak_bytes {
            self.peak_bytes = self.live_total;
            self.peak_seq = self.seq;
            self.peak_ticks = ticks;
        }
    }

    /// A block of `size` bytes (standing for `weight` blocks) allocated at `stack` is gone.
    pub(super) fn release(&mut self, session: SessionId, stack: StackId, size: u64, weight: u32) {
        self.release_counting(session, stack, size, weight, false);
    }

    /// [`Self::release`] of a temporary allocation when `temporary`.
    pub(super) fn release_counting(
        &mut self,
        session: SessionId,
        stack: StackId,
        size: u64,
        weight: u32,
        temporary: bool,
    ) {
        let e = self.entry(session, stack);
        e.temporary_objects += u64::from(temporary);
        e.live_objects = e.live_objects.saturating_sub(u64::from(weight));
        e.live_bytes = e.live_bytes.saturating_sub(size);
        self.live_total = self.live_total.saturating_sub(super::size_delta(size));
    }

    /// The figures of every stack, in order of first allocation; and the live bytes at the
    /// peak.
    pub(super) fn finish(self) -> (Vec<StackFigures>, u64) {
        let peak_seq = self.peak_seq;
        let figures = self
            .keys
            .iter()
            .zip(&self.entries)
            .map(|(&(session, stack), e)| {
                let (peak_objects, peak_bytes) = if e.changed <= peak_seq {
                    (e.live_objects, e.live_bytes)
                } else {
                    (e.saved_objects, e.saved_bytes)
                };
                StackFigures {
                    session,
                    pid: 0,
                    stack,
                    alloc_objects: e.alloc_objects,
                    alloc_bytes: e.alloc_bytes,
                    live_objects: e.live_objects,
                    live_bytes: e.live_bytes,
                    peak_objects,
                    peak_bytes,
                    temporary_objects: e.temporary_objects,
                    lost_objects: 0,
                    lost_bytes: 0,
                }
            })
            .collect();
        (figures, self.peak_bytes.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(t: StackTally) -> Vec<(u32, u64, u64, u64)> {
        let (f, _) = t.finish();
        f.iter()
            .map(|f| (f.stack.0, f.alloc_bytes, f.live_bytes, f.peak_bytes))
            .collect()
    }

    #[test]
    fn peak_values_are_those_at_the_first_highest_total() {
        let s = SessionId(1);
        let mut t = StackTally::default();
        t.allocate(s, StackId(1), 100, 1, 1);
        t.allocate(s, StackId(2), 50, 1, 2);
        // Peak: 150 (100 at 1, 50 at 2).
        t.release(s, StackId(1), 100, 1);
        t.allocate(s, StackId(3), 120, 1, 3);
        // 170: a new peak (0 at 1, 50 at 2, 120 at 3).
        t.release(s, StackId(3), 120, 1);
        t.allocate(s, StackId(1), 160, 1, 4);
        // 210: a new peak (160, 50, 0).
        t.release(s, StackId(2), 50, 1);
        t.allocate(s, StackId(3), 50, 1, 5);
        // 210 again: not a new peak; values stay (160, 50, 0).
        t.release(s, StackId(1), 160, 1);
        assert_eq!(
            figures(t),
            vec![(1, 260, 0, 160), (2, 50, 0, 50), (3, 170, 50, 0)]
        );
    }

    #[test]
    fn a_stack_untouched_since_the_peak_keeps_its_live_value() {
        let s = SessionId(1);
        let mut t = StackTally::default();
        t.allocate(s, StackId(1), 10, 1, 1);
        t.allocate(s, StackId(2), 20, 1, 2);
        t.release(s, StackId(2), 20, 1);
        let (f, peak) = t.finish();
        assert_eq!(peak, 30);
        assert_eq!((f[0].peak_bytes, f[0].peak_objects), (10, 1));
        assert_eq!((f[1].peak_bytes, f[1].live_bytes), (20, 0));
    }
}
