//! The aggregator driven as `tansa report` and online mode drive it: sessions first, then
//! events in time order, then `finish`. Every figure below is worked out by hand from the
//! events listed in each test.

use tansa_format::memory::SessionInfo;
use tansa_format::meta::Calibration;
use tansa_wire::event::{
    AllocEvent, AllocOp, ByteSink, EventBuf, FreeEvent, ReallocEvent, StreamState,
    encode_thread_start,
};

use super::{Aggregator, Config};
use crate::memory::classify::{By, Charge, FreeTo};
use crate::memory::ids::{SessionId, StackId};
use crate::memory::merge::{Event, EventKind, StreamDecoder};
use crate::memory::model::Registry;
use crate::memory::report::{Calls, MemoryReport, Stats};
use crate::memory::testkit::{APP, Kit, LIBA, LIBB, LIBC, session};

/// The stacks every test uses, all rooted at `main`.
struct Stacks {
    /// `liba.so!a_alloc` called from `libb.so!b_work`: `libb.so` first, `liba.so` last.
    lib: u32,
    /// `libb.so!b_free`.
    b: u32,
    /// `app!helper`: no library.
    app: u32,
}

fn fixture(sessions: &[u32]) -> (Registry, Stacks) {
    let mut kit = Kit::new();
    let root = [(APP, "main"), (LIBC, "__libc_start_main")];
    let lib = kit.stack(&[&[(LIBA, "a_alloc"), (LIBB, "b_work")][..], &root].concat());
    let b = kit.stack(&[&[(LIBB, "b_free")][..], &root].concat());
    let app = kit.stack(&[&[(APP, "helper")][..], &root].concat());
    (kit.registry(sessions), Stacks { lib, b, app })
}

fn report(
    config: Config,
    reg: &Registry,
    sessions: &[SessionInfo],
    events: &[Event],
) -> MemoryReport {
    let mut agg = Aggregator::new(config, Calibration::monotonic());
    for s in sessions {
        agg.add_session(s);
    }
    for e in events {
        agg.event(reg, e);
    }
    agg.finish(reg)
}

fn config(charge: Charge, free_to: FreeTo) -> Config {
    Config {
        by: By::Library,
        charge,
        free_to,
        ..Config::default()
    }
}

fn event(ts: u64, session: u32, kind: EventKind) -> Event {
    Event {
        ts,
        session: SessionId(session),
        tid: 1000 + session,
        kind,
    }
}

fn alloc(ts: u64, session: u32, op: AllocOp, ptr: u64, size: u64, stack: u32) -> Event {
    event(
        ts,
        session,
        EventKind::Alloc {
            op,
            ptr,
            size,
            stack: StackId(stack),
        },
    )
}

fn free(ts: u64, session: u32, ptr: u64, stack: u32) -> Event {
    event(
        ts,
        session,
        EventKind::Free {
            ptr,
            stack: StackId(stack),
        },
    )
}

/// Figures: net, max, min, allocated, freed, then the calls.
fn stats(net: i64, max: i64, min: i64, allocated: u64, freed: u64, calls: Calls) -> Stats {
    Stats {
        net_bytes: net,
        max_bytes: max,
        min_bytes: min,
        allocated_bytes: allocated,
        freed_bytes: freed,
        calls,
        ..Stats::default()
    }
}

/// `s` with `n` temporary allocations.
fn temporary(s: Stats, n: u64) -> Stats {
    Stats {
        temporary_allocations: n,
        ..s
    }
}

/// Call counts: malloc, calloc, realloc, free (no memalign in these tests).
fn calls(malloc: u64, calloc: u64, realloc: u64, free: u64) -> Calls {
    Calls {
        malloc,
        calloc,
        realloc,
        free,
        memalign: 0,
    }
}

/// A unit's name and figures.
type Row = (String, Stats);

/// Every unit of the report with its figures, by name.
fn units(r: &MemoryReport) -> Vec<Row> {
    let mut u: Vec<Row> = r.units.iter().map(|u| (u.unit.clone(), u.stats)).collect();
    u.sort_by(|a, b| a.0.cmp(&b.0));
    u
}

