//! Crafted recordings and plans: each input that once made tansa reserve gigabytes, abort,
//! hang, wrap or panic (issue 9), read under the memory bound of the fuzz targets (64 MiB
//! plus 64 times the data) and a deadline.

use std::io::Cursor;
use std::sync::Mutex;
use std::time::Duration;

use tansa_analysis::cpu::{self, CpuRecording};
use tansa_analysis::memory::aggregate::MAX_INTERVALS;
use tansa_analysis::memory::recording::MemoryRecording;
use tansa_analysis::memory::{By, Charge, Config, FreeTo, MemoryReport};
use tansa_format::container::{FRAME_HEADER_LEN, FrameType, Kind, Writer};
use tansa_format::cpu as cpu_frames;
use tansa_format::memory::{self, SessionInfo, meta_chunk_prefix, thread_chunk_prefix};
use tansa_format::meta::{Calibration, RecordingMeta};
use tansa_format::symtab::{
    AddrSymbols, CodeBlock, ModuleStatus, ModuleSymbols, SymFrame, SymbolTable,
};
use tansa_fuzz::alloc::{self, Counting};
use tansa_fuzz::craft::{self, Recording};
use tansa_wire::event::{
    AllocEvent, AllocOp, ByteSink, EventBuf, FreeEvent, StackFrame, StreamState, Tag,
    encode_module_load, encode_stack_def, encode_thread_start,
};

#[global_allocator]
static ALLOC: Counting = Counting;

/// One test at a time: the memory bound is measured on the whole process.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` on its own thread within the fuzz targets' memory bound for `data` and a
/// deadline.
fn bounded<R: Send + 'static>(data_len: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let limit = (64 << 20) + 64 * data_len;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = alloc::bounded(limit, f);
        let _ = tx.send(r);
    });
    let (r, peak) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("finished within a minute");
    assert!(peak <= limit, "{peak} bytes");
    r
}

struct Bytes(Vec<u8>);

impl ByteSink for Bytes {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// A thread stream.
struct Stream {
    out: Bytes,
    state: StreamState,
}

impl Stream {
    fn new(pid: u32, tid: u32) -> Stream {
        let mut s = Stream {
            out: Bytes(Vec::new()),
            state: StreamState::default(),
        };
        encode_thread_start(&mut s.out, &mut s.state, pid, tid, 0, b"main");
        s
    }

    fn alloc(&mut self, ts: u64, ptr: u64, size: u64, stack: u32) {
        let mut b = EventBuf::new();
        self.state.encode_alloc(
            &AllocEvent {
                op: AllocOp::Malloc,
                ts,
                ptr,
                size,
                align: 0,
                stack,
            },
            &mut b,
        );
        self.out.put(b.as_bytes());
    }

    fn free(&mut self, ts: u64, ptr: u64, stack: u32) {
        let mut b = EventBuf::new();
        self.state
            .encode_free(&FreeEvent { ts, ptr, stack }, &mut b);
        self.out.put(b.as_bytes());
    }
}

/// A memory recording being written.
struct Build(Writer<Vec<u8>>);

impl Build {
    fn new() -> Build {
        Build::on("", 0)
    }

    /// A recording made on `host`, started at `started_unix_ms`.
    fn on(host: &str, started_unix_ms: u64) -> Build {
        let mut w = Writer::new(Vec::new(), Kind::Memory).unwrap();
        w.value(
            FrameType::META,
            &RecordingMeta {
                tool: "crafted".into(),
                started_unix_ms,
                hostname: host.into(),
                command: Vec::new(),
                options: Vec::new(),
            },
        )
        .unwrap();
        Build(w)
    }

    fn session(&mut self, session: u32, pid: u32, ppid: u32) {
        let info = SessionInfo {
            session,
            pid,
            ppid,
            exe: "/bin/crafted".into(),
            cmdline: Vec::new(),
            start_ticks: 0,
            free_stacks: true,
            online: false,
        };
        self.0.value(memory::SESSION, &info).unwrap();
    }

    fn meta(&mut self, session: u32, stream: &[u8]) {
        let mut p = meta_chunk_prefix(session).to_vec();
        p.extend_from_slice(stream);
        self.0.frame(memory::META_CHUNK, &p).unwrap();
    }

    fn thread(&mut self, session: u32, stream: u32, s: &Stream) {
        let mut p = thread_chunk_prefix(session, stream).to_vec();
        p.extend_from_slice(&s.out.0);
        self.0.keyed_frame(memory::THREAD_CHUNK, &p).unwrap();
    }

