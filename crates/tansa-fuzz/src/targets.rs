//! The fuzz targets: plain functions over bytes.
//!
//! Each target reads its input as untrusted data the way tansa does, and goes on to what
//! tansa computes from it (reports under every unit of aggregation, annotation, trace
//! rebuilding). None may panic or abort; [`Target::memory_limit`] is the bound its
//! allocations must stay within. The recording targets recompute the frame checksums of
//! their input first, so that any mutation reaches the decoders; the container target does
//! not, so that the checksum is fuzzed too.

use std::io::Cursor;

use tansa_analysis::cpu::{self, CpuRecording};
use tansa_analysis::memory::merge::StreamDecoder;
use tansa_analysis::memory::model::Registry;
use tansa_analysis::memory::recording::{MemoryRecording, TableResolver};
use tansa_analysis::memory::{By, Charge, Config, FreeTo, SessionId, StackId};
use tansa_format::container::{FrameType, Reader};
use tansa_format::symtab::SymbolTable;
use tansa_format::{Frame, cpu as cpu_frames, memory, meta, retrace as retrace_frames};
use tansa_retrace::recording::RetraceRecording;
use tansa_wire::event::{Decoder, Record};

use crate::craft;

/// A fuzz target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The container reader: frames read in sequence, skimmed by key, and again at their
    /// offsets.
    Container,
    /// Every frame decoder on one payload: the postcard payloads of every frame type, and
    /// the event records of meta and thread streams.
    Frames,
    /// A memory recording read and reported on under every unit (the memory aggregator).
    Memory,
    /// A CPU recording read, reported on under every unit (the CPU aggregator), annotated.
    Cpu,
    /// An instruction-trace recording read, its code annotated, and a small one rebuilt.
    Retrace,
    /// A leak-test plan parsed.
    Plan,
    /// An agent's segment file read by the salvage of a recording whose recorder was
    /// killed (`tansa_collect::salvage::recover`).
    Segment,
    /// A heap recording a killed recorder left unfinished, completed as `tansa report`
    /// completes one (`tansa_collect::salvage::complete_leftover`), then read.
    Leftover,
    /// A CPU recording a killed recorder left cut short after its checkpoints, completed
    /// as `tansa report` completes one (`tansa_sample::complete_leftover`), then read.
    CpuLeftover,
    /// A JIT runtime's perf map (`/tmp/perf-PID.map`, written by the profiled program)
    /// read, and addresses named from it.
    PerfMap,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 10] = [
        Target::Container,
        Target::Frames,
        Target::Memory,
        Target::Cpu,
        Target::Retrace,
        Target::Plan,
        Target::Segment,
        Target::Leftover,
        Target::CpuLeftover,
        Target::PerfMap,
    ];

    /// Its name (the corpus directory and the cargo-fuzz target).
    pub fn name(self) -> &'static str {
        match self {
            Target::Container => "container",
            Target::Frames => "frames",
            Target::Memory => "memory",
            Target::Cpu => "cpu",
            Target::Retrace => "retrace",
            Target::Plan => "plan",
            Target::Segment => "segment",
            Target::Leftover => "leftover",
            Target::CpuLeftover => "cpu-leftover",
            Target::PerfMap => "perf-map",
        }
    }

    /// The target called `name`.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether its inputs are recordings (as opposed to a payload or a text).
    pub fn takes_recordings(self) -> bool {
        matches!(
            self,
            Target::Container
                | Target::Memory
                | Target::Cpu
                | Target::Retrace
                | Target::Leftover
                | Target::CpuLeftover
        )
    }

    /// Runs the target on `data`.
    pub fn run(self, data: &[u8]) {
        match self {
            Target::Container => container(data),
            Target::Frames => frames(data),
            Target::Memory => memory_report(data),
            Target::Cpu => cpu_report(data),
            Target::Retrace => retrace(data),
            Target::Plan => plan(data),
            Target::Segment => segment(data),
            Target::Leftover => leftover(data),
            Target::CpuLeftover => cpu_leftover(data),
            Target::PerfMap => perf_map(data),
        }
    }

    /// The most bytes the target may have allocated at once on `data`: 64 MiB plus 64
    /// times the input, where a recording's input counts its frames decompressed (as far as
    /// the reader accepts them).
    pub fn memory_limit(self, data: &[u8]) -> usize {
        let size = if self.takes_recordings() {
            (data.len() as u64).saturating_add(craft::payload_bound(data))
        } else {
            data.len() as u64
        };
        usize::try_from(size.saturating_mul(64).saturating_add(64 << 20)).unwrap_or(usize::MAX)
    }
}

