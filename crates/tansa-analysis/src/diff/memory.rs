//! The difference of two heap reports.

use serde::Serialize;

use super::{
    Crossing, DiffError, Gate, IndexKind, Item, Metric, Threshold, TotalDiff, UnitDiff, Value,
};
use crate::memory::MemoryReport;
use crate::memory::report::{Calls, Stats};

/// A unit's heap figures on one side: those of the heap report, plus the calls of every
/// family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HeapFigures {
    /// The report's figures.
    #[serde(flatten)]
    pub stats: Stats,
    /// Calls of every family.
    pub total_calls: u64,
    /// Bytes the leak check at exit found lost, definitely or indirectly (recordings made
    /// with `tansa record --leak-check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_at_exit_bytes: Option<u64>,
}

impl From<Stats> for HeapFigures {
    fn from(stats: Stats) -> Self {
        HeapFigures {
            stats,
            total_calls: stats.calls.total(),
            lost_at_exit_bytes: None,
        }
    }
}

impl HeapFigures {
    /// The value of a heap metric (0 for CPU metrics).
    pub fn metric(&self, metric: Metric) -> i128 {
        match metric {
            Metric::Net => self.stats.net_bytes.into(),
            Metric::Max => self.stats.max_bytes.into(),
            Metric::Allocated => self.stats.allocated_bytes.into(),
            Metric::Calls => self.total_calls.into(),
            Metric::Temporary => self.stats.temporary_allocations.into(),
            Metric::Lost => self.lost_at_exit_bytes.unwrap_or(0).into(),
            Metric::SelfSamples | Metric::TotalSamples => 0,
        }
    }
}

/// Changes of call counts (B minus A).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CallsDelta {
    /// `malloc`
    pub malloc: i64,
    /// `calloc`
    pub calloc: i64,
    /// `realloc` and `reallocarray`
    pub realloc: i64,
    /// `free`
    pub free: i64,
    /// The `memalign` family.
    pub memalign: i64,
}

/// Changes of a unit's heap figures (B minus A; saturating at the bounds of `i64`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HeapDelta {
    /// Of `net_bytes`.
    pub net_bytes: i64,
    /// Of `max_bytes`.
    pub max_bytes: i64,
    /// Of `min_bytes`.
    pub min_bytes: i64,
    /// Of `allocated_bytes`.
    pub allocated_bytes: i64,
    /// Of `freed_bytes`.
    pub freed_bytes: i64,
    /// Of the calls, per family.
    pub calls: CallsDelta,
    /// Of `total_calls`.
    pub total_calls: i64,
    /// Of `temporary_allocations`.
    pub temporary_allocations: i64,
    /// Of `lost_at_exit_bytes`, when either side has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_at_exit_bytes: Option<i64>,
}

impl HeapDelta {
    /// B minus A.
    pub fn of(a: &HeapFigures, b: &HeapFigures) -> HeapDelta {
        use super::sub;
        let (x, y) = (&a.stats, &b.stats);
        let c = |f: fn(&Calls) -> u64| sub(f(&y.calls), f(&x.calls));
        HeapDelta {
            net_bytes: sub(y.net_bytes, x.net_bytes),
            max_bytes: sub(y.max_bytes, x.max_bytes),
            min_bytes: sub(y.min_bytes, x.min_bytes),
            allocated_bytes: sub(y.allocated_bytes, x.allocated_bytes),
            freed_bytes: sub(y.freed_bytes, x.freed_bytes),
            calls: CallsDelta {
                malloc: c(|c| c.malloc),
                calloc: c(|c| c.calloc),
                realloc: c(|c| c.realloc),
                free: c(|c| c.free),
                memalign: c(|c| c.memalign),
            },
            total_calls: sub(b.total_calls, a.total_calls),
            temporary_allocations: sub(y.temporary_allocations, x.temporary_allocations),
            lost_at_exit_bytes: (a.lost_at_exit_bytes.is_some() || b.lost_at_exit_bytes.is_some())
                .then(|| {
                    sub(
                        b.lost_at_exit_bytes.unwrap_or(0),
                        a.lost_at_exit_bytes.unwrap_or(0),
                    )
                }),
        }
    }
}

