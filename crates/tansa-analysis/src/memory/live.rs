//! What a live view of an online recording (`tansa record --online` on a terminal) is
//! handed while the program runs: the reports of the events aggregated so far, one per unit
//! the view can switch between, and the live heap over time.
//!
//! The collector computes a [`LiveSnapshot`] a few times a second and offers it to a
//! [`LiveSlot`]; the view takes the newest one when it wants it. The collector never waits
//! for the view: an offer that finds the slot busy is dropped, and an offer replaces a
//! snapshot the view did not take.

use std::sync::{Mutex, PoisonError};

use super::report::MemoryReport;

/// One point of the heap over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapPoint {
    /// Milliseconds since the recording started.
    pub ms: u64,
    /// Live heap bytes (net bytes of every unit together) at that time.
    pub bytes: i64,
}

/// The live heap over time, in at most `cap` points: when it is full, every other point is
/// dropped and points are kept half as often from then on, so the points stay evenly
/// spaced and a long run costs no more than a short one.
#[derive(Debug, Clone)]
pub struct HeapSeries {
    points: Vec<HeapPoint>,
    cap: usize,
    /// Keep one offered point out of `stride`.
    stride: u64,
    offered: u64,
}

impl HeapSeries {
    /// A series of at most `cap` points (at least 2).
    pub fn new(cap: usize) -> Self {
        HeapSeries {
            points: Vec::new(),
            cap: cap.max(2),
            stride: 1,
            offered: 0,
        }
    }

    /// Offers the next point (points are offered at a steady rate). A point of the same
    /// millisecond as the last one kept (the snapshot at a program's end, taken right after
    /// a tick's) updates that point: a time has one value.
    pub fn push(&mut self, point: HeapPoint) {
        if let Some(last) = self.points.last_mut()
            && last.ms == point.ms
        {
            last.bytes = point.bytes;
            return;
        }
        let keep = self.offered.is_multiple_of(self.stride);
        self.offered += 1;
        if !keep {
            return;
        }
        if self.points.len() == self.cap {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
            // The point offered now is kept only if it falls on the new spacing.
            if !(self.offered - 1).is_multiple_of(self.stride) {
                return;
            }
        }
        self.points.push(point);
    }

    /// The points kept, oldest first.
    pub fn points(&self) -> &[HeapPoint] {
        &self.points
    }