/// A segment file as the salvage reads it: as segment 0 of a session, and as segments 0
/// and 1 at once, with the recording holding some bytes of each stream (taken from the
/// input's length, so that both "nothing" and "part of it" are tried). What comes back is
/// bounded by the input: each ring's bytes by its size, the rings by the segment's size.
pub fn segment(data: &[u8]) {
    use tansa_collect::salvage::{ReadAt, recover};
    let have = (data.len() % 97) as u64;
    let src: &dyn ReadAt = &data;
    for segments in [vec![(0u32, src)], vec![(0u32, src), (1, src)]] {
        for have_meta in [0, have] {
            if let Ok(r) = recover(&segments, have_meta, &|s| u64::from(s) * have) {
                let got: usize =
                    r.meta.len() + r.streams.iter().map(|s| s.bytes.len()).sum::<usize>();
                assert!(
                    got <= data.len() * segments.len(),
                    "more bytes than the input holds"
                );
                let _ = Decoder::new(&r.meta).take_while(Result::is_ok).count();
            }
        }
    }
}

/// The input with its checksums recomputed, written to a file of its own (in a temporary
/// directory, removed when dropped), as a killed recorder would have left it.
fn leftover_file(data: &[u8]) -> Option<(Vec<u8>, tempfile::TempDir, std::path::PathBuf)> {
    let mut data = data.to_vec();
    craft::fix_checksums(&mut data);
    let dir = tempfile::tempdir().ok()?;
    let path = dir.path().join("leftover.tansa");
    std::fs::write(&path, &data).ok()?;
    Some((data, dir, path))
}

/// An unfinished heap recording (the input, checksums recomputed) completed in a file of
/// its own, as `tansa report` completes what a killed recorder left: its torn tail cut,
/// every image without an end ended, calibration, symbols and the end marker added. What
/// comes back must be a whole recording that the reader takes, and the bytes cut off at
/// most the input's; every report of it is then made, as for [`memory_report`].
pub fn leftover(data: &[u8]) {
    let Some((data, _dir, path)) = leftover_file(data) else {
        return;
    };
    let Ok(Some(done)) = tansa_collect::salvage::complete_leftover(&path, &mut |_, _, _| {}) else {
        return;
    };
    assert!(
        done.salvage.torn_bytes <= data.len() as u64,
        "more cut off than the input holds"
    );
    let completed = std::fs::read(&path).expect("the completed recording is readable");
    let mut reader =
        Reader::new(Cursor::new(completed.as_slice())).expect("a completed recording's header");
    while let Ok(Some(_)) = reader.next_frame() {}
    assert!(
        reader.is_complete(),
        "a completed recording ends with its end marker"
    );
    memory_report(&completed);
}

/// An unfinished CPU recording (the input, checksums recomputed) completed in a file of its
/// own, as `tansa report` completes what a killed `tansa sample` left: cut after its last
/// checkpoint group, its addresses resolved (from whatever files it names), the symbols,
/// the completion note, the summary and the end marker added. What comes back must be a
/// whole recording that the reader takes, with the samples the completion said it kept,
/// and no more cut off than the input holds; every report of it is then made, as for
/// [`cpu_report`].
pub fn cpu_leftover(data: &[u8]) {
    let Some((data, _dir, path)) = leftover_file(data) else {
        return;
    };
    let Ok(Some(done)) = tansa_sample::complete_leftover(&path, &mut |_, _, _| {}) else {
        return;
    };
    assert!(
        done.completed.dropped_bytes <= data.len() as u64,
        "more cut off than the input holds"
    );
    let completed = std::fs::read(&path).expect("the completed recording is readable");
    let rec = CpuRecording::open(Cursor::new(completed.as_slice()))
        .expect("a completed recording is read");
    assert!(
        !rec.damaged,
        "a completed recording is whole: {:?}",
        rec.warnings
    );
    assert!(rec.completed.is_some(), "it says it was completed");
    assert_eq!(
        rec.summary.map(|s| s.samples),
        Some(done.samples),
        "the samples kept"
    );
    cpu_report(&completed);
}