    fn finish(mut self, symbols: Option<&SymbolTable>) -> Vec<u8> {
        self.0
            .value(FrameType::CALIBRATION, &Calibration::monotonic())
            .unwrap();
        if let Some(t) = symbols {
            self.0.value(FrameType::SYMBOLS, t).unwrap();
        }
        self.0.finish().unwrap()
    }
}

fn config(by: By, interval_ns: u64) -> Config {
    Config {
        by,
        charge: Charge::First,
        free_to: FreeTo::Owner,
        interval_ns,
        pid: None,
        rank: None,
        split_intervals: false,
    }
}

/// The report on `data` (read in a bounded run), and whether it was found damaged.
fn report(data: Vec<u8>, cfg: Config) -> (MemoryReport, bool) {
    let n = data.len();
    bounded(n, move || {
        let rec = MemoryRecording::open(Cursor::new(data)).expect("a memory recording");
        let r = rec.report(cfg, |_| {});
        (r, rec.is_damaged())
    })
}

/// A real recording (`tansa record` of fuzz/seeds/heap.c, frames stored uncompressed).
fn real_recording() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/corpus/memory/heap-plain"
    );
    std::fs::read(path).expect("the seed recording of the memory corpus")
}

const ALLOC_TAGS: [Tag; 7] = [
    Tag::Malloc,
    Tag::Calloc,
    Tag::Memalign,
    Tag::PosixMemalign,
    Tag::AlignedAlloc,
    Tag::Valloc,
    Tag::Pvalloc,
];

#[test]
fn a_stack_id_of_0xffffffff_reserves_nothing() {
    // A real recording whose first stack is renamed 0xFFFFFFFF, in its definition and in
    // every event that uses it: the report must be the same as the original's.
    let original = real_recording();
    let mut rec = Recording::decode(&original).unwrap();
    rec.unchunk();
    let to_max = |v: u64| (v == 1).then_some(u64::from(u32::MAX));
    // Stack 1 of each process image (the parent and its forked child).
    assert!(rec.rewrite_field(memory::META_CHUNK, &[Tag::StackDef], 0, to_max) >= 1);
    let events = rec.rewrite_field(memory::THREAD_CHUNK, &ALLOC_TAGS, 3, to_max)
        + rec.rewrite_field(
            memory::THREAD_CHUNK,
            &[Tag::Realloc, Tag::ReallocArray],
            5,
            to_max,
        )
        + rec.rewrite_field(memory::THREAD_CHUNK, &[Tag::Free], 2, to_max);
    assert!(events > 0, "the first stack is used");
    let crafted = rec.encode(true);
    for by in [By::Library, By::Function] {
        let (want, damaged) = report(original.clone(), config(by, 1));
        assert!(!damaged);
        let (got, damaged) = report(crafted.clone(), config(by, 1));
        assert!(!damaged, "{:?}", got.warnings);
        assert_eq!(got.totals, want.totals);
        let units = |r: &MemoryReport| -> Vec<(String, i64, u64)> {
            r.units
                .iter()
                .map(|u| (u.unit.clone(), u.stats.net_bytes, u.stats.allocated_bytes))
                .collect()
        };
        assert_eq!(units(&got), units(&want));
    }
}

#[test]
fn a_session_number_of_0xffffffff_reserves_nothing() {
    let mut b = Build::new();
    b.session(u32::MAX, 42, 1);
    let mut s = Stream::new(42, 42);
    s.alloc(10, 0x1000, 100, 0);
    s.alloc(20, 0x2000, 23, 0);
    b.thread(u32::MAX, 0, &s);
    let (r, damaged) = report(b.finish(None), config(By::Library, 1));
    assert!(!damaged);
    assert_eq!(r.process.pid, 42);
    assert_eq!(r.totals.allocated_bytes, 123);
}

