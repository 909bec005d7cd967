//! Golden files of every `tansa diff` output format (table, JSON, CSV; heap by library and
//! by thread, with and without a growth gate and `--top`; CPU by function), from reports
//! built by hand. Regenerate with `scripts/bless-golden` (never in CI).

mod common;

use common::check;

use tansa_analysis::cpu::CpuReport;
use tansa_analysis::cpu::report::CpuUnit;
use tansa_analysis::diff::{self, Metric, Threshold};
use tansa_analysis::memory::MemoryReport;
use tansa_analysis::memory::report::{
    Calls, ExitReport, ProcessReport, Stats, ThreadReport, UnitReport,
};
use tansa_format::meta::ExitStatus;
use tansa_render::Format;

fn stats(net: i64, max: i64, allocated: u64, malloc: u64, free: u64) -> Stats {
    Stats {
        net_bytes: net,
        max_bytes: max,
        min_bytes: 0,
        allocated_bytes: allocated,
        freed_bytes: allocated.saturating_sub(net as u64),
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

fn thread(name: &str, pid: u32, tid: u32, s: Stats) -> UnitReport {
    let mut u = unit(&format!("{name} [{tid}]"), s);
    u.thread = Some(ThreadReport {
        pid,
        tid,
        name: name.into(),
    });
    u
}

fn heap(
    by: &'static str,
    pid: u32,
    leak: &str,
    totals: Stats,
    units: Vec<UnitReport>,
) -> MemoryReport {
    let process = ProcessReport {
        events: 1200,
        ..ProcessReport::new(
            pid,
            1,
            "/opt/app/bin/app".into(),
            vec!["./app".into(), leak.into()],
            ExitReport::from(ExitStatus::Exited { code: 0 }),
        )
    };
    MemoryReport {
        schema: tansa_analysis::memory::report::SCHEMA,
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
        events: 1200,
        duration_ns: 12_500_000,
        unrecorded: vec![],
        recordings: vec![],
        job: None,
        leak_check: None,
        warnings: vec![],
    }
}

fn heap_pair() -> (MemoryReport, MemoryReport) {
    let a = heap(
        "library",
        4242,
        "1000",
        stats(11_000, 12_000, 40_000, 300, 200),
        vec![
            unit("libleak.so", stats(10_000, 10_000, 10_000, 100, 0)),
            unit("libc.so.6", stats(1_000, 2_000, 30_000, 150, 149)),
            unit("libold.so", stats(0, 512, 512, 1, 1)),
            unit("app", stats(0, 0, 0, 0, 0)),
        ],
    );
    let b = heap(
        "library",
        4343,
        "3000",
        stats(31_100, 32_000, 60_100, 503, 200),
        vec![
            unit("libleak.so", stats(30_000, 30_000, 30_000, 300, 0)),
            unit("libc.so.6", stats(1_000, 2_000, 30_000, 150, 149)),
            unit("libnew.so", stats(100, 100, 100, 2, 0)),
            unit("app", stats(0, 0, 0, 0, 0)),
        ],
    );
    (a, b)
}

fn heap_outputs(name: &str, d: &diff::memory::HeapDiff) {
    for (format, ext) in [
        (Format::Table, "txt"),
        (Format::Json, "json"),
        (Format::Csv, "csv"),
    ] {
        let mut out = Vec::new();
        tansa_render::diff::write_heap(d, format, &mut out).unwrap();
        check(
            &format!("diff/{name}.{ext}"),
            &String::from_utf8(out).unwrap(),
        );
    }
}

#[test]
fn heap_by_library() {
    let (a, b) = heap_pair();
    let d = diff::memory::diff(
        ("a.tansa", &a),
        ("b.tansa", &b),
        &diff::memory::Options {
            metric: Metric::Max,
            thresholds: vec![],
            top: None,
        },
    )
    .unwrap();
    heap_outputs("heap-library", &d);
}

#[test]
fn heap_gate_and_top() {
    let (a, b) = heap_pair();
    let d = diff::memory::diff(
        ("a.tansa", &a),
        ("b.tansa", &b),
        &diff::memory::Options {
            metric: Metric::Net,
            thresholds: vec![Threshold::Percent(10.0), Threshold::Amount(64)],
            top: Some(2),
        },
    )
    .unwrap();
    heap_outputs("heap-gate-top", &d);
}

#[test]
fn heap_by_thread() {
    let a = heap(
        "thread",
        10,
        "1",
        stats(300, 300, 300, 3, 0),
        vec![
            thread("app", 10, 10, stats(100, 100, 100, 1, 0)),
            thread("worker", 10, 11, stats(100, 100, 100, 1, 0)),
            thread("worker", 10, 12, stats(100, 100, 100, 1, 0)),
        ],
    );
    let b = heap(
        "thread",
        20,
        "2",
        stats(250, 250, 250, 3, 0),
        vec![
            thread("app", 20, 20, stats(150, 150, 150, 2, 0)),
            thread("worker", 20, 21, stats(100, 100, 100, 1, 0)),
        ],
    );
    let d = diff::memory::diff(
        ("a.tansa", &a),
        ("b.tansa", &b),
        &diff::memory::Options {
            metric: Metric::Allocated,
            thresholds: vec![Threshold::Percent(25.0)],
            top: None,
        },
    )
    .unwrap();
    heap_outputs("heap-thread", &d);
}

fn cpu(total: u64, units: Vec<CpuUnit>) -> CpuReport {
    CpuReport {
        schema: tansa_analysis::cpu::report::SCHEMA,
        by: "function",
        period_ns: 1_000_000,
        total_samples: total,
        event: "cpu-clock".into(),
        source: "perf",
        target: "command".into(),
        kernel: false,
        cpus: 2,
        duration_ns: total * 1_000_000,
        lost_samples: 0,
        lost_records: 0,
        unsampled_ns: 0,
        pid: None,
        units,
        notes: vec![],
        warnings: vec![],
    }
}

#[test]
fn cpu_by_function() {
    let a = cpu(
        1000,
        vec![
            CpuUnit::new("app!exe_work".into(), 700, 700),
            CpuUnit::new("libshare.so!lib_work".into(), 300, 300),
            CpuUnit::new("app!main".into(), 0, 1000),
            CpuUnit::new("app!old".into(), 0, 0),
        ],
    );
    let b = cpu(
        2500,
        vec![
            CpuUnit::new("app!exe_work".into(), 1250, 1250),
            CpuUnit::new("libshare.so!lib_work".into(), 1000, 1000),
            CpuUnit::new("app!fresh".into(), 250, 250),
            CpuUnit::new("app!main".into(), 0, 2500),
        ],
    );
    let d = diff::cpu::diff(
        ("a.tansa", &a),
        ("b.tansa", &b),
        &diff::cpu::Options {
            metric: Metric::SelfSamples,
            thresholds: vec![Threshold::Percent(20.0)],
            top: None,
        },
    )
    .unwrap();
    for (format, ext) in [
        (Format::Table, "txt"),
        (Format::Json, "json"),
        (Format::Csv, "csv"),
    ] {
        let mut out = Vec::new();
        tansa_render::diff::write_cpu(&d, format, &mut out).unwrap();
        check(
            &format!("diff/cpu-function.{ext}"),
            &String::from_utf8(out).unwrap(),
        );
    }
}
