//! The heap page: the heap over time per library, the unit tables filtered by a time
//! range, leak sites, improper uses, the process tree and the flame graphs given.
//!
//! The time line is cut into at most [`Limits::max_buckets`] buckets. For each kind of
//! unit (library, function, thread) the [`Limits::top_units`] largest units (by peak, then
//! bytes allocated: the report's order) keep their own series, one entry per bucket where
//! they had events: net change, peak within the bucket (relative to its start), bytes
//! allocated and freed, calls, and the running net at the bucket's end. The other units
//! are summed into one `(others)` unit (whose peak within a range is not known). A time
//! range's figures are then sums over its buckets, and its peak the largest of
//! (running net before a bucket + peak within it): exact at bucket granularity.

use std::collections::HashMap;

use serde::Serialize;
use tansa_analysis::memory::leaks::{
    AtExit, LeakCheckSummary, LeaksReport, SiteReport, fold_repeats,
};
use tansa_analysis::memory::report::{
    ImproperReport, ProcessReport, Stats, ThreadReport, UnitReport, UnrecordedReport,
};
use tansa_analysis::memory::{By, Config, MemoryReport};

use crate::{FlameGraph, HtmlError, Kind, Limits, Page};

/// The reports a heap page is made from: see [`heap_configs`] for how to make them.
#[derive(Debug, Clone, Copy)]
pub struct HeapInput<'a> {
    /// What the page is about (the recording's file name), for its title.
    pub source: &'a str,
    /// Per library, split per interval.
    pub library: &'a MemoryReport,
    /// Per function, split per interval.
    pub function: &'a MemoryReport,
    /// Per thread, split per interval.
    pub thread: &'a MemoryReport,
    /// Per call.
    pub call: &'a MemoryReport,
    /// The leak report, when made.
    pub leaks: Option<&'a LeaksReport>,
}

/// The configurations of the four reports of a [`HeapInput`] (library, function, thread,
/// call), from the report options in `base` (charge, free accounting, process) and the
/// recording's length: intervals of `span_ns / max_buckets`, so a recording of known
/// length makes at most `max_buckets` intervals per unit (the page merges more if the
/// length was not known).
pub fn heap_configs(base: Config, span_ns: u64, limits: &Limits) -> [Config; 4] {
    let buckets = limits.max_buckets.max(1) as u64;
    let interval_ns = span_ns.div_ceil(buckets).max(1_000);
    let split = |by| Config {
        by,
        interval_ns,
        split_intervals: true,
        ..base
    };
    [
        split(By::Library),
        split(By::Function),
        split(By::Thread),
        Config {
            by: By::Call,
            ..base
        },
    ]
}

/// One unit's figures: net, peak, lowest, allocated, freed, calls, temporary allocations.
type Totals = [i64; 7];
/// One bucket of a unit: bucket index, net change, peak within the bucket (from its
/// start), allocated, freed, calls, running net at its end, temporary allocations.
type Point = [i64; 8];

#[derive(Debug, Serialize)]
struct UnitData {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread: Option<ThreadReport>,
    total: Totals,
    series: Vec<Point>,
    /// Its blocks still allocated at exit, as the leak check found them (`record
    /// --leak-check`; `null` otherwise).
    at_exit: Option<AtExit>,
}

#[derive(Debug, Serialize)]
struct KindData {
    kind: &'static str,
    /// Units in the report.
    count: usize,
    units: Vec<UnitData>,
    /// The sum of the units not listed, if any.
    others: Option<UnitData>,
}

#[derive(Debug, Serialize)]
struct CallData {
    library: String,
    index: u64,
    start_ns: u64,
    end_ns: u64,
    total: Totals,
}

#[derive(Debug, Serialize)]
struct HeapData<'a> {
    source: &'a str,
    process: &'a ProcessReport,
    charge: &'static str,
    free_to: &'static str,
    events: u64,
    duration_ns: u64,
    bucket_ns: u64,
    buckets: usize,
    totals: Totals,
    kinds: Vec<KindData>,
    calls: Vec<CallData>,
    call_count: usize,
    leaks: Option<LeaksView<'a>>,
    leak_site_count: usize,
    chart_bands: usize,
    improper: &'a [ImproperReport],
    processes: &'a [ProcessReport],
    /// The job (reports over several recordings or of an MPI job): ranks, first end.
    job: Option<&'a tansa_analysis::memory::report::JobReport>,
    unrecorded: &'a [UnrecordedReport],
    inherited_frees: u64,
    sample_rate_bytes: Option<u64>,
    warnings: &'a [String],
    flame_graphs: &'a [FlameGraph],
}