#[test]
fn a_frame_header_claiming_a_gibibyte_costs_no_more_than_the_file() {
    let mut b = Build::new();
    b.session(0, 42, 1);
    let mut bytes = b.0.finish().unwrap();
    // Instead of the end frame: a header claiming 1 GiB, and 100 bytes.
    bytes.truncate(bytes.len() - FRAME_HEADER_LEN);
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[0..2].copy_from_slice(&memory::THREAD_CHUNK.0.to_le_bytes());
    h[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    h[8..12].copy_from_slice(&(1u32 << 30).to_le_bytes());
    bytes.extend_from_slice(&h);
    bytes.extend_from_slice(&[7u8; 100]);
    craft::fix_checksums(&mut bytes);
    let (r, damaged) = report(bytes, config(By::Library, 1));
    assert!(damaged);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("ends in the middle of a frame at byte")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn allocation_sizes_beyond_i64_are_damage_not_negative_bytes() {
    let mut b = Build::new();
    b.session(0, 42, 1);
    let mut s = Stream::new(42, 42);
    s.alloc(10, 0x1000, 100, 0);
    s.alloc(20, 0x2000, (1 << 63) + 5, 0);
    s.alloc(30, 0x3000, 50, 0);
    b.thread(0, 0, &s);
    let (r, damaged) = report(b.finish(None), config(By::Library, 1));
    assert!(damaged);
    assert_eq!(
        r.totals.net_bytes, 100,
        "the events after the damage are left out"
    );
    assert!(r.units.iter().all(|u| u.stats.net_bytes >= 0));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("an allocation of 9223372036854775813 bytes, more than any")),
        "{:?}",
        r.warnings
    );

    // The same in a real recording: every malloc size rewritten.
    let mut rec = Recording::decode(&real_recording()).unwrap();
    rec.unchunk();
    let n = rec.rewrite_field(memory::THREAD_CHUNK, &[Tag::Malloc], 2, |_| Some(1 << 63));
    assert!(n > 0);
    let (r, damaged) = report(rec.encode(false), config(By::Function, 1));
    assert!(damaged);
    assert!(r.totals.net_bytes >= 0 && r.units.iter().all(|u| u.stats.max_bytes >= 0));
}

#[test]
fn an_interval_of_a_nanosecond_is_capped() {
    // 20,000 allocations over 4 s (monotonic clock: ticks are nanoseconds).
    let mut b = Build::new();
    b.session(0, 42, 1);
    let mut s = Stream::new(42, 42);
    let n = 20_000u64;
    for i in 0..n {
        s.alloc(i * 200_000, 0x1000 + 16 * i, 10, 0);
    }
    b.thread(0, 0, &s);
    let data = b.finish(None);
    for interval in [1, 1_000] {
        let (r, damaged) = report(data.clone(), config(By::Interval, interval));
        assert!(!damaged);
        assert!(r.units.len() as u64 <= MAX_INTERVALS, "{}", r.units.len());
        let used = r.interval_ns.unwrap();
        assert!(
            used > interval && 4_000_000_000 / used < MAX_INTERVALS,
            "{used}"
        );
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("more than 10000 intervals")),
            "{:?}",
            r.warnings
        );
        // Merged rows keep every byte.
        let sum: u64 = r.units.iter().map(|u| u.stats.allocated_bytes).sum();
        assert_eq!(sum, 10 * n);
        let last = r.units.last().unwrap();
        assert_eq!(last.cumulative_net_bytes, Some(10 * n as i64));
    }
}