fn named(rows: &[(&str, Stats)]) -> Vec<Row> {
    rows.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

/// One process: `libb.so` (first) or `liba.so` (last) allocates 100 bytes that `app`
/// releases; `app` allocates 40 bytes that `libb.so` releases; `libb.so` allocates 7
/// bytes that stay live.
#[test]
fn each_charge_policy_under_each_free_mode() {
    let (reg, st) = fixture(&[0]);
    let events = [
        alloc(1, 0, AllocOp::Malloc, 0x1000, 100, st.lib),
        alloc(2, 0, AllocOp::Calloc, 0x2000, 40, st.app),
        free(3, 0, 0x1000, st.app),
        free(4, 0, 0x2000, st.b),
        alloc(5, 0, AllocOp::Malloc, 0x3000, 7, st.b),
    ];
    // The allocator's view: running net 100, 140, 40, 0, 7. The 40 bytes are released
    // before the thread allocates again: a temporary allocation, `app`'s (it allocated
    // them) whoever released them.
    let totals = temporary(stats(7, 140, 0, 147, 140, calls(2, 1, 0, 2)), 1);
    // The 40 bytes of `app`, released by `libb.so`: charged back to `app` (owner) or
    // to `libb.so` (caller); and the reverse for the 100 bytes of the library.
    let app_owner = temporary(stats(0, 40, 0, 40, 40, calls(0, 1, 0, 1)), 1);
    let app_caller = temporary(stats(-60, 40, -60, 40, 100, calls(0, 1, 0, 1)), 1);
    let expected: [(Charge, FreeTo, Vec<Row>); 6] = [
        (
            Charge::First,
            FreeTo::Owner,
            named(&[
                ("app", app_owner),
                ("libb.so", stats(7, 100, 0, 107, 100, calls(2, 0, 0, 1))),
            ]),
        ),
        (
            Charge::First,
            FreeTo::Caller,
            named(&[
                ("app", app_caller),
                ("libb.so", stats(67, 100, 0, 107, 40, calls(2, 0, 0, 1))),
            ]),
        ),
        (
            Charge::Last,
            FreeTo::Owner,
            named(&[
                ("app", app_owner),
                ("liba.so", stats(0, 100, 0, 100, 100, calls(1, 0, 0, 1))),
                ("libb.so", stats(7, 7, 0, 7, 0, calls(1, 0, 0, 0))),
            ]),
        ),
        (
            Charge::Last,
            FreeTo::Caller,
            named(&[
                ("app", app_caller),
                ("liba.so", stats(100, 100, 0, 100, 0, calls(1, 0, 0, 0))),
                ("libb.so", stats(-33, 0, -40, 7, 40, calls(1, 0, 0, 1))),
            ]),
        ),
        (
            Charge::All,
            FreeTo::Owner,
            named(&[
                ("app", app_owner),
                ("liba.so", stats(0, 100, 0, 100, 100, calls(1, 0, 0, 1))),
                ("libb.so", stats(7, 100, 0, 107, 100, calls(2, 0, 0, 1))),
            ]),
        ),
        (
            Charge::All,
            FreeTo::Caller,
            named(&[
                ("app", app_caller),
                ("liba.so", stats(100, 100, 0, 100, 0, calls(1, 0, 0, 0))),
                ("libb.so", stats(67, 100, 0, 107, 40, calls(2, 0, 0, 1))),
            ]),
        ),
    ];
    for (charge, free_to, rows) in expected {
        let r = report(
            config(charge, free_to),
            &reg,
            &[session(0, 100, 1, 0)],
            &events,
        );
        let what = format!("--charge {} --free-to {}", charge.name(), free_to.name());
        assert_eq!(units(&r), rows, "{what}");
        // Whatever the units, the process's own figures count each event once.
        assert_eq!(r.totals, totals, "{what}");
        assert_eq!((r.charge, r.free_to), (charge.name(), free_to.name()));
        assert_eq!(r.events, 5, "{what}");
        assert!(r.improper.is_empty(), "{what}: {:?}", r.improper);
        assert_eq!(r.inherited_frees, 0, "{what}");
    }
}

/// A parent (pid 100) forks a child (101) at tick 50, which forks a grandchild (102) at
/// tick 95. The children release blocks they inherited (counted, charged to nobody) and
/// blocks the parent allocated after the fork (improper: the child never had them); the
/// parent's own copies stay live until the parent releases them.
#[test]
fn frees_of_blocks_inherited_across_fork() {
    let (reg, st) = fixture(&[0, 1, 2]);
    let sessions = [
        session(0, 100, 1, 0),
        session(1, 101, 100, 50),
        session(2, 102, 101, 95),
    ];
    let events = [
        alloc(10, 0, AllocOp::Malloc, 0x1000, 64, st.lib),
        alloc(20, 0, AllocOp::Malloc, 0x2000, 32, st.app),
        alloc(60, 0, AllocOp::Malloc, 0x5000, 16, st.lib),
        // The child: two inherited blocks, one allocated after the fork, one never.
        free(70, 1, 0x1000, st.b),
        free(80, 1, 0x5000, st.app),
        free(85, 1, 0x9990, st.app),
        event(
            90,
            1,
            EventKind::ReallocRelease {
                old: 0x2000,
                new: 0x6000,
                stack: StackId(st.lib),
            },
        ),
        event(
            91,
            1,
            EventKind::ReallocAlloc {
                new: 0x6000,
                size: 48,
                stack: StackId(st.lib),
            },
        ),
        // The grandchild: a block of its grandparent, and one of its parent.
        free(96, 2, 0x2000, st.app),
        free(97, 2, 0x6000, st.app),
        // The parent's copy of 0x1000 is still its own.
        free(100, 0, 0x1000, st.b),
    ];
    // The same in both free modes: every byte released is released by the stack that
    // allocated it or by `libb.so` releasing a block of `libb.so`.
    for free_to in [FreeTo::Owner, FreeTo::Caller] {
        let r = report(config(Charge::First, free_to), &reg, &sessions, &events);
        let what = format!("--free-to {}", free_to.name());
        assert_eq!(
            units(&r),
            named(&[
                // 32 live; the four frees of the children that released nothing.
                ("app", stats(32, 32, 0, 32, 0, calls(1, 0, 0, 4))),
                // 64 + 16 + 48 (the child's realloc) - 64 (the parent's free).
                ("libb.so", stats(64, 128, 0, 128, 64, calls(2, 0, 1, 2))),
            ]),
            "{what}"
        );
        assert_eq!(
            r.totals,
            stats(96, 160, 0, 160, 64, calls(3, 0, 1, 6)),
            "{what}"
        );
        assert_eq!(r.inherited_frees, 4, "{what}");
        assert_eq!(r.improper.len(), 1, "{what}: {:?}", r.improper);
        let improper = &r.improper[0];
        assert_eq!(
            (improper.op, improper.count, improper.pid, improper.refused),
            ("free", 2, 101, false),
            "{what}"
        );
        let per_process: Vec<(u32, u64)> = r.processes.iter().map(|p| (p.pid, p.events)).collect();
        assert_eq!(per_process, [(100, 4), (101, 5), (102, 2)], "{what}");
        assert_eq!(r.events, 11, "{what}");
    }

    // The child alone: the parent's events are read (its blocks are what the child
    // inherits) but not reported.
    let child = Config {
        pid: Some(101),
        ..config(Charge::First, FreeTo::Owner)
    };
    let r = report(child, &reg, &sessions, &events);
    assert_eq!(
        units(&r),
        named(&[
            ("app", stats(0, 0, 0, 0, 0, calls(0, 0, 0, 2))),
            ("libb.so", stats(48, 48, 0, 48, 0, calls(0, 0, 1, 1))),
        ])
    );
    assert_eq!(r.totals, stats(48, 48, 0, 48, 0, calls(0, 0, 1, 3)));
    assert_eq!(r.inherited_frees, 2);
    assert_eq!(r.improper.len(), 1);
    assert_eq!(r.improper[0].count, 2);
    assert_eq!((r.process.pid, r.events), (101, 5));
}

/// Per-stack figures (for stack profiles) across a fork: inherited blocks released by a
/// child are charged to nobody, as in the units, and the figures sum to the totals.
#[test]
fn stack_figures_across_fork_sum_to_the_totals() {
    let (reg, st) = fixture(&[0, 1, 2]);
    let sessions = [
        session(0, 100, 1, 0),
        session(1, 101, 100, 50),
        session(2, 102, 101, 95),
    ];
    let events = [
        alloc(10, 0, AllocOp::Malloc, 0x1000, 64, st.lib),
        alloc(20, 0, AllocOp::Malloc, 0x2000, 32, st.app),
        alloc(60, 0, AllocOp::Malloc, 0x5000, 16, st.lib),
        free(70, 1, 0x1000, st.b),
        event(
            90,
            1,
            EventKind::ReallocRelease {
                old: 0x2000,
                new: 0x6000,
                stack: StackId(st.lib),
            },
        ),
        event(
            91,
            1,
            EventKind::ReallocAlloc {
                new: 0x6000,
                size: 48,
                stack: StackId(st.lib),
            },
        ),
        free(96, 2, 0x2000, st.app),
        free(97, 2, 0x6000, st.app),
        free(100, 0, 0x1000, st.b),
    ];
    let mut agg = Aggregator::new(
        config(Charge::First, FreeTo::Caller),
        Calibration::monotonic(),
    );
    agg.track_stacks();
    for s in &sessions {
        agg.add_session(s);
    }
    for e in &events {
        agg.event(&reg, e);
    }
    let data = agg.take_stack_figures().expect("tracked");
    assert!(agg.take_stack_figures().is_none(), "taken once");
    let r = agg.finish(&reg);
    let figures: Vec<(u32, u32, u32, [u64; 6])> = data
        .stacks
        .iter()
        .map(|f| {
            (
                f.session.0,
                f.pid,
                f.stack.0,
                [
                    f.alloc_objects,
                    f.alloc_bytes,
                    f.live_objects,
                    f.live_bytes,
                    f.peak_objects,
                    f.peak_bytes,
                ],
            )
        })
        .collect();
    // The heap peaks at 160 bytes when the child reallocates (ts 91): the parent's 64 and
    // 16 bytes at `lib` and 32 at `app`, the child's 48.
    assert_eq!(
        figures,
        [
            (0, 100, st.lib, [2, 80, 1, 16, 2, 80]),
            (0, 100, st.app, [1, 32, 1, 32, 1, 32]),
            (1, 101, st.lib, [1, 48, 1, 48, 1, 48]),
        ]
    );
    assert_eq!((data.peak_bytes, data.peak_ns), (160, 91));
    let sum = |i: usize| figures.iter().map(|f| f.3[i]).sum::<u64>();
    assert_eq!(sum(1), r.totals.allocated_bytes);
    assert_eq!(sum(3) as i64, r.totals.net_bytes);
    assert_eq!(sum(5) as i64, r.totals.max_bytes);
}

/// Without [`Aggregator::track_stacks`] nothing is kept.
#[test]
fn stack_figures_are_kept_only_when_asked() {
    let (reg, st) = fixture(&[0]);
    let mut agg = Aggregator::new(Config::default(), Calibration::monotonic());
    agg.add_session(&session(0, 100, 1, 0));
    agg.event(&reg, &alloc(10, 0, AllocOp::Malloc, 0x1000, 64, st.lib));
    assert!(agg.take_stack_figures().is_none());
}

struct Bytes(Vec<u8>);

impl ByteSink for Bytes {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// A thread stream (thread 7, `main`) encoded as the agent encodes it.
struct ThreadStream {
    bytes: Bytes,
    state: StreamState,
}

impl ThreadStream {
    fn new() -> Self {
        let mut t = ThreadStream {
            bytes: Bytes(Vec::new()),
            state: StreamState::default(),
        };
        encode_thread_start(&mut t.bytes, &mut t.state, 100, 7, 0, b"main");
        t
    }

    /// Appends the record `encode` writes.
    fn put(&mut self, encode: &dyn Fn(&mut StreamState, &mut EventBuf)) {
        let mut buf = EventBuf::new();
        encode(&mut self.state, &mut buf);
        self.bytes.put(buf.as_bytes());
    }
}

/// A realloc in place, one that moves, `realloc(NULL, n)` and `realloc(p, 0)`, encoded
/// as the agent encodes them and split by the stream decoder as `tansa report` splits
/// them.
fn realloc_events(st: &Stacks) -> Vec<Event> {
    let mut stream = ThreadStream::new();
    let realloc = |ts: u64, old_ptr: u64, new_ptr: u64, size: u64, stack: u32| ReallocEvent {
        array: false,
        ts_begin: ts,
        ts_end: ts + 1,
        old_ptr,
        new_ptr,
        size,
        stack,
    };
    let free = |ts: u64, ptr: u64, stack: u32| FreeEvent { ts, ptr, stack };
    stream.put(&|s, b| {
        s.encode_alloc(
            &AllocEvent {
                op: AllocOp::Malloc,
                ts: 10,
                ptr: 0x1000,
                size: 100,
                align: 0,
                stack: st.lib,
            },
            b,
        )
    });
    // In place: 100 bytes become 250.
    stream.put(&|s, b| s.encode_realloc(&realloc(20, 0x1000, 0x1000, 250, st.lib), b));
    // Moves: the 250 bytes at 0x1000 are released, 400 bytes at 0x2000 allocated.
    stream.put(&|s, b| s.encode_realloc(&realloc(30, 0x1000, 0x2000, 400, st.app), b));
    stream.put(&|s, b| s.encode_free(&free(40, 0x2000, st.b), b));
    // The old block is gone: releasing it again is improper.
    stream.put(&|s, b| s.encode_free(&free(50, 0x1000, st.b), b));
    stream.put(&|s, b| s.encode_realloc(&realloc(60, 0, 0x3000, 8, st.app), b));
    stream.put(&|s, b| s.encode_realloc(&realloc(70, 0x3000, 0, 0, st.b), b));
    let mut events = Vec::new();
    let mut decoder = StreamDecoder::new(SessionId(0));
    decoder.push(&stream.bytes.0, &mut |e| events.push(e));
    assert_eq!(decoder.finish(), None);
    events
}

#[test]
fn a_realloc_that_moves_is_a_release_and_an_allocation_one_in_place_a_new_size() {
    let (reg, st) = fixture(&[0]);
    let events = realloc_events(&st);
    let kinds: Vec<(u64, &EventKind)> = events.iter().map(|e| (e.ts, &e.kind)).collect();
    let (lib, app, b) = (st.lib, st.app, st.b);
    assert_eq!(
        kinds[1..],
        [
            (
                10,
                &EventKind::Alloc {
                    op: AllocOp::Malloc,
                    ptr: 0x1000,
                    size: 100,
                    stack: StackId(lib)
                }
            ),
            (
                20,
                &EventKind::ReallocRelease {
                    old: 0x1000,
                    new: 0x1000,
                    stack: StackId(lib)
                }
            ),
            (
                21,
                &EventKind::ReallocAlloc {
                    new: 0x1000,
                    size: 250,
                    stack: StackId(lib)
                }
            ),
            (
                30,
                &EventKind::ReallocRelease {
                    old: 0x1000,
                    new: 0x2000,
                    stack: StackId(app)
                }
            ),
            (
                31,
                &EventKind::ReallocAlloc {
                    new: 0x2000,
                    size: 400,
                    stack: StackId(app)
                }
            ),
            (
                40,
                &EventKind::Free {
                    ptr: 0x2000,
                    stack: StackId(b)
                }
            ),
            (
                50,
                &EventKind::Free {
                    ptr: 0x1000,
                    stack: StackId(b)
                }
            ),
            // realloc(NULL, 8) has no release half, realloc(p, 0) no allocation half.
            (
                61,
                &EventKind::ReallocAlloc {
                    new: 0x3000,
                    size: 8,
                    stack: StackId(app)
                }
            ),
            (
                70,
                &EventKind::ReallocRelease {
                    old: 0x3000,
                    new: 0,
                    stack: StackId(b)
                }
            ),
        ]
    );
    // Every byte allocated is released: 100, 250 (in place), 400 (moved), 8. The block
    // `app` moved is freed before the thread allocates again: a temporary allocation
    // (realloc(p, 0) is not counted as one).
    let totals = temporary(stats(0, 400, 0, 758, 758, calls(1, 0, 4, 2)), 1);
    let sessions = [session(0, 100, 1, 0)];

    // Owner: `libb.so` (first) holds 100 then 250 bytes and releases them when the block
    // moves; `app` owns the moved block and the realloc(NULL, 8). The realloc(p, 0) and the
    // improper free count as calls of `libb.so`, whose stack made them.
    let r = report(
        config(Charge::First, FreeTo::Owner),
        &reg,
        &sessions,
        &events,
    );
    assert_eq!(
        units(&r),
        named(&[
            (
                "app",
                temporary(stats(0, 400, 0, 408, 408, calls(0, 0, 2, 1)), 1)
            ),
            ("libb.so", stats(0, 250, 0, 350, 350, calls(1, 0, 2, 1))),
        ])
    );
    assert_eq!(r.totals, totals);
    assert_eq!(r.improper.len(), 1, "{:?}", r.improper);
    assert_eq!(
        (
            r.improper[0].op,
            r.improper[0].count,
            r.improper[0].ptr.as_str()
        ),
        ("free", 1, "0x1000")
    );

    // Caller: the release half of the move is charged to `app`, whose stack moved it;
    // `libb.so` releases the 400 bytes and the 8.
    let r = report(
        config(Charge::First, FreeTo::Caller),
        &reg,
        &sessions,
        &events,
    );
    assert_eq!(
        units(&r),
        named(&[
            (
                "app",
                temporary(stats(158, 158, -250, 408, 250, calls(0, 0, 2, 0)), 1)
            ),
            (
                "libb.so",
                stats(-158, 250, -158, 350, 508, calls(1, 0, 2, 2))
            ),
        ])
    );
    assert_eq!(r.totals, totals);
    assert_eq!(r.improper.len(), 1, "{:?}", r.improper);
}

/// `split_intervals` cuts each unit's figures at interval boundaries (any unit but calls);
/// folded back in time order with `Stats::then`, the rows of a unit give exactly the
/// figures of the unsplit report.
#[test]
fn split_intervals_fold_back_to_the_whole() {
    let (reg, st) = fixture(&[0]);
    let sessions = [session(0, 100, 1, 0)];
    let events = [
        alloc(1, 0, AllocOp::Malloc, 0x1000, 100, st.lib),
        alloc(12, 0, AllocOp::Calloc, 0x2000, 40, st.app),
        free(13, 0, 0x1000, st.app),
        alloc(25, 0, AllocOp::Malloc, 0x3000, 7, st.b),
        free(31, 0, 0x2000, st.b),
        alloc(32, 0, AllocOp::Malloc, 0x4000, 9, st.lib),
    ];
    for by in [By::Library, By::Function, By::Thread, By::Call] {
        let whole = Config {
            by,
            interval_ns: 10,
            ..config(Charge::First, FreeTo::Owner)
        };
        let split = Config {
            split_intervals: true,
            ..whole
        };
        let expected = units(&report(whole, &reg, &sessions, &events));
        let r = report(split, &reg, &sessions, &events);
        if by == By::Call {
            assert_eq!(units(&r), expected, "calls are never split");
            assert_eq!(r.interval_ns, None);
            continue;
        }
        assert_eq!(r.interval_ns, Some(10), "{by:?}");
        let mut folded: Vec<Row> = Vec::new();
        // Rows come in time order; within an interval, by name.
        for u in &r.units {
            let (start, end) = (u.start_ns.unwrap(), u.end_ns.unwrap());
            assert_eq!(end - start, 10, "{by:?}");
            match folded.iter_mut().find(|(n, _)| *n == u.unit) {
                Some((_, s)) => *s = s.then(&u.stats),
                None => folded.push((u.unit.clone(), u.stats)),
            }
        }
        folded.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(folded, expected, "{by:?}");
        assert!(
            r.units.len() > expected.len(),
            "{by:?}: split in several intervals"
        );
    }
}

/// `report` (the live view's snapshot) taken after each event is what `finish` gives on the
/// same prefix of events, under every unit, and taking it changes nothing that follows.
#[test]
fn a_report_taken_midway_is_finish_of_the_events_so_far() {
    let (reg, st) = fixture(&[0]);
    let events = [
        alloc(1, 0, AllocOp::Malloc, 0x1000, 100, st.lib),
        alloc(2, 0, AllocOp::Calloc, 0x2000, 40, st.app),
        free(3, 0, 0x1000, st.app),
        free(4, 0, 0x2000, st.b),
        alloc(5, 0, AllocOp::Malloc, 0x3000, 7, st.b),
    ];
    let sessions = [session(0, 100, 1, 0)];
    for by in [
        By::Library,
        By::Function,
        By::Thread,
        By::Call,
        By::Interval,
    ] {
        let config = Config {
            by,
            interval_ns: 2,
            ..Config::default()
        };
        let mut live = Aggregator::new(config, Calibration::monotonic());
        live.add_session(&sessions[0]);
        for n in 0..events.len() {
            live.event(&reg, &events[n]);
            let midway = live.report(&reg);
            assert_eq!(
                midway,
                report(config, &reg, &sessions, &events[..=n]),
                "{by:?} after {} event(s)",
                n + 1
            );
            assert_eq!(live.totals(), &midway.totals);
        }
        assert_eq!(
            live.finish(&reg),
            report(config, &reg, &sessions, &events),
            "{by:?}"
        );
    }
}

/// A job of two ranks and a launcher, each a process of its own: `--by rank` charges every
/// event to its image's rank, each rank keeps its own heap, the job's max is that of the
/// sum over time, and `--rank` selects one rank.
#[test]
fn ranks_are_units_with_their_own_heaps() {
    use super::{JobSetup, Origin};
    use crate::memory::report::JobClock;
    use tansa_format::meta::ExitStatus;
    let (reg, st) = fixture(&[0, 1, 2]);
    let sessions = [
        session(0, 10, 1, 0),
        session(1, 11, 10, 1),
        session(2, 12, 10, 2),
    ];
    let origin = |rank, end| Origin {
        recording: 0,
        host: "node".into(),
        rank,
        end_ticks: end,
    };
    let origins = [
        origin(None, None),
        origin(Some(0), Some(90)),
        origin(Some(1), Some(50)),
    ];
    // Rank 0: +100 at 10, -100 at 30, +5 at 40. Rank 1: +70 at 20, stays. Launcher: +3.
    let events = [
        alloc(5, 0, AllocOp::Malloc, 0x10, 3, st.app),
        alloc(10, 1, AllocOp::Malloc, 0x100, 100, st.lib),
        alloc(20, 2, AllocOp::Malloc, 0x100, 70, st.lib),
        free(30, 1, 0x100, st.b),
        alloc(40, 1, AllocOp::Malloc, 0x200, 5, st.app),
    ];
    let run = |by, rank| {
        let mut agg = Aggregator::new(
            Config {
                by,
                rank,
                ..Config::default()
            },
            Calibration::monotonic(),
        );
        agg.set_job(JobSetup {
            id: Some("j1".into()),
            size: Some(2),
            recordings: Vec::new(),
            clock: JobClock::Shared,
        });
        for (s, o) in sessions.iter().zip(&origins) {
            agg.add_session_from(s, o.clone());
        }
        agg.end_session(
            SessionId(1),
            ExitStatus::Signaled {
                signal: 15,
                core_dumped: false,
            },
            0,
        );
        agg.end_session(
            SessionId(2),
            ExitStatus::Signaled {
                signal: 6,
                core_dumped: false,
            },
            0,
        );
        for e in &events {
            agg.event(&reg, e);
        }
        agg.finish(&reg)
    };
    let r = run(By::Rank, None);
    let rows: Vec<(String, i64, i64)> = r
        .units
        .iter()
        .map(|u| (u.unit.clone(), u.stats.net_bytes, u.stats.max_bytes))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("rank 0".to_string(), 5, 100),
            ("rank 1".to_string(), 70, 70),
            ("(no rank)".to_string(), 3, 3)
        ]
    );
    assert_eq!(r.units[0].rank, Some(0));
    assert_eq!(r.units[0].host.as_deref(), Some("node"));
    // The job's max: 3 + 100 + 70 at 20.
    assert_eq!(r.totals.max_bytes, 173);
    let job = r.job.expect("a job");
    assert_eq!((job.id.as_deref(), job.size), (Some("j1"), Some(2)));
    let peaks: Vec<(u32, u32, i64, i64)> = job
        .ranks
        .iter()
        .map(|x| (x.rank, x.pid, x.peak_bytes, x.net_bytes))
        .collect();
    assert_eq!(peaks, vec![(0, 11, 100, 5), (1, 12, 70, 70)]);
    // Rank 1 ended at 50, rank 0 at 90.
    assert_eq!(
        (job.first_ended, job.first_ended_by),
        (Some(1), Some("end-time"))
    );
    assert_eq!(job.launcher.map(|l| l.pid), Some(10));
    assert_eq!(r.processes[1].peak_bytes, Some(100));
    assert_eq!(r.processes[1].rank, Some(0));
    // --rank 0: only its events.
    let r0 = run(By::Library, Some(0));
    assert_eq!(r0.totals.net_bytes, 5);
    assert_eq!(r0.totals.max_bytes, 100);
    assert_eq!(r0.job.expect("a job").ranks.len(), 1);
}

