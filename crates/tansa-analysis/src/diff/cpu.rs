//! The difference of two CPU reports. Runs differ in length, so each unit's share of its
//! run's samples is compared as well as its counts; rows are sorted, and growth judged, on
//! the share.

use serde::Serialize;

use super::{
    Crossing, DiffError, Gate, IndexKind, Item, Metric, Threshold, TotalDiff, UnitDiff, Value,
};
use crate::cpu::CpuReport;

/// A unit's CPU figures on one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuFigures {
    /// Samples taken in the unit itself.
    pub self_samples: u64,
    /// Samples taken in the unit or in what it called.
    pub total_samples: u64,
    /// `self_samples` in percent of the side's samples.
    pub self_percent: f64,
    /// `total_samples` in percent of the side's samples.
    pub total_percent: f64,
}

impl CpuFigures {
    fn new(self_samples: u64, total_samples: u64, all: u64) -> CpuFigures {
        let pct = |n: u64| {
            if all == 0 {
                0.0
            } else {
                n as f64 * 100.0 / all as f64
            }
        };
        CpuFigures {
            self_samples,
            total_samples,
            self_percent: pct(self_samples),
            total_percent: pct(total_samples),
        }
    }

    fn samples(&self, metric: Metric) -> u64 {
        match metric {
            Metric::TotalSamples => self.total_samples,
            _ => self.self_samples,
        }
    }

    fn percent(&self, metric: Metric) -> f64 {
        match metric {
            Metric::TotalSamples => self.total_percent,
            _ => self.self_percent,
        }
    }

    /// The same figures with percentages rounded to two decimals, as CPU reports show them.
    fn rounded(self) -> CpuFigures {
        CpuFigures {
            self_percent: super::round2(self.self_percent),
            total_percent: super::round2(self.total_percent),
            ..self
        }
    }
}

/// Changes of a unit's CPU figures (B minus A).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuDelta {
    /// Of `self_samples`.
    pub self_samples: i64,
    /// Of `total_samples`.
    pub total_samples: i64,
    /// Of `self_percent`, in percentage points.
    pub self_percent: f64,
    /// Of `total_percent`, in percentage points.
    pub total_percent: f64,
}

impl CpuDelta {
    /// B minus A.
    pub fn of(a: &CpuFigures, b: &CpuFigures) -> CpuDelta {
        CpuDelta {
            self_samples: super::sub(b.self_samples, a.self_samples),
            total_samples: super::sub(b.total_samples, a.total_samples),
            self_percent: super::round2(b.self_percent - a.self_percent),
            total_percent: super::round2(b.total_percent - a.total_percent),
        }
    }
}

/// One side of a CPU comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuSide {
    /// The recording, as the caller names it (its path).
    pub file: String,
    /// Samples reported on.
    pub total_samples: u64,
    /// Nominal sampling period in nanoseconds.
    pub period_ns: u64,
    /// The event sampled.
    pub event: String,
    /// The sampler (`perf` or `agent`).
    pub source: &'static str,
    /// What was sampled.
    pub target: String,
    /// Wall-clock duration of sampling, in nanoseconds.
    pub duration_ns: u64,
}

impl CpuSide {
    fn of(file: &str, r: &CpuReport) -> CpuSide {
        CpuSide {
            file: file.to_string(),
            total_samples: r.total_samples,
            period_ns: r.period_ns,
            event: r.event.clone(),
            source: r.source,
            target: r.target.clone(),
            duration_ns: r.duration_ns,
        }
    }
}

/// A row of a CPU comparison.
pub type CpuUnitDiff = UnitDiff<CpuFigures, CpuDelta>;

/// The comparison of two CPU reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuDiff {
    /// [`super::SCHEMA`].
    pub schema: &'static str,
    /// `cpu`.
    pub kind: &'static str,
    /// Unit of aggregation.
    pub by: &'static str,
    /// The metric rows are sorted by (`self` or `total`; its share is compared).
    pub metric: &'static str,
    /// The first recording (the baseline).
    pub a: CpuSide,
    /// The second recording.
    pub b: CpuSide,
    /// All samples of each side (self and total both the side's sample count).
    pub totals: TotalDiff<CpuFigures, CpuDelta>,
    /// Units in A, B or both, by the absolute change of the metric's share, largest first.
    pub units: Vec<CpuUnitDiff>,
    /// Units left out of `units` (`--top`).
    pub units_omitted: usize,
    /// The growth gate, when a threshold was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
    /// The reports' warnings, each prefixed with `A: ` or `B: `.
    pub warnings: Vec<String>,
}

