//! The in-process fallback sampler: where `perf_event_open` is not permitted, the heap
//! recorder's agent (`libtansa_agent.so`, preloaded) samples each thread of the command on
//! a `SIGPROF` timer that counts the thread's own CPU time, unwinds the interrupted user
//! stack in the signal handler, and writes `Sample` records to its rings. The collector
//! drains them as it does heap events; [`AgentSink`] turns the agent's module loads, stack
//! definitions and samples into calls of the [`CpuRecordingBuilder`], so the recording is
//! the same kind as perf's and every report works on it.
//!
//! What it cannot see: kernel code, idle time, and processes that do not load the agent
//! (statically linked programs, set-uid programs).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tansa_collect::{CollectError, Sink};
use tansa_format::cpu::{CpuInfo, CpuSummary, SampleSource};
use tansa_format::memory::{SessionEnd, SessionInfo, SessionLosses, Unrecorded};
use tansa_format::meta::{CalibrationPoint, ExitStatus, RecordingMeta};
use tansa_wire::event::{DecodeError, Decoder, MODULE_VDSO, ModuleLoad, Record, StreamState};

use crate::SampleError;
use crate::builder::{CpuRecordingBuilder, MappingInfo, ProcessId, ProcessInfo, SampleInput};
use crate::checkpoint::RecordingOut;
use crate::phases::Phases;
use crate::warm::Warmer;

/// What to sample.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Path of `libtansa_agent.so`.
    pub agent: PathBuf,
    /// Samples per second of each thread's CPU time.
    pub frequency_hz: u32,
    /// Stop (terminating the command) after this long.
    pub duration: Option<Duration>,
    /// Keep every sample's time.
    pub timeline: bool,
    /// Who hears of what the collector has to tell (see [`tansa_collect::CollectEvent`]).
    pub events: Option<tansa_collect::EventHandler>,
}

/// What a run gives back.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    /// Totals.
    pub summary: CpuSummary,
    /// How the command ended.
    pub exit: ExitStatus,
    /// The event sampled.
    pub event: String,
    /// The module files whose symbols could not be read, one line each.
    pub unresolved: Vec<String>,
    /// CPU time no sample stands for: threads' last partial periods.
    pub unsampled: tansa_format::cpu::Unsampled,
    /// Where the run's time went, phase by phase (`tansa sample`'s `TANSA_TIMINGS=1`).
    pub phases: Phases,
}

/// The event name recorded for agent samples.
pub const AGENT_EVENT: &str = "thread-cpu-clock (SIGPROF)";

/// What a recording of the agent's sampler says of itself: `hz` samples per second of each
/// thread's CPU time.
fn agent_info(hz: u32, timeline: bool) -> CpuInfo {
    CpuInfo {
        source: SampleSource::Agent,
        event: AGENT_EVENT.into(),
        period_ns: 1_000_000_000 / u64::from(hz),
        frequency_hz: u64::from(hz),
        target: "command".into(),
        unwinding: "dwarf (in-process)".into(),
        kernel: false,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        timeline,
        notes: vec![
            "sampled in-process by the agent's SIGPROF timers (perf_event_open was not used): \
             user code only, no kernel frames and no idle time"
                .into(),
        ],
        recorder_pid: std::process::id(),
    }
}

/// The note a recording gets when its samples came fewer and heavier than the frequency
/// asked for: the kernel checks a CPU-time timer at its tick, so at a frequency above the
/// kernel's `HZ` one signal stands for several periods (at 1 kHz on a kernel with
/// `HZ=250`, one signal every 4 ms, weighted 4). The figures stay right (each signal counts
/// its periods), but fewer distinct stacks are seen than the frequency suggests, which the
/// report should say. `None` while signals stand for fewer than 1.5 periods on average.
fn tick_note(signals: u64, periods: u64, frequency_hz: u64) -> Option<String> {
    if signals == 0 || periods.saturating_mul(2) < signals.saturating_mul(3) {
        return None;
    }
    let each = periods as f64 / signals as f64;
    Some(format!(
        "{signals} timer signals stood for {periods} samples ({each:.1} periods each on \
         average): the kernel checks CPU-time timers at its tick, so at {frequency_hz} Hz \
         a thread was interrupted about {:.0} times per second of its CPU time, and fewer \
         distinct stacks were seen than the frequency suggests (perf's sampler, `--source \
         perf`, takes every period)",
        frequency_hz as f64 / each
    ))
}