/// The rank a whole-job report names as the first to end, and how, when ranks 0.. ended
/// with `exits` (a recording of the whole job: no end times).
fn first_ended_without_end_times(
    exits: &[tansa_format::meta::ExitStatus],
) -> (Option<u32>, Option<&'static str>) {
    use super::{JobSetup, Origin};
    use crate::memory::report::JobClock;
    let ids: Vec<u32> = (0..exits.len() as u32).collect();
    let (reg, _) = fixture(&ids);
    let mut agg = Aggregator::new(Config::default(), Calibration::monotonic());
    agg.set_job(JobSetup {
        id: None,
        size: None,
        recordings: Vec::new(),
        clock: JobClock::Shared,
    });
    for &i in &ids {
        agg.add_session_from(
            &session(i, 20 + i, 1, u64::from(i)),
            Origin {
                rank: Some(i),
                ..Origin::default()
            },
        );
    }
    for (&i, &exit) in ids.iter().zip(exits) {
        agg.end_session(SessionId(i), exit, 0);
    }
    let job = agg.finish(&reg).job.expect("a job");
    (job.first_ended, job.first_ended_by)
}

/// Without end times (a whole-job recording), the first rank to end is the one that
/// failed by itself, not those the launcher killed.
#[test]
fn without_end_times_the_rank_that_failed_by_itself_ended_first() {
    use tansa_format::meta::ExitStatus;
    let term = ExitStatus::Signaled {
        signal: 15,
        core_dumped: false,
    };
    let unseen = ExitStatus::Unknown { normal_exit: false };
    assert_eq!(
        first_ended_without_end_times(&[term, unseen, term]),
        (Some(1), Some("exit-status"))
    );
}