/// Options of a CPU comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `SelfSamples` or `TotalSamples`.
    pub metric: Metric,
    /// Growth thresholds: a percentage at most (relative growth of the unit's share).
    pub thresholds: Vec<Threshold>,
    /// Rows kept (all when `None`); the gate judges every unit.
    pub top: Option<usize>,
}

impl Options {
    /// Whether the options apply to CPU recordings: the metric, and the thresholds (at most
    /// one percentage and one amount; for CPU, no amount).
    pub fn check(&self) -> Result<(), DiffError> {
        self.metric.check(false)?;
        super::check_thresholds(&self.thresholds, false)
    }
}

fn items(r: &CpuReport) -> Vec<Item<CpuFigures>> {
    r.units
        .iter()
        .map(|u| {
            let figures = CpuFigures::new(u.self_samples, u.total_samples, r.total_samples);
            // Processes, their threads and address spaces: by command and thread name or
            // module, in pid order.
            let (unit, order) = match (r.by, u.pid) {
                ("process", Some(pid)) => (
                    process_name(u.command.as_deref(), pid),
                    Some((u64::from(pid), 0)),
                ),
                ("thread", Some(pid)) => (
                    format!(
                        "{} {}",
                        process_name(u.command.as_deref(), pid),
                        u.thread.as_deref().unwrap_or("?")
                    ),
                    Some((u64::from(pid), u64::from(u.tid.unwrap_or(0)))),
                ),
                ("space", Some(pid)) => (
                    format!(
                        "{} {}",
                        process_name(u.command.as_deref(), pid),
                        u.module.as_deref().unwrap_or("?")
                    ),
                    Some((u64::from(pid), 0)),
                ),
                _ => (u.unit.clone(), None),
            };
            Item {
                unit,
                index: None,
                order,
                name: u.unit.clone(),
                figures,
            }
        })
        .collect()
}

fn process_name(command: Option<&str>, pid: u32) -> String {
    match command {
        _ if pid == 0 => "idle".to_string(),
        Some(c) => c.to_string(),
        None => "?".to_string(),
    }
}