/// Runs `config.command` under the agent in sampling mode until it ends (or the duration
/// passes, or `stop` is set), writing the recording to `out` as it goes (checkpoints, see
/// [`crate::checkpoint`]) and finishing it at the end.
pub fn record<W: Write>(
    config: &AgentConfig,
    meta: RecordingMeta,
    stop: &AtomicBool,
    out: W,
    progress: &mut dyn FnMut(u64),
) -> Result<AgentOutcome, SampleError> {
    let hz = config.frequency_hz.max(1);
    let info = agent_info(hz, config.timeline);
    let collect = tansa_collect::Config {
        leak_cause: false,
        leak_check: false,
        sample_rate: None,
        command: config.command.clone(),
        agent: config.agent.clone(),
        online: false,
        free_stacks: false,
        ring_kb: None,
        max_frames: None,
        // Sample times in CLOCK_MONOTONIC nanoseconds, like perf's.
        monotonic_clock: true,
        sample_hz: Some(hz),
        events: config.events.clone(),
        segment_dir: None,
    };
    // The header and description now, checkpoints while sampling: a recorder killed
    // outright leaves what it had at its last checkpoint.
    let mut out = RecordingOut::new(out, &meta, true).map_err(SampleError::Write)?;
    let mut checkpoint = |b: &mut CpuRecordingBuilder| out.checkpoint_if_due(b);
    let mut builder = CpuRecordingBuilder::new(meta, info);
    builder.unmapped_code_is_generated();
    let mut sink = AgentSink::new(builder);
    sink.deadline = config.duration.map(|d| Instant::now() + d);
    sink.stop = Some(stop);
    sink.progress = Some(progress);
    sink.checkpoint = Some(&mut checkpoint);
    let mut phases = Phases::new();
    let started = Instant::now();
    let outcome = tansa_collect::record(&collect, &mut sink).map_err(|e| match e {
        CollectError::Spawn { command, source } => SampleError::Spawn { command, source },
        other => SampleError::Io {
            what: "sampling with the agent".into(),
            source: std::io::Error::other(other.to_string()),
        },
    })?;
    let wall = started.elapsed();
    phases.mark("sampling (the command runs)");
    let mut builder = sink.into_builder();
    builder.set_wall_ns(wall.as_nanos().min(u128::from(u64::MAX)) as u64);
    phases.mark("stop work ahead");
    let finished = builder.finish_timed(out, &mut phases)?;
    Ok(AgentOutcome {
        summary: finished.summary,
        exit: outcome.exit,
        event: AGENT_EVENT.into(),
        unresolved: finished.unresolved,
        unsampled: finished.unsampled,
        phases,
    })
}

/// Bytes of one stream, decoded as they arrive (a record may be split across deliveries).
#[derive(Debug, Default)]
struct Stream {
    state: StreamState,
    carry: Vec<u8>,
    broken: bool,
}