/// A failure seen comes before an end not seen: MPICH's Hydra kills the other ranks with
/// SIGKILL and reaps them itself, so their ends are unknown to the recording, while the
/// rank that aborted is known to have (rank 2 here, after an unseen rank 1).
#[test]
fn without_end_times_a_failure_seen_comes_before_an_end_not_seen() {
    use tansa_format::meta::ExitStatus;
    let signal = |signal| ExitStatus::Signaled {
        signal,
        core_dumped: false,
    };
    let unseen = ExitStatus::Unknown { normal_exit: false };
    assert_eq!(
        first_ended_without_end_times(&[signal(9), unseen, signal(6), unseen]),
        (Some(2), Some("exit-status"))
    );
}

/// Two images whose executables' paths are not known (the agent could not read
/// `/proc/self/exe`) and one that is: per program, the first two are one program named by
/// their command's file name in brackets, as CPU reports name such a program; they were
/// `?` before.
#[test]
fn a_program_without_a_known_executable_is_named_by_its_command() {
    let (reg, st) = fixture(&[0, 1, 2]);
    let unknown = |id: u32| SessionInfo {
        exe: String::new(),
        cmdline: vec!["/opt/bin/worker".into(), "-x".into()],
        ..session(id, 100 + id, 1, 0)
    };
    let sessions = [unknown(0), unknown(1), session(2, 102, 1, 0)];
    let events = [
        alloc(1, 0, AllocOp::Malloc, 0x1000, 10, st.app),
        alloc(2, 1, AllocOp::Malloc, 0x1000, 20, st.app),
        alloc(3, 2, AllocOp::Malloc, 0x1000, 30, st.app),
    ];
    let r = report(
        Config {
            by: By::Program,
            ..config(Charge::First, FreeTo::Owner)
        },
        &reg,
        &sessions,
        &events,
    );
    let got: Vec<(String, i64)> = r
        .units
        .iter()
        .map(|u| (u.unit.clone(), u.stats.net_bytes))
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(&("[worker]".into(), 30)), "{got:?}");
    assert!(got.contains(&("app".into(), 30)), "{got:?}");
    // The JSON's `exe` stays `?` when not known.
    let worker = r.units.iter().find(|u| u.unit == "[worker]").unwrap();
    assert_eq!(worker.exe.as_deref(), Some("?"));
    assert_eq!(worker.processes, Some(2));
}