#[test]
fn a_process_started_twice_does_not_hang_a_release() {
    let mut b = Build::new();
    // The same session twice, its own parent: a release of an unknown block once looked
    // for the block in the session's ancestors for ever.
    b.session(0, 7, 7);
    b.session(0, 7, 7);
    let mut s = Stream::new(7, 7);
    s.free(10, 0xdead, 0);
    b.thread(0, 0, &s);
    let (r, damaged) = report(b.finish(None), config(By::Library, 1));
    assert!(damaged);
    assert!(
        r.warnings.iter().any(|w| w.contains("a second start")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn deep_inlining_does_not_multiply_memory() {
    // 200 stacks of 500 frames at one address that the symbol table says has 10,000
    // inlined functions: once 10^9 source-level frames.
    let mut b = Build::new();
    b.session(0, 42, 1);
    let mut meta = Bytes(Vec::new());
    encode_module_load(
        &mut meta,
        1,
        0,
        0,
        0,
        &[],
        b"/lib/libdeep.so",
        std::iter::empty(),
    );
    let frames: Vec<StackFrame> = (0..500)
        .map(|_| StackFrame {
            module: 1,
            offset: 0x10,
        })
        .collect();
    for id in 1..=200 {
        encode_stack_def(&mut meta, id, frames.iter().copied());
    }
    b.meta(0, &meta.0);
    let mut s = Stream::new(42, 42);
    for id in 1..=200u32 {
        s.alloc(u64::from(id), 0x1000 * u64::from(id), 8, id);
    }
    b.thread(0, 0, &s);
    let symbols = SymbolTable {
        strings: vec!["deep".into(), "deep.c".into()],
        modules: vec![ModuleSymbols {
            key: 1,
            path: "/lib/libdeep.so".into(),
            build_id: Vec::new(),
            status: ModuleStatus::Resolved,
            addrs: vec![AddrSymbols {
                offset: 0x10,
                frames: vec![
                    SymFrame {
                        function: 0,
                        file: 1,
                        line: 1,
                        column: 0,
                    };
                    10_000
                ],
                function_start: Some(0),
            }],
            code: Vec::new(),
        }],
    };
    let (r, damaged) = report(b.finish(Some(&symbols)), config(By::Function, 1));
    assert!(!damaged, "{:?}", r.warnings);
    assert_eq!(r.totals.allocated_bytes, 200 * 8);
}

/// A CPU recording of one process and module, with these counts and symbols.
fn cpu_recording(
    addresses: &[cpu_frames::AddressCount],
    stacks: &[cpu_frames::Stack],
    counts: &[cpu_frames::StackCount],
    symbols: &SymbolTable,
) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), Kind::Cpu).unwrap();
    w.value(
        cpu_frames::INFO,
        &cpu_frames::CpuInfo {
            source: cpu_frames::SampleSource::Agent,
            event: "crafted".into(),
            period_ns: 1_000_000,
            frequency_hz: 1000,
            target: "command".into(),
            unwinding: "fp".into(),
            kernel: false,
            cpus: 1,
            timeline: false,
            notes: Vec::new(),
            recorder_pid: 0,
        },
    )
    .unwrap();
    w.value(
        cpu_frames::MODULES,
        &vec![cpu_frames::Module {
            id: 0,
            path: "/bin/hot".into(),
            build_id: Vec::new(),
            kind: cpu_frames::ModuleKind::Elf,
        }],
    )
    .unwrap();
    w.value(cpu_frames::ADDRESSES, &addresses.to_vec()).unwrap();
    w.value(cpu_frames::STACKS, &stacks.to_vec()).unwrap();
    w.value(cpu_frames::STACK_COUNTS, &counts.to_vec()).unwrap();
    w.value(FrameType::SYMBOLS, symbols).unwrap();
    w.finish().unwrap()
}

fn pc(offset: u64, count: u64) -> cpu_frames::AddressCount {
    cpu_frames::AddressCount {
        process: 0,
        pc: cpu_frames::Loc { module: 0, offset },
        caller: None,
        mode: cpu_frames::Mode::User,
        count,
    }
}

#[test]
fn one_long_chain_counted_by_many_threads_is_walked_once() {
    let frames: Vec<cpu_frames::Loc> = (0..20_000)
        .map(|i| cpu_frames::Loc {
            module: 0,
            offset: 0x1000 + i,
        })
        .collect();
    let stack = cpu_frames::Stack {
        id: 0,
        frames,
        kernel_frames: 0,
        truncated: false,
    };
    let counts: Vec<cpu_frames::StackCount> = (0..20_000)
        .map(|tid| cpu_frames::StackCount {
            process: 0,
            tid,
            stack: 0,
            count: 1,
        })
        .collect();
    let data = cpu_recording(
        &[pc(0x1000, 20_000)],
        &[stack],
        &counts,
        &SymbolTable::default(),
    );
    let n = data.len();
    let units = bounded(n, move || {
        let rec = CpuRecording::open(Cursor::new(data)).unwrap();
        [cpu::By::Function, cpu::By::Line, cpu::By::Library].map(|by| {
            cpu::report(&rec, cpu::Options { by, pid: None })
                .units
                .len()
        })
    });
    assert!(units.iter().all(|&u| u >= 1));
}

#[test]
fn sample_counts_add_up_without_wrapping() {
    let data = cpu_recording(
        &[pc(0x1000, u64::MAX), pc(0x1000, u64::MAX), pc(0x1001, 5)],
        &[],
        &[],
        &SymbolTable::default(),
    );
    let rec = CpuRecording::open(Cursor::new(data)).unwrap();
    assert_eq!(rec.total_samples(), u64::MAX);
    let r = cpu::report(
        &rec,
        cpu::Options {
            by: cpu::By::Process,
            pid: None,
        },
    );
    assert_eq!(r.total_samples, u64::MAX);
}