impl Stream {
    /// Hands every complete record of `bytes` (after what was carried) to `each`.
    fn push(&mut self, bytes: &[u8], each: &mut dyn FnMut(Record<'_>)) {
        if self.broken {
            return;
        }
        let mut joined = std::mem::take(&mut self.carry);
        joined.extend_from_slice(bytes);
        let mut d = Decoder::with_state(&joined, self.state);
        let mut used = 0;
        while let Some(r) = d.next() {
            match r {
                Ok(rec) => {
                    used = d.position();
                    self.state = d.state();
                    each(rec);
                }
                Err(DecodeError::Truncated { .. }) => break,
                Err(_) => {
                    self.broken = true;
                    used = joined.len();
                    break;
                }
            }
        }
        joined.drain(..used);
        self.carry = joined;
    }
}

/// A process image as the agent describes it.
#[derive(Debug)]
struct Session {
    process: ProcessId,
    pid: u32,
    /// When `/proc/PID/maps` was last read for code in no module the agent announced.
    maps_read: Option<Instant>,
    /// The mappings added from it: the library there may have been unloaded since, and
    /// another loaded in its place, without the agent knowing.
    from_proc: Vec<(u64, u64)>,
    /// Load bias of every module, by the agent's module id.
    bias: HashMap<u32, u64>,
    /// Stack definitions: absolute addresses, the interrupted instruction first.
    stacks: HashMap<u32, Box<[u64]>>,
    meta: Stream,
}

/// How often at most `/proc/PID/maps` is read for code in no announced module (see
/// `AgentSink::map_from_proc`): code generated at run time is in no file, and each of its
/// new stacks would read it again.
const MAPS_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// A sample whose stack was not defined yet when it arrived.
#[derive(Debug, Clone, Copy)]
struct Pending {
    session: u32,
    tid: u32,
    stack: u32,
    weight: u32,
    time_ns: u64,
}

/// Turns what the agent writes in sampling mode into a CPU recording.
pub struct AgentSink<'a> {
    builder: CpuRecordingBuilder,
    sessions: HashMap<u32, Session>,
    threads: HashMap<(u32, u32), (u32, Stream)>,
    pending: Vec<Pending>,
    deadline: Option<Instant>,
    stop: Option<&'a AtomicBool>,
    root: Option<u32>,
    terminated: bool,
    progress: Option<&'a mut dyn FnMut(u64)>,
    checkpoint: Option<&'a mut dyn FnMut(&mut CpuRecordingBuilder)>,
    /// Resolves the addresses sampled while the command runs (fed at every tick).
    warm: Option<Warmer>,
    /// Samples received, each for one signal, and the timer periods they stand for.
    signals: u64,
    periods: u64,
}

impl std::fmt::Debug for AgentSink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSink")
            .field("sessions", &self.sessions.len())
            .field("samples", &self.builder.samples())
            .finish_non_exhaustive()
    }
}

impl<'a> AgentSink<'a> {
    /// A sink feeding `builder`, which resolves the addresses sampled while the command
    /// runs, on a thread of its own, at every tick (`crate::warm`, as with perf): finishing
    /// then has only the last addresses left to look up. Without it, reading libc's
    /// debugging information and every lookup came after the command ended: 33-41 ms of a
    /// 1.7 s run, now about 1 ms. The agent samples user code only: no kernel symbols are
    /// read.
    pub fn new(mut builder: CpuRecordingBuilder) -> Self {
        builder.track_new_locations();
        AgentSink {
            builder,
            sessions: HashMap::new(),
            threads: HashMap::new(),
            pending: Vec::new(),
            deadline: None,
            stop: None,
            root: None,
            terminated: false,
            progress: None,
            checkpoint: None,
            warm: Some(Warmer::start(false)),
            signals: 0,
            periods: 0,
        }
    }

    /// The builder, with every sample delivered (samples whose stack never got defined are
    /// counted as lost), the work ahead stopped and the modules it began handed over, to
    /// be finished where they were begun.
    pub fn into_builder(mut self) -> CpuRecordingBuilder {
        self.retry_pending();
        let lost = self.pending.len() as u64;
        if lost > 0 {
            self.builder.note_lost(0, lost);
        }
        let info = self.builder.info_mut();
        if let Some(note) = tick_note(self.signals, self.periods, info.frequency_hz) {
            info.notes.push(note);
        }
        if let Some(mut w) = self.warm.take() {
            w.feed(&mut self.builder);
            w.finish();
            self.builder.warm = Some(w);
        }
        self.builder
    }

