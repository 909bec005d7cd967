//! The recorder: run the target, cut at the region's entry, sample each execution with the
//! chosen source, optionally single-step executions for the ground truth.
//!
//! Division (seed unit 112) uses a breakpoint on the region's function (a debug register
//! of each thread, see `session`): at each hit the execution starts; it ends when the stack pointer rises above its value at entry
//! (the outermost `ret` ran, or a `longjmp` left the region). Recursion inside the region
//! is part of the execution.
//!
//! * **ptrace** single-steps every instruction of the region (and only the region: the
//!   code between executions runs at full speed) and keeps every `P`-th instruction of an
//!   execution from its phase: drawn at random for each execution and recorded
//!   ([`PhaseRule::Shuffled`], the default), or following a count that runs on across
//!   executions ([`PhaseRule::Counted`], exactly the seed's sampling model).
//! * **instructions** / **cpu-clock** open a perf event on the target that is enabled only
//!   while the region runs (one per thread, enabled at the entry breakpoint, disabled at a
//!   breakpoint on the return address), so its period also counts only region
//!   instructions or region time; the ring is drained after each execution, so every
//!   sample belongs to it.

use std::collections::HashMap;
use std::time::Instant;

use tansa_format::meta::ExitStatus;
use tansa_format::retrace::{
    Addr, Execution, GroundTruth, PhaseRule, RegionCode, RetraceInfo, RetraceSummary, Source,
};
use tansa_perf::{
    Event, EventAttr, EventKind, HardwareEvent, Record, Ring, SampleFormat, SoftwareEvent,
};

use crate::TraceError;
use crate::code;
use crate::maps::{Mapping, Modules, read_maps};
use crate::region::{find_region, resolve_program};
use crate::session::{Plan, Session};
use crate::tracee::Tracee;

/// Which sampler to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceChoice {
    /// Hardware instruction sampling when the CPU has a PMU, else ptrace.
    Auto,
    /// This source, or an error.
    Exactly(Source),
}

/// What to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The region's function.
    pub region: String,
    /// The sampler.
    pub source: SourceChoice,
    /// Period: instructions (ptrace, instructions) or nanoseconds (cpu-clock); `None` for
    /// the source's [`default_period`].
    pub period: Option<u64>,
    /// How the ptrace sampler picks each execution's phase (perf sources ignore it: their
    /// count runs on across executions).
    pub phase: PhaseRule,
    /// Executions to sample.
    pub executions: u64,
    /// Executions to let run before sampling.
    pub warmup: u64,
    /// Single-step executions for the true trace.
    pub ground_truth: bool,
    /// For perf sources, how many further executions to single-step for the true trace.
    pub ground_truth_executions: u64,
}

/// The period used when none is given: 7 instructions for ptrace (the seed's example; the
/// cost of single-stepping does not depend on it), 10007 instructions for the hardware
/// counter (a prime, so executions fall at all phases, and large enough to stay below the
/// kernel's sample-rate limit), 100 µs for `cpu-clock`.
pub fn default_period(source: Source) -> u64 {
    match source {
        Source::Ptrace => 7,
        Source::Instructions => 10_007,
        Source::CpuClock => 100_000,
    }
}

/// Everything recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Process id of the target.
    pub pid: u32,
    /// What and how.
    pub info: RetraceInfo,
    /// The code touched.
    pub code: RegionCode,
    /// Samples per execution.
    pub executions: Vec<Execution>,
    /// The phase of each execution when the ptrace sampler drew them
    /// ([`PhaseRule::Shuffled`]; `None` otherwise).
    pub phases: Option<Vec<u64>>,
    /// True traces, if asked for.
    pub ground_truth: Option<GroundTruth>,
    /// How it ended.
    pub summary: RetraceSummary,
    /// Threads whose executions were sampled (any thread that runs the region is).
    pub threads: u64,
    /// What the user should know about executions that could not be sampled.
    pub warnings: Vec<String>,
}

/// Module index of addresses outside any file-backed mapping (vDSO, JIT code).
pub const UNKNOWN_MODULE: u32 = u32::MAX;