/// The container: every frame, by sequence (thread chunks skimmed to their keys), then
/// again at its offset.
pub fn container(data: &[u8]) {
    let Ok(mut reader) = Reader::new(Cursor::new(data)) else {
        return;
    };
    let mut seen = Vec::new();
    loop {
        match reader.next_frame_skimming(|ty| ty == memory::THREAD_CHUNK) {
            Ok(Some(f)) => seen.push(f),
            Ok(None) => break,
            Err(e) => {
                // After an error the reader yields nothing more.
                assert!(matches!(reader.next_frame(), Ok(None)), "{e}");
                assert!(!reader.is_complete());
                break;
            }
        }
    }
    for f in &seen {
        let again = reader.frame_at(f.pos());
        if f.ty != memory::THREAD_CHUNK
            && let Ok(again) = again
        {
            assert_eq!(again, *f, "a frame read twice differs");
        }
    }
}

/// Decodes `payload` as the payload of every frame type.
pub fn frames(payload: &[u8]) {
    let frame = |ty: FrameType| Frame {
        ty,
        offset: 16,
        index: 1,
        payload: payload.to_vec(),
        stored_len: payload.len() as u32,
        compressed: false,
    };
    let _ = frame(FrameType::META).decode::<meta::RecordingMeta>();
    let _ = frame(FrameType::CALIBRATION)
        .decode::<meta::Calibration>()
        .map(|c| c.to_ns(u64::from(payload.len() as u32)));
    let symbols = frame(FrameType::SYMBOLS)
        .decode::<SymbolTable>()
        .unwrap_or_default();
    let _ = frame(memory::SESSION).decode::<memory::SessionInfo>();
    let _ = frame(memory::SESSION_END).decode::<memory::SessionEnd>();
    let _ = frame(memory::SESSION_LOSSES)
        .decode::<memory::SessionLosses>()
        .map(|l| l.losses.describe());
    let _ = frame(memory::UNRECORDED).decode::<memory::Unrecorded>();
    let _ = frame(memory::SESSION_PLACE).decode::<memory::SessionPlace>();
    let _ = frame(memory::VOLATILE_SEGMENT).decode::<memory::VolatileSegment>();
    let _ = frame(memory::LEAK_CAUSE).decode::<memory::LeakCause>();
    let _ = frame(memory::OWN_ALLOCATORS)
        .decode::<Vec<memory::OwnAllocator>>()
        .map(|own| own.iter().map(memory::OwnAllocator::note).count());
    let _ = frame(cpu_frames::INFO).decode::<cpu_frames::CpuInfo>();
    let _ = frame(cpu_frames::PROCESSES).decode::<Vec<cpu_frames::Process>>();
    let _ = frame(cpu_frames::MODULES).decode::<Vec<cpu_frames::Module>>();
    let _ = frame(cpu_frames::ADDRESSES).decode::<Vec<cpu_frames::AddressCount>>();
    let _ = frame(cpu_frames::STACKS).decode::<Vec<cpu_frames::Stack>>();
    let _ = frame(cpu_frames::STACK_COUNTS).decode::<Vec<cpu_frames::StackCount>>();
    let _ = frame(cpu_frames::TIMELINE).decode::<Vec<cpu_frames::TimelineEntry>>();
    let _ = frame(cpu_frames::SOURCES).decode::<Vec<cpu_frames::SourceFile>>();
    let _ = frame(cpu_frames::WITHHELD_SOURCES).decode::<Vec<cpu_frames::WithheldSource>>();
    let _ = frame(cpu_frames::NEWER_SOURCES).decode::<Vec<cpu_frames::NewerSource>>();
    let _ = frame(cpu_frames::SUMMARY).decode::<cpu_frames::CpuSummary>();
    let _ = frame(cpu_frames::UNSAMPLED).decode::<cpu_frames::Unsampled>();
    let _ = frame(cpu_frames::CHECKPOINT).decode::<cpu_frames::Checkpoint>();
    let _ = frame(cpu_frames::COMPLETED).decode::<cpu_frames::Completed>();
    let _ = frame(cpu_frames::SHORT_STACK_COPIES)
        .decode::<cpu_frames::ShortStackCopies>()
        .map(|c| c.larger_copy());
    let _ = frame(retrace_frames::INFO).decode::<retrace_frames::RetraceInfo>();
    let _ = frame(retrace_frames::CODE)
        .decode::<retrace_frames::RegionCode>()
        .map(|c| tansa_retrace::recording::program(&c));
    let _ = frame(retrace_frames::EXECUTIONS).decode::<retrace_frames::ExecutionChunk>();
    let _ = frame(retrace_frames::GROUND_TRUTH)
        .decode::<retrace_frames::GroundTruth>()
        .map(|g| g.modal().map(|m| m.1));
    let _ = frame(retrace_frames::SUMMARY).decode::<retrace_frames::RetraceSummary>();

    // As a meta stream: modules and stacks into a registry (resolved against the payload's
    // own symbol table, if it is one).
    let mut registry = Registry::default();
    let mut resolver = TableResolver::new(symbols);
    let mut stacks = Vec::new();
    for r in Decoder::new(payload) {
        match r {
            Ok(Record::ModuleLoad(m)) => {
                registry.add_module(SessionId(0), &m);
                let _ = m.segments.count();
            }
            Ok(Record::StackDef { id, frames }) => stacks.push((id, frames)),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    for (id, frames) in stacks {
        registry.add_stack(SessionId(0), StackId(id), frames, &mut resolver);
    }
    registry.resolve_pending(&mut resolver, true);
    // As a thread stream, delivered in two pieces.
    let mut d = StreamDecoder::new(SessionId(0));
    let cut = payload.len() / 3;
    let mut events = 0usize;
    d.push(&payload[..cut], &mut |_| events += 1);
    d.push(&payload[cut..], &mut |_| events += 1);
    d.finish();
}

/// A memory recording, reported on under every unit.
pub fn memory_report(data: &[u8]) {
    let mut data = data.to_vec();
    craft::fix_checksums(&mut data);
    let Ok(mut rec) = MemoryRecording::open(Cursor::new(data.as_slice())) else {
        return;
    };
    let pid = rec.sessions.first().map(|s| s.pid);
    // Pass two on a second thread once, as `tansa report` does.
    rec.prefetch_from(Cursor::new(data.clone()));
    let configs = [
        (By::Library, Charge::First, FreeTo::Owner, None),
        (By::Function, Charge::All, FreeTo::Caller, None),
        (By::Thread, Charge::Last, FreeTo::Owner, pid),
        (By::Call, Charge::First, FreeTo::Owner, None),
        // A short interval, to reach the cap on the number of intervals.
        (By::Interval, Charge::First, FreeTo::Owner, None),
    ];
    for (by, charge, free_to, pid) in configs {
        let report = rec.report(
            Config {
                by,
                charge,
                free_to,
                interval_ns: 1_000,
                pid,
                rank: None,
                split_intervals: false,
            },
            |_| {},
        );
        if by == By::Interval {
            let intervals: std::collections::BTreeSet<Option<u64>> =
                report.units.iter().map(|u| u.start_ns).collect();
            assert!(intervals.len() as u64 <= tansa_analysis::memory::aggregate::MAX_INTERVALS);
        }
    }
    // The stack profile and every export of it: its values sum to the report's totals.
    let (profile, report) = tansa_analysis::profile::heap::profile(&rec, None, None, |_| {});
    if report.totals.allocated_bytes < u64::MAX / 4 {
        assert_eq!(profile.total(1) as u64, report.totals.allocated_bytes);
        assert_eq!(profile.total(3), report.totals.net_bytes.max(0));
    }
    // Temporary allocations, counted at the same releases in both.
    assert_eq!(profile.total(6) as u64, report.totals.temporary_allocations);
    exports(&profile);
    // The leak report (with the leak-cause frame's paths, if any).
    let leaks = tansa_analysis::memory::leaks::report(&rec);
    // The HTML page, from the reports `tansa html` makes (one pass over the events).
    let limits = tansa_html::Limits::default();
    let configs = tansa_html::heap_configs(Config::default(), rec.span_ns(), &limits);
    if let [library, function, thread, call] = &rec.reports(&configs, |_| {})[..] {
        let input = tansa_html::HeapInput {
            source: "fuzz",
            library,
            function,
            thread,
            call,
            leaks: Some(&leaks),
        };
        let _ = tansa_html::heap(&input, &[], &limits).map(|page| page.to_html());
    }
    let _ = rec.is_damaged();
}

/// Writes a stack profile in every export format and as flame graphs.
fn exports(profile: &tansa_analysis::profile::Profile) {
    use tansa_export::{collapsed, flamegraph, pprof, speedscope};
    let mut sink = std::io::sink();
    let _ = pprof::write(profile, 0, &mut sink);
    let _ = speedscope::write(
        profile,
        "fuzz",
        speedscope::Options {
            by_process: true,
            by_rank: true,
        },
        &mut sink,
    );
    for value in 0..profile.value_types.len() {
        let options = collapsed::Options {
            value,
            by_process: value == 0,
            by_rank: value == 1,
        };
        let _ = collapsed::write(profile, options, &mut sink);
    }
    let options = flamegraph::Options {
        value: profile.default_value,
        reverse: true,
        ..flamegraph::Options::default()
    };
    let _ = flamegraph::write(profile, &options, &mut sink);
    let _ = flamegraph::write_diff(profile, profile, &options, &mut sink);
}

/// A CPU recording, reported on under every unit and annotated.
pub fn cpu_report(data: &[u8]) {
    let mut data = data.to_vec();
    craft::fix_checksums(&mut data);
    let Ok(rec) = CpuRecording::open(Cursor::new(data.as_slice())) else {
        return;
    };
    let _ = rec.total_samples();
    let mut functions = Vec::new();
    for by in [
        cpu::By::Process,
        cpu::By::Thread,
        cpu::By::Space,
        cpu::By::Library,
        cpu::By::Function,
        cpu::By::Line,
        cpu::By::Instruction,
        // A width chosen, and one so short that the interval limit applies.
        cpu::By::Interval { width_ns: 0 },
        cpu::By::Interval { width_ns: 1 },
    ] {
        for pid in [None, rec.processes.first().map(|p| p.pid)] {
            let report = cpu::report(&rec, cpu::Options { by, pid });
            if by == cpu::By::Function && pid.is_none() {
                functions = report
                    .units
                    .iter()
                    .take(3)
                    .map(|u| u.unit.clone())
                    .collect();
            }
        }
    }
    exports(&tansa_analysis::profile::cpu::profile(&rec, None));
    // The HTML page.
    let report = |by| cpu::report(&rec, cpu::Options { by, pid: None });
    let (by_function, by_process, by_library) = (
        report(cpu::By::Function),
        report(cpu::By::Process),
        report(cpu::By::Library),
    );
    let input = tansa_html::CpuInput {
        source: "fuzz",
        functions: &by_function,
        processes: &by_process,
        libraries: &by_library,
        annotations: &[],
    };
    let _ = tansa_html::cpu(&input, &[], &tansa_html::Limits::default()).map(|p| p.to_html());
    functions.push("main".into());
    for f in functions {
        let _ = cpu::annotate::annotate(&rec, &f, None);
    }
}

/// Most samples of a recording rebuilt by the target (rebuilding is quadratic in them).
const MAX_REBUILT_SAMPLES: usize = 400;

/// An instruction-trace recording: read, its code annotated, rebuilt when small.
pub fn retrace(data: &[u8]) {
    let mut data = data.to_vec();
    craft::fix_checksums(&mut data);
    let Ok(rec) = RetraceRecording::read(Cursor::new(data.as_slice())) else {
        return;
    };
    let _ = tansa_retrace::recording::program(&rec.code);
    let samples: usize = rec.executions.iter().map(|e| e.samples.len()).sum();
    if rec.executions.len() > 16 || samples > MAX_REBUILT_SAMPLES {
        return;
    }
    let variant = tansa_retrace::Variant::Block;
    let scores = tansa_retrace::Scores::defaults(variant, rec.info.source.is_time_based());
    let cfg = tansa_retrace::MergeConfig::new(scores);
    let _ = tansa_retrace::report::build_report(
        tansa_retrace::report::ReportInput {
            command: &[],
            info: &rec.info,
            code: &rec.code,
            executions: &rec.executions,
            phases: rec.phases.as_deref(),
            ground_truth: rec.ground_truth.as_ref(),
            summary: rec.summary.as_ref(),
        },
        &cfg,
        tansa_retrace::report::Alignment::Counts,
    );
}

/// A leak-test plan.
pub fn plan(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tansa_leaktest::plan::Plan::parse(text);
    }
}

/// A perf map, read within a budget of its own size and of half of it, and the addresses
/// its first lines name (and their neighbours) looked up: each named address must lie in
/// the line that names it.
pub fn perf_map(data: &[u8]) {
    use tansa_symbols::perfmap::PerfMap;
    let _ = PerfMap::read(data, data.len() as u64 / 2);
    let Ok(map) = PerfMap::read(data, data.len() as u64) else {
        return;
    };
    let mut addresses = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(data).lines().take(256) {
        if let Some(a) = line
            .split(' ')
            .next()
            .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        {
            addresses.extend([a.wrapping_sub(1), a, a.wrapping_add(1), a.wrapping_add(64)]);
        }
    }
    let covering = PerfMap::read_covering(data, data.len() as u64, &addresses)
        .expect("a map read whole reads whole again");
    assert_eq!(covering.lookup(&addresses), map.lookup(&addresses));
    for (a, s) in map.lookup(&addresses) {
        assert!(
            s.start <= a && a - s.start < s.size,
            "{a:#x} named by a line at {:#x} of {} bytes",
            s.start,
            s.size
        );
    }
}