/// One side of a heap comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeapSide {
    /// The recording, as the caller names it (its path).
    pub file: String,
    /// The process reported on.
    pub pid: u32,
    /// Its command line.
    pub command: Vec<String>,
    /// How it ended (a sentence).
    pub exit: String,
    /// Events reported on.
    pub events: u64,
    /// From the first process start to the last event, in nanoseconds.
    pub duration_ns: u64,
}

impl HeapSide {
    fn of(file: &str, r: &MemoryReport) -> HeapSide {
        HeapSide {
            file: file.to_string(),
            pid: r.process.pid,
            command: r.process.command.clone(),
            exit: r.process.exit.description.clone(),
            events: r.events,
            duration_ns: r.duration_ns,
        }
    }
}

/// A row of a heap comparison.
pub type HeapUnitDiff = UnitDiff<HeapFigures, HeapDelta>;

/// The comparison of two heap reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeapDiff {
    /// [`super::SCHEMA`].
    pub schema: &'static str,
    /// `heap`.
    pub kind: &'static str,
    /// Unit of aggregation.
    pub by: &'static str,
    /// Charge policy.
    pub charge: &'static str,
    /// Free accounting.
    pub free_to: &'static str,
    /// Interval length (`--by interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ns: Option<u64>,
    /// The metric rows are sorted by.
    pub metric: &'static str,
    /// The first recording (the baseline).
    pub a: HeapSide,
    /// The second recording.
    pub b: HeapSide,
    /// Figures over everything reported in each.
    pub totals: TotalDiff<HeapFigures, HeapDelta>,
    /// Units in A, B or both, by the absolute change of the metric, largest first.
    pub units: Vec<HeapUnitDiff>,
    /// Units left out of `units` (`--top`).
    pub units_omitted: usize,
    /// The growth gate, when thresholds were given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
    /// The reports' warnings, each prefixed with `A: ` or `B: `.
    pub warnings: Vec<String>,
}

/// Options of a heap comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The metric to sort and judge by (a heap one).
    pub metric: Metric,
    /// Growth thresholds (none: no gate).
    pub thresholds: Vec<Threshold>,
    /// Rows kept (all when `None`); the gate judges every unit.
    pub top: Option<usize>,
}

impl Options {
    /// Whether the options apply to heap recordings: the metric, and the thresholds (at most
    /// one percentage and one amount).
    pub fn check(&self) -> Result<(), DiffError> {
        self.metric.check(true)?;
        super::check_thresholds(&self.thresholds, true)
    }
}

fn items(r: &MemoryReport) -> Vec<Item<HeapFigures>> {
    let interval = r.interval_ns.filter(|n| *n > 0);
    r.units
        .iter()
        .map(|u| {
            let (unit, order) = match &u.thread {
                Some(t) => (t.name.clone(), Some((u64::from(t.pid), u64::from(t.tid)))),
                None => (u.unit.clone(), None),
            };
            let index = match (u.call_index, interval, u.start_ns) {
                (Some(i), _, _) => Some(i),
                (None, Some(len), Some(start)) => Some(start / len),
                _ => None,
            };
            Item {
                unit,
                index,
                order,
                name: u.unit.clone(),
                figures: HeapFigures {
                    lost_at_exit_bytes: u.at_exit.map(|x| x.lost_bytes()),
                    ..u.stats.into()
                },
            }
        })
        .collect()
}

