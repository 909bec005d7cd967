//! `--by interval`: rows per unit per time interval, with a cap on the number of
//! intervals.
//!
//! An interval far too short for the recording (`--interval 1ns` over seconds) would make
//! a row per event and unit; a damaged recording can put an event centuries after the
//! others. So the number of intervals is capped at [`MAX_INTERVALS`]: when an event falls
//! beyond it, the interval is made ten times longer (as often as needed) and the rows
//! made so far are merged into the longer intervals, which gives exactly the figures the
//! longer interval would have given from the start. The report says so.

use super::{Aggregator, UNSET};

/// Most intervals a report has.
pub const MAX_INTERVALS: u64 = 10_000;

impl Aggregator {
    /// The interval an event at `ts_ns` falls in, making intervals longer first if it
    /// falls beyond [`MAX_INTERVALS`].
    pub(super) fn interval_of(&mut self, ts_ns: u64) -> u64 {
        let since = ts_ns.saturating_sub(self.t0_ns);
        let mut index = since / self.interval_ns;
        if index >= MAX_INTERVALS {
            let mut factor: u64 = 1;
            while index >= MAX_INTERVALS {
                factor = factor.saturating_mul(10);
                let interval = self.interval_ns.saturating_mul(factor);
                index = since / interval;
            }
            self.coarsen(factor);
        }
        index
    }

    /// Makes the interval `factor` times longer and merges the rows accordingly.
    fn coarsen(&mut self, factor: u64) {
        self.interval_ns = self.interval_ns.saturating_mul(factor);
        // Rows of one unit were made in time order; merge consecutive rows of a unit that
        // now fall in one interval.
        let rows = std::mem::take(&mut self.rows);
        let mut last_row_of: Vec<u32> = vec![UNSET; self.bases.len()];
        self.interval_rows.clear();
        for mut row in rows {
            row.interval /= factor;
            let last = last_row_of[row.base as usize];
            if last != UNSET && self.rows[last as usize].interval == row.interval {
                let into = &mut self.rows[last as usize];
                into.stats = into.stats.then(&row.stats);
                into.cumulative = row.cumulative;
                continue;
            }
            let r = self.rows.len() as u32;
            last_row_of[row.base as usize] = r;
            self.interval_rows.insert((row.base, row.interval), r);
            self.rows.push(row);
        }
    }
}

/// A duration in nanoseconds in the largest unit that divides it (`1s`, `250ms`, `7ns`).
pub(super) fn duration_text(ns: u64) -> String {
    for (unit, name) in [
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ] {
        if ns >= unit && ns.is_multiple_of(unit) {
            return format!("{}{name}", ns / unit);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::report::Stats;

    #[test]
    fn merged_figures_are_those_of_the_whole() {
        let deltas = [100i64, -40, 300, -360, 5, -5, 1000];
        for cut in 0..=deltas.len() {
            let mut whole = Stats::default();
            let (mut a, mut b) = (Stats::default(), Stats::default());
            for (i, &d) in deltas.iter().enumerate() {
                whole.add(d);
                if i < cut { a.add(d) } else { b.add(d) }
            }
            assert_eq!(a.then(&b), whole, "cut {cut}");
        }
    }

    #[test]
    fn durations_in_words() {
        assert_eq!(duration_text(1), "1ns");
        assert_eq!(duration_text(10_000), "10us");
        assert_eq!(duration_text(100_000_000), "100ms");
        assert_eq!(duration_text(120_000_000_000), "2m");
        assert_eq!(duration_text(1_500_000_000), "1500ms");
    }
}
