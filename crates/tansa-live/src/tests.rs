//! The view's state and drawing, on snapshots made by hand (the integration test
//! `tansa-cli/tests/live_view.rs` draws real ones and drives the real terminal).

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tansa_analysis::memory::live::{HeapPoint, HeapSeries, LiveSnapshot};
use tansa_analysis::memory::report::{Calls, MemoryReport, ProcessReport, Stats, UnitReport};
use tansa_format::meta::ExitStatus;

use crate::draw::draw;
use crate::state::{Action, SortKey, View};

fn process(pid: u32, lost: u64) -> ProcessReport {
    ProcessReport {
        events: 10,
        lost_events: lost,
        ..ProcessReport::new(
            pid,
            1,
            "/bin/app".into(),
            vec!["app".into()],
            ExitStatus::Running.into(),
        )
    }
}

/// A unit: net, max, allocated, mallocs.
fn unit(name: &str, net: i64, max: i64, allocated: u64, malloc: u64) -> UnitReport {
    UnitReport {
        unit: name.into(),
        stats: Stats {
            net_bytes: net,
            max_bytes: max,
            min_bytes: 0,
            allocated_bytes: allocated,
            freed_bytes: allocated - net as u64,
            calls: Calls {
                malloc,
                ..Calls::default()
            },
            ..Stats::default()
        },
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

fn report(by: &'static str, units: Vec<UnitReport>, lost: u64) -> MemoryReport {
    MemoryReport {
        schema: "tansa.memory-report.v1",
        by,
        charge: "first",
        free_to: "owner",
        interval_ns: None,
        process: process(42, lost),
        processes: vec![process(42, lost)],
        totals: Stats::default(),
        units,
        improper: Vec::new(),
        inherited_frees: 0,
        sample_rate_bytes: None,
        events: 1234,
        duration_ns: 0,
        unrecorded: Vec::new(),
        recordings: Vec::new(),
        job: None,
        leak_check: None,
        warnings: Vec::new(),
    }
}

fn snapshot(lost: u64) -> LiveSnapshot {
    let mut heap = HeapSeries::new(64);
    for (i, b) in [0, 4096, 8192, 2048].into_iter().enumerate() {
        heap.push(HeapPoint {
            ms: i as u64 * 250,
            bytes: b,
        });
    }
    LiveSnapshot {
        elapsed_ms: 2500,
        reports: vec![
            report(
                "library",
                vec![
                    // net, max, allocated, calls: each unit first under one key;
                    // libb.so makes the most temporary allocations.
                    unit("liba.so", 300, 400, 500, 1),
                    UnitReport {
                        stats: Stats {
                            temporary_allocations: 2,
                            ..unit("libb.so", 100, 900, 1000, 2).stats
                        },
                        ..unit("libb.so", 100, 900, 1000, 2)
                    },
                    unit("app", 200, 500, 4000, 3),
                    unit("libc.so.6", 0, 10, 10, 40),
                ],
                lost,
            ),
            report(
                "function",
                vec![unit("liba.so!make", 300, 400, 500, 1)],
                lost,
            ),
            report("thread", vec![unit("app [42]", 300, 900, 5510, 46)], lost),
        ],
        heap,
    }
}

fn names(view: &View) -> Vec<String> {
    view.rows().into_iter().map(|r| r.unit).collect()
}

/// The screen as text, one line per row, trailing blanks removed.
fn screen(view: &View, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| draw(f, view)).unwrap();
    let buf = t.backend().buffer();
    (0..h)
        .map(|y| {
            let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
            line.trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn each_key_sorts_by_its_column_largest_first() {
    let mut v = View::new("app".into());
    assert!(v.rows().is_empty());
    v.update(snapshot(0));
    assert_eq!(v.sort(), SortKey::Net);
    assert_eq!(names(&v), ["liba.so", "app", "libb.so", "libc.so.6"]);
    assert_eq!(v.key('m'), Action::Draw);
    assert_eq!(names(&v), ["libb.so", "app", "liba.so", "libc.so.6"]);
    assert_eq!(v.key('a'), Action::Draw);
    assert_eq!(names(&v), ["app", "libb.so", "liba.so", "libc.so.6"]);
    assert_eq!(v.key('c'), Action::Draw);
    assert_eq!(names(&v), ["libc.so.6", "app", "libb.so", "liba.so"]);
    assert_eq!(v.key('t'), Action::Draw);
    assert_eq!(names(&v)[0], "libb.so");
    assert_eq!(v.key('x'), Action::None);
    assert_eq!(v.key('r'), Action::Redraw);
    assert_eq!(v.key('q'), Action::Quit);
}

#[test]
fn u_goes_through_the_units_and_the_choice_outlives_new_snapshots() {
    let mut v = View::new("app".into());
    assert_eq!(v.key('u'), Action::None, "no snapshot, nothing to switch");
    v.update(snapshot(0));
    assert_eq!(v.units(), ["library", "function", "thread"]);
    assert_eq!(v.report().unwrap().by, "library");
    v.key('u');
    assert_eq!(v.report().unwrap().by, "function");
    assert_eq!(names(&v), ["liba.so!make"]);
    v.update(snapshot(0));
    assert_eq!(v.report().unwrap().by, "function");
    v.key('u');
    assert_eq!(v.report().unwrap().by, "thread");
    v.key('u');
    assert_eq!(v.report().unwrap().by, "library");
    v.key('U');
    assert_eq!(v.report().unwrap().by, "thread");
}

#[test]
fn the_screen_shows_header_table_heap_and_help() {
    let mut v = View::new("./app --n 3".into());
    let waiting = screen(&v, 100, 24);
    assert!(
        waiting.contains("waiting for the first events"),
        "{waiting}"
    );
    v.update(snapshot(0));
    v.note("a note".into());
    let s = screen(&v, 100, 24);
    let lines: Vec<&str> = s.lines().collect();
    assert!(
        lines[0].starts_with("tansa record --online  ./app --n 3"),
        "{s}"
    );
    assert_eq!(
        lines[1], "pid 42  elapsed 2.5 s  events 1234  lost 0",
        "{s}"
    );
    assert!(s.contains("by library: 4 units, sorted by net"), "{s}");
    let row = lines.iter().find(|l| l.contains("liba.so")).unwrap();
    let cells: Vec<&str> = row.trim_matches('│').split_whitespace().collect();
    assert_eq!(
        cells,
        ["liba.so", "300", "B", "400", "B", "500", "B", "1", "0"],
        "{s}"
    );
    assert!(
        s.contains("heap over time: 2.0 KiB now, peak 8.0 KiB, over 0.8 s"),
        "{s}"
    );
    assert!(s.contains("tansa: a note"), "{s}");
    assert!(lines[23].starts_with("q close view"), "{s}");
    assert!(
        lines[23].ends_with("^C interrupt"),
        "the whole help line: {s}"
    );
    // The sparkline: 4 columns, the third the highest (a full block).
    let spark = lines.iter().find(|l| l.contains('█')).expect("a full bar");
    assert_eq!(spark.chars().filter(|&c| c == '█').count(), 1, "{s}");
}

#[test]
fn lost_events_are_shown_never_hidden() {
    let mut v = View::new("app".into());
    v.update(snapshot(7));
    let s = screen(&v, 100, 24);
    assert!(
        s.contains("lost 7 events: the figures are incomplete"),
        "{s}"
    );
}

#[test]
fn a_small_terminal_says_how_many_units_are_not_shown() {
    let mut v = View::new("app".into());
    v.update(snapshot(0));
    let s = screen(&v, 80, 14);
    assert!(s.contains("4 units (2 shown)"), "{s}");
}