/// Compares heap report `a` (the baseline, read from `a_file`) with `b`. Both should come
/// from the same analysis options (unit, charge policy, free accounting, interval).
pub fn diff(
    (a_file, a): (&str, &MemoryReport),
    (b_file, b): (&str, &MemoryReport),
    options: &Options,
) -> Result<HeapDiff, DiffError> {
    options.check()?;
    if options.metric == Metric::Lost {
        match (a.leak_check.is_some(), b.leak_check.is_some()) {
            (true, true) => {}
            (false, true) => return Err(DiffError::NoLeakCheck { side: "A" }),
            (true, false) => return Err(DiffError::NoLeakCheck { side: "B" }),
            (false, false) => return Err(DiffError::NoLeakCheck { side: "A and B" }),
        }
    }
    let index_kind = match (a.by, a.interval_ns) {
        ("call", _) => IndexKind::Call,
        (_, Some(_)) => IndexKind::Interval,
        _ => IndexKind::None,
    };
    let metric = options.metric;
    let mut units = super::pair(items(a), items(b), index_kind, HeapDelta::of, |x, y| x == y);
    let change = |u: &HeapUnitDiff| u.b.metric(metric) - u.a.metric(metric);
    super::sort_rows(&mut units, |u| change(u) as f64);
    let gate = (!options.thresholds.is_empty()).then(|| Gate {
        metric: metric.name(),
        thresholds: options.thresholds.iter().map(Threshold::text).collect(),
        crossed: units
            .iter()
            .filter(|u| super::crosses(u.a.metric(metric), u.b.metric(metric), &options.thresholds))
            .map(|u| {
                let (x, y) = (u.a.metric(metric), u.b.metric(metric));
                let count = |v: i128| {
                    Value::Count(v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
                };
                Crossing {
                    unit: super::label(u),
                    a: count(x),
                    b: count(y),
                    growth_percent: super::growth_percent(x, y),
                }
            })
            .collect(),
    });
    let units_omitted = options.top.map_or(0, |n| units.len().saturating_sub(n));
    units.truncate(units.len() - units_omitted);
    let total = |r: &MemoryReport| HeapFigures {
        lost_at_exit_bytes: r.leak_check.as_ref().map(|c| c.at_exit.lost_bytes()),
        ..r.totals.into()
    };
    let (ta, tb) = (total(a), total(b));
    let mut warnings: Vec<String> = a.warnings.iter().map(|w| format!("A: {w}")).collect();
    warnings.extend(b.warnings.iter().map(|w| format!("B: {w}")));
    // Sampled figures are estimates: compared with exact ones, or with another rate's,
    // a difference may be the sampling's own.
    let rate = |r: &MemoryReport| {
        r.sample_rate_bytes.map_or_else(
            || "exact".to_string(),
            |b| format!("sampled every {b} bytes"),
        )
    };
    if a.sample_rate_bytes != b.sample_rate_bytes {
        warnings.push(format!(
            "the recordings were made at different sampling rates (A: {}, B: {}): differences \
             within the estimates' error are not changes",
            rate(a),
            rate(b)
        ));
    } else if a.sample_rate_bytes.is_some() {
        warnings.push(format!(
            "both recordings are sampled ({}): their figures are estimates, and so are the \
             differences",
            rate(a)
        ));
    }
    for (what, x, y) in [
        ("unit", a.by, b.by),
        ("charge policy", a.charge, b.charge),
        ("free accounting", a.free_to, b.free_to),
    ] {
        if x != y {
            warnings.push(format!(
                "the reports differ in {what} ({x} and {y}): units do not compare"
            ));
        }
    }
    Ok(HeapDiff {
        schema: super::SCHEMA,
        kind: "heap",
        by: a.by,
        charge: a.charge,
        free_to: a.free_to,
        interval_ns: a.interval_ns,
        metric: metric.name(),
        a: HeapSide::of(a_file, a),
        b: HeapSide::of(b_file, b),
        totals: TotalDiff {
            delta: HeapDelta::of(&ta, &tb),
            a: ta,
            b: tb,
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
    use crate::diff::Status;
    use crate::memory::report::{ExitReport, ProcessReport, SCHEMA, ThreadReport, UnitReport};
    use tansa_format::meta::ExitStatus;

    fn stats(net: i64, max: i64, allocated: u64, malloc: u64, free: u64) -> Stats {
        Stats {
            net_bytes: net,
            max_bytes: max,
            min_bytes: 0,
            allocated_bytes: allocated,
            freed_bytes: allocated - net as u64,
            calls: Calls {
                malloc,
                free,
                ..Calls::default()
            },
            ..Stats::default()
        }
    }

    fn unit(name: &str, s: Stats) -> UnitReport {
        UnitReport {
            unit: name.into(),
            stats: s,
            thread: None,
            call_index: None,
            start_ns: None,
            end_ns: None,
            cumulative_net_bytes: None,
            rank: None,
            host: None,
            exe: None,
            processes: None,
            at_exit: None,
        }
    }

    fn report(by: &'static str, units: Vec<UnitReport>) -> MemoryReport {
        let process = ProcessReport {
            events: 10,
            ..ProcessReport::new(
                7,
                1,
                "/bin/x".into(),
                vec!["x".into()],
                ExitReport::from(ExitStatus::Exited { code: 0 }),
            )
        };
        let mut totals = Stats::default();
        for u in &units {
            totals.net_bytes += u.stats.net_bytes;
            totals.max_bytes += u.stats.max_bytes;
            totals.allocated_bytes += u.stats.allocated_bytes;
            totals.freed_bytes += u.stats.freed_bytes;
            totals.calls.malloc += u.stats.calls.malloc;
            totals.calls.free += u.stats.calls.free;
        }
        MemoryReport {
            schema: SCHEMA,
            by,
            charge: "first",
            free_to: "owner",
            interval_ns: None,
            process: process.clone(),
            processes: vec![process],
            totals,
            units,
            improper: vec![],
            inherited_frees: 0,
            sample_rate_bytes: None,
            events: 10,
            duration_ns: 1000,
            unrecorded: vec![],
            recordings: vec![],
            job: None,
            leak_check: None,
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
    fn deltas_statuses_order_and_totals() {
        let a = report(
            "library",
            vec![
                unit("liba.so", stats(1000, 1000, 1000, 10, 0)),
                unit("libb.so", stats(0, 500, 500, 5, 5)),
                unit("gone.so", stats(64, 64, 64, 1, 0)),
            ],
        );
        let b = report(
            "library",
            vec![
                unit("liba.so", stats(5000, 5000, 5000, 50, 0)),
                unit("libb.so", stats(0, 500, 500, 5, 5)),
                unit("new.so", stats(100, 200, 300, 3, 2)),
            ],
        );
        let d = diff(("a", &a), ("b", &b), &options(Metric::Net, vec![])).unwrap();
        assert_eq!(d.schema, "tansa.diff.v1");
        let rows: Vec<(&str, Status, i64, i64)> = d
            .units
            .iter()
            .map(|u| {
                (
                    u.unit.as_str(),
                    u.status,
                    u.delta.net_bytes,
                    u.delta.total_calls,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("liba.so", Status::Changed, 4000, 40),
                ("new.so", Status::Added, 100, 5),
                ("gone.so", Status::Removed, -64, -1),
                ("libb.so", Status::Unchanged, 0, 0),
            ]
        );
        let liba = &d.units[0];
        assert_eq!(liba.delta.allocated_bytes, 4000);
        assert_eq!(liba.delta.calls.malloc, 40);
        assert_eq!((liba.a.total_calls, liba.b.total_calls), (10, 50));
        let new = &d.units[1];
        assert_eq!(new.a, HeapFigures::default());
        assert_eq!(new.delta.freed_bytes, 200);
        assert_eq!(d.totals.a.stats.net_bytes, 1064);
        assert_eq!(d.totals.b.stats.net_bytes, 5100);
        assert_eq!(d.totals.delta.net_bytes, 4036);
        assert!(d.gate.is_none());
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn gate_and_top() {
        let a = report(
            "function",
            vec![
                unit("x!leak", stats(1000, 1000, 1000, 10, 0)),
                unit("x!steady", stats(100, 100, 100, 1, 0)),
            ],
        );
        let b = report(
            "function",
            vec![
                unit("x!leak", stats(1500, 1500, 1500, 15, 0)),
                unit("x!steady", stats(105, 105, 105, 1, 0)),
                unit("x!fresh", stats(10, 10, 10, 1, 0)),
            ],
        );
        let gate = |thresholds| {
            let d = diff(("a", &a), ("b", &b), &options(Metric::Max, thresholds)).unwrap();
            let g = d.gate.unwrap();
            g.crossed.into_iter().map(|c| c.unit).collect::<Vec<_>>()
        };
        assert_eq!(
            gate(vec![Threshold::Percent(10.0)]),
            vec!["x!leak", "x!fresh"]
        );
        assert_eq!(gate(vec![Threshold::Percent(50.0)]), vec!["x!fresh"]);
        assert_eq!(gate(vec![Threshold::Amount(499)]), vec!["x!leak"]);
        assert!(gate(vec![Threshold::Amount(500)]).is_empty());
        assert_eq!(
            gate(vec![Threshold::Percent(1.0), Threshold::Amount(8)]),
            vec!["x!leak", "x!fresh"]
        );
        let d = diff(
            ("a", &a),
            ("b", &b),
            &Options {
                metric: Metric::Max,
                thresholds: vec![Threshold::Percent(1.0)],
                top: Some(1),
            },
        )
        .unwrap();
        assert_eq!(d.units.len(), 1);
        assert_eq!(d.units_omitted, 2);
        assert_eq!(
            d.gate.unwrap().crossed.len(),
            3,
            "the gate judges every unit"
        );
        let c = diff(
            ("a", &a),
            ("b", &b),
            &options(Metric::Calls, vec![Threshold::Amount(0)]),
        )
        .unwrap();
        let g = c.gate.unwrap();
        assert_eq!(g.crossed[0].unit, "x!leak");
        assert_eq!(g.crossed[0].a, Value::Count(10));
        assert_eq!(g.crossed[0].growth_percent, Some(50.0));
    }

    #[test]
    fn threads_match_by_name_and_calls_by_index() {
        let thread = |name: &str, tid: u32, net: i64| {
            let mut u = unit(
                &format!("{name} [{tid}]"),
                stats(net, net, net as u64, 1, 0),
            );
            u.thread = Some(ThreadReport {
                pid: 7,
                tid,
                name: name.into(),
            });
            u
        };
        let a = report("thread", vec![thread("main", 100, 10), thread("w", 101, 5)]);
        let b = report("thread", vec![thread("main", 200, 12), thread("w", 201, 5)]);
        let d = diff(("a", &a), ("b", &b), &options(Metric::Net, vec![])).unwrap();
        assert_eq!(d.units.len(), 2);
        assert_eq!(d.units[0].unit, "main");
        assert_eq!(d.units[0].delta.net_bytes, 2);
        assert_eq!(d.units[0].a_unit.as_deref(), Some("main [100]"));
        assert_eq!(d.units[0].b_unit.as_deref(), Some("main [200]"));
        assert_eq!(d.units[0].occurrence, Some(1));

        let call = |i: u64, net: i64| {
            let mut u = unit("liba.so", stats(net, net, net as u64, 1, 0));
            u.call_index = Some(i);
            u.start_ns = Some(i * 1000);
            u
        };
        let a = report("call", vec![call(0, 10), call(1, 20)]);
        let b = report("call", vec![call(0, 10), call(1, 25), call(2, 1)]);
        let d = diff(("a", &a), ("b", &b), &options(Metric::Net, vec![])).unwrap();
        let rows: Vec<(String, i64)> = d
            .units
            .iter()
            .map(|u| (super::super::label(u), u.delta.net_bytes))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("liba.so call #1".to_string(), 5),
                ("liba.so call #2".to_string(), 1),
                ("liba.so call #0".to_string(), 0),
            ]
        );
        assert!(d.units.iter().all(|u| u.a_unit.is_none()));
    }

    #[test]
    fn intervals_match_by_index() {
        let interval = |i: u64, net: i64| {
            let mut u = unit("liba.so", stats(net, net, net as u64, 1, 0));
            u.start_ns = Some(i * 100);
            u.end_ns = Some((i + 1) * 100);
            u
        };
        let mut a = report("interval", vec![interval(0, 10), interval(3, 20)]);
        a.interval_ns = Some(100);
        let mut b = report("interval", vec![interval(3, 50)]);
        b.interval_ns = Some(100);
        let d = diff(("a", &a), ("b", &b), &options(Metric::Net, vec![])).unwrap();
        let rows: Vec<(Option<u64>, i64)> = d
            .units
            .iter()
            .map(|u| (u.interval_index, u.delta.net_bytes))
            .collect();
        assert_eq!(rows, vec![(Some(3), 30), (Some(0), -10)]);
    }

    #[test]
    fn wrong_metric_and_mismatched_reports() {
        let a = report("library", vec![]);
        let b = report("function", vec![]);
        assert!(matches!(
            diff(("a", &a), ("b", &a), &options(Metric::SelfSamples, vec![])),
            Err(DiffError::MetricKind { .. })
        ));
        let d = diff(("a", &a), ("b", &b), &options(Metric::Max, vec![])).unwrap();
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    }
}