/// Compares CPU report `a` (the baseline, read from `a_file`) with `b`, made with the same
/// unit.
pub fn diff(
    (a_file, a): (&str, &CpuReport),
    (b_file, b): (&str, &CpuReport),
    options: &Options,
) -> Result<CpuDiff, DiffError> {
    options.check()?;
    let metric = options.metric;
    let mut units = super::pair(items(a), items(b), IndexKind::None, CpuDelta::of, |x, y| {
        x.self_samples == y.self_samples && x.total_samples == y.total_samples
    });
    super::sort_rows(&mut units, |u| u.b.percent(metric) - u.a.percent(metric));
    // Shares compared exactly: a/Ta against b/Tb is a·Tb against b·Ta.
    let (ta, tb) = (
        i128::from(a.total_samples.max(1)),
        i128::from(b.total_samples.max(1)),
    );
    let scaled = |u: &CpuUnitDiff| {
        (
            i128::from(u.a.samples(metric)) * tb,
            i128::from(u.b.samples(metric)) * ta,
        )
    };
    let gate = (!options.thresholds.is_empty()).then(|| Gate {
        metric: metric.name(),
        thresholds: options.thresholds.iter().map(Threshold::text).collect(),
        crossed: units
            .iter()
            .filter(|u| {
                let (x, y) = scaled(u);
                super::crosses(x, y, &options.thresholds)
            })
            .map(|u| {
                let (x, y) = scaled(u);
                Crossing {
                    unit: super::label(u),
                    a: Value::Percent(super::round2(u.a.percent(metric))),
                    b: Value::Percent(super::round2(u.b.percent(metric))),
                    growth_percent: super::growth_percent(x, y),
                }
            })
            .collect(),
    });
    let units_omitted = options.top.map_or(0, |n| units.len().saturating_sub(n));
    units.truncate(units.len() - units_omitted);
    for u in &mut units {
        u.a = u.a.rounded();
        u.b = u.b.rounded();
    }
    let total = |r: &CpuReport| CpuFigures::new(r.total_samples, r.total_samples, r.total_samples);
    let (fa, fb) = (total(a), total(b));
    let mut warnings: Vec<String> = a.warnings.iter().map(|w| format!("A: {w}")).collect();
    warnings.extend(b.warnings.iter().map(|w| format!("B: {w}")));
    if a.by != b.by {
        warnings.push(format!(
            "the reports differ in unit ({} and {}): units do not compare",
            a.by, b.by
        ));
    }
    if a.event != b.event || a.period_ns != b.period_ns {
        warnings.push(format!(
            "the recordings sampled differently ({} every {} ns, {} every {} ns): compare \
             shares rather than counts",
            a.event, a.period_ns, b.event, b.period_ns
        ));
    }
    Ok(CpuDiff {
        schema: super::SCHEMA,
        kind: "cpu",
        by: a.by,
        metric: metric.name(),
        a: CpuSide::of(a_file, a),
        b: CpuSide::of(b_file, b),
        totals: TotalDiff {
            delta: CpuDelta::of(&fa, &fb),
            a: fa,
            b: fb,
        },
        units,
        units_omitted,
        gate,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::report::{CpuUnit, SCHEMA};

    fn report(by: &'static str, total: u64, units: Vec<CpuUnit>) -> CpuReport {
        CpuReport {
            schema: SCHEMA,
            by,
            period_ns: 1_000_000,
            total_samples: total,
            event: "cpu-clock".into(),
            source: "perf",
            target: "command".into(),
            kernel: false,
            cpus: 2,
            duration_ns: 1_000_000_000,
            lost_samples: 0,
            lost_records: 0,
            unsampled_ns: 0,
            pid: None,
            units,
            notes: vec![],
            warnings: vec![],
        }
    }

    fn options(metric: Metric, thresholds: Vec<Threshold>) -> Options {
        Options {
            metric,
            thresholds,
            top: None,
        }
    }

    #[test]
    fn shares_are_compared_as_well_as_counts() {
        // A: 1000 samples, f 500 (50%), g 500 (50%). B twice as long: f 1200 (60%), g 800
        // (40%): both grew in samples, only f in share.
        let a = report(
            "function",
            1000,
            vec![
                CpuUnit::new("x!f".into(), 500, 600),
                CpuUnit::new("x!g".into(), 500, 500),
            ],
        );
        let b = report(
            "function",
            2000,
            vec![
                CpuUnit::new("x!f".into(), 1200, 1200),
                CpuUnit::new("x!g".into(), 800, 900),
                CpuUnit::new("x!h".into(), 0, 100),
            ],
        );
        let d = diff(("a", &a), ("b", &b), &options(Metric::SelfSamples, vec![])).unwrap();
        let rows: Vec<(&str, i64, f64)> = d
            .units
            .iter()
            .map(|u| (u.unit.as_str(), u.delta.self_samples, u.delta.self_percent))
            .collect();
        assert_eq!(
            rows,
            vec![("x!f", 700, 10.0), ("x!g", 300, -10.0), ("x!h", 0, 0.0)]
        );
        assert_eq!(d.units[2].status, Status::Added);
        assert_eq!(d.units[0].delta.total_percent, 0.0);
        assert_eq!(d.totals.a.self_samples, 1000);
        assert_eq!(d.totals.b.total_samples, 2000);
        assert_eq!(d.totals.delta.self_samples, 1000);
        assert_eq!(d.totals.delta.self_percent, 0.0);

        let crossed = |metric, pct| {
            diff(
                ("a", &a),
                ("b", &b),
                &options(metric, vec![Threshold::Percent(pct)]),
            )
            .unwrap()
            .gate
            .unwrap()
            .crossed
            .into_iter()
            .map(|c| (c.unit, c.growth_percent))
            .collect::<Vec<_>>()
        };
        // f: 50% -> 60% is +20% of its share; g shrank.
        assert_eq!(
            crossed(Metric::SelfSamples, 19.9),
            vec![("x!f".into(), Some(20.0))]
        );
        assert!(crossed(Metric::SelfSamples, 20.0).is_empty());
        // Total: h is new (0% -> 5%), f went 60% -> 60%, g 50% -> 45%.
        assert_eq!(
            crossed(Metric::TotalSamples, 1000.0),
            vec![("x!h".into(), None)]
        );
    }

    #[test]
    fn processes_match_by_command() {
        let proc_unit = |pid: u32, cmd: &str, n: u64| {
            let mut u = CpuUnit::new(format!("{cmd} [{pid}]"), n, n);
            u.pid = Some(pid);
            u.command = Some(cmd.into());
            u
        };
        let a = report("process", 10, vec![proc_unit(10, "app", 10)]);
        let b = report(
            "process",
            10,
            vec![proc_unit(20, "app", 8), proc_unit(21, "app", 2)],
        );
        let d = diff(("a", &a), ("b", &b), &options(Metric::SelfSamples, vec![])).unwrap();
        let rows: Vec<(String, Status, Option<String>)> = d
            .units
            .iter()
            .map(|u| (super::super::label(u), u.status, u.b_unit.clone()))
            .collect();
        assert_eq!(
            rows,
            vec![
                // +20 points before -20 points.
                ("app #2".into(), Status::Added, Some("app [21]".into())),
                ("app".into(), Status::Changed, Some("app [20]".into())),
            ]
        );
    }

    /// Threads match by process command and thread name across runs (their ids differ),
    /// in thread id order among threads of the same name.
    #[test]
    fn threads_match_by_command_and_name() {
        let thread_unit = |pid: u32, tid: u32, name: &str, n: u64| {
            let mut u = CpuUnit::new(format!("{name} [{tid}] of app [{pid}]"), n, n);
            u.pid = Some(pid);
            u.command = Some("app".into());
            u.tid = Some(tid);
            u.thread = Some(name.into());
            u
        };
        let a = report(
            "thread",
            10,
            vec![
                thread_unit(10, 11, "worker", 6),
                thread_unit(10, 12, "io", 4),
            ],
        );
        let b = report(
            "thread",
            10,
            vec![
                thread_unit(20, 23, "io", 4),
                thread_unit(20, 21, "worker", 3),
                thread_unit(20, 22, "worker", 3),
            ],
        );
        let d = diff(("a", &a), ("b", &a), &options(Metric::SelfSamples, vec![])).unwrap();
        assert!(d.units.iter().all(|u| u.status == Status::Unchanged));
        let d = diff(("a", &a), ("b", &b), &options(Metric::SelfSamples, vec![])).unwrap();
        let mut rows: Vec<(String, Status, Option<String>)> = d
            .units
            .iter()
            .map(|u| (super::super::label(u), u.status, u.b_unit.clone()))
            .collect();
        rows.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            rows,
            vec![
                (
                    "app io".into(),
                    Status::Unchanged,
                    Some("io [23] of app [20]".into())
                ),
                (
                    "app worker".into(),
                    Status::Changed,
                    Some("worker [21] of app [20]".into())
                ),
                (
                    "app worker #2".into(),
                    Status::Added,
                    Some("worker [22] of app [20]".into())
                ),
            ]
        );
    }

    #[test]
    fn amounts_and_heap_metrics_are_refused() {
        let a = report("function", 0, vec![]);
        assert_eq!(
            diff(
                ("a", &a),
                ("b", &a),
                &options(Metric::SelfSamples, vec![Threshold::Amount(5)])
            ),
            Err(DiffError::AmountForCpu)
        );
        assert!(matches!(
            diff(("a", &a), ("b", &a), &options(Metric::Max, vec![])),
            Err(DiffError::MetricKind { .. })
        ));
        let d = diff(("a", &a), ("b", &a), &options(Metric::TotalSamples, vec![])).unwrap();
        assert!(d.units.is_empty());
        assert_eq!(d.totals.a.self_percent, 0.0);
    }

    use super::super::Status;
}