/// Runtime addresses to recording addresses, refreshing the mappings when needed.
pub(crate) struct Normalizer {
    pid: i32,
    maps: Vec<Mapping>,
    modules: Modules,
    cache: HashMap<u64, Addr>,
}

impl Normalizer {
    fn get(&mut self, runtime: u64) -> Addr {
        if let Some(&a) = self.cache.get(&runtime) {
            return a;
        }
        let mut found = self.modules.normalize(&self.maps, runtime);
        if found.is_none()
            && let Ok(maps) = read_maps(self.pid)
        {
            self.maps = maps;
            found = self.modules.normalize(&self.maps, runtime);
        }
        let a = found.unwrap_or((UNKNOWN_MODULE, runtime));
        self.cache.insert(runtime, a);
        a
    }

    pub(crate) fn all(&mut self, runtime: &[u64]) -> Vec<Addr> {
        runtime.iter().map(|&r| self.get(r)).collect()
    }
}

/// A perf event enabled only inside the region.
pub(crate) struct PerfSampler {
    pub(crate) event: Event,
    pub(crate) ring: Ring,
    pub(crate) records: Vec<Record>,
    pub(crate) lost: u64,
}

pub(crate) const PERF_FORMAT: SampleFormat = SampleFormat(SampleFormat::IP.0 | SampleFormat::TID.0);

pub(crate) fn open_perf(source: Source, period: u64, pid: i32) -> Result<PerfSampler, TraceError> {
    let kind = match source {
        Source::CpuClock => EventKind::Software(SoftwareEvent::CpuClock),
        _ => EventKind::Hardware(HardwareEvent::Instructions),
    };
    let base = EventAttr::new(kind)
        .sample_period(period)
        .sample_format(PERF_FORMAT)
        .disabled(true);
    // Ask for the least skid the PMU offers, falling back to none.
    let event = match source {
        Source::Instructions => [2u8, 1, 0]
            .iter()
            .find_map(|&p| Event::open(&base.clone().precise_ip(p), pid).ok())
            .map_or_else(|| Event::open(&base, pid), Ok)?,
        _ => Event::open(&base, pid)?,
    };
    let ring = Ring::new(&event, 256)?;
    Ok(PerfSampler {
        event,
        ring,
        records: Vec::new(),
        lost: 0,
    })
}

/// The single-stepped traces, de-duplicated.
pub(crate) struct Truth {
    index: HashMap<Vec<Addr>, u32>,
    gt: GroundTruth,
}

impl Truth {
    pub(crate) fn add(&mut self, trace: Vec<Addr>) {
        let next = self.gt.traces.len() as u32;
        let id = *self.index.entry(trace.clone()).or_insert_with(|| {
            self.gt.traces.push(trace);
            next
        });
        self.gt.executions.push(id);
    }
}

/// The source, why it was chosen, its period and its perf event.
type Chosen = (Source, String, u64, Option<PerfSampler>);

fn choose_source(
    choice: SourceChoice,
    period: Option<u64>,
    pid: i32,
) -> Result<Chosen, TraceError> {
    let period_of = |s| period.unwrap_or_else(|| default_period(s));
    match choice {
        SourceChoice::Exactly(Source::Ptrace) => Ok((
            Source::Ptrace,
            "requested".to_string(),
            period_of(Source::Ptrace),
            None,
        )),
        SourceChoice::Exactly(s) => {
            let p = open_perf(s, period_of(s), pid)?;
            Ok((s, "requested".to_string(), period_of(s), Some(p)))
        }
        SourceChoice::Auto => {
            match open_perf(Source::Instructions, period_of(Source::Instructions), pid) {
                Ok(p) => Ok((
                    Source::Instructions,
                    "hardware instruction counter found".to_string(),
                    period_of(Source::Instructions),
                    Some(p),
                )),
                Err(TraceError::Perf(e)) if e.is_unsupported() => Ok((
                    Source::Ptrace,
                    format!("no hardware instruction counter: {e}; single-stepping with ptrace"),
                    period_of(Source::Ptrace),
                    None,
                )),
                Err(e) => Err(e),
            }
        }
    }
}

