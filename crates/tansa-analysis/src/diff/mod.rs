//! Comparing two runs: per-unit deltas of two heap reports ([`memory`]) or of two CPU
//! reports ([`cpu`]), and the growth gate of `tansa diff --fail-if-growth`.
//!
//! Units of the two reports are matched by what they are, not by process or thread ids
//! (those change from run to run): by name (libraries, functions, lines, instructions), by
//! name and index (`--by call`: the call's ordinal; `--by interval`: the interval's), and,
//! for threads and processes, by name and occurrence (the first `worker` thread of A with
//! the first of B, in order of process and thread id). A unit found on one side only is
//! `added` or `removed`, with zero figures on the other side.
//!
//! Rows are sorted by the absolute change of the chosen [`Metric`], largest first (growth
//! before shrinkage at equal size, then by name). The JSON form is the documented contract
//! `tansa.diff.v1` (`docs/json/diff.v1.md`): fields are only ever added.

pub mod cpu;
pub mod memory;

use std::collections::HashMap;

use serde::Serialize;

/// Schema identifier of the JSON form.
pub const SCHEMA: &str = "tansa.diff.v1";

/// Errors of a comparison's options.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DiffError {
    /// The metric does not apply to this kind of recording.
    #[error("the metric `{metric}` applies to {applies} recordings, not to {kind} recordings")]
    MetricKind {
        /// The metric's name.
        metric: &'static str,
        /// The kind it applies to.
        applies: &'static str,
        /// The kind of the recordings compared.
        kind: &'static str,
    },
    /// An absolute threshold given for CPU shares.
    #[error(
        "an absolute growth threshold does not apply to CPU recordings: give a percentage \
         (their shares of the samples are compared, since runs differ in length)"
    )]
    AmountForCpu,
    /// `--metric lost` for a recording made without the leak check.
    #[error(
        "the metric `lost` compares the blocks the leak check at exit found lost, but {side} \
         {} recorded without it (tansa record --leak-check)",
        if side.contains(" and ") { "were" } else { "was" }
    )]
    NoLeakCheck {
        /// `A`, `B` or `A and B`.
        side: &'static str,
    },
    /// Two thresholds of the same kind.
    #[error("give at most one percentage and one amount as growth thresholds")]
    DuplicateThreshold,
}

/// What rows are sorted by and growth is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Heap: bytes held at the end (`net_bytes`).
    Net,
    /// Heap: peak bytes held (`max_bytes`).
    Max,
    /// Heap: bytes allocated (`allocated_bytes`).
    Allocated,
    /// Heap: allocator calls of every family.
    Calls,
    /// Heap: temporary allocations (`temporary_allocations`).
    Temporary,
    /// Heap: bytes the leak check at exit found lost, definitely or indirectly
    /// (`lost_at_exit_bytes`; recordings made with `tansa record --leak-check`).
    Lost,
    /// CPU: the unit's share of the samples taken in it (`self_samples`).
    SelfSamples,
    /// CPU: the unit's share of the samples taken in it or its callees (`total_samples`).
    TotalSamples,
}

impl Metric {
    /// Name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Net => "net",
            Metric::Max => "max",
            Metric::Allocated => "allocated",
            Metric::Calls => "calls",
            Metric::Temporary => "temporary",
            Metric::Lost => "lost",
            Metric::SelfSamples => "self",
            Metric::TotalSamples => "total",
        }
    }

    /// The metric of this name ([`Metric::name`]).
    pub fn from_name(name: &str) -> Option<Metric> {
        [
            Metric::Net,
            Metric::Max,
            Metric::Allocated,
            Metric::Calls,
            Metric::Temporary,
            Metric::Lost,
            Metric::SelfSamples,
            Metric::TotalSamples,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }

    /// Whether it applies to heap recordings (else to CPU recordings).
    pub fn is_heap(self) -> bool {
        !matches!(self, Metric::SelfSamples | Metric::TotalSamples)
    }

    /// Whether it counts bytes.
    pub fn is_bytes(self) -> bool {
        matches!(
            self,
            Metric::Net | Metric::Max | Metric::Allocated | Metric::Lost
        )
    }

    fn check(self, heap: bool) -> Result<(), DiffError> {
        if self.is_heap() == heap {
            return Ok(());
        }
        let (applies, kind) = if heap {
            ("CPU", "heap")
        } else {
            ("heap", "CPU")
        };
        Err(DiffError::MetricKind {
            metric: self.name(),
            applies,
            kind,
        })
    }
}