/// The leak report with its sites cut to the largest.
#[derive(Debug, Serialize)]
struct LeaksView<'a> {
    leak_cause: bool,
    /// The leak check at exit's summary (`record --leak-check`).
    leak_check: Option<&'a LeakCheckSummary>,
    sites: Vec<ShownSite<'a>>,
    /// Sites not freed that repeat one shown (or one cut), folded into it.
    folded: usize,
    trace_failures: &'a [String],
    warnings: &'a [String],
}

/// A site the page shows, with the sites that repeat it ([`fold_repeats`]).
#[derive(Debug, Serialize)]
struct ShownSite<'a> {
    #[serde(flatten)]
    site: &'a SiteReport,
    repeats: Option<Repeats>,
}

/// The sites that repeat a shown one, together.
#[derive(Debug, Default, Serialize)]
struct Repeats {
    /// How many are in other images of the program.
    in_other_images: usize,
    /// How many are in the same image, through call paths that look the same.
    in_same_image: usize,
    /// Their numbers (`index`), the first [`REPEATS_LISTED`].
    indexes: Vec<usize>,
    leaked_blocks: u64,
    leaked_bytes: u64,
}

/// How many repeats of a site the page lists by number.
const REPEATS_LISTED: usize = 8;

/// The sites the page shows: of the sites not freed (whose stacks are named), the `max`
/// that lost the most bytes at exit (recordings made with the leak check), then that hold
/// the most bytes at the end with their repeats (in the report's order among equals),
/// largest first, each with its repeats folded into it.
fn leaks_view(r: &LeaksReport, max: usize) -> LeaksView<'_> {
    let candidates: Vec<&SiteReport> = r.sites.iter().filter(|s| s.judgement != "freed").collect();
    let mut shown: Vec<((u64, u64), ShownSite<'_>)> = fold_repeats(&candidates)
        .into_iter()
        .map(|(first, same)| {
            let head = candidates[first];
            let image = |s: &SiteReport| (s.pid, s.session);
            let repeats = (!same.is_empty()).then(|| {
                let mut rep = Repeats::default();
                for &i in &same {
                    let s = candidates[i];
                    if image(s) == image(head) {
                        rep.in_same_image += 1;
                    } else {
                        rep.in_other_images += 1;
                    }
                    if rep.indexes.len() < REPEATS_LISTED {
                        rep.indexes.push(s.index);
                    }
                    rep.leaked_blocks = rep.leaked_blocks.saturating_add(s.leaked_blocks);
                    rep.leaked_bytes = rep.leaked_bytes.saturating_add(s.leaked_bytes);
                }
                rep
            });
            let bytes = head
                .leaked_bytes
                .saturating_add(repeats.as_ref().map_or(0, |r| r.leaked_bytes));
            let lost = head.at_exit.map_or(0, |x| x.lost_bytes());
            (
                (lost, bytes),
                ShownSite {
                    site: head,
                    repeats,
                },
            )
        })
        .collect();
    let folded = candidates.len() - shown.len();
    shown.sort_by(|(a, x), (b, y)| b.cmp(a).then(x.site.index.cmp(&y.site.index)));
    shown.truncate(max);
    LeaksView {
        leak_cause: r.leak_cause,
        leak_check: r.leak_check.as_ref(),
        sites: shown.into_iter().map(|(_, s)| s).collect(),
        folded,
        trace_failures: &r.trace_failures,
        warnings: &r.warnings,
    }
}

fn sat(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn totals(s: &Stats) -> Totals {
    let calls = s.calls.total();
    [
        s.net_bytes,
        s.max_bytes,
        s.min_bytes,
        sat(s.allocated_bytes),
        sat(s.freed_bytes),
        sat(calls),
        sat(s.temporary_allocations),
    ]
}

/// A unit's rows merged into buckets, in time order.
#[derive(Debug, Default)]
struct Series {
    name: String,
    thread: Option<ThreadReport>,
    whole: Stats,
    /// Bucket, figures in it, running net at its end.
    buckets: Vec<(u64, Stats, i64)>,
    /// Its blocks at exit (on its last row of the split report).
    at_exit: Option<AtExit>,
}

/// Groups the rows of a split report per unit and bucket (`group` intervals per bucket).
fn series_of(units: &[UnitReport], interval_ns: u64, group: u64) -> Vec<Series> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Series> = Vec::new();
    for u in units {
        let i = *index.entry(u.unit.as_str()).or_insert_with(|| {
            out.push(Series {
                name: u.unit.clone(),
                thread: u.thread.clone(),
                ..Series::default()
            });
            out.len() - 1
        });
        let s = &mut out[i];
        s.whole = s.whole.then(&u.stats);
        if let Some(x) = &u.at_exit {
            s.at_exit.get_or_insert_with(AtExit::default).sum(x);
        }
        let bucket = u.start_ns.unwrap_or(0) / interval_ns.max(1) / group.max(1);
        let cumulative = u.cumulative_net_bytes.unwrap_or(s.whole.net_bytes);
        match s.buckets.last_mut() {
            Some((b, stats, cum)) if *b == bucket => {
                *stats = stats.then(&u.stats);
                *cum = cumulative;
            }
            _ => s.buckets.push((bucket, u.stats, cumulative)),
        }
    }
    // The report's order: largest peak first, then most allocated, then by name.
    out.sort_by(|a, b| {
        (b.whole.max_bytes, b.whole.allocated_bytes, &a.name).cmp(&(
            a.whole.max_bytes,
            a.whole.allocated_bytes,
            &b.name,
        ))
    });
    out
}