/// A temporary allocation is a block its own thread releases before allocating again.
/// Another thread's allocations in between do not count, and a block at the address of the
/// thread's last allocation is not that allocation once the address was released elsewhere
/// and handed out again.
#[test]
fn temporary_allocations_are_per_thread_and_per_block() {
    let (reg, st) = fixture(&[0]);
    let on = |tid: u32, e: Event| Event { tid, ..e };
    let events = [
        // Thread 1 allocates and frees with thread 2's allocation in between: temporary.
        on(1, alloc(1, 0, AllocOp::Malloc, 0x1000, 10, st.lib)),
        on(2, alloc(2, 0, AllocOp::Malloc, 0x2000, 20, st.app)),
        on(1, free(3, 0, 0x1000, st.lib)),
        // Thread 2's block is freed by thread 1: not temporary.
        on(1, free(4, 0, 0x2000, st.lib)),
        // Thread 1 allocates 0x3000, thread 2 frees it and allocates at the same address;
        // thread 1 frees that block: not thread 1's last allocation, nor thread 2's
        // temporary (thread 1 released it).
        on(1, alloc(5, 0, AllocOp::Malloc, 0x3000, 30, st.lib)),
        on(2, free(6, 0, 0x3000, st.app)),
        on(2, alloc(7, 0, AllocOp::Malloc, 0x3000, 40, st.app)),
        on(1, free(8, 0, 0x3000, st.lib)),
    ];
    let r = report(
        config(Charge::First, FreeTo::Owner),
        &reg,
        &[session(0, 100, 1, 0)],
        &events,
    );
    assert_eq!(r.totals.temporary_allocations, 1);
    let temporary: Vec<(String, u64)> = units(&r)
        .into_iter()
        .map(|(n, s)| (n, s.temporary_allocations))
        .collect();
    assert_eq!(
        temporary,
        [("app".to_string(), 0), ("libb.so".to_string(), 1)]
    );
}