/// A growth threshold of `--fail-if-growth`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// Growth by more than this percentage of A's value (of its absolute value, when
    /// negative). A unit whose value in A is zero (new in B, or idle in A) crosses it as
    /// soon as its value in B is above zero.
    Percent(f64),
    /// Growth by more than this amount, in the metric's unit (bytes or calls); heap only.
    Amount(u64),
}

impl Threshold {
    /// The threshold as written on a command line: `10%`, `1048576`.
    pub fn text(&self) -> String {
        match self {
            Threshold::Percent(p) => format!("{p}%"),
            Threshold::Amount(n) => n.to_string(),
        }
    }
}

/// Checks that `thresholds` hold at most one of each kind.
fn check_thresholds(thresholds: &[Threshold], heap: bool) -> Result<(), DiffError> {
    let percents = thresholds
        .iter()
        .filter(|t| matches!(t, Threshold::Percent(_)))
        .count();
    let amounts = thresholds.len() - percents;
    if !heap && amounts > 0 {
        return Err(DiffError::AmountForCpu);
    }
    if percents > 1 || amounts > 1 {
        return Err(DiffError::DuplicateThreshold);
    }
    Ok(())
}

/// Whether the change from `a` to `b` crosses every threshold (there is at least one):
/// the value grew, by more than each of them.
fn crosses(a: i128, b: i128, thresholds: &[Threshold]) -> bool {
    let delta = b - a;
    if delta <= 0 || thresholds.is_empty() {
        return false;
    }
    thresholds.iter().all(|t| match *t {
        Threshold::Percent(p) => a == 0 || delta as f64 * 100.0 > p * a.unsigned_abs() as f64,
        Threshold::Amount(n) => delta > i128::from(n),
    })
}

/// The growth from `a` to `b` in percent of `|a|` (none when `a` is zero).
fn growth_percent(a: i128, b: i128) -> Option<f64> {
    (a != 0).then(|| round2((b - a) as f64 * 100.0 / a.unsigned_abs() as f64))
}

/// Rounds to two decimals.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A signed difference that saturates at the bounds of `i64`.
fn sub(b: impl Into<i128>, a: impl Into<i128>) -> i64 {
    let d = b.into() - a.into();
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Whether a unit is on both sides, and whether its figures changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// On both sides, figures differ.
    Changed,
    /// On both sides, same figures.
    Unchanged,
    /// In B only.
    Added,
    /// In A only.
    Removed,
}

/// One row: a unit's figures in A and B and their difference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitDiff<F, D> {
    /// The unit, as matched: `liba.so`, `liba.so!f`, a thread's or process's name.
    pub unit: String,
    /// On both sides or one.
    pub status: Status,
    /// The call's ordinal among the calls of its library, from 0 (`--by call`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_index: Option<u64>,
    /// The interval's ordinal, from 0 (`--by interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_index: Option<u64>,
    /// Among units of the same name, ordered by process and thread id, this one's rank from
    /// 1 (threads and processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<u32>,
    /// The unit's name in A's report when it differs from `unit` (`worker [1234]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a_unit: Option<String>,
    /// The unit's name in B's report when it differs from `unit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_unit: Option<String>,
    /// Figures in A (zero when `added`).
    pub a: F,
    /// Figures in B (zero when `removed`).
    pub b: F,
    /// B minus A.
    pub delta: D,
}

/// The totals row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TotalDiff<F, D> {
    /// Totals of A.
    pub a: F,
    /// Totals of B.
    pub b: F,
    /// B minus A.
    pub delta: D,
}

/// A metric's value, as JSON shows it: a count, or a share in percent (CPU).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// Bytes or calls.
    Count(i64),
    /// Percent of the samples.
    Percent(f64),
}

/// A unit that grew past the thresholds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Crossing {
    /// The row's label (as the text view shows it).
    pub unit: String,
    /// The metric in A.
    pub a: Value,
    /// The metric in B.
    pub b: Value,
    /// Growth in percent of A's value (`null` when A's value is zero).
    pub growth_percent: Option<f64>,
}

/// The result of `--fail-if-growth`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    /// The metric judged.
    pub metric: &'static str,
    /// The thresholds, as given (`10%`, `1048576`); a unit must cross all of them.
    pub thresholds: Vec<String>,
    /// The units that crossed them, largest change first (every unit is judged, whatever
    /// `--top` shows).
    pub crossed: Vec<Crossing>,
}

/// A unit of one report, ready to be matched.
struct Item<F> {
    /// Matching name.
    unit: String,
    /// Call or interval index.
    index: Option<u64>,
    /// Order among units of the same name (process and thread ids), when it counts.
    order: Option<(u64, u64)>,
    /// The name in the report.
    name: String,
    figures: F,
}