fn point(bucket: u64, s: &Stats, cumulative: i64) -> Point {
    let t = totals(s);
    [sat(bucket), t[0], t[1], t[3], t[4], t[5], cumulative, t[6]]
}

fn kind_data(kind: &'static str, series: Vec<Series>, top: usize) -> KindData {
    let count = series.len();
    let mut units = Vec::new();
    let mut rest: Vec<Series> = Vec::new();
    for (i, s) in series.into_iter().enumerate() {
        if i < top {
            units.push(UnitData {
                name: s.name,
                thread: s.thread,
                total: totals(&s.whole),
                series: s
                    .buckets
                    .iter()
                    .map(|(b, st, cum)| point(*b, st, *cum))
                    .collect(),
                at_exit: s.at_exit,
            });
        } else {
            rest.push(s);
        }
    }
    let others = (!rest.is_empty()).then(|| others(&rest));
    KindData {
        kind,
        count,
        units,
        others,
    }
}

/// The units of `rest` summed: per bucket, the sums of their figures and running nets
/// (a unit without events in a bucket keeps its running net). Peaks of a sum are not
/// known: they are left at 0 (the page shows none).
fn others(rest: &[Series]) -> UnitData {
    let mut buckets: Vec<u64> = rest
        .iter()
        .flat_map(|s| s.buckets.iter().map(|b| b.0))
        .collect();
    buckets.sort_unstable();
    buckets.dedup();
    let mut sums: Vec<Point> = buckets
        .iter()
        .map(|&b| [sat(b), 0, 0, 0, 0, 0, 0, 0])
        .collect();
    for s in rest {
        let mut j = 0;
        let mut cum = 0i64;
        for (k, p) in sums.iter_mut().enumerate() {
            if j < s.buckets.len() && s.buckets[j].0 == buckets[k] {
                let t = totals(&s.buckets[j].1);
                p[1] = p[1].saturating_add(t[0]);
                p[3] = p[3].saturating_add(t[3]);
                p[4] = p[4].saturating_add(t[4]);
                p[5] = p[5].saturating_add(t[5]);
                p[7] = p[7].saturating_add(t[6]);
                cum = s.buckets[j].2;
                j += 1;
            }
            p[6] = p[6].saturating_add(cum);
        }
    }
    let mut total: Totals = [0; 7];
    for s in rest {
        let t = totals(&s.whole);
        for k in [0, 3, 4, 5, 6] {
            total[k] = total[k].saturating_add(t[k]);
        }
    }
    let mut at_exit: Option<AtExit> = None;
    for x in rest.iter().filter_map(|s| s.at_exit.as_ref()) {
        at_exit.get_or_insert_with(AtExit::default).sum(x);
    }
    UnitData {
        name: format!("(others: {} units)", rest.len()),
        thread: None,
        total,
        series: sums,
        at_exit,
    }
}