    /// The series drawn in `width` columns (for a sparkline): every point a column when
    /// they fit, otherwise the points split into `width` runs of consecutive points, each
    /// column the largest value of its run (a peak is never averaged away). Negative
    /// values (more released than allocated) are drawn as 0.
    pub fn columns(&self, width: usize) -> Vec<u64> {
        let value = |p: &HeapPoint| u64::try_from(p.bytes).unwrap_or(0);
        let n = self.points.len();
        if width == 0 || n == 0 {
            return Vec::new();
        }
        if n <= width {
            return self.points.iter().map(value).collect();
        }
        (0..width)
            .map(|c| {
                let (lo, hi) = (c * n / width, ((c + 1) * n / width).max(c * n / width + 1));
                self.points[lo..hi.min(n)]
                    .iter()
                    .map(value)
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }
}

/// The state of an online recording at one moment.
#[derive(Debug, Clone)]
pub struct LiveSnapshot {
    /// Milliseconds since the recording started.
    pub elapsed_ms: u64,
    /// The report so far under each unit the view can show, the recording's own unit
    /// (`--by`) first; [`MemoryReport::by`] names each one's unit.
    pub reports: Vec<MemoryReport>,
    /// The live heap over time.
    pub heap: HeapSeries,
}

/// Where the collector leaves its newest [`LiveSnapshot`] for the view, and the notes the
/// recorder would otherwise print while the view owns the terminal.
#[derive(Debug, Default)]
pub struct LiveSlot {
    latest: Mutex<Option<LiveSnapshot>>,
    notes: Mutex<Vec<String>>,
}

impl LiveSlot {
    /// Leaves `snapshot` for the view, replacing one it did not take. Never waits: when the
    /// view holds the slot at this instant the snapshot is dropped (the next one follows
    /// shortly); returns whether it was left.
    pub fn offer(&self, snapshot: LiveSnapshot) -> bool {
        match self.latest.try_lock() {
            Ok(mut slot) => {
                *slot = Some(snapshot);
                true
            }
            Err(std::sync::TryLockError::Poisoned(p)) => {
                *p.into_inner() = Some(snapshot);
                true
            }
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// The newest snapshot, if one came since the last call.
    pub fn take(&self) -> Option<LiveSnapshot> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Leaves a note for people (shown by the view).
    pub fn note(&self, text: String) {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(text);
    }

    /// The notes left since the last call.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(cap: usize, n: u64) -> HeapSeries {
        let mut s = HeapSeries::new(cap);
        for i in 0..n {
            s.push(HeapPoint {
                ms: i * 250,
                bytes: i as i64,
            });
        }
        s
    }

    /// The live snapshot test once got two points at 713 ms (a tick's snapshot, then the
    /// program's end in the same millisecond): times must rise.
    #[test]
    fn a_point_of_the_same_millisecond_updates_the_last() {
        let mut s = series(8, 3);
        s.push(HeapPoint { ms: 500, bytes: 7 });
        let points: Vec<(u64, i64)> = s.points().iter().map(|p| (p.ms, p.bytes)).collect();
        assert_eq!(points, [(0, 0), (250, 1), (500, 7)]);
    }

    #[test]
    fn series_keeps_every_point_until_full() {
        let s = series(8, 8);
        let ms: Vec<u64> = s.points().iter().map(|p| p.ms).collect();
        assert_eq!(ms, [0, 250, 500, 750, 1000, 1250, 1500, 1750]);
    }

    #[test]
    fn series_halves_and_stays_evenly_spaced() {
        // 8 kept, then the 9th offer halves to 0,2,4,6 and keeps 8 (on the new spacing).
        let s = series(8, 9);
        let b: Vec<i64> = s.points().iter().map(|p| p.bytes).collect();
        assert_eq!(b, [0, 2, 4, 6, 8]);
        // Offers continue every second point.
        let s = series(8, 16);
        let b: Vec<i64> = s.points().iter().map(|p| p.bytes).collect();
        assert_eq!(b, [0, 2, 4, 6, 8, 10, 12, 14]);
        // Full again: spacing 4.
        let s = series(8, 17);
        let b: Vec<i64> = s.points().iter().map(|p| p.bytes).collect();
        assert_eq!(b, [0, 4, 8, 12, 16]);
        // Never more than the cap, however long the run.
        let s = series(8, 100_000);
        assert!(s.points().len() <= 8);
        let gaps: Vec<i64> = s
            .points()
            .windows(2)
            .map(|w| w[1].bytes - w[0].bytes)
            .collect();
        assert!(gaps.windows(2).all(|g| g[0] == g[1]), "{gaps:?}");
    }

    #[test]
    fn columns_keep_peaks() {
        let mut s = HeapSeries::new(64);
        for (i, b) in [1, 9, 2, 3, 4, 8, -5].into_iter().enumerate() {
            s.push(HeapPoint {
                ms: i as u64,
                bytes: b,
            });
        }
        assert_eq!(s.columns(10), [1, 9, 2, 3, 4, 8, 0]);
        // 7 points in 3 columns: runs [0,2) [2,4) [4,7).
        assert_eq!(s.columns(3), [9, 3, 8]);
        assert_eq!(s.columns(1), [9]);
        assert!(s.columns(0).is_empty());
        assert!(HeapSeries::new(4).columns(5).is_empty());
    }

    #[test]
    fn slot_hands_over_the_newest_snapshot_once() {
        let slot = LiveSlot::default();
        assert!(slot.take().is_none());
        for ms in [1, 2] {
            assert!(slot.offer(LiveSnapshot {
                elapsed_ms: ms,
                reports: Vec::new(),
                heap: HeapSeries::new(4),
            }));
        }
        assert_eq!(slot.take().map(|s| s.elapsed_ms), Some(2));
        assert!(slot.take().is_none());
        // An offer while the view holds the slot is dropped, not waited for.
        let guard = slot.latest.lock().unwrap();
        assert!(!slot.offer(LiveSnapshot {
            elapsed_ms: 3,
            reports: Vec::new(),
            heap: HeapSeries::new(4),
        }));
        drop(guard);
        assert!(slot.take().is_none());
        slot.note("a".into());
        slot.note("b".into());
        assert_eq!(slot.take_notes(), ["a", "b"]);
        assert!(slot.take_notes().is_empty());
    }
}
