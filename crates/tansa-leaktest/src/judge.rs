//! The decisions of the flow, as pure functions over measurements and lists.
//!
//! Nothing here runs anything: [`crate::flow`] calls these with what it measured.

use std::collections::{BTreeMap, BTreeSet};

use crate::measure::{ProcId, Resource, Snapshot};
use crate::plan::Thresholds;
use crate::report::{Cause, LogOnIncrease, LogRecord, NonRecurring, Verdict};

/// The change of one resource of one process between two measurements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Growth {
    /// Who.
    pub id: ProcId,
    /// What.
    pub resource: Resource,
    /// Value before.
    pub before: u64,
    /// Value after.
    pub after: u64,
    /// `after - before`.
    pub diff: i64,
    /// Whether `diff` reaches the threshold.
    pub grew: bool,
}

/// Whether a change counts as growth: positive and at least `threshold` (the claims' "by
/// a predetermined value or more"; a threshold of 1 is the embodiment's "> 0").
pub fn grew(diff: i64, threshold: u64) -> bool {
    diff > 0 && diff.unsigned_abs() >= threshold.max(1)
}

/// Signed difference of two readings.
pub fn diff(before: u64, after: u64) -> i64 {
    let d = i128::from(after) - i128::from(before);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// The change of every judged resource of every process present in both measurements
/// under the same identity (seed S40: a process missing from either is not compared).
pub fn growth(
    before: &Snapshot,
    after: &Snapshot,
    resources: &[Resource],
    thresholds: &Thresholds,
) -> Vec<Growth> {
    let mut out = Vec::new();
    for a in &after.processes {
        let Some(b) = before.get(&a.id) else { continue };
        for &resource in resources {
            let (bv, av) = (b.get(resource), a.get(resource));
            let d = diff(bv, av);
            out.push(Growth {
                id: a.id.clone(),
                resource,
                before: bv,
                after: av,
                diff: d,
                grew: grew(d, thresholds.of(resource)),
            });
        }
    }
    out
}

/// The processes of `before` that are not in `after` under the same identity: they ended
/// (or restarted) in between.
pub fn ended(before: &Snapshot, after: &Snapshot) -> Vec<ProcId> {
    before
        .processes
        .iter()
        .filter(|b| after.get(&b.id).is_none())
        .map(|b| b.id.clone())
        .collect()
}

/// Length of the "latter 10 %" of a sweep of `n` values: `ceil(n / 10)`, at least one.
pub fn tail_len(n: usize) -> usize {
    n.div_ceil(10).max(1).min(n)
}

/// Whether a sweep still grows in its latter 10 % (seed S162): any of the last
/// [`tail_len`] changes counts as growth.
pub fn tail_grows(grew_per_value: &[bool]) -> bool {
    let n = grew_per_value.len();
    grew_per_value[n - tail_len(n)..].iter().any(|&g| g)
}

/// The first measurement (index into `values`) that is higher than the one before by at
/// least `threshold` (seed Fig. 22, S243, compared for i in 1..NUM-1).
pub fn first_increase(values: &[u64], threshold: u64) -> Option<usize> {
    values
        .windows(2)
        .position(|w| grew(diff(w[0], w[1]), threshold))
        .map(|i| i + 1)
}

/// The decision of P2-3's type-2 part (Fig. 12) on one first-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDecision {
    /// Index into the first list.
    pub entry: usize,
    /// Verdict.
    pub verdict: Verdict,
    /// Why.
    pub cause: Cause,
    /// In words.
    pub reason: String,
    /// The log IDs it is about.
    pub log_ids: Vec<String>,
}

/// P2-3, type 2 (Fig. 12, supplementary note 4).
///
/// Entries are counted per (process, log ID) over items. Two or more: the same logged
/// event came with one-off growth again and again: fault, type 2. Exactly one: the error
/// logs of the whole test period (`all_logs`) are searched for that ID from that process
/// *outside* the entry's own window: found there, the error also happens without growth,
/// so it is not a fault; not found, there is too little information (undeterminable). An
/// entry with several IDs takes the most severe of their verdicts.
pub fn type2(log_on_increase: &[LogOnIncrease], all_logs: &[LogRecord]) -> Vec<LogDecision> {
    let mut counts: BTreeMap<(&str, Resource, &str), BTreeSet<&str>> = BTreeMap::new();
    for e in log_on_increase {
        for id in &e.log_ids {
            counts
                .entry((e.process.as_str(), e.resource, id.as_str()))
                .or_default()
                .insert(e.item.as_str());
        }
    }
    let mut out = Vec::new();
    for (i, e) in log_on_increase.iter().enumerate() {
        let mut best: Option<LogDecision> = None;
        for id in &e.log_ids {
            let items = &counts[&(e.process.as_str(), e.resource, id.as_str())];
            let (verdict, cause, reason) = if items.len() >= 2 {
                let list: Vec<&str> = items.iter().copied().collect();
                (
                    Verdict::OneOffFault,
                    Cause::LogIdRepeated,
                    format!(
                        "grew once with error `{id}` logged, in {} items ({}): the growth follows that event",
                        items.len(),
                        list.join(", ")
                    ),
                )
            } else {
                let elsewhere = all_logs.iter().any(|r| {
                    r.process == e.process
                        && &r.id == id
                        && !(e.window_ms.0..=e.window_ms.1).contains(&r.t_ms)
                });
                if elsewhere {
                    (
                        Verdict::NotFault,
                        Cause::LogIdSeenElsewhere,
                        format!(
                            "grew once with error `{id}` logged; that error was also logged at other times without growth"
                        ),
                    )
                } else {
                    (
                        Verdict::Undeterminable,
                        Cause::LogIdOnce,
                        format!(
                            "grew once with error `{id}` logged, and that error was logged nowhere else: insufficient information"
                        ),
                    )
                }
            };
            if best
                .as_ref()
                .is_none_or(|b| verdict.severity() > b.verdict.severity())
            {
                best = Some(LogDecision {
                    entry: i,
                    verdict,
                    cause,
                    reason,
                    log_ids: e.log_ids.clone(),
                });
            }
        }
        if let Some(b) = best {
            out.push(b);
        }
    }
    out
}

/// P2-3, type-3 candidates (Fig. 13): the indices of second-list entries whose (process,
/// resource) has at least `min_records` entries (the seed: "more than one"). The other
/// entries stay "not a fault" (S56).
pub fn type3_candidates(non_recurring: &[NonRecurring], min_records: u32) -> Vec<usize> {
    let mut counts: BTreeMap<(&str, Resource), usize> = BTreeMap::new();
    for e in non_recurring {
        *counts.entry((e.process.as_str(), e.resource)).or_default() += 1;
    }
    (0..non_recurring.len())
        .filter(|&i| {
            let e = &non_recurring[i];
            counts[&(e.process.as_str(), e.resource)] >= min_records as usize
        })
        .collect()
}

/// Whether a change exceeds a known limit (P2-4 S122 and, by decision, P2-5 S171: strictly
/// greater, so growth equal to the limit is within it, as in the seed's Fig. 31).
pub fn exceeds(growth: i64, limit: u64) -> bool {
    growth > 0 && growth.unsigned_abs() > limit
}

#[cfg(test)]
mod tests;