/// Builds the heap page.
pub fn heap(
    input: &HeapInput<'_>,
    flame_graphs: &[FlameGraph],
    limits: &Limits,
) -> Result<Page, HtmlError> {
    let lib = input.library;
    let interval_ns = lib.interval_ns.unwrap_or(lib.duration_ns.max(1));
    // Intervals used, and how many make one bucket.
    let last_interval = [input.library, input.function, input.thread]
        .iter()
        .flat_map(|r| r.units.iter())
        .filter_map(|u| u.start_ns)
        .max()
        .unwrap_or(0)
        / interval_ns.max(1);
    let max_buckets = limits.max_buckets.max(1) as u64;
    let group = (last_interval + 1).div_ceil(max_buckets).max(1);
    let buckets = (last_interval / group + 1) as usize;
    let kinds = [
        ("library", input.library),
        ("function", input.function),
        ("thread", input.thread),
    ]
    .into_iter()
    .map(|(kind, r)| {
        let ns = r.interval_ns.unwrap_or(interval_ns);
        // Every split report is cut at the same intervals unless one was lengthened.
        let g = (group * interval_ns).div_ceil(ns.max(1)).max(1);
        kind_data(kind, series_of(&r.units, ns, g), limits.top_units)
    })
    .collect();
    let mut calls: Vec<&UnitReport> = input.call.units.iter().collect();
    calls.sort_by(|a, b| {
        (b.stats.max_bytes, b.stats.allocated_bytes)
            .cmp(&(a.stats.max_bytes, a.stats.allocated_bytes))
    });
    let call_count = calls.len();
    let calls = calls
        .into_iter()
        .take(limits.top_calls)
        .map(|u| CallData {
            library: u.unit.clone(),
            index: u.call_index.unwrap_or(0),
            start_ns: u.start_ns.unwrap_or(0),
            end_ns: u.end_ns.unwrap_or(0),
            total: totals(&u.stats),
        })
        .collect();
    let data = HeapData {
        source: input.source,
        process: &lib.process,
        charge: lib.charge,
        free_to: lib.free_to,
        events: lib.events,
        duration_ns: lib.duration_ns,
        bucket_ns: interval_ns.saturating_mul(group),
        buckets,
        totals: totals(&lib.totals),
        kinds,
        calls,
        call_count,
        leaks: input.leaks.map(|l| leaks_view(l, limits.leak_sites)),
        leak_site_count: input.leaks.map_or(0, |l| {
            l.sites.iter().filter(|s| s.judgement != "freed").count()
        }),
        chart_bands: limits.chart_bands,
        improper: &lib.improper[..lib.improper.len().min(limits.improper)],
        processes: &lib.processes,
        job: lib.job.as_ref(),
        unrecorded: &lib.unrecorded,
        inherited_frees: lib.inherited_frees,
        sample_rate_bytes: lib.sample_rate_bytes,
        warnings: &lib.warnings,
        flame_graphs,
    };
    Page::new(
        Kind::Heap,
        format!("tansa heap report: {}", input.source),
        &data,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(unit: &str, interval: u64, deltas: &[i64], cumulative: i64) -> UnitReport {
        let mut stats = Stats::default();
        for &d in deltas {
            stats.add(d);
            if d > 0 {
                stats.allocated_bytes += d as u64;
                stats.calls.malloc += 1;
            } else {
                stats.freed_bytes += d.unsigned_abs();
                stats.calls.free += 1;
            }
        }
        UnitReport {
            unit: unit.into(),
            stats,
            thread: None,
            call_index: None,
            start_ns: Some(interval * 10),
            end_ns: Some(interval * 10 + 10),
            cumulative_net_bytes: Some(cumulative),
            rank: None,
            host: None,
            exe: None,
            processes: None,
            at_exit: None,
        }
    }

    #[test]
    fn buckets_merge_intervals_exactly_and_others_sum_the_rest() {
        // a: +100 -40 in interval 0, +300 in 1, -360 in 3; b: +5 in 1; c: +7 in 2.
        let mut units = vec![
            row("a", 0, &[100, -40], 60),
            row("a", 1, &[300], 360),
            row("b", 1, &[5], 5),
            row("c", 2, &[7], 7),
            row("a", 3, &[-360], 0),
        ];
        units[2].stats.temporary_allocations = 2;
        units[3].stats.temporary_allocations = 3;
        // Two intervals per bucket.
        let s = series_of(&units, 10, 2);
        assert_eq!(s[0].name, "a");
        assert_eq!(s[0].whole.max_bytes, 360);
        assert_eq!(s[0].buckets.len(), 2);
        let (b, st, cum) = &s[0].buckets[0];
        assert_eq!((*b, st.net_bytes, st.max_bytes, *cum), (0, 360, 360, 360));
        let (b, st, cum) = &s[0].buckets[1];
        assert_eq!((*b, st.net_bytes, st.max_bytes, *cum), (1, -360, 0, 0));
        let k = kind_data("library", s, 1);
        assert_eq!(k.count, 3);
        assert_eq!(k.units.len(), 1);
        let o = k.others.unwrap();
        assert_eq!(o.name, "(others: 2 units)");
        assert_eq!((o.total[0], o.total[6]), (12, 5));
        // b's bucket 0 (+5), then c's bucket 1 (+7, b still at 5).
        assert_eq!(
            o.series,
            vec![[0, 5, 0, 5, 0, 1, 5, 2], [1, 7, 0, 7, 0, 1, 12, 3]]
        );
    }
}