/// The leak check's findings (`record --leak-check`), per process image and per unit: a
/// block found lost stays lost unless freed after the check (other threads run on while it
/// reads); a finding about an address not allocated is dropped; an image without the
/// check's summary record was not checked, and its blocks count nowhere.
#[test]
fn leak_check_findings_count_per_image_and_unit_until_freed() {
    use crate::memory::report::AtExit;
    use tansa_wire::event::{LeakClass, LeakScan};
    let (reg, st) = fixture(&[1, 2]);
    let sessions = [session(1, 100, 1, 0), session(2, 200, 1, 0)];
    let unreached =
        |ts: u64, ptr: u64, class: LeakClass| event(ts, 1, EventKind::Unreached { ptr, class });
    let scan = LeakScan {
        ts: 8,
        blocks: 4,
        reachable: 1,
        root_bytes: 4096,
        status: 0,
    };
    let events = [
        alloc(1, 1, AllocOp::Malloc, 0x10, 40, st.lib),
        alloc(2, 1, AllocOp::Malloc, 0x20, 24, st.app),
        alloc(3, 1, AllocOp::Malloc, 0x30, 100, st.app),
        alloc(4, 1, AllocOp::Malloc, 0x40, 8, st.lib),
        alloc(5, 2, AllocOp::Malloc, 0x10, 50, st.app),
        unreached(6, 0x10, LeakClass::Definite),
        unreached(6, 0x20, LeakClass::Indirect),
        unreached(6, 0x40, LeakClass::Definite),
        unreached(6, 0x99, LeakClass::Definite),
        unreached(7, 0x30, LeakClass::Released),
        event(8, 1, EventKind::LeakScan(Box::new(scan))),
        free(9, 1, 0x40, st.b),
        // Allocated again after the check: not found lost.
        alloc(10, 1, AllocOp::Malloc, 0x40, 16, st.app),
    ];
    let checked = |config: Config| {
        let mut agg = Aggregator::new(config, Calibration::monotonic());
        agg.set_leak_check(None);
        for s in &sessions {
            agg.add_session(s);
        }
        for e in &events {
            agg.event(&reg, e);
        }
        agg.finish(&reg)
    };
    let r = checked(config(Charge::First, FreeTo::Owner));
    let x = |d: (u64, u64), i: (u64, u64), reach: (u64, u64), rel: (u64, u64)| AtExit {
        definite_blocks: d.0,
        definite_bytes: d.1,
        indirect_blocks: i.0,
        indirect_bytes: i.1,
        reachable_blocks: reach.0,
        reachable_bytes: reach.1,
        released_blocks: rel.0,
        released_bytes: rel.1,
    };
    let none = (0, 0);
    let image = x((1, 40), (1, 24), (1, 16), (1, 100));
    let check = r.leak_check.as_ref().expect("a leak check summary");
    assert_eq!(check.images_checked, 1);
    assert_eq!(check.images_not_checked, 1);
    assert_eq!(check.at_exit, image);
    assert_eq!(r.processes[0].at_exit, Some(image));
    assert_eq!(r.processes[1].at_exit, None, "not checked");
    // Per unit: `libb.so` allocated the lost 40 bytes (the 8 were freed); `app` the
    // indirectly lost, the released and the reachable blocks, and 50 bytes in the image
    // not checked.
    let mut per_unit: Vec<(&str, Option<AtExit>)> =
        r.units.iter().map(|u| (&*u.unit, u.at_exit)).collect();
    per_unit.sort_by_key(|u| u.0);
    assert_eq!(
        per_unit,
        [
            ("app", Some(x(none, (1, 24), (1, 16), (1, 100)))),
            ("libb.so", Some(x((1, 40), none, none, none))),
        ]
    );
    // Split by interval (the HTML page's tables), on each unit's last row only: the check
    // is made at the end.
    let split = checked(Config {
        interval_ns: 4,
        split_intervals: true,
        ..config(Charge::First, FreeTo::Owner)
    });
    let mut rows: Vec<(&str, Option<u64>, Option<AtExit>)> = split
        .units
        .iter()
        .map(|u| (&*u.unit, u.start_ns, u.at_exit))
        .collect();
    rows.sort_by_key(|u| (u.0, u.1));
    assert_eq!(
        rows,
        [
            ("app", Some(0), None),
            ("app", Some(4), None),
            ("app", Some(8), Some(x(none, (1, 24), (1, 16), (1, 100)))),
            ("libb.so", Some(0), None),
            ("libb.so", Some(4), None),
            ("libb.so", Some(8), Some(x((1, 40), none, none, none))),
        ]
    );
    // The check's records are not the program's events, and without `set_leak_check`
    // nothing is said of them.
    assert_eq!(r.events, 7);
    let plain = report(
        config(Charge::First, FreeTo::Owner),
        &reg,
        &sessions,
        &events,
    );
    assert!(plain.leak_check.is_none());
    assert!(plain.units.iter().all(|u| u.at_exit.is_none()));
    assert!(plain.processes.iter().all(|p| p.at_exit.is_none()));
}

