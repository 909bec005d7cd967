//! The live view on a real snapshot: `livegrow` recorded online in this process with a
//! live feed (its own test binary: the recorder becomes this process's subreaper and
//! handles its signals), the newest snapshot drawn on ratatui's `TestBackend`.

mod common;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tansa_analysis::memory::live::LiveSlot;
use tansa_analysis::memory::{By, Config};
use tansa_collect::online::{LiveFeed, record_online};
use tansa_live::{SortKey, View};

#[test]
fn a_real_snapshot_is_a_prefix_of_the_report_and_draws_per_unit() {
    ensure_agent();
    let exe = livegrow();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let config = tansa_collect::Config {
        command: vec![
            exe.clone().into(),
            OsString::from("60"),
            OsString::from("10"),
            done.clone().into(),
        ],
        online: true,
        monotonic_clock: true,
        ..collect_config(Vec::new())
    };
    let slot = Arc::new(LiveSlot::default());
    let feed = LiveFeed {
        units: vec![By::Library, By::Function, By::Thread, By::Library],
        // At each of the collector's ticks (every 100 ms).
        every: Duration::ZERO,
        slot: Arc::clone(&slot),
    };
    let (outcome, report) = record_online(&config, Config::default(), &[], Some(feed)).unwrap();
    assert!(done.exists());
    let lib = |r: &tansa_analysis::memory::MemoryReport, unit: &str| {
        r.units.iter().find(|u| u.unit == unit).map(|u| u.stats)
    };
    // The final report is the one of --by alone: 60 blocks of 4096 bytes.
    assert_eq!(report.by, "library");
    assert_eq!(lib(&report, "liblive.so").unwrap().net_bytes, 60 * 4096);

    // The newest snapshot was taken while the program ran (at least 0.6 s: several ticks).
    let snap = slot.take().expect("a snapshot while the program ran");
    let units: Vec<&str> = snap.reports.iter().map(|r| r.by).collect();
    assert_eq!(units, ["library", "function", "thread"], "each unit once");
    let net = lib(&snap.reports[0], "liblive.so").map_or(0, |s| s.net_bytes);
    assert!(
        net > 0 && net <= 60 * 4096 && net % 4096 == 0,
        "liblive.so's net so far: {net}"
    );
    // Every unit's view counts the same events.
    let function = lib(&snap.reports[1], "liblive.so!live_grow").unwrap();
    assert_eq!(function.net_bytes, net);
    let thread = format!("livegrow [{}]", outcome.pid);
    // One thread: it is charged with every byte.
    assert_eq!(
        lib(&snap.reports[2], &thread).unwrap().net_bytes,
        snap.reports[0].totals.net_bytes
    );
    // The heap over time grows (blocks are kept) but for the C library's own blocks (the
    // stdio buffer of the file written at the end, freed again), and ends at the
    // snapshot's total.
    let libc = lib(&report, "libc.so.6").map_or(0, |s| s.max_bytes);
    let heap = snap.heap.points();
    assert!(heap.len() >= 2, "{heap:?}");
    assert!(
        heap.windows(2)
            .all(|w| w[1].bytes >= w[0].bytes - libc && w[0].ms < w[1].ms),
        "{heap:?}"
    );
    assert_eq!(heap.last().unwrap().bytes, snap.reports[0].totals.net_bytes);

    let mut view = View::new("livegrow 60 10 done".into());
    view.update(snap.clone());
    let screen = |view: &View| {
        let mut t = Terminal::new(TestBackend::new(100, 24)).unwrap();
        t.draw(|f| tansa_live::draw::draw(f, view)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..24)
            .map(|y| {
                (0..100)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let s = screen(&view);
    assert!(s.contains(&format!("pid {}", outcome.pid)), "{s}");
    assert!(s.contains("by library"), "{s}");
    assert!(s.contains("liblive.so"), "{s}");
    assert!(s.contains(&tansa_render::bytes(net)), "{s}");
    view.key('c');
    assert_eq!(view.sort(), SortKey::Calls);
    let rows = view.rows();
    assert!(
        rows.windows(2)
            .all(|w| w[0].stats.calls.total() >= w[1].stats.calls.total())
    );
    view.key('u');
    let s = screen(&view);
    assert!(
        s.contains("by function") && s.contains("liblive.so!live_grow"),
        "{s}"
    );
    view.key('u');
    let s = screen(&view);
    assert!(s.contains("by thread") && s.contains(&thread), "{s}");
}