/// Which index an [`Item`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexKind {
    None,
    Call,
    Interval,
}

/// Matches the units of A and B: rows with the figures of each side (`None` when absent).
fn pair<F: Clone + Default, D>(
    a: Vec<Item<F>>,
    b: Vec<Item<F>>,
    index_kind: IndexKind,
    delta: impl Fn(&F, &F) -> D,
    same: impl Fn(&F, &F) -> bool,
) -> Vec<UnitDiff<F, D>> {
    type Key = (String, Option<u64>, Option<u32>);
    /// A side's unit: its name in the report and its figures.
    type Found<F> = Option<(String, F)>;
    let keyed = |items: Vec<Item<F>>| -> Vec<(Key, String, F)> {
        let mut items = items;
        items.sort_by(|x, y| (&x.unit, x.index, x.order).cmp(&(&y.unit, y.index, y.order)));
        let mut seen: HashMap<(String, Option<u64>), u32> = HashMap::new();
        items
            .into_iter()
            .map(|it| {
                let occurrence = it.order.map(|_| {
                    let n = seen.entry((it.unit.clone(), it.index)).or_insert(0);
                    *n += 1;
                    *n
                });
                ((it.unit, it.index, occurrence), it.name, it.figures)
            })
            .collect()
    };
    let a = keyed(a);
    let b = keyed(b);
    let mut rows: Vec<(Key, Found<F>, Found<F>)> = Vec::new();
    let mut at: HashMap<Key, usize> = HashMap::new();
    for (key, name, f) in a {
        // A key met twice on one side (not produced by tansa's reports) keeps the first.
        if at.contains_key(&key) {
            continue;
        }
        at.insert(key.clone(), rows.len());
        rows.push((key, Some((name, f)), None));
    }
    for (key, name, f) in b {
        match at.get(&key) {
            Some(&i) => {
                if rows[i].2.is_none() {
                    rows[i].2 = Some((name, f));
                }
            }
            None => {
                at.insert(key.clone(), rows.len());
                rows.push((key, None, Some((name, f))));
            }
        }
    }
    rows.into_iter()
        .map(|((unit, index, occurrence), a, b)| {
            let status = match (&a, &b) {
                (Some(x), Some(y)) if same(&x.1, &y.1) => Status::Unchanged,
                (Some(_), Some(_)) => Status::Changed,
                (None, _) => Status::Added,
                (_, None) => Status::Removed,
            };
            let other_name = |side: &Found<F>| {
                side.as_ref()
                    .map(|s| s.0.clone())
                    .filter(|n| *n != unit && index_kind == IndexKind::None)
            };
            let (a_unit, b_unit) = (other_name(&a), other_name(&b));
            let fa = a.map(|s| s.1).unwrap_or_default();
            let fb = b.map(|s| s.1).unwrap_or_default();
            UnitDiff {
                delta: delta(&fa, &fb),
                status,
                call_index: index.filter(|_| index_kind == IndexKind::Call),
                interval_index: index.filter(|_| index_kind == IndexKind::Interval),
                occurrence,
                a_unit,
                b_unit,
                a: fa,
                b: fb,
                unit,
            }
        })
        .collect()
}

/// The label of a row, as the text view and the gate show it: the unit, then its call,
/// interval or occurrence.
pub fn label<F, D>(u: &UnitDiff<F, D>) -> String {
    match (u.call_index, u.interval_index, u.occurrence) {
        (Some(i), _, _) => format!("{} call #{i}", u.unit),
        (_, Some(i), _) => format!("{} interval #{i}", u.unit),
        (_, _, Some(n)) if n > 1 => format!("{} #{n}", u.unit),
        _ => u.unit.clone(),
    }
}