/// Two threads that meet a new stack at the same moment each define it (the agent's stack
/// table takes no lock): the decoders given the registry's aliases, and online mode's
/// [`Registry::canonicalize`], give every event the first id its session gave those frames,
/// so that nothing counted per stack is split. Another session's ids stay its own.
#[test]
fn a_stack_defined_twice_by_a_session_is_one_stack() {
    let mut kit = Kit::new();
    let root = [(APP, "main"), (LIBC, "__libc_start_main")];
    let first = kit.stack(&[&[(LIBA, "a_alloc")][..], &root].concat());
    let other = kit.stack(&[&[(LIBB, "b_free")][..], &root].concat());
    let again = kit.stack(&[&[(LIBA, "a_alloc")][..], &root].concat());
    let reg = kit.registry(&[0, 1]);
    let aliases = reg.stack_aliases().expect("a stack defined twice");
    assert_eq!(aliases.len(), 2, "one per session");
    for s in [0, 1] {
        let s = SessionId(s);
        assert_eq!(aliases.canonical(s, StackId(again)), StackId(first));
        assert_eq!(aliases.canonical(s, StackId(other)), StackId(other));
        assert_eq!(aliases.canonical(s, StackId(first)), StackId(first));
    }
    let mut stream = ThreadStream::new();
    let alloc = |ts: u64, ptr: u64, stack: u32| AllocEvent {
        op: AllocOp::Malloc,
        ts,
        ptr,
        size: 8,
        align: 0,
        stack,
    };
    stream.put(&|s, b| s.encode_alloc(&alloc(10, 0x1000, first), b));
    stream.put(&|s, b| s.encode_alloc(&alloc(20, 0x2000, again), b));
    stream.put(&|s, b| {
        s.encode_free(
            &FreeEvent {
                ts: 30,
                ptr: 0x2000,
                stack: again,
            },
            b,
        )
    });
    stream.put(&|s, b| {
        s.encode_free(
            &FreeEvent {
                ts: 40,
                ptr: 0x1000,
                stack: other,
            },
            b,
        )
    });
    let decode = |aliases| {
        let mut events = Vec::new();
        let mut d = StreamDecoder::new(SessionId(0)).with_stack_aliases(aliases);
        d.push(&stream.bytes.0, &mut |e| events.push(e));
        assert_eq!(d.finish(), None);
        events
            .into_iter()
            .skip(1)
            .map(|e| e.kind.stack().0)
            .collect::<Vec<u32>>()
    };
    assert_eq!(decode(Some(aliases)), [first, first, first, other]);
    assert_eq!(decode(None), [first, again, again, other]);
    // Online mode: the events decoded as they come, given the first id when aggregated.
    let mut e = Event {
        ts: 20,
        session: SessionId(1),
        tid: 7,
        kind: EventKind::Free {
            ptr: 0x2000,
            stack: StackId(again),
        },
    };
    reg.canonicalize(&mut e);
    assert_eq!(e.kind.stack(), StackId(first));
    // Without a second definition there is nothing to do.
    assert!(fixture(&[0]).0.stack_aliases().is_none());
}