#[test]
fn an_annotated_source_spanning_four_billion_lines_lists_what_is_there() {
    let frame = |line| SymFrame {
        function: 0,
        file: 1,
        line,
        column: 0,
    };
    let symbols = SymbolTable {
        strings: vec!["work".into(), "hot.c".into()],
        modules: vec![ModuleSymbols {
            key: 0,
            path: "/bin/hot".into(),
            build_id: Vec::new(),
            status: ModuleStatus::Resolved,
            addrs: vec![
                AddrSymbols {
                    offset: 0x1000,
                    frames: vec![frame(1)],
                    function_start: Some(0x1000),
                },
                AddrSymbols {
                    offset: 0x1001,
                    frames: vec![frame(4_000_000_000)],
                    function_start: Some(0x1000),
                },
            ],
            code: vec![CodeBlock {
                start: 0x1000,
                bytes: vec![0x90, 0x90, 0xc3],
            }],
        }],
    };
    let data = cpu_recording(&[pc(0x1000, 3), pc(0x1001, 4)], &[], &[], &symbols);
    let n = data.len();
    let listed = bounded(n, move || {
        let rec = CpuRecording::open(Cursor::new(data)).unwrap();
        let a = cpu::annotate::annotate(&rec, "work", None).unwrap();
        a.sources.iter().map(|s| s.lines.len()).sum::<usize>()
    });
    assert!(listed < 20_000, "{listed}");
}

#[test]
fn lost_event_counts_add_up_without_wrapping() {
    let mut b = Build::new();
    b.session(0, 42, 1);
    let mut s = Stream::new(42, 42);
    for _ in 0..2 {
        let mut e = EventBuf::new();
        s.state.encode_lost(u64::MAX, &mut e);
        s.out.put(e.as_bytes());
    }
    b.thread(0, 0, &s);
    let (r, _) = report(b.finish(None), config(By::Library, 1));
    assert_eq!(r.processes[0].lost_events, u64::MAX);
}

/// A recording of `bytes` allocated at 10 ns and freed at 500 µs of its own clock, made on
/// `host` at `started_ms`.
fn job_part(host: &str, started_ms: u64, pid: u32, bytes: u64) -> Vec<u8> {
    let mut b = Build::on(host, started_ms);
    b.session(0, pid, 1);
    let mut s = Stream::new(pid, pid);
    s.alloc(10, 0x1000, bytes, 0);
    s.free(500_000, 0x1000, 0);
    b.thread(0, 0, &s);
    b.finish(None)
}

/// The report on several recordings read as one job.
fn job_report(parts: Vec<Vec<u8>>) -> MemoryReport {
    let n = parts.iter().map(Vec::len).sum();
    bounded(n, move || {
        let mut rec = MemoryRecording::new_job();
        for (i, p) in parts.into_iter().enumerate() {
            rec.add(format!("part{i}"), Cursor::new(p))
                .expect("a memory recording");
        }
        rec.finish_job();
        rec.report(Config::default(), |_| {})
    })
}

#[test]
fn recordings_of_one_host_share_its_clock_and_others_align_by_wall_clock() {
    // One host, started 1 ms apart: one clock, so both blocks are live at once.
    let r = job_report(vec![
        job_part("a", 1000, 7, 100),
        job_part("a", 1001, 8, 50),
    ]);
    assert_eq!(r.totals.max_bytes, 150);
    let job = r.job.as_ref().expect("a job");
    assert_eq!(job.clock, tansa_analysis::memory::report::JobClock::Shared);
    assert_eq!(
        r.recordings.iter().map(|x| x.shift_ns).collect::<Vec<_>>(),
        [0, 0]
    );
    // Two hosts: the second's timeline starts 1 ms after the first's, when the first
    // block was freed already.
    let r = job_report(vec![
        job_part("a", 1000, 7, 100),
        job_part("b", 1001, 7, 50),
    ]);
    assert_eq!(r.totals.max_bytes, 100);
    assert_eq!(r.totals.allocated_bytes, 150);
    assert_eq!(
        r.job.as_ref().expect("a job").clock,
        tansa_analysis::memory::report::JobClock::WallClock
    );
    assert_eq!(
        r.recordings.iter().map(|x| x.shift_ns).collect::<Vec<_>>(),
        [0, 1_000_000]
    );
    // The same pid in both: two processes, one per recording.
    let recs: Vec<Option<u32>> = r.processes.iter().map(|p| p.recording).collect();
    assert_eq!(recs, [Some(0), Some(1)]);
}

#[test]
fn a_crafted_session_number_leaves_no_room_for_another_recording() {
    let mut b = Build::new();
    b.session(u32::MAX, 42, 1);
    let first = b.finish(None);
    let second = job_part("a", 0, 1, 10);
    let mut rec = MemoryRecording::new_job();
    rec.add("a".into(), Cursor::new(first))
        .expect("the first reads");
    assert!(matches!(
        rec.add("b".into(), Cursor::new(second)),
        Err(tansa_analysis::memory::recording::RecordingError::TooManySessions)
    ));
}