/// Sorts rows by `key` (the metric's change, comparable across rows) descending in
/// absolute value, growth first at equal size, then by unit and index.
fn sort_rows<F, D>(rows: &mut [UnitDiff<F, D>], key: impl Fn(&UnitDiff<F, D>) -> f64) {
    rows.sort_by(|x, y| {
        let (kx, ky) = (key(x), key(y));
        ky.abs()
            .total_cmp(&kx.abs())
            .then(ky.total_cmp(&kx))
            .then_with(|| {
                (&x.unit, x.call_index, x.interval_index, x.occurrence).cmp(&(
                    &y.unit,
                    y.call_index,
                    y.interval_index,
                    y.occurrence,
                ))
            })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_leak_check_is_said_in_good_grammar() {
        let one = DiffError::NoLeakCheck { side: "B" }.to_string();
        assert!(one.contains("but B was recorded without it"), "{one}");
        let both = DiffError::NoLeakCheck { side: "A and B" }.to_string();
        assert!(
            both.contains("but A and B were recorded without it"),
            "{both}"
        );
    }

    #[test]
    fn thresholds() {
        let p = |x| [Threshold::Percent(x)];
        assert!(crosses(100, 111, &p(10.0)));
        assert!(!crosses(100, 110, &p(10.0)), "exactly 10% is not past it");
        assert!(!crosses(100, 90, &p(10.0)));
        assert!(crosses(0, 1, &p(1000.0)), "new in B: infinite growth");
        assert!(!crosses(0, 0, &p(0.0)));
        assert!(crosses(-100, -80, &p(10.0)), "relative to |A|");
        assert!(crosses(1000, 1001, &[Threshold::Amount(0)]));
        assert!(!crosses(1000, 2024, &[Threshold::Amount(1024)]));
        assert!(crosses(1000, 2025, &[Threshold::Amount(1024)]));
        let both = [Threshold::Percent(10.0), Threshold::Amount(100)];
        assert!(!crosses(0, 50, &both), "new but small");
        assert!(crosses(0, 101, &both));
        assert!(!crosses(10_000, 10_500, &both), "large but 5%");
        assert!(!crosses(1, 2, &[]), "no threshold, no crossing");
        assert_eq!(growth_percent(200, 250), Some(25.0));
        assert_eq!(growth_percent(0, 250), None);
    }

    #[test]
    fn threshold_sets() {
        let (p, a) = (Threshold::Percent(5.0), Threshold::Amount(10));
        assert_eq!(check_thresholds(&[p, a], true), Ok(()));
        assert_eq!(
            check_thresholds(&[p, p], true),
            Err(DiffError::DuplicateThreshold)
        );
        assert_eq!(check_thresholds(&[a], false), Err(DiffError::AmountForCpu));
        assert_eq!(check_thresholds(&[p], false), Ok(()));
        assert_eq!(p.text(), "5%");
        assert_eq!(Threshold::Percent(2.5).text(), "2.5%");
    }

    fn item(unit: &str, order: Option<(u64, u64)>, v: i64) -> Item<i64> {
        Item {
            unit: unit.into(),
            index: None,
            order,
            name: match order {
                Some((_, tid)) => format!("{unit} [{tid}]"),
                None => unit.into(),
            },
            figures: v,
        }
    }

    #[test]
    fn matching_by_name_and_occurrence() {
        let a = vec![
            item("w", Some((1, 12)), 5),
            item("w", Some((1, 11)), 4),
            item("gone", None, 3),
            item("same", None, 7),
        ];
        let b = vec![
            item("w", Some((2, 21)), 6),
            item("new", None, 9),
            item("same", None, 7),
        ];
        let mut rows = pair(a, b, IndexKind::None, |x, y| y - x, |x, y| x == y);
        sort_rows(&mut rows, |r| r.delta as f64);
        /// Label, status, A, B, and the names in A's and B's reports.
        type Row = (String, Status, i64, i64, Option<String>, Option<String>);
        let got: Vec<Row> = rows
            .iter()
            .map(|r| {
                (
                    label(r),
                    r.status,
                    r.a,
                    r.b,
                    r.a_unit.clone(),
                    r.b_unit.clone(),
                )
            })
            .collect();
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            got,
            vec![
                ("new".into(), Status::Added, 0, 9, None, None),
                ("w #2".into(), Status::Removed, 5, 0, s("w [12]"), None),
                ("gone".into(), Status::Removed, 3, 0, None, None),
                // The thread of lower id in A (11) goes with B's only one.
                ("w".into(), Status::Changed, 4, 6, s("w [11]"), s("w [21]")),
                ("same".into(), Status::Unchanged, 7, 7, None, None),
            ]
        );
    }

    #[test]
    fn shrinkage_after_growth_of_equal_size() {
        let a = vec![item("x", None, 10), item("y", None, 0)];
        let b = vec![item("x", None, 0), item("y", None, 10)];
        let mut rows = pair(a, b, IndexKind::None, |x, y| y - x, |x, y| x == y);
        sort_rows(&mut rows, |r| r.delta as f64);
        let got: Vec<(&str, i64)> = rows.iter().map(|r| (r.unit.as_str(), r.delta)).collect();
        assert_eq!(got, vec![("y", 10), ("x", -10)]);
    }
}