    fn add_module(builder: &mut CpuRecordingBuilder, s: &mut Session, m: &ModuleLoad<'_>) {
        s.bias.insert(m.id, m.bias);
        let path = if m.flags & MODULE_VDSO != 0 {
            "[vdso]".to_string()
        } else {
            String::from_utf8_lossy(m.path).into_owned()
        };
        for seg in m.segments {
            // Executable segments only (PF_X): samples land in code.
            if seg.flags & 1 == 0 || seg.memsz == 0 {
                continue;
            }
            let start = seg.vaddr.wrapping_add(m.bias);
            builder.add_mapping(
                s.process,
                MappingInfo {
                    start,
                    end: start.wrapping_add(seg.memsz),
                    file_offset: seg.file_offset,
                    path: path.clone(),
                    build_id: (!m.build_id.is_empty()).then(|| m.build_id.to_vec()),
                    load_bias: Some(m.bias),
                },
            );
        }
    }

    /// A sample stack runs through code in no module the agent announced. The agent learns
    /// of a library the program loaded only when one of its hooks runs: a library that
    /// computes without allocating, sampled and unloaded before, was `[jit PID]!??`. So the
    /// process's file mappings are read here (while it still has them: the definition comes
    /// within a tick of the sample that made it), at most once per [`MAPS_EVERY`], and the
    /// executable ones not known yet, or learnt here before (another library may have
    /// taken an unloaded one's place), are added as the perf sampler adds them. Code that
    /// no file maps stays generated code.
    fn map_from_proc(builder: &mut CpuRecordingBuilder, s: &mut Session) {
        if s.maps_read.is_some_and(|t| t.elapsed() < MAPS_EVERY) {
            return;
        }
        s.maps_read = Some(Instant::now());
        let Ok(maps) = tansa_proc::maps::read_exec_maps(s.pid) else {
            return;
        };
        // Whose files these are now (see `sources`).
        builder.refresh_owner(s.process);
        for m in maps.into_iter().filter(|m| m.is_file()) {
            let range = (m.start, m.end);
            if builder.is_mapped(s.process, m.start) && !s.from_proc.contains(&range) {
                continue;
            }
            if !s.from_proc.contains(&range) {
                s.from_proc.push(range);
            }
            builder.add_mapping(
                s.process,
                MappingInfo {
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    path: m.path,
                    build_id: None,
                    load_bias: None,
                },
            );
        }
    }

    /// Adds a sample if its stack is known; returns false otherwise.
    fn try_sample(&mut self, p: Pending) -> bool {
        let Some(s) = self.sessions.get(&p.session) else {
            return false;
        };
        let Some(frames) = s.stacks.get(&p.stack) else {
            return false;
        };
        let input = SampleInput {
            process: s.process,
            tid: p.tid,
            cpu: 0,
            time_ns: p.time_ns,
            kernel: &[],
            user: frames,
            truncated: false,
        };
        for _ in 0..p.weight.max(1) {
            self.builder.add_sample(&input);
        }
        true
    }

    fn retry_pending(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for p in pending {
            if !self.try_sample(p) {
                self.pending.push(p);
            }
        }
    }
}