/// Records `opts`, calling `progress(sampled, ground_truth_stepped)` after each execution.
pub fn record(opts: &Options, progress: &mut dyn FnMut(u64, u64)) -> Result<Recorded, TraceError> {
    let Some((program, args)) = opts.command.split_first() else {
        return Err(TraceError::CommandNotFound(String::new()));
    };
    let exe = resolve_program(program)?;
    let region = find_region(&exe, &opts.region)?;
    let started = Instant::now();
    let t = Tracee::spawn(program, args)?;
    let pid = t.pid;
    let exe_path = exe.display().to_string();
    let mut norm = Normalizer {
        pid: t.pid,
        maps: read_maps(t.pid).unwrap_or_default(),
        modules: Modules::default(),
        cache: HashMap::new(),
    };
    let region_module = norm.modules.index(&exe_path);
    let entry = norm
        .modules
        .runtime(&norm.maps, &exe_path, region.address)
        .ok_or_else(|| TraceError::RegionNotMapped(region.name.clone()))?;
    let (source, source_note, period, mut perf) = choose_source(opts.source, opts.period, t.pid)?;
    let truth_target = match (opts.ground_truth, source) {
        (false, _) => 0,
        (true, Source::Ptrace) => opts.executions,
        (true, _) => opts.ground_truth_executions,
    };
    let truth = opts.ground_truth.then(|| Truth {
        index: HashMap::new(),
        gt: GroundTruth {
            same_executions: source == Source::Ptrace,
            ..GroundTruth::default()
        },
    });

    let mut session = Session::new(
        t,
        Plan {
            entry,
            source,
            period,
            phase: opts.phase,
            warmup: opts.warmup,
            target: opts.executions,
            truth_target,
        },
        norm,
        truth,
        progress,
    );
    if let Some(p) = perf.take() {
        session.perf.insert(pid, p);
    }
    let run = session.run();
    let exit = session.finish();
    run?;
    let seconds = started.elapsed().as_secs_f64();
    let Session {
        entries,
        executions,
        samples: samples_total,
        incomplete,
        truth,
        perf,
        sampled_threads,
        warnings,
        norm,
        phases,
        ..
    } = session;
    let phases = (source == Source::Ptrace && opts.phase == PhaseRule::Shuffled).then(|| {
        let mut drawn = phases.drawn;
        drawn.truncate(executions.len());
        drawn
    });
    if executions.is_empty() {
        return Err(if entries == 0 {
            TraceError::RegionNeverRan {
                region: region.name,
                exit,
            }
        } else {
            TraceError::NoCompleteExecution {
                region: region.name,
                entries,
                warmup: opts.warmup,
                exit,
            }
        });
    }
    let ground_truth = truth.map(|t| t.gt);
    let touched = executions
        .iter()
        .flat_map(|e| e.samples.iter().copied())
        .chain(
            ground_truth
                .iter()
                .flat_map(|g| g.traces.iter().flatten().copied()),
        )
        .chain([(region_module, region.address)])
        .filter(|a| a.0 != UNKNOWN_MODULE);
    let code = code::collect(&norm.modules.paths, touched);
    Ok(Recorded {
        pid: pid as u32,
        info: RetraceInfo {
            region: region.name,
            region_module,
            region_addr: region.address,
            source,
            source_note,
            period,
            warmup: opts.warmup,
        },
        code,
        summary: RetraceSummary {
            executions: executions.len() as u64,
            samples: samples_total,
            incomplete,
            lost: perf.values().map(|p| p.lost).sum(),
            exit,
            seconds,
        },
        executions,
        phases,
        ground_truth,
        threads: sampled_threads.len() as u64,
        warnings,
    })
}

/// Whether `exit` is the recorder's own SIGKILL after enough executions.
pub fn stopped_by_recorder(exit: &ExitStatus) -> bool {
    matches!(exit, ExitStatus::Signaled { signal, .. } if *signal == libc::SIGKILL)
}