impl Sink for AgentSink<'_> {
    fn session_started(&mut self, info: &SessionInfo) -> Result<(), CollectError> {
        let comm = info.exe.rsplit('/').next().unwrap_or(&info.exe).to_string();
        let process = self.builder.add_process(ProcessInfo {
            pid: info.pid,
            ppid: info.ppid,
            comm,
            exe: info.exe.clone(),
            cmdline: info.cmdline.clone(),
            kernel_thread: false,
            start_ns: info.start_ticks,
        });
        self.root.get_or_insert(info.pid);
        self.sessions.insert(
            info.session,
            Session {
                process,
                pid: info.pid,
                maps_read: None,
                from_proc: Vec::new(),
                bias: HashMap::new(),
                stacks: HashMap::new(),
                meta: Stream::default(),
            },
        );
        Ok(())
    }

    fn meta(&mut self, session: u32, bytes: &[u8]) -> Result<(), CollectError> {
        let Some(s) = self.sessions.get_mut(&session) else {
            return Ok(());
        };
        let builder = &mut self.builder;
        let mut meta = std::mem::take(&mut s.meta);
        meta.push(bytes, &mut |rec| match rec {
            Record::ModuleLoad(m) => Self::add_module(builder, s, &m),
            Record::StackDef { id, frames } => {
                let abs: Box<[u64]> = frames
                    .map(|f| match f.module {
                        0 => f.offset,
                        m => f.offset.wrapping_add(s.bias.get(&m).copied().unwrap_or(0)),
                    })
                    .collect();
                let learnt = |a: u64| s.from_proc.iter().any(|&(lo, hi)| lo <= a && a < hi);
                if abs
                    .iter()
                    .any(|&a| !builder.is_mapped(s.process, a) || learnt(a))
                {
                    Self::map_from_proc(builder, s);
                }
                s.stacks.insert(id, abs);
            }
            _ => {}
        });
        s.meta = meta;
        if !self.pending.is_empty() {
            self.retry_pending();
        }
        Ok(())
    }

    fn thread(&mut self, session: u32, stream: u32, bytes: &[u8]) -> Result<(), CollectError> {
        let Some(process) = self.sessions.get(&session).map(|s| s.process) else {
            return Ok(());
        };
        let (mut tid, mut st) = self.threads.remove(&(session, stream)).unwrap_or_default();
        let mut samples = Vec::new();
        let builder = &mut self.builder;
        st.push(bytes, &mut |rec| match rec {
            Record::ThreadStart { tid: t, name, .. } => {
                tid = t;
                builder.add_thread(process, t, &String::from_utf8_lossy(name));
            }
            Record::ThreadName { name } => {
                builder.add_thread(process, tid, &String::from_utf8_lossy(name));
            }
            Record::Sample { ts, stack, weight } => samples.push(Pending {
                session,
                tid,
                stack,
                weight,
                time_ns: ts,
            }),
            Record::Lost { count } => builder.note_lost(0, count),
            _ => {}
        });
        self.threads.insert((session, stream), (tid, st));
        for p in samples {
            self.signals += 1;
            self.periods += u64::from(p.weight.max(1));
            if !self.try_sample(p) {
                self.pending.push(p);
            }
        }
        Ok(())
    }

    fn stream_closed(&mut self, session: u32, stream: u32) -> Result<(), CollectError> {
        self.threads.remove(&(session, stream));
        Ok(())
    }

    fn session_ended(&mut self, end: &SessionEnd) -> Result<(), CollectError> {
        self.retry_pending();
        if let Some(s) = self.sessions.get(&end.session) {
            self.builder
                .end_process(s.process, end.end_ticks, Some(end.exit));
            if end.lost_events > 0 {
                self.builder.note_lost(0, end.lost_events);
            }
        }
        Ok(())
    }

    fn session_unsampled(
        &mut self,
        _session: u32,
        cpu_ns: u64,
        threads: u64,
    ) -> Result<(), CollectError> {
        self.builder.note_unsampled(cpu_ns, threads);
        Ok(())
    }

    fn session_losses(&mut self, _: &SessionLosses) -> Result<(), CollectError> {
        // Every loss of a sampling agent is a lost sample, already counted from the
        // session's end (`lost_events`).
        Ok(())
    }

    fn unrecorded(&mut self, process: &Unrecorded) -> Result<(), CollectError> {
        let exe = if process.exe.is_empty() {
            String::new()
        } else {
            format!(" ({})", process.exe)
        };
        self.builder.info_mut().notes.push(format!(
            "process {}{exe} was not sampled: {}",
            process.pid, process.reason
        ));
        Ok(())
    }

    fn watermark(&mut self, _: u64) -> Result<(), CollectError> {
        Ok(())
    }

    fn tick(&mut self, _: CalibrationPoint) -> Result<(), CollectError> {
        let samples = self.builder.samples();
        if let Some(p) = self.progress.as_mut() {
            p(samples);
        }
        if let Some(c) = self.checkpoint.as_mut() {
            c(&mut self.builder);
        }
        if let Some(w) = self.warm.as_mut() {
            w.feed(&mut self.builder);
        }
        let expired = self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.stop.is_some_and(|s| s.load(Ordering::Relaxed));
        if expired
            && !self.terminated
            && let Some(root) = self.root
        {
            // As `timeout` would: the command is asked to end; the collector then drains
            // what is left and reports how it ended.
            self.terminated = true;
            let _ = tansa_proc::os::kill(root, libc::SIGTERM);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The builder as the agent's sampler drives it: a real binary compiled at test time,
    //! samples at known addresses of its functions, and the report read back must count
    //! exactly those samples.

    use std::path::{Path, PathBuf};

    use tansa_analysis::cpu::{self, By, CpuRecording};
    use tansa_symbols::ElfFile;

    use super::*;

    const BIAS: u64 = 0x5555_0000_0000;

    fn build(dir: &Path) -> PathBuf {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/twofuncs.c");
        tansa_testkit::build(&src, dir, &["-g", "-O1"])
    }

    fn builder(exe: &Path) -> CpuRecordingBuilder {
        let meta = RecordingMeta {
            tool: "test".into(),
            started_unix_ms: 0,
            hostname: String::new(),
            command: vec![exe.display().to_string()],
            options: Vec::new(),
        };
        CpuRecordingBuilder::new(meta, agent_info(1000, true))
    }

    /// Declares `exe`'s process and mapping, and 7 samples in `alpha` and 3 in `beta`
    /// (called from `main`; any address inside `main` stands for a return address).
    /// Returns the module's id.
    fn sample_twofuncs(b: &mut CpuRecordingBuilder, exe: &Path) -> u32 {
        let elf = ElfFile::open(exe).unwrap();
        let [alpha, beta, main] =
            ["alpha", "beta", "main"].map(|f| elf.function_by_name(f).unwrap().address);
        let end = elf
            .segments()
            .iter()
            .map(|s| s.address + s.size)
            .max()
            .unwrap();
        let p = b.add_process(ProcessInfo {
            pid: 4242,
            ppid: 1,
            comm: "twofuncs".into(),
            exe: exe.display().to_string(),
            cmdline: vec!["twofuncs".into()],
            ..ProcessInfo::default()
        });
        b.add_thread(p, 4242, "twofuncs");
        let module = b.add_mapping(
            p,
            MappingInfo {
                start: BIAS,
                end: BIAS + end,
                file_offset: 0,
                path: exe.display().to_string(),
                build_id: None,
                load_bias: Some(BIAS),
            },
        );
        for (t0, pc, n) in [(0, alpha, 7), (100, beta, 3)] {
            for i in 0..n {
                assert!(b.add_sample(&SampleInput {
                    process: p,
                    tid: 4242,
                    time_ns: t0 + i,
                    user: &[BIAS + pc, BIAS + main + 5],
                    ..SampleInput::default()
                }));
            }
        }
        module
    }

    /// Finishes `b` into `file` and reads it back.
    fn finish(b: CpuRecordingBuilder, file: &Path) -> CpuRecording {
        let out = std::io::BufWriter::new(std::fs::File::create(file).unwrap());
        let finished = b.finish(out).unwrap();
        assert_eq!(finished.summary.samples, 10);
        assert_eq!(finished.unresolved, Vec::<String>::new());
        let rec = CpuRecording::open(std::fs::File::open(file).unwrap()).unwrap();
        assert!(!rec.damaged);
        rec
    }

    fn by(rec: &CpuRecording, by: By) -> cpu::CpuReport {
        cpu::report(rec, cpu::Options { by, pid: None })
    }

    #[test]
    fn signals_that_stand_for_several_periods_are_noted() {
        assert_eq!(tick_note(0, 0, 1000), None);
        assert_eq!(
            tick_note(400, 400, 1000),
            None,
            "every period its own signal"
        );
        assert_eq!(tick_note(400, 599, 1000), None, "under 1.5 periods each");
        let note = tick_note(426, 1704, 1000).expect("4 periods a signal");
        assert!(
            note.starts_with("426 timer signals stood for 1704 samples (4.0 periods each"),
            "{note}"
        );
        assert!(note.contains("about 250 times per second"), "{note}");
    }

    #[test]
    fn a_recording_built_without_perf_reports_exactly_its_samples() {
        let dir = tempfile::tempdir().unwrap();
        let exe = build(dir.path());
        let mut b = builder(&exe);
        sample_twofuncs(&mut b, &exe);
        let rec = finish(b, &dir.path().join("agent.tansa"));
        // The binary is gone; the recording is enough.
        std::fs::remove_file(&exe).unwrap();
        assert_eq!(rec.timeline.len(), 10);
        assert_eq!(rec.stacks.len(), 2, "two distinct chains");
        let r = by(&rec, By::Function);
        assert_eq!(r.source, "agent");
        assert_eq!(r.total_samples, 10);
        let get = |name: &str| r.units.iter().find(|u| u.unit == name).unwrap();
        assert_eq!(get("twofuncs!alpha").self_samples, 7);
        assert_eq!(get("twofuncs!beta").self_samples, 3);
        assert_eq!(get("twofuncs!main").total_samples, 10);
        assert_eq!(get("twofuncs!main").self_samples, 0);
        let callers = get("twofuncs!alpha").callers.clone().unwrap();
        assert_eq!(callers[0].unit, "twofuncs!main");
        assert_eq!(get("twofuncs!alpha").self_ns, 7_000_000);

        let p = by(&rec, By::Process);
        let u = &p.units[0];
        assert_eq!(u.unit, "twofuncs [4242]");
        assert_eq!(u.spaces.unwrap().user_samples, 10);

        let a = cpu::annotate::annotate(&rec, "alpha", None).unwrap();
        assert_eq!(a.samples, 7);
        assert_eq!(a.instructions[0].samples, 7);
        assert!(a.instructions.len() > 3);
        assert!(
            a.instructions
                .iter()
                .any(|i| i.file.as_deref().is_some_and(|f| f.ends_with("twofuncs.c")))
        );
        assert!(
            a.sources[0].available,
            "the source text is in the recording"
        );
    }

    #[test]
    fn an_agent_run_resolves_its_modules_while_the_command_runs() {
        let dir = tempfile::tempdir().unwrap();
        let exe = build(dir.path());

        let mut sink = AgentSink::new(builder(&exe));
        let module = sample_twofuncs(&mut sink.builder, &exe);
        sink.tick(CalibrationPoint { ticks: 0, ns: 0 }).unwrap();
        // The tick handed the new addresses to the thread; a task queued after them reports
        // the modules it has begun once it has worked through them.
        let (tx, rx) = std::sync::mpsc::channel();
        sink.warm
            .as_ref()
            .expect("a sink has a warm thread")
            .run(Box::new(move |_, begun| {
                let _ = tx.send(begun.keys().copied().collect::<Vec<u32>>());
            }));
        assert_eq!(
            rx.recv().unwrap(),
            vec![module],
            "the module sampled is resolved ahead, at the tick"
        );
        let warm = finish(sink.into_builder(), &dir.path().join("warm.tansa"));

        // The same samples, all resolved at the end, give the same report.
        let mut cold = builder(&exe);
        sample_twofuncs(&mut cold, &exe);
        let cold = finish(cold, &dir.path().join("cold.tansa"));
        let rows = |rec: &CpuRecording| {
            let mut rows: Vec<_> = by(rec, By::Function)
                .units
                .iter()
                .map(|u| (u.unit.clone(), u.self_samples, u.total_samples))
                .collect();
            rows.sort();
            rows
        };
        let warmed = rows(&warm);
        assert_eq!(warmed, rows(&cold));
        let get = |f: &str| {
            warmed
                .iter()
                .find(|r| r.0 == format!("twofuncs!{f}"))
                .cloned()
        };
        assert_eq!(get("alpha").map(|r| r.1), Some(7));
        assert_eq!(get("beta").map(|r| r.1), Some(3));
        assert_eq!(get("main").map(|r| (r.1, r.2)), Some((0, 10)));
    }
}
