//! The live side of leak-cause localization (seed 001): `tansa record --leak-cause`.
//!
//! [`LeakCauseSink`] wraps the recording's sink. It passes everything on unchanged and, on
//! the way, decodes the events (as they arrive; a free that comes before its allocation
//! waits for it) to keep,
//! per allocation site (one stack of one process image), its allocations, frees, blocks
//! outstanding and free stacks. Every scan interval it judges each site
//! ([`tansa_leakcause::judge`]); for a site judged leaking it computes the trace range end
//! (the innermost common caller of the allocation stack and every free stack, spec §11)
//! and asks the agent, through the session header's `trace_sites`, to hand over the
//! threads of the site's next allocations.
//!
//! The tracer thread ([`Tracer`]) owns every ptrace attachment (a tracee belongs to the
//! thread that attached it). It sleeps on the trace slots of the sessions that trace a
//! site (the agent wakes the slot when it writes a request); for a request it attaches to
//! the allocating thread, lets the agent return, and follows the thread with
//! [`AttachedThread::follow`] from the allocator's return until the block is freed (F) or
//! the range end returns (E), recording function entries and exits and the conditional
//! branches of the stepped functions. One pass gives both the function trace and the
//! branch trace of the seed (which takes them in two phases because hardware block
//! stepping costs less than tracing functions with breakpoints; here both come from the
//! same single-stepping, so the second phase would only double the traced allocations).
//!
//! A block that outlives the range end it was traced to (its free arrives after an E
//! trace) moves the range end one caller up and starts the site's paths again (spec §12.2).
//! Tracing of a site stops once every free site known for it was reached by a traced F path
//! and at least one E path was seen (spec §12.8), and the last [`SATURATION`] traces
//! brought no new path (free sites alone do not tell freeing paths apart), or after
//! `traces` traces.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tansa_analysis::memory::SessionId;
use tansa_analysis::memory::merge::{EventKind, StreamDecoder};
use tansa_collect::file::FileSink;
use tansa_collect::{CollectError, Outcome, SharedHeader, Sink};
use tansa_format::memory::{
    CodeBranch, CodeFunction, LeakCause, PathStep, SessionEnd, SessionInfo, SessionLosses,
    SessionPlace, TracedPath, TracedSite, Unrecorded, VolatileSegment,
};
use tansa_format::meta::CalibrationPoint;
use tansa_leakcause::judge::{Judge, Judgement};
use tansa_leakcause::range::{depth_of, move_up, range_end};
use tansa_symbols::Resolver;
use tansa_wire::event::{DecodeError, Decoder, Record, StreamState};
use tansa_wire::layout::{
    TRACE_ALIASES, TRACE_ATTACHING, TRACE_FOLLOWING, TRACE_IDLE, TRACE_REQUESTED, TRACE_SITES,
    trace_free_stack, trace_freed_elsewhere,
};

use crate::follow::{AttachedThread, CodeMap, FollowEnd, FollowLimits, PathEvent};
use crate::procmap::{ProcessCode, is_runtime_library};

/// Runs `config`'s command under the agent in leak-cause mode (`config.leak_cause` is set),
/// recording into `sink` with the live side wrapped around it; what was traced is added to
/// the recording as its `LEAK_CAUSE` frame. Gives the sink back (to be finished, also after
/// an error: what was recorded is worth keeping) with the collector's result.
pub fn record_leak_cause(
    config: &tansa_collect::Config,
    sink: FileSink,
    leak_cause: LeakCauseConfig,
) -> (FileSink, Result<Outcome, CollectError>) {
    let mut config = config.clone();
    config.leak_cause = true;
    let mut wrapped = LeakCauseSink::new(sink, leak_cause);
    let recorded = tansa_collect::record(&config, &mut wrapped);
    let (mut sink, traced) = wrapped.finish();
    let mut added = sink.add_value(tansa_format::memory::LEAK_CAUSE, &traced);
    let elsewhere = traced.freed_elsewhere();
    if added.is_ok() && !elsewhere.is_empty() {
        added = sink.add_value(tansa_format::memory::FREED_ELSEWHERE, &elsewhere);
    }
    (sink, recorded.and_then(|o| added.map(|()| o)))
}

/// Settings of leak-cause mode.
#[derive(Debug, Clone, Copy)]
pub struct LeakCauseConfig {
    /// Most traces per allocation site.
    pub traces: u32,
    /// How often sites are judged.
    pub scan_interval: Duration,
    /// Most single steps of one trace.
    pub max_steps: u64,
}

impl Default for LeakCauseConfig {
    fn default() -> Self {
        LeakCauseConfig {
            traces: 64,
            scan_interval: Duration::from_millis(50),
            max_steps: 200_000,
        }
    }
}

/// Traces granted to the agent at a time for one site (so that a finished site does not
/// leave many requests behind).
const BATCH: u32 = 16;
/// Most releases kept waiting for their allocation (of one process).
const MAX_EARLY_FREES: usize = 1 << 20;

/// The blocks allocated in one process, as events arrive from the threads' streams in any
/// order between streams: a release goes to the latest block at its address allocated
/// before it, and a release that arrives before its allocation waits for it.
#[derive(Debug, Default)]
struct Blocks {
    /// ptr -> (allocation time, stack) of the one block at that address (the usual case).
    live: FxHashMap<u64, (u64, u32)>,
    /// More blocks at an address whose older block's release has not arrived yet.
    extra: FxHashMap<u64, Vec<(u64, u32)>>,
    /// Releases that arrived before their allocation: ptr -> [(time, free stack)].
    early: FxHashMap<u64, Vec<(u64, u32)>>,
    early_count: usize,
}

impl Blocks {
    /// A block at `ptr` allocated at `ts` from `stack`; returns its release if that came
    /// first.
    fn allocated(&mut self, ptr: u64, ts: u64, stack: u32) -> Option<(u64, u32)> {
        if let Some(list) = self.early.get_mut(&ptr) {
            // The earliest release after this allocation is this block's.
            if let Some(i) = list
                .iter()
                .enumerate()
                .filter(|(_, r)| r.0 >= ts)
                .min_by_key(|(_, r)| r.0)
                .map(|(i, _)| i)
            {
                let r = list.swap_remove(i);
                if list.is_empty() {
                    self.early.remove(&ptr);
                }
                self.early_count -= 1;
                return Some(r);
            }
        }
        match self.live.entry(ptr) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert((ts, stack));
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.extra.entry(ptr).or_default().push((ts, stack));
            }
        }
        None
    }

    /// A release of `ptr` at `ts` by `free_stack`: the allocation time and stack of the
    /// block it releases, or `None` if that allocation has not arrived (the release waits).
    fn released(&mut self, ptr: u64, ts: u64, free_stack: u32) -> Option<(u64, u32)> {
        // The latest block at `ptr` allocated before `ts`.
        let primary = self.live.get(&ptr).copied().filter(|b| b.0 <= ts);
        let extra = self.extra.get(&ptr).and_then(|l| {
            l.iter()
                .enumerate()
                .filter(|(_, b)| b.0 <= ts)
                .max_by_key(|(_, b)| b.0)
                .map(|(i, b)| (i, *b))
        });
        match (primary, extra) {
            (Some(p), Some((i, x))) if x.0 > p.0 => Some(self.take_extra(ptr, i, x)),
            (Some(p), _) => {
                // Promote a remaining extra block, if any.
                match self.extra.get_mut(&ptr).and_then(Vec::pop) {
                    Some(next) => {
                        self.live.insert(ptr, next);
                        if self.extra.get(&ptr).is_some_and(Vec::is_empty) {
                            self.extra.remove(&ptr);
                        }
                    }
                    None => {
                        self.live.remove(&ptr);
                    }
                }
                Some(p)
            }
            (None, Some((i, x))) => Some(self.take_extra(ptr, i, x)),
            (None, None) => {
                if self.early_count >= MAX_EARLY_FREES {
                    self.early.clear();
                    self.early_count = 0;
                }
                self.early.entry(ptr).or_default().push((ts, free_stack));
                self.early_count += 1;
                None
            }
        }
    }

    fn take_extra(&mut self, ptr: u64, i: usize, b: (u64, u32)) -> (u64, u32) {
        if let Some(l) = self.extra.get_mut(&ptr) {
            l.swap_remove(i);
            if l.is_empty() {
                self.extra.remove(&ptr);
            }
        }
        b
    }
}
/// Kinds of failure kept for the recording (each with its count).
const MAX_FAILURES: usize = 16;

/// The allocation stacks (runtime return addresses, innermost first) of the sites being
/// traced, by (session, stack id): the tracer finds the return address of a trace's range
/// end in them.
type TracedStacks = Arc<Mutex<HashMap<(u32, u32), Vec<u64>>>>;

/// Why traces could not be taken: each distinct message once, with how many traces it
/// stopped; those of kinds past [`MAX_FAILURES`] are only counted.
#[derive(Debug, Default)]
struct Failures {
    kinds: Vec<(String, u64)>,
    others: u64,
}

impl Failures {
    fn add(&mut self, msg: String) {
        if let Some(k) = self.kinds.iter_mut().find(|k| k.0 == msg) {
            k.1 += 1;
        } else if self.kinds.len() < MAX_FAILURES {
            self.kinds.push((msg, 1));
        } else {
            self.others += 1;
        }
    }

    /// The messages for the recording: `msg (N traces)` where several traces failed alike.
    fn messages(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .kinds
            .iter()
            .map(|(msg, n)| match n {
                1 => msg.clone(),
                n => format!("{msg} ({n} traces)"),
            })
            .collect();
        if self.others > 0 {
            out.push(format!(
                "{} more trace(s) failed for other reasons, not kept",
                self.others
            ));
        }
        out
    }
}

/// A finished trace, from the tracer thread.
#[derive(Debug)]
struct TraceDone {
    session: u32,
    stack: u32,
    ptr: u64,
    events: Vec<PathEvent>,
    end: FollowEnd,
    ns: u64,
    /// When the follower attached, on the agent's clock: every event of the traced
    /// allocation and before it has an earlier timestamp.
    attached_ticks: u64,
    /// Branch instructions' text, by runtime address.
    code: Vec<(u64, String)>,
    /// For a trace that ended at the block's release: the release's stack, as the agent
    /// put it in the slot (0 if not known).
    free_stack: u32,
    /// For a trace that ended at the block's release: whether another thread than the
    /// followed one released it (the agent said so in the slot).
    freed_elsewhere: bool,
    /// The range end it was followed to (depth above the allocating function), as the
    /// agent's slot gave it when the trace was requested.
    range_depth: u32,
}

/// Where one site stands.
#[derive(Debug, Default)]
struct Site {
    allocations: u64,
    frees: u64,
    outstanding: u64,
    judge: Judge,
    /// Free stacks of blocks allocated here.
    free_stacks: BTreeSet<u32>,
    /// Tracing: the `trace_sites` entry, the range end's depth above the allocating
    /// function, the paths collected over the current range.
    slot: Option<usize>,
    /// Judged leaking, but every trace slot of its process was taken by other sites then.
    waited_for_slot: bool,
    range_depth: u32,
    range_moves: u32,
    alloc_functions: Vec<u64>,
    paths: BTreeMap<(Vec<Step>, bool), u32>,
    reached: BTreeSet<u32>,
    not_freed: u32,
    /// Traces of the current range whose block another thread released: no path.
    freed_elsewhere: u32,
    traces: u32,
    /// Traces granted to the agent so far.
    granted: u32,
    /// Traces of the current range that could not be taken or were given up (the
    /// tracer's failures).
    failed: u32,
    tracing_ns: u64,
    status: Option<String>,
    /// Traces in a row that brought no new path (see [`SATURATION`]).
    unchanged: u32,
    /// When the site was listed for tracing, on the agent's clock, and its allocations
    /// recorded after that moment while it stayed listed: each either reached the agent's
    /// hand-over (a trace started, or the entry's `passed` counted it) or never could.
    asked_at: u64,
    asked_allocations: u64,
    /// Traces the tracer started for the site.
    handed: u64,
}

/// Why a site listed for tracing got no trace at all (none failed either), from its
/// allocations recorded after it was listed (`asked`), those the agent saw and passed over
/// (`passed`: another trace was in flight, none was left, or the request was not taken in
/// time) and the traces started (`handed`): `ended` when none came after it was listed (the
/// program stopped allocating there, or ended); `busy` when every one met a busy moment
/// (a longer run gives it more chances); `not-handed-over` when some never reached the
/// hand-over, which no run length changes (an allocation a signal handler makes while it
/// interrupts an allocator call is never handed over).
fn untraced_status(asked: u64, passed: u64, handed: u64) -> &'static str {
    if asked == 0 {
        "ended"
    } else if asked > passed.saturating_add(handed) {
        "not-handed-over"
    } else {
        "busy"
    }
}

/// Traces in a row that must bring no new path before a site whose free sites were all
/// reached stops being traced. Free sites alone do not tell the freeing paths apart: at -O2
/// the worked example's two frees are both tail calls, so both have funcA's frame as their
/// caller and one free stack, and tracing stopped at the first freeing path. When that path
/// went through `sub1`, the leaking path was found to leave the freeing ones at the first
/// condition, not the second (as one CI run of the multi-threaded test reported). A
/// path that a share `p` of the allocations takes is now missed with probability
/// `(1 - p)^16` once the others were seen: 1 % for `p` = 25 %, 2e-6 for that path's 56 %.
const SATURATION: u32 = 16;

impl Site {
    /// Counts a finished trace (freed: it ended at the block's release) and records its
    /// path; a path not seen before starts the count of [`Site::unchanged`] again.
    fn add_trace(&mut self, steps: Vec<Step>, freed: bool) {
        self.traces += 1;
        if !freed {
            self.not_freed += 1;
        }
        let seen = self.paths.entry((steps, freed)).or_default();
        *seen += 1;
        if *seen == 1 {
            self.unchanged = 0;
        } else {
            self.unchanged += 1;
        }
    }

    /// Counts a finished trace whose block another thread released while the followed
    /// one ran: its path is not a freeing path (the followed thread did not free the
    /// block), so it is not kept, and it brings no new path.
    fn add_trace_freed_elsewhere(&mut self) {
        self.traces += 1;
        self.freed_elsewhere += 1;
        self.unchanged += 1;
    }

    /// Whether tracing is done, and why: `covered` once a leaking path was seen, every free
    /// site known was reached by a traced freeing path, and the last [`SATURATION`] traces
    /// brought no new path; `limit` after `limit` traces.
    fn tracing_done(&self, limit: u32) -> Option<&'static str> {
        let covered = self.not_freed > 0
            && !self.free_stacks.is_empty()
            && self.free_stacks.is_subset(&self.reached)
            && self.unchanged >= SATURATION;
        if covered {
            Some("covered")
        } else if self.traces >= limit {
            Some("limit")
        } else {
            None
        }
    }
}

/// A path step with runtime addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Enter(u64),
    Exit(u64),
    Branch(u64, bool),
}

/// One process image.
#[derive(Default)]
struct Session {
    header: Option<SharedHeader>,
    code: Option<ProcessCode>,
    /// Module id -> (bias, path as the dynamic loader knows it).
    modules: FxHashMap<u32, (u64, String)>,
    /// Stack id -> frames (runtime return addresses, innermost first).
    stacks: FxHashMap<u32, Vec<u64>>,
    /// Module id -> its file's index in `files` (a library loaded again gets a new id).
    module_files: FxHashMap<u32, u32>,
    /// Module files (path, build id), numbered in the order they came.
    files: FxHashMap<(String, Vec<u8>), u32>,
    /// Each distinct stack (per frame: module file, or `u32::MAX` for no module, and
    /// offset) -> the first id it was defined under.
    first_ids: FxHashMap<Vec<(u32, u64)>, u32>,
    /// Stack ids defined again for frames already defined -> the first id, as the
    /// reader's `StackAliases`: two threads meeting a new stack at the same moment both
    /// define it. Sites, their free stacks and traces are kept under first ids.
    aliases: FxHashMap<u32, u32>,
    meta_carry: Vec<u8>,
    blocks: Blocks,
    sites: FxHashMap<u32, Site>,
    /// Traced blocks whose release is awaited: ptr -> the trace.
    traced: FxHashMap<u64, Traced>,
    /// Traces started whose results have not come yet, in the order they started (one at a
    /// time per process image; an entry left behind by a trace that failed goes when a
    /// later trace settles).
    in_flight: Vec<InFlight>,
    /// Releases not kept for a trace in flight because its list was full.
    candidates_dropped: u64,
}

/// A trace whose result has not come yet, and its block's release if that was read first
/// (the events and the trace's messages come by different ways).
#[derive(Debug, Clone)]
struct InFlight {
    stack: u32,
    ptr: u64,
    /// When the follower attached, once the tracer said it.
    attached: Option<u64>,
    /// Before that: the releases of blocks of the site at the address, read meanwhile (at
    /// most [`MAX_CANDIDATES`]); the block's is among them if it came that early.
    candidates: Vec<Release>,
    /// The release of the traced block.
    release: Option<Release>,
}

/// A settled trace whose block's release is awaited.
#[derive(Debug, Clone, Copy)]
struct Traced {
    /// The site.
    stack: u32,
    /// Whether the trace ended E (at the range end or the thread's exit).
    e_ended: bool,
    /// When the follower attached (the block was allocated before, and released after).
    attached: u64,
    /// The range end it was followed to.
    range_depth: u32,
}

/// A release of a block, as the event stream told it.
#[derive(Debug, Clone, Copy)]
struct Release {
    ptr: u64,
    /// The site (the block's allocation stack) and when the block was allocated.
    stack: u32,
    allocated: u64,
    free_stack: u32,
    ts: u64,
}

impl Release {
    /// Whether this is the release of the block a trace of `stack` attached to at
    /// `attached`: a block at that address of that site allocated before, released after.
    /// An earlier block there was released before the traced one was allocated; a later
    /// one was allocated after the trace attached.
    fn of_trace(&self, stack: u32, attached: u64) -> bool {
        self.stack == stack && self.allocated <= attached && self.ts >= attached
    }
}

/// Releases kept for a trace in flight whose attach time is not known yet: those of blocks
/// of its site at its address read between the tracer's two messages, sent one right after
/// the other (so in practice none or one).
const MAX_CANDIDATES: usize = 256;

/// What the tracer tells the sink about a trace, in this order. A release of the traced
/// block has a timestamp after the attach time, which the tracer reads after sending
/// `Started`: so the event of that release is read after `Started` was sent, and the sink,
/// which takes its messages before it handles the events it has read, knows the trace is
/// in flight when that release comes.
enum TraceMsg {
    /// A trace of the block at `ptr`, allocated at the site `stack`, is starting.
    Started { session: u32, stack: u32, ptr: u64 },
    /// Its follower's attach time (on the agent's clock).
    Attached { session: u32, ptr: u64, ticks: u64 },
    /// Its result.
    Done(TraceDone),
    /// A trace of the site `stack` could not be taken, or was given up (the failures
    /// say why).
    Failed { session: u32, stack: u32 },
}

/// Wraps a sink with the live side of leak-cause mode.
pub struct LeakCauseSink<S: Sink> {
    inner: S,
    config: LeakCauseConfig,
    sessions: BTreeMap<u32, Session>,
    decoders: FxHashMap<(u32, u32), StreamDecoder>,
    events: Vec<tansa_analysis::memory::merge::Event>,
    last_scan: Instant,
    tracer: Tracer,
    done: Receiver<TraceMsg>,
    failures: Arc<Mutex<Failures>>,
    /// The allocation stacks of the sites being traced, for the tracer.
    traced_stacks: TracedStacks,
    /// Instruction text of branches, by (session, runtime address).
    code_text: HashMap<(u32, u64), String>,
}

impl<S: Sink> std::fmt::Debug for LeakCauseSink<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeakCauseSink")
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl<S: Sink> LeakCauseSink<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: LeakCauseConfig) -> Self {
        let (tx, rx) = channel();
        let failures = Arc::new(Mutex::new(Failures::default()));
        let traced_stacks = TracedStacks::default();
        LeakCauseSink {
            inner,
            config,
            sessions: BTreeMap::new(),
            decoders: FxHashMap::default(),
            events: Vec::new(),
            last_scan: Instant::now(),
            tracer: Tracer::start(tx, config, failures.clone(), traced_stacks.clone()),
            done: rx,
            failures,
            traced_stacks,
            code_text: HashMap::new(),
        }
    }

    /// Stops tracing and gives back the inner sink with what was traced, symbolized.
    pub fn finish(mut self) -> (S, LeakCause) {
        self.tracer.stop();
        self.collect_done();
        let mut out = Symbolizer::default();
        let mut sites = Vec::new();
        for (&session, s) in &mut self.sessions {
            out.name_modules_as_loaded(session, s.modules.values().map(|m| m.1.as_str()));
            let code = &mut s.code;
            for (&stack, site) in &s.sites {
                // A site judged leaking is kept even when no trace was taken: the program
                // may have ended before it allocated there again.
                if site.traces == 0
                    && site.status.is_none()
                    && site.slot.is_none()
                    && !site.waited_for_slot
                {
                    continue;
                }
                let mut f = |addr: u64| out.function(session, code, addr);
                let alloc_functions: Vec<u32> =
                    site.alloc_functions.iter().map(|&a| f(a)).collect();
                let range_end = (site.range_depth as usize)
                    .checked_add(1)
                    .and_then(|d| alloc_functions.len().checked_sub(d))
                    .map(|i| alloc_functions[i]);
                let paths = site
                    .paths
                    .iter()
                    .map(|((steps, freed), &count)| TracedPath {
                        steps: steps
                            .iter()
                            .map(|st| match *st {
                                Step::Enter(e) => PathStep::Enter(out.function(session, code, e)),
                                Step::Exit(e) => PathStep::Exit(out.function(session, code, e)),
                                Step::Branch(at, taken) => PathStep::Branch {
                                    branch: out.branch(session, code, at, &self.code_text),
                                    taken,
                                },
                            })
                            .collect(),
                        freed: *freed,
                        count,
                    })
                    .collect();
                sites.push(TracedSite {
                    session,
                    stack,
                    range_end,
                    range_moves: site.range_moves,
                    alloc_functions,
                    paths,
                    traces: site.traces,
                    tracing_ns: site.tracing_ns,
                    freed_elsewhere: site.freed_elsewhere,
                    status: site.status.clone().unwrap_or_else(|| {
                        if site.paths.is_empty() && site.failed > 0 {
                            "failed".into()
                        } else if site.slot.is_none() && site.traces == 0 && site.waited_for_slot {
                            format!(
                                "every one of the {TRACE_SITES} trace slots of its process was \
                                 taken by other leaking sites until the program ended (a slot \
                                 frees when its site is covered or reaches --traces)"
                            )
                        } else if let (0, Some(slot), Some(h)) =
                            (site.traces, site.slot, s.header.as_ref())
                        {
                            let passed = h.get().trace_sites[slot].passed.load(Ordering::Acquire);
                            untraced_status(site.asked_allocations, passed.into(), site.handed)
                                .into()
                        } else {
                            "ended".into()
                        }
                    }),
                });
            }
        }
        let (functions, branches) = out.finish();
        let mut failures = self
            .failures
            .lock()
            .map(|f| f.messages())
            .unwrap_or_default();
        failures.extend(self.sessions.values().filter_map(Session::dropped_note));
        let data = LeakCause {
            scan_interval_ms: self.config.scan_interval.as_millis() as u32,
            traces_per_site: self.config.traces,
            functions,
            branches,
            sites,
            failures,
        };
        (self.inner, data)
    }

    /// Takes the tracer's messages: traces started, and finished ones added to their sites.
    fn collect_done(&mut self) {
        while let Ok(m) = self.done.try_recv() {
            match m {
                TraceMsg::Started {
                    session,
                    stack,
                    ptr,
                } => {
                    if let Some(s) = self.sessions.get_mut(&session) {
                        s.trace_started(stack, ptr);
                    }
                }
                TraceMsg::Attached {
                    session,
                    ptr,
                    ticks,
                } => {
                    if let Some(s) = self.sessions.get_mut(&session) {
                        s.trace_attached(ptr, ticks);
                    }
                }
                TraceMsg::Done(d) => self.settle(d),
                TraceMsg::Failed { session, stack } => {
                    if let Some(site) = self
                        .sessions
                        .get_mut(&session)
                        .and_then(|s| s.sites.get_mut(&stack))
                    {
                        site.failed += 1;
                    }
                }
            }
        }
    }

    /// Adds a finished trace to its site.
    fn settle(&mut self, d: TraceDone) {
        for (addr, text) in &d.code {
            self.code_text.insert((d.session, *addr), text.clone());
        }
        if let Some(s) = self.sessions.get_mut(&d.session) {
            s.settle(&d);
        }
    }

    /// Applies decoded events as they arrive. Streams of different threads arrive in any
    /// order, so a free may come before the allocation it releases: it waits (in
    /// `early_frees`) for it.
    fn apply(&mut self, events: &mut Vec<tansa_analysis::memory::merge::Event>) {
        for e in events.drain(..) {
            let Some(s) = self.sessions.get_mut(&e.session.0) else {
                continue;
            };
            match e.kind {
                EventKind::Alloc { ptr, stack, .. }
                | EventKind::ReallocAlloc {
                    new: ptr, stack, ..
                } => {
                    let stack = s.canonical(stack.0);
                    let site = s.sites.entry(stack).or_default();
                    site.allocations += 1;
                    site.outstanding += 1;
                    if site.slot.is_some() && e.ts > site.asked_at {
                        site.asked_allocations += 1;
                    }
                    // Its release may have come first.
                    if let Some((ts, free_stack)) = s.blocks.allocated(ptr, e.ts, stack) {
                        s.release(Release {
                            ptr,
                            stack,
                            allocated: e.ts,
                            free_stack,
                            ts,
                        });
                    }
                }
                EventKind::Free { ptr, stack }
                | EventKind::ReallocRelease {
                    old: ptr, stack, ..
                } => {
                    let stack = s.canonical(stack.0);
                    if let Some((allocated, owner)) = s.blocks.released(ptr, e.ts, stack) {
                        s.release(Release {
                            ptr,
                            stack: owner,
                            allocated,
                            free_stack: stack,
                            ts: e.ts,
                        });
                    }
                }
                _ => {}
            }
        }
    }

    /// Grants more traces to the sites being traced that used theirs.
    fn refill(&mut self) {
        let traces = self.config.traces;
        for s in self.sessions.values_mut() {
            let Some(header) = &s.header else { continue };
            let h = header.get();
            for site in s.sites.values_mut() {
                if let Some(slot) = site.slot
                    && h.trace_sites[slot].remaining.load(Ordering::Acquire) == 0
                {
                    grant(site, &h.trace_sites[slot].remaining, traces);
                }
            }
        }
    }

    /// Scans once a scan interval has passed since the last scan.
    fn scan_if_due(&mut self) {
        if self.last_scan.elapsed() >= self.config.scan_interval {
            self.last_scan = Instant::now();
            self.scan();
        }
    }

    /// Judges the sites and grants traces.
    fn scan(&mut self) {
        let traces = self.config.traces;
        let mut started = false;
        for (&session, s) in &mut self.sessions {
            let Some(header) = s.header.clone() else {
                continue;
            };
            let h = header.get();
            let stacks: Vec<u32> = s.sites.keys().copied().collect();
            for stack in stacks {
                let judged = {
                    let site = &mut s.sites.get_mut(&stack).expect("known site");
                    site.judge.scan(site.frees, site.outstanding)
                };
                let site = s.sites.get_mut(&stack).expect("known site");
                if let Some(slot) = site.slot {
                    if let Some(why) = site.tracing_done(traces) {
                        site.status = Some(why.into());
                        release_slot(h, slot);
                        site.slot = None;
                    } else if h.trace_sites[slot].remaining.load(Ordering::Acquire) == 0 {
                        grant(site, &h.trace_sites[slot].remaining, traces);
                    }
                    continue;
                }
                if site.status.is_some() || judged != Judgement::Leaking {
                    continue;
                }
                // Start tracing: the range end from the stacks.
                let Some(alloc) = s.stacks.get(&stack).cloned() else {
                    continue;
                };
                let frees: Vec<Vec<u64>> = site
                    .free_stacks
                    .iter()
                    .filter_map(|f| s.stacks.get(f).cloned())
                    .collect();
                let Some(code) = s.code.as_mut() else {
                    continue;
                };
                let functions = |code: &mut ProcessCode, frames: &[u64]| -> Vec<u64> {
                    frames
                        .iter()
                        .rev()
                        .map(|&ra| code.function(ra.saturating_sub(1)).map_or(ra, |f| f.entry))
                        .collect()
                };
                let alloc_fns = functions(code, &alloc);
                let free_fns: Vec<Vec<u64>> = frees.iter().map(|f| functions(code, f)).collect();
                let refs: Vec<&[u64]> = free_fns.iter().map(Vec::as_slice).collect();
                let site = s.sites.get_mut(&stack).expect("known site");
                let Some(end) = range_end(&alloc_fns, &refs) else {
                    site.status =
                        Some("no function is common to the allocation and free stacks".into());
                    continue;
                };
                let Some(slot) =
                    (0..TRACE_SITES).find(|&i| h.trace_sites[i].stack.load(Ordering::Acquire) == 0)
                else {
                    // Asked again at the next scan: a slot frees when a site is covered.
                    site.waited_for_slot = true;
                    continue;
                };
                site.alloc_functions = alloc_fns.clone();
                site.range_depth = depth_of(end, alloc_fns.len());
                if let Ok(mut stacks) = self.traced_stacks.lock() {
                    stacks.insert((session, stack), alloc.clone());
                }
                // A free stack that is a prefix of the allocation stack was made from a
                // frame the allocating function's activation may have replaced (tail
                // calls: `jmp free` leaves no frame) or from a caller after it returned. The
                // follower counts tail-called functions as part of that activation, so the
                // trace starts at its return; a block that outlives it moves the range end
                // up (spec §12.2), which covers the second case.
                if refs
                    .iter()
                    .any(|f| f.len() < alloc_fns.len() && alloc_fns.starts_with(f))
                {
                    site.range_depth = 0;
                }
                site.slot = Some(slot);
                site.waited_for_slot = false;
                let entry = &h.trace_sites[slot];
                entry.passed.store(0, Ordering::Relaxed);
                // Release: see `requested_site`.
                entry.range_depth.store(site.range_depth, Ordering::Release);
                grant(site, &entry.remaining, traces);
                let aliases = s.aliases_of(stack);
                for (to, id) in h.trace_aliases[slot].iter().zip(aliases) {
                    to.store(id, Ordering::Release);
                }
                entry.stack.store(stack, Ordering::Release);
                if h.tracing.fetch_add(1, Ordering::AcqRel) == 0 {
                    started = true;
                }
                // Read after the site is listed: an allocation stamped later saw the list.
                let site = s.sites.get_mut(&stack).expect("known site");
                site.asked_at =
                    tansa_collect::clock_now(h.clock == tansa_wire::layout::ClockKind::Tsc as u32);
            }
        }
        if started {
            // The tracer sleeps only on the slots of sessions that trace a site.
            self.tracer.kick();
        }
    }
}

/// Grants the agent more traces of `site` (its `remaining` is 0): what the limit leaves.
/// Every trace granted before has been started then, so those still in flight, not settled
/// yet, count against the limit (counting only the settled ones traced one more than
/// `--traces`). Failed ones count too: a site whose traces all fail (paths longer than
/// `--trace-steps`) stops at the limit instead of holding its program up again and again.
fn grant(site: &mut Site, remaining: &AtomicU32, traces: u32) {
    let used = site.granted;
    if used < traces {
        let n = BATCH.min(traces - used);
        site.granted += n;
        remaining.store(n, Ordering::Release);
    }
}

/// Stops the agent from handing over allocations of the site in `slot`.
fn release_slot(h: &tansa_wire::layout::SegmentHeader, slot: usize) {
    let entry = &h.trace_sites[slot];
    entry.remaining.store(0, Ordering::Release);
    entry.stack.store(0, Ordering::Release);
    for alias in &h.trace_aliases[slot] {
        alias.store(0, Ordering::Release);
    }
    h.tracing.fetch_sub(1, Ordering::AcqRel);
}

impl Session {
    /// The first id the process image gave the frames it defined as `id`.
    fn canonical(&self, id: u32) -> u32 {
        if self.aliases.is_empty() {
            id
        } else {
            self.aliases.get(&id).copied().unwrap_or(id)
        }
    }

    /// A stack definition: `id` for `frames` (module id, 0 for none, and offset).
    fn define_stack(&mut self, id: u32, frames: &[(u32, u64)]) {
        let runtime = frames
            .iter()
            .map(|&(module, offset)| match module {
                0 => offset,
                m => self.modules.get(&m).map_or(0, |m| m.0) + offset,
            })
            .collect();
        self.stacks.insert(id, runtime);
        // Its identity, as the reader's registry keys stacks: by module file, so that the
        // frames of a library loaded again are the same frames.
        let content = frames
            .iter()
            .map(|&(module, offset)| match module {
                0 => (u32::MAX, offset),
                m => (
                    self.module_files.get(&m).copied().unwrap_or(u32::MAX),
                    offset,
                ),
            })
            .collect();
        let first = *self.first_ids.entry(content).or_insert(id);
        if first != id {
            self.alias_learned(id, first);
        }
    }

    /// `alias` was defined for the frames of `first`: whatever was kept under `alias` so
    /// far (its events may have come before this definition) goes to `first`.
    fn alias_learned(&mut self, alias: u32, first: u32) {
        self.aliases.insert(alias, first);
        for site in self.sites.values_mut() {
            if site.free_stacks.remove(&alias) {
                site.free_stacks.insert(first);
            }
            if site.reached.remove(&alias) {
                site.reached.insert(first);
            }
        }
        // A site counted under the alias joins the first's. One already traced, or done
        // with, stays apart: its traces were taken under its id.
        if self
            .sites
            .get(&alias)
            .is_some_and(|o| o.slot.is_none() && o.status.is_none())
            && let Some(other) = self.sites.remove(&alias)
        {
            match self.sites.entry(first) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(other);
                }
                std::collections::hash_map::Entry::Occupied(o) => {
                    let site = o.into_mut();
                    site.allocations += other.allocations;
                    site.frees += other.frees;
                    site.outstanding += other.outstanding;
                    site.free_stacks.extend(other.free_stacks);
                }
            }
        }
        // The first's site being traced: its allocations under the alias are traced too.
        if let Some(slot) = self.sites.get(&first).and_then(|s| s.slot)
            && let Some(h) = &self.header
            && let Some(free) = h.get().trace_aliases[slot]
                .iter()
                .find(|a| a.load(Ordering::Acquire) == 0)
        {
            free.store(alias, Ordering::Release);
        }
    }

    /// The other ids of the stack first defined as `first` (at most what a `trace_sites`
    /// entry holds).
    fn aliases_of(&self, first: u32) -> [u32; TRACE_ALIASES] {
        let mut out = [0; TRACE_ALIASES];
        for (slot, (&alias, _)) in out
            .iter_mut()
            .zip(self.aliases.iter().filter(|&(_, &f)| f == first))
        {
            *slot = alias;
        }
        out
    }

    /// What [`Session::candidates_dropped`] may have cost, for the report, if anything.
    fn dropped_note(&self) -> Option<String> {
        let n = self.candidates_dropped;
        (n > 0).then(|| {
            let who = self.header.as_ref().map_or_else(
                || "a process".to_string(),
                |h| format!("process {}", h.get().pid),
            );
            format!(
                "{who}: {n} release(s) at a traced address came before its trace's attach time \
                 was known, more than {MAX_CANDIDATES}, and were not kept: that trace may not \
                 have learnt its block's release"
            )
        })
    }

    /// A block was released (its allocation and release events have both arrived, in
    /// either order).
    fn release(&mut self, mut r: Release) {
        // A block or an early release kept before the alias of its id was known.
        r.stack = self.canonical(r.stack);
        r.free_stack = self.canonical(r.free_stack);
        let site = self.sites.entry(r.stack).or_default();
        site.frees += 1;
        site.outstanding = site.outstanding.saturating_sub(1);
        if r.free_stack != 0 {
            site.free_stacks.insert(r.free_stack);
        }
        let tracing = site.slot.is_some();
        match self.traced.get(&r.ptr).copied() {
            Some(t) if r.of_trace(t.stack, t.attached) => {
                self.traced.remove(&r.ptr);
                self.traced_block_released(r.stack, r.free_stack, t.e_ended, t.range_depth);
            }
            // Perhaps the block of a trace whose result has not come yet.
            _ if tracing => {
                for t in &mut self.in_flight {
                    if t.ptr != r.ptr || t.stack != r.stack {
                        continue;
                    }
                    match t.attached {
                        Some(at) if r.of_trace(t.stack, at) => t.release = Some(r),
                        Some(_) => {}
                        None if t.candidates.len() < MAX_CANDIDATES => t.candidates.push(r),
                        None => self.candidates_dropped += 1,
                    }
                }
            }
            _ => {}
        }
    }

    /// The tracer started a trace of `stack`'s block at `ptr`.
    fn trace_started(&mut self, stack: u32, ptr: u64) {
        if let Some(site) = self.sites.get_mut(&stack) {
            site.handed += 1;
        }
        self.in_flight.push(InFlight {
            stack,
            ptr,
            attached: None,
            candidates: Vec::new(),
            release: None,
        });
    }

    /// The follower of the trace in flight of the block at `ptr` attached at `ticks`.
    fn trace_attached(&mut self, ptr: u64, ticks: u64) {
        if let Some(t) = self
            .in_flight
            .iter_mut()
            .rev()
            .find(|t| t.ptr == ptr && t.attached.is_none())
        {
            t.attached = Some(ticks);
            let (stack, candidates) = (t.stack, std::mem::take(&mut t.candidates));
            t.release = candidates.into_iter().find(|r| r.of_trace(stack, ticks));
        }
    }

    /// Takes the trace of `d` out of those in flight (and those started before it, left by
    /// traces that failed): the release of its block, if that was read already. Its entry
    /// is the one with its attach time (told before its result): a trace that failed, or
    /// the next one, may have had the same block address. That entry's candidates were
    /// sifted when the attach time came, so its `release` is all there is.
    fn take_in_flight(&mut self, d: &TraceDone) -> Option<Release> {
        let i = self.in_flight.iter().position(|t| {
            t.ptr == d.ptr && t.stack == d.stack && t.attached == Some(d.attached_ticks)
        })?;
        self.in_flight.drain(..=i).next_back()?.release
    }

    /// The block of a trace of the site `stack`, followed to the range end `range_depth`,
    /// was released by `free_stack`: after a trace that ended at the release (F), its
    /// freeing path reached that free stack; after one that ended E, the range was too
    /// narrow (spec §12.2): it moves one caller up and the paths are collected again. A
    /// trace of a range the site has moved from says nothing of the current one: the
    /// other traces of that range, followed and released meanwhile, would each move it
    /// once more (an allocation wrapper's blocks, all freed by its caller, moved the range
    /// from the wrapper past the caller to `main`, whose traces then ran out of steps).
    fn traced_block_released(
        &mut self,
        stack: u32,
        free_stack: u32,
        e_ended: bool,
        range_depth: u32,
    ) {
        let Some(site) = self.sites.get_mut(&stack) else {
            return;
        };
        if range_depth != site.range_depth {
            return;
        }
        if !e_ended {
            if free_stack != 0 {
                site.reached.insert(free_stack);
            }
            return;
        }
        if let Some(slot) = site.slot
            && let Some(up) = move_up(site.range_depth, site.alloc_functions.len())
        {
            site.range_depth = up;
            site.range_moves += 1;
            site.paths.clear();
            site.unchanged = 0;
            site.reached.clear();
            site.not_freed = 0;
            site.freed_elsewhere = 0;
            site.failed = 0;
            if let Some(h) = &self.header {
                h.get().trace_sites[slot]
                    .range_depth
                    .store(site.range_depth, Ordering::Release);
            }
        }
    }

    /// Adds a finished trace to its site. Its block's release may have been read already
    /// (the events and the trace's result come by different ways): then it is kept with
    /// the trace in flight; otherwise the release is awaited.
    fn settle(&mut self, d: &TraceDone) {
        let came = self.take_in_flight(d);
        let Some(site) = self.sites.get_mut(&d.stack) else {
            return;
        };
        site.tracing_ns += d.ns;
        let freed = match d.end {
            FollowEnd::Stopped => true,
            FollowEnd::RangeEnd | FollowEnd::ThreadExited => false,
            // Never sent: `trace_one` reports a trace given up as a failure.
            FollowEnd::Abandoned(_) => return,
        };
        if d.range_depth != site.range_depth {
            // Followed to a range end the site has moved from: its path is not one of the
            // current range's, and its block's release says nothing of that range.
            return;
        }
        let steps = d
            .events
            .iter()
            .map(|e| match *e {
                PathEvent::Enter { entry } => Step::Enter(entry),
                PathEvent::Exit { entry } => Step::Exit(entry),
                PathEvent::Branch { at, taken } => Step::Branch(at, taken),
            })
            .collect();
        if freed && d.freed_elsewhere {
            site.add_trace_freed_elsewhere();
        } else {
            site.add_trace(steps, freed);
        }
        if freed && d.free_stack != 0 {
            // The agent said which free stack the release came from (under its own id).
            let free_stack = self.canonical(d.free_stack);
            self.traced_block_released(d.stack, free_stack, false, d.range_depth);
        } else if let Some(r) = came {
            self.traced_block_released(d.stack, r.free_stack, !freed, d.range_depth);
        } else {
            self.traced.insert(
                d.ptr,
                Traced {
                    stack: d.stack,
                    e_ended: !freed,
                    attached: d.attached_ticks,
                    range_depth: d.range_depth,
                },
            );
        }
    }
}

impl<S: Sink> Sink for LeakCauseSink<S> {
    fn session_started(&mut self, info: &SessionInfo) -> Result<(), CollectError> {
        self.sessions.insert(info.session, Session::default());
        self.inner.session_started(info)
    }

    fn session_place(&mut self, place: &SessionPlace) -> Result<(), CollectError> {
        self.inner.session_place(place)
    }

    fn volatile_segment(&mut self, segment: &VolatileSegment) -> Result<(), CollectError> {
        self.inner.volatile_segment(segment)
    }

    fn session_python_malloc(&mut self, session: u32) {
        self.inner.session_python_malloc(session)
    }

    fn session_header(&mut self, session: u32, pid: u32, header: SharedHeader) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.header = Some(header.clone());
            s.code = ProcessCode::new(pid as i32, Box::new(|p| !is_runtime_library(p))).ok();
        }
        self.tracer.add(session, pid, header.clone());
        self.inner.session_header(session, pid, header);
    }

    fn meta(&mut self, session: u32, bytes: &[u8]) -> Result<(), CollectError> {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.meta_carry.extend_from_slice(bytes);
            let buf = std::mem::take(&mut s.meta_carry);
            let mut used = 0;
            let mut loaded = false;
            let mut d = Decoder::with_state(&buf, StreamState::default());
            while let Some(r) = d.next() {
                match r {
                    Ok(Record::ModuleLoad(m)) => {
                        let path = String::from_utf8_lossy(m.path).into_owned();
                        let next = s.files.len() as u32;
                        let file = *s
                            .files
                            .entry((path.clone(), m.build_id.to_vec()))
                            .or_insert(next);
                        s.module_files.insert(m.id, file);
                        s.modules.insert(m.id, (m.bias, path));
                        loaded = true;
                    }
                    Ok(Record::StackDef { id, frames }) => {
                        let frames: Vec<(u32, u64)> =
                            frames.map(|f| (f.module, f.offset)).collect();
                        s.define_stack(id, &frames);
                    }
                    Ok(_) => {}
                    Err(DecodeError::Truncated { .. }) => break,
                    Err(DecodeError::Corrupt { .. }) => {
                        used = buf.len();
                        break;
                    }
                }
                used = d.position();
            }
            s.meta_carry = buf[used..].to_vec();
            if loaded && let Some(code) = s.code.as_mut() {
                code.refresh();
            }
        }
        self.inner.meta(session, bytes)
    }

    fn thread(&mut self, session: u32, stream: u32, bytes: &[u8]) -> Result<(), CollectError> {
        // The tracer's messages first: a trace started before these events were read is
        // then known to be in flight when its block's release is among them.
        self.collect_done();
        let mut events = std::mem::take(&mut self.events);
        self.decoders
            .entry((session, stream))
            .or_insert_with(|| StreamDecoder::new(SessionId(session)))
            .push(bytes, &mut |e| events.push(e));
        self.apply(&mut events);
        self.events = events;
        // Also between streams: a busy program's events can take the collector tens of
        // milliseconds to read in one round, and judging only between rounds would see a
        // short run's sites too few times.
        self.scan_if_due();
        self.inner.thread(session, stream, bytes)
    }

    fn stream_closed(&mut self, session: u32, stream: u32) -> Result<(), CollectError> {
        if let Some(mut d) = self.decoders.remove(&(session, stream)) {
            d.finish();
        }
        self.inner.stream_closed(session, stream)
    }

    fn session_ended(&mut self, end: &SessionEnd) -> Result<(), CollectError> {
        self.inner.session_ended(end)
    }

    fn session_losses(&mut self, losses: &SessionLosses) -> Result<(), CollectError> {
        self.inner.session_losses(losses)
    }

    fn unrecorded(&mut self, process: &Unrecorded) -> Result<(), CollectError> {
        self.inner.unrecorded(process)
    }

    fn watermark(&mut self, ticks: u64) -> Result<(), CollectError> {
        self.collect_done();
        self.refill();
        self.scan_if_due();
        self.inner.watermark(ticks)
    }

    fn tick(&mut self, point: CalibrationPoint) -> Result<(), CollectError> {
        self.inner.tick(point)
    }

    fn stored(&mut self, session: u32, stream: Option<u32>) -> Option<u64> {
        self.inner.stored(session, stream)
    }

    fn store_soon(
        &mut self,
        session: u32,
        stream: Option<u32>,
        at_least: u64,
    ) -> Result<(), CollectError> {
        self.inner.store_soon(session, stream, at_least)
    }
}

/// Symbolizes the functions and branches named by the traces into the recording's tables.
#[derive(Default)]
struct Symbolizer {
    resolver: Option<Resolver>,
    /// Per session: a mapped file's path (as `/proc/PID/maps` gives it, links resolved) ->
    /// its path as the dynamic loader knows it, by which the rest of the recording names
    /// it (`libstdc++.so.6`, not `libstdc++.so.6.0.30`).
    loaded_as: HashMap<u32, HashMap<String, String>>,
    functions: Vec<CodeFunction>,
    function_index: HashMap<(String, u64), u32>,
    by_address: HashMap<(u32, u64), u32>,
    branches: Vec<CodeBranch>,
    branch_index: HashMap<(u32, u64), u32>,
}

impl Symbolizer {
    /// Names the modules of `session` by `paths`, the paths its agent announced them by.
    fn name_modules_as_loaded<'a>(&mut self, session: u32, paths: impl Iterator<Item = &'a str>) {
        let names = self.loaded_as.entry(session).or_default();
        for path in paths {
            if let Ok(real) = std::fs::canonicalize(path)
                && let Some(real) = real.to_str()
                && real != path
            {
                names.insert(real.to_string(), path.to_string());
            }
        }
    }

    fn resolve(&mut self, module: &str, offset: u64) -> (String, String, u32) {
        let r = self.resolver.get_or_insert_with(Resolver::new);
        match r.resolve(std::path::Path::new(module), &[offset]) {
            Ok(mut v) if !v.is_empty() => {
                let v = v.swap_remove(0);
                // The innermost frame: an inlined function's own line.
                match v.frames.into_iter().next() {
                    Some(f) => (
                        f.function.unwrap_or_default(),
                        f.file.unwrap_or_default(),
                        f.line,
                    ),
                    None => Default::default(),
                }
            }
            _ => Default::default(),
        }
    }

    /// The index of the function with runtime entry `entry` in `session`.
    fn function(&mut self, session: u32, code: &mut Option<ProcessCode>, entry: u64) -> u32 {
        if let Some(&i) = self.by_address.get(&(session, entry)) {
            return i;
        }
        let (module, offset, name) = match code.as_mut() {
            Some(c) => {
                let name = c
                    .function(entry)
                    .and_then(|f| c.function_at(f.entry).map(|id| id.name.clone()))
                    .unwrap_or_default();
                match c.normalize(entry) {
                    Some((m, o)) => (m, o, name),
                    None => (String::new(), entry, name),
                }
            }
            None => (String::new(), entry, String::new()),
        };
        let module = self
            .loaded_as
            .get(&session)
            .and_then(|names| names.get(&module))
            .cloned()
            .unwrap_or(module);
        let i = match self.function_index.get(&(module.clone(), offset)) {
            Some(&i) => i,
            None => {
                let (sym, file, line) = if module.is_empty() {
                    Default::default()
                } else {
                    self.resolve(&module, offset)
                };
                let i = self.functions.len() as u32;
                self.functions.push(CodeFunction {
                    module: module.clone(),
                    name: function_display_name(name, sym),
                    offset,
                    file,
                    line,
                });
                self.function_index.insert((module, offset), i);
                i
            }
        };
        self.by_address.insert((session, entry), i);
        i
    }

    fn branch(
        &mut self,
        session: u32,
        code: &mut Option<ProcessCode>,
        at: u64,
        text: &HashMap<(u32, u64), String>,
    ) -> u32 {
        if let Some(&i) = self.branch_index.get(&(session, at)) {
            return i;
        }
        let entry = code
            .as_mut()
            .and_then(|c| c.function(at))
            .map_or(at, |f| f.entry);
        let function = self.function(session, code, entry);
        let (module, offset) = code
            .as_mut()
            .and_then(|c| c.normalize(at))
            .unwrap_or((String::new(), at));
        let (_, file, line) = if module.is_empty() {
            Default::default()
        } else {
            self.resolve(&module, offset)
        };
        let i = self.branches.len() as u32;
        self.branches.push(CodeBranch {
            function,
            offset,
            file,
            line,
            instruction: text.get(&(session, at)).cloned().unwrap_or_default(),
        });
        self.branch_index.insert((session, at), i);
        i
    }

    fn finish(self) -> (Vec<CodeFunction>, Vec<CodeBranch>) {
        (self.functions, self.branches)
    }
}

/// A session the tracer watches.
struct Watched {
    session: u32,
    pid: u32,
    header: SharedHeader,
    code: Option<ProcessCode>,
}

/// The tracer thread: takes the agents' trace requests and follows their threads.
struct Tracer {
    add: Option<Sender<Watched>>,
    stop: Arc<AtomicBool>,
    /// Bumped (and woken) to wake the tracer thread from its wait: see [`Tracer::kick`].
    kick: Arc<AtomicU32>,
    thread: Option<JoinHandle<()>>,
}

/// How long the tracer sleeps at most when nothing is asked of it. Every change it must
/// act on wakes it (a request, a new session, a site traced, the end), so this only
/// bounds what a missed wake could cost.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// How often the tracer looks at the trace slots where it cannot sleep on them (a kernel
/// before 5.16, or more traced sessions than one wait takes).
const POLL: Duration = Duration::from_micros(200);

impl Tracer {
    fn start(
        done: Sender<TraceMsg>,
        config: LeakCauseConfig,
        failures: Arc<Mutex<Failures>>,
        stacks: TracedStacks,
    ) -> Tracer {
        let (tx, rx) = channel::<Watched>();
        let stop = Arc::new(AtomicBool::new(false));
        let kick = Arc::new(AtomicU32::new(0));
        let (stopping, kicks) = (stop.clone(), kick.clone());
        let thread = std::thread::Builder::new()
            .name("tansa-ptrace".into())
            .spawn(move || {
                tracer_loop(rx, done, config, &stopping, &kicks, &failures, &stacks);
            })
            .ok();
        Tracer {
            add: Some(tx),
            stop,
            kick,
            thread,
        }
    }

    fn add(&self, session: u32, pid: u32, header: SharedHeader) {
        if let Some(tx) = &self.add {
            let _ = tx.send(Watched {
                session,
                pid,
                header,
                code: None,
            });
            self.kick();
        }
    }

    /// Wakes the tracer thread to look at its sessions again: after a new session, a site
    /// traced in a session that traced none (the thread sleeps only on the slots of traced
    /// sessions), or the end.
    fn kick(&self) {
        self.kick.fetch_add(1, Ordering::Release);
        let _ = tansa_proc::os::futex_wake(&self.kick, false);
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.kick();
        self.add = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tracer_loop(
    add: Receiver<Watched>,
    done: Sender<TraceMsg>,
    config: LeakCauseConfig,
    stop: &AtomicBool,
    kick: &AtomicU32,
    failures: &Mutex<Failures>,
    stacks: &Mutex<HashMap<(u32, u32), Vec<u64>>>,
) {
    let mut watched: Vec<Watched> = Vec::new();
    // Whether this kernel can sleep on the slots (`futex_waitv`).
    let mut doorbell = true;
    let fail = |msg: String| {
        if let Ok(mut f) = failures.lock() {
            f.add(msg);
        }
    };
    while !stop.load(Ordering::Acquire) {
        // Read before the sessions are: a kick after this ends the wait below at once.
        let kicked = kick.load(Ordering::Acquire);
        while let Ok(w) = add.try_recv() {
            watched.push(w);
        }
        let mut busy = false;
        for w in &mut watched {
            let header = w.header.clone();
            let h = header.get();
            if h.tracing.load(Ordering::Acquire) == 0 {
                continue;
            }
            let slot = &h.trace;
            if slot.state.load(Ordering::Acquire) != TRACE_REQUESTED
                || slot
                    .state
                    .compare_exchange(
                        TRACE_REQUESTED,
                        TRACE_ATTACHING,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err()
            {
                continue;
            }
            busy = true;
            let Some(site) = requested_site(h) else {
                // The collector stopped tracing the request's site meanwhile (and may have
                // given its entry to another): not followed, not a failure. The agent
                // returns when it sees the slot idle.
                slot.state.store(TRACE_IDLE, Ordering::Release);
                continue;
            };
            // The return address of the range end's frame: where a trace lands that leaves
            // the range by an exception or a `longjmp` while code runs at full speed.
            let escape = stacks.lock().ok().and_then(|s| {
                s.get(&(w.session, site.stack))
                    .and_then(|frames| frames.get(site.range_depth as usize + 1).copied())
            });
            match trace_one(w, site, escape, config, &done) {
                Ok(d) => {
                    let _ = done.send(TraceMsg::Done(d));
                }
                Err(e) => {
                    let _ = done.send(TraceMsg::Failed {
                        session: w.session,
                        stack: site.stack,
                    });
                    fail(format!("process {}: {e}", w.pid));
                }
            }
            slot.state.store(TRACE_IDLE, Ordering::Release);
        }
        if busy {
            continue;
        }
        if doorbell {
            match wait_for_request(&watched, kick, kicked) {
                Ok(()) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => doorbell = false,
                Err(_) => {}
            }
        }
        std::thread::sleep(POLL);
    }
}

/// Sleeps until an agent of a traced session asks for a trace (it wakes its slot's state
/// after writing the request), the sink kicks (`kick` no longer holds `kicked`), or
/// [`IDLE_WAIT`] passes. Returns at once if a traced session's request came after the
/// tracer looked.
///
/// # Errors
///
/// More traced sessions than one wait takes, or a kernel without `futex_waitv`
/// (`Unsupported`): the caller polls instead.
fn wait_for_request(watched: &[Watched], kick: &AtomicU32, kicked: u32) -> std::io::Result<()> {
    use tansa_proc::os::{FutexWait, futex_wait_any};
    let mut words = vec![FutexWait {
        word: kick,
        expected: kicked,
        shared: false,
    }];
    for w in watched {
        let h = w.header.get();
        if h.tracing.load(Ordering::Acquire) == 0 {
            continue;
        }
        let state = h.trace.state.load(Ordering::Acquire);
        if state == TRACE_REQUESTED {
            return Ok(());
        }
        words.push(FutexWait {
            word: &h.trace.state,
            expected: state,
            shared: true,
        });
    }
    futex_wait_any(&words, IDLE_WAIT).map(|_| ())
}

/// The site a taken request (state ATTACHING) is to be followed for: its allocation stack
/// and range depth, or `None` if its `trace_sites` entry no longer holds the stack the
/// request was made for (the collector stopped tracing that site, and may have given the
/// entry to another: the request would then be followed as the other site's).
fn requested_site(h: &tansa_wire::layout::SegmentHeader) -> Option<RequestedSite> {
    let requested = h.trace_stack.load(Ordering::Acquire);
    let index = h.trace.site.load(Ordering::Acquire) as usize;
    let entry = h.trace_sites.get(index)?;
    // The collector clears an entry's stack before it gives the entry to another site, and
    // then writes the range depth and the stack's other ids (Release) before the stack: a
    // range depth read between two reads that both find the site's stack is that stack's.
    // The request may be made under another id of the stack (see `trace_aliases`); the
    // site is the entry's.
    let stack = entry.stack.load(Ordering::Acquire);
    let holds = h.trace_site_holds(index, requested);
    let range_depth = entry.range_depth.load(Ordering::Acquire);
    let after = entry.stack.load(Ordering::Acquire);
    (stack != 0 && holds && after == stack).then_some(RequestedSite { stack, range_depth })
}

/// What [`requested_site`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RequestedSite {
    stack: u32,
    range_depth: u32,
}

/// Follows the thread of the request in `w`'s trace slot (state ATTACHING), made at `site`.
fn trace_one(
    w: &mut Watched,
    site: RequestedSite,
    escape: Option<u64>,
    config: LeakCauseConfig,
    tell: &Sender<TraceMsg>,
) -> Result<TraceDone, String> {
    let h = w.header.get();
    let slot = &h.trace;
    let tid = slot.tid.load(Ordering::Acquire) as i32;
    let ptr = slot.ptr.load(Ordering::Acquire);
    let resume_at = slot.resume_at.load(Ordering::Acquire);
    let resume_sp = slot.resume_sp.load(Ordering::Acquire);
    let RequestedSite { stack, range_depth } = site;
    if w.code.is_none() {
        w.code = ProcessCode::new(w.pid as i32, Box::new(|p| !is_runtime_library(p))).ok();
    }
    let code = w
        .code
        .as_mut()
        .ok_or("cannot read the process's mappings")?;
    code.refresh();
    let started = Instant::now();
    // Said before the attach time is read (see `TraceMsg`).
    let _ = tell.send(TraceMsg::Started {
        session: w.session,
        stack,
        ptr,
    });
    let attached_ticks =
        tansa_collect::clock_now(h.clock == tansa_wire::layout::ClockKind::Tsc as u32);
    let _ = tell.send(TraceMsg::Attached {
        session: w.session,
        ptr,
        ticks: attached_ticks,
    });
    let mut t = AttachedThread::attach(w.pid as i32, tid).map_err(|e| e.to_string())?;
    slot.state.store(TRACE_FOLLOWING, Ordering::Release);
    let mut events = Vec::new();
    let result = (|| {
        if !t.run_to(resume_at, Some(resume_sp))? {
            return Ok(FollowEnd::ThreadExited);
        }
        t.set_escape(escape);
        t.follow(
            code,
            range_depth,
            FollowLimits {
                max_steps: config.max_steps,
            },
            &mut || slot.freed.load(Ordering::Acquire) != 0,
            &mut |e| events.push(e),
        )
    })();
    let mut text = Vec::new();
    let mut seen = BTreeSet::new();
    for e in &events {
        if let PathEvent::Branch { at, .. } = *e
            && seen.insert(at)
            && let Some(s) = t.disassemble(at)
        {
            text.push((at, s));
        }
    }
    let _ = t.detach();
    let end = result.map_err(|e| e.to_string())?;
    if let FollowEnd::Abandoned(why) = &end {
        return Err(why.clone());
    }
    let (free_stack, freed_elsewhere) = match end {
        FollowEnd::Stopped => {
            let freed = slot.freed.load(Ordering::Acquire);
            (trace_free_stack(freed), trace_freed_elsewhere(freed))
        }
        _ => (0, false),
    };
    Ok(TraceDone {
        session: w.session,
        stack,
        ptr,
        events,
        end,
        ns: started.elapsed().as_nanos() as u64,
        attached_ticks,
        code: text,
        free_stack,
        freed_elsewhere,
        range_depth,
    })
}

/// The name a cause function is shown with: its symbol's, demangled (`funcB(char*)`, not
/// `_Z5funcBPc`), else the name the module's line tables give (`sym`), else its address
/// (`fn@0x1098eb`).
fn function_display_name(symbol: String, sym: String) -> String {
    let no_symbol = symbol.is_empty() || tansa_format::symtab::is_unnamed_function(&symbol);
    if no_symbol && !sym.is_empty() {
        return sym;
    }
    tansa_symbols::resolve::demangle(&symbol).unwrap_or(symbol)
}

#[cfg(test)]
mod tests {
    /// Failures are kept once per kind with their count; kinds past the 16 kept are
    /// counted, not dropped.
    #[test]
    fn failures_are_kept_once_per_kind_and_counted() {
        let mut f = super::Failures::default();
        for _ in 0..3 {
            f.add("process 1: more than 1000 instructions".into());
        }
        f.add("process 1: gone".into());
        for i in 0..super::MAX_FAILURES + 2 {
            f.add(format!("process 2: kind {i}"));
        }
        let m = f.messages();
        assert_eq!(m[0], "process 1: more than 1000 instructions (3 traces)");
        assert_eq!(m[1], "process 1: gone");
        assert_eq!(m.len(), super::MAX_FAILURES + 1);
        assert_eq!(
            m.last().unwrap(),
            "4 more trace(s) failed for other reasons, not kept"
        );
    }

    #[test]
    fn cause_functions_are_named_demangled_or_from_line_tables() {
        let name = |symbol: &str, sym: &str| {
            super::function_display_name(symbol.to_string(), sym.to_string())
        };
        assert_eq!(name("_Z5funcBPc", "funcB"), "funcB(char*)");
        assert_eq!(name("funcB", ""), "funcB");
        assert_eq!(name("fn@0x1098eb", "clone3"), "clone3");
        assert_eq!(name("fn@0x1098eb", ""), "fn@0x1098eb");
        assert_eq!(name("memcpy@plt", ""), "memcpy@plt");
        assert_eq!(name("", "work"), "work");
    }

    use super::*;

    /// The worked example's paths at -O2: the leak, the free through `sub1`, and the
    /// direct free.
    fn leak() -> Vec<Step> {
        vec![
            Step::Enter(0x10),
            Step::Branch(0x20, false),
            Step::Branch(0x30, true),
        ]
    }
    fn sub1() -> Vec<Step> {
        vec![
            Step::Enter(0x10),
            Step::Branch(0x20, true),
            Step::Enter(0x40),
        ]
    }
    fn direct() -> Vec<Step> {
        vec![
            Step::Enter(0x10),
            Step::Branch(0x20, false),
            Step::Branch(0x30, false),
        ]
    }

    /// A site traced as the worked example at -O2: one free stack (3) for both freeing
    /// paths, a leaking path and the freeing path through `sub1` seen.
    fn site_with_one_free_stack() -> Site {
        let mut site = Site {
            free_stacks: [3].into(),
            reached: [3].into(),
            ..Site::default()
        };
        site.add_trace(leak(), false);
        site.add_trace(sub1(), true);
        assert_eq!((site.traces, site.not_freed), (2, 1));
        site
    }

    #[test]
    fn tracing_goes_on_until_the_paths_stop_changing() {
        let mut site = site_with_one_free_stack();
        // Every free site reached and a leaking path seen: not enough while paths are new.
        assert_eq!(site.tracing_done(64), None);
        for _ in 0..SATURATION - 1 {
            site.add_trace(sub1(), true);
            assert_eq!(site.tracing_done(64), None);
        }
        // The other freeing path, at last: the count starts again.
        site.add_trace(direct(), true);
        assert_eq!(site.unchanged, 0);
        assert_eq!(site.tracing_done(64), None);
        for k in 1..=SATURATION {
            site.add_trace(if k % 2 == 0 { sub1() } else { direct() }, true);
            let expected = (k == SATURATION).then_some("covered");
            assert_eq!(site.tracing_done(64), expected, "after {k} repeated paths");
        }
        assert_eq!(site.paths.len(), 3);
        assert_eq!(site.traces, 2 + SATURATION + SATURATION);
    }

    /// A site listed for tracing that got no trace says why: nothing allocated there after
    /// it was listed, only busy moments, or allocations that never reached the hand-over
    /// (as every `realloc` did before the agent handed reallocations over).
    #[test]
    fn an_untraced_site_says_whether_a_longer_run_helps() {
        assert_eq!(untraced_status(0, 0, 0), "ended");
        assert_eq!(untraced_status(5, 5, 0), "busy");
        assert_eq!(untraced_status(5, 3, 2), "busy");
        // A count of the entry's previous site may be left in `passed`.
        assert_eq!(untraced_status(5, 6, 0), "busy");
        assert_eq!(untraced_status(5, 4, 0), "not-handed-over");
        assert_eq!(untraced_status(1500, 0, 0), "not-handed-over");
    }

    #[test]
    fn tracing_stops_at_the_limit_or_without_a_leaking_path_never_covers() {
        let mut site = site_with_one_free_stack();
        site.traces = 5;
        assert_eq!(site.tracing_done(5), Some("limit"));
        // No leaking path yet: repeats alone do not cover.
        site.not_freed = 0;
        site.unchanged = SATURATION;
        assert_eq!(site.tracing_done(64), None);
        // A free site not reached yet: neither.
        site.not_freed = 1;
        site.free_stacks.insert(9);
        assert_eq!(site.tracing_done(64), None);
        site.reached.insert(9);
        assert_eq!(site.tracing_done(64), Some("covered"));
    }

    /// Stacks defined again (two threads met them at the same moment) are their first
    /// definitions' stacks: what was counted under the second id goes to the first, free
    /// stacks included, unless that site is traced already.
    #[test]
    fn a_stack_defined_again_is_its_first_ids() {
        let mut s = Session::default();
        for (module, bias) in [(1, 0x1000), (3, 0x9000)] {
            s.modules.insert(module, (bias, "liba.so".into()));
            // The same file: the library loaded again under a new module id.
            s.module_files.insert(module, 0);
        }
        s.define_stack(1, &[(1, 0x10), (1, 0x20)]);
        s.define_stack(5, &[(1, 0x30)]);
        assert_eq!(s.stacks[&5], [0x1030]);
        // Events under ids 2 and 6 came before their definitions.
        s.sites.insert(
            1,
            Site {
                allocations: 4,
                outstanding: 4,
                ..Site::default()
            },
        );
        s.sites.insert(
            2,
            Site {
                allocations: 3,
                outstanding: 2,
                frees: 1,
                free_stacks: [6].into(),
                ..Site::default()
            },
        );
        s.sites.insert(
            9,
            Site {
                free_stacks: [6].into(),
                reached: [6].into(),
                ..Site::default()
            },
        );
        s.define_stack(6, &[(3, 0x30)]);
        s.define_stack(2, &[(1, 0x10), (1, 0x20)]);
        assert_eq!((s.canonical(2), s.canonical(6), s.canonical(5)), (1, 5, 5));
        assert!(!s.sites.contains_key(&2));
        let first = &s.sites[&1];
        assert_eq!(
            (first.allocations, first.outstanding, first.frees),
            (7, 6, 1)
        );
        assert_eq!(first.free_stacks, [5].into());
        assert_eq!(
            (&s.sites[&9].free_stacks, &s.sites[&9].reached),
            (&[5].into(), &[5].into())
        );
        assert_eq!(s.aliases_of(1), [2, 0, 0]);
        // A site traced under its own id before its definition came stays apart.
        s.sites.insert(
            12,
            Site {
                slot: Some(3),
                allocations: 1,
                ..Site::default()
            },
        );
        s.define_stack(12, &[(1, 0x10), (1, 0x20)]);
        assert_eq!(s.sites[&12].allocations, 1);
        assert_eq!(s.sites[&1].allocations, 7);
        let mut aliases = s.aliases_of(1);
        aliases.sort_unstable();
        assert_eq!(aliases, [0, 2, 12]);
        // Other frames, or the same offsets in another file, are another stack.
        s.module_files.insert(4, 1);
        s.define_stack(13, &[(4, 0x10), (4, 0x20)]);
        s.define_stack(14, &[(1, 0x10)]);
        assert_eq!((s.canonical(13), s.canonical(14)), (13, 14));
    }

    /// A session with the site 7 being traced (allocation stack of 3 functions, range at
    /// the allocating function).
    fn traced_session() -> Session {
        let mut s = Session::default();
        s.sites.insert(
            7,
            Site {
                slot: Some(0),
                alloc_functions: vec![1, 2, 3],
                ..Site::default()
            },
        );
        s
    }
    /// A finished trace of the site 7's block at 0x100, the follower attached at 20.
    fn done(end: FollowEnd, free_stack: u32) -> TraceDone {
        TraceDone {
            session: 1,
            stack: 7,
            ptr: 0x100,
            events: Vec::new(),
            end,
            ns: 0,
            attached_ticks: 20,
            code: Vec::new(),
            free_stack,
            freed_elsewhere: false,
            range_depth: 0,
        }
    }

    /// A traced block released by another thread than the followed one: the trace counts,
    /// its free stack was reached, but its path is no freeing path and is not kept.
    #[test]
    fn a_block_another_thread_released_gives_no_freeing_path() {
        let mut s = traced_session();
        start(&mut s);
        s.settle(&TraceDone {
            freed_elsewhere: true,
            ..done(FollowEnd::Stopped, 3)
        });
        let site = &s.sites[&7];
        assert_eq!((site.traces, site.freed_elsewhere), (1, 1));
        assert!(site.paths.is_empty());
        assert!(site.reached.contains(&3));
    }
    /// The release of a block at 0x100 of the site 7, allocated at `allocated`, released
    /// at `ts` by the free stack 3.
    fn release(allocated: u64, ts: u64) -> Release {
        Release {
            ptr: 0x100,
            stack: 7,
            allocated,
            free_stack: 3,
            ts,
        }
    }

    /// The tracer's first two messages for the trace `done` builds.
    fn start(s: &mut Session) {
        s.trace_started(7, 0x100);
        s.trace_attached(0x100, 20);
    }

    #[test]
    fn a_freeing_trace_reaches_its_free_stack_whichever_comes_first() {
        // The release event before the trace's result (a loaded collector), the free stack
        // told by the agent, by the release event, or both.
        for agent_says in [3, 0] {
            let mut s = traced_session();
            start(&mut s);
            s.release(release(10, 30));
            s.settle(&done(FollowEnd::Stopped, agent_says));
            let site = &s.sites[&7];
            assert_eq!(
                site.reached,
                [3].into(),
                "release first, agent said {agent_says}"
            );
            assert_eq!((site.frees, site.traces), (1, 1));
            assert!(s.traced.is_empty() && s.in_flight.is_empty());
        }
        // The trace's result first.
        for agent_says in [3, 0] {
            let mut s = traced_session();
            start(&mut s);
            s.settle(&done(FollowEnd::Stopped, agent_says));
            assert_eq!(s.sites[&7].reached.len(), usize::from(agent_says != 0));
            s.release(release(10, 30));
            assert_eq!(
                s.sites[&7].reached,
                [3].into(),
                "result first, agent said {agent_says}"
            );
            assert_eq!(s.sites[&7].free_stacks, [3].into());
        }
    }

    #[test]
    fn a_block_released_after_its_trace_ended_moves_the_range_whichever_comes_first() {
        // The release read: before the attach time was told, after it, after the result.
        for order in 0..3 {
            let mut s = traced_session();
            s.trace_started(7, 0x100);
            if order == 0 {
                s.release(release(10, 30));
            }
            s.trace_attached(0x100, 20);
            if order == 1 {
                s.release(release(10, 30));
            }
            s.settle(&done(FollowEnd::RangeEnd, 0));
            if order == 2 {
                s.release(release(10, 30));
            }
            let site = &s.sites[&7];
            assert_eq!(
                (site.range_moves, site.range_depth, site.paths.len()),
                (1, 1, 0),
                "order {order}"
            );
            assert!(s.traced.is_empty() && s.in_flight.is_empty());
        }
    }

    /// An allocation wrapper (`make`) whose blocks its caller frees after it returned:
    /// every trace to `make`'s return ends E, and each block is then freed. Several such
    /// traces are in flight or awaiting their release when the first release moves the
    /// range up; the others' releases must not move it again, nor their paths count for
    /// the new range. Before, each moved it once more (to `main`, which no trace could
    /// follow to its return).
    #[test]
    fn traces_of_a_range_the_site_left_neither_move_it_again_nor_add_paths() {
        let mut s = traced_session();
        let at = |ptr: u64| Release {
            ptr,
            ..release(10, 30)
        };
        let trace = |ptr: u64, end: FollowEnd, range_depth: u32| TraceDone {
            ptr,
            range_depth,
            ..done(end, 0)
        };
        // Three traces to depth 0: one released before its result, two after.
        for ptr in [0x100, 0x200, 0x300] {
            s.trace_started(7, ptr);
            s.trace_attached(ptr, 20);
        }
        s.release(at(0x100));
        for ptr in [0x100, 0x200, 0x300] {
            s.settle(&trace(ptr, FollowEnd::RangeEnd, 0));
        }
        let site = &s.sites[&7];
        assert_eq!((site.range_moves, site.range_depth), (1, 1));
        s.release(at(0x200));
        s.release(at(0x300));
        let site = &s.sites[&7];
        assert_eq!((site.range_moves, site.range_depth), (1, 1), "moved once");
        assert!(s.traced.is_empty());
        // A trace requested before the move, settled after it: not a path of the new range.
        s.trace_started(7, 0x400);
        s.trace_attached(0x400, 20);
        s.settle(&trace(0x400, FollowEnd::Stopped, 0));
        // (The first trace counts: it was of the range then.)
        assert_eq!((s.sites[&7].traces, s.sites[&7].paths.len()), (1, 0));
        // One of the new range counts.
        s.trace_started(7, 0x500);
        s.trace_attached(0x500, 20);
        s.settle(&trace(0x500, FollowEnd::Stopped, 1));
        assert_eq!((s.sites[&7].traces, s.sites[&7].paths.len()), (2, 1));
    }

    #[test]
    fn other_blocks_at_a_traced_address_are_not_the_traced_one() {
        // An earlier block at the traced address, released before the follower attached,
        // its event read late (before or after the attach time was told): not the traced
        // block, whose release is then awaited.
        for told in [false, true] {
            let mut s = traced_session();
            s.trace_started(7, 0x100);
            if told {
                s.trace_attached(0x100, 20);
            }
            s.release(release(1, 5));
            if !told {
                s.trace_attached(0x100, 20);
            }
            s.settle(&done(FollowEnd::RangeEnd, 0));
            assert_eq!(s.sites[&7].range_moves, 0, "told: {told}");
            assert_eq!(s.traced.len(), 1, "the traced block's release is awaited");
            // A later block at that address, allocated after the follower attached, is not
            // the traced one either.
            s.release(release(35, 40));
            assert_eq!(s.sites[&7].range_moves, 0);
            assert_eq!(s.traced.len(), 1);
            s.release(release(10, 45));
            assert_eq!(s.sites[&7].range_moves, 1, "the traced block's release");
        }
        // Releases at other addresses, or of other sites, are not kept for the trace.
        let mut s = traced_session();
        s.sites.insert(
            8,
            Site {
                slot: Some(1),
                ..Site::default()
            },
        );
        start(&mut s);
        s.release(Release {
            ptr: 0x200,
            ..release(10, 30)
        });
        s.release(Release {
            stack: 8,
            ..release(10, 30)
        });
        assert!(s.in_flight[0].release.is_none());
    }

    #[test]
    fn a_trace_that_failed_leaves_nothing_behind() {
        // A trace started and never finished (its follower could not attach): the next
        // trace that settles takes it out with its own.
        let mut s = traced_session();
        s.trace_started(7, 0x900);
        start(&mut s);
        s.release(release(10, 30));
        assert_eq!(s.in_flight.len(), 2);
        s.settle(&done(FollowEnd::Stopped, 0));
        assert!(s.in_flight.is_empty());
        assert_eq!(s.sites[&7].reached, [3].into());
    }

    #[test]
    fn traces_of_the_same_address_keep_their_own_releases() {
        // A trace of the block at 0x100 failed (attached at 5); the next one there attached
        // at 20 and its result came after a third had started at that address: each
        // release goes to its own trace.
        let mut s = traced_session();
        s.trace_started(7, 0x100);
        s.trace_attached(0x100, 5);
        s.release(release(1, 8));
        start(&mut s);
        s.release(release(10, 30));
        s.trace_started(7, 0x100);
        s.trace_attached(0x100, 50);
        s.settle(&done(FollowEnd::RangeEnd, 0));
        assert_eq!(
            s.sites[&7].range_moves, 1,
            "the release at 30 was the trace's"
        );
        assert_eq!(
            s.in_flight.len(),
            1,
            "the failed trace's entry went with it"
        );
        assert_eq!(s.in_flight[0].attached, Some(50));
        s.release(release(40, 60));
        assert_eq!(
            s.in_flight[0].release.map(|r| r.ts),
            Some(60),
            "the third trace's"
        );
    }

    #[test]
    fn releases_beyond_the_candidates_kept_are_counted() {
        let mut s = traced_session();
        s.trace_started(7, 0x100);
        for i in 0..MAX_CANDIDATES as u64 + 5 {
            s.release(release(i, i + 1));
        }
        assert_eq!(s.candidates_dropped, 5);
        let note = s.dropped_note().expect("the loss is told");
        assert!(note.starts_with("a process: 5 release(s)"), "{note}");
        assert_eq!(traced_session().dropped_note(), None);
    }

    /// A session header as the agent maps it: all zero.
    fn zeroed_header() -> Box<tansa_wire::layout::SegmentHeader> {
        let layout = std::alloc::Layout::new::<tansa_wire::layout::SegmentHeader>();
        // SAFETY: the layout is not zero-sized; every field of the header (integers, atomics
        // and byte arrays) is valid when all zero; the box owns the allocation, made with
        // the layout of its type.
        unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<tansa_wire::layout::SegmentHeader>();
            assert!(!p.is_null());
            Box::from_raw(p)
        }
    }

    #[test]
    fn a_request_is_followed_only_for_the_site_it_was_made_for() {
        let h = zeroed_header();
        let (site, stack, depth) = (3, 0x51, 2);
        let entry = &h.trace_sites[site];
        entry.range_depth.store(depth, Ordering::Release);
        entry.stack.store(stack, Ordering::Release);
        h.trace.site.store(site as u32, Ordering::Release);
        h.trace_stack.store(stack, Ordering::Release);
        let wanted = Some(RequestedSite {
            stack,
            range_depth: depth,
        });
        assert_eq!(requested_site(&h), wanted);
        // The collector stopped tracing the site while the request waited.
        entry.stack.store(0, Ordering::Release);
        assert_eq!(requested_site(&h), None);
        // ... and gave its entry to another site, with a range of its own.
        entry.range_depth.store(0, Ordering::Release);
        entry.stack.store(0x52, Ordering::Release);
        assert_eq!(requested_site(&h), None);
        // The same site traced again in that entry: its requests are followed again.
        entry.range_depth.store(depth, Ordering::Release);
        entry.stack.store(stack, Ordering::Release);
        assert_eq!(requested_site(&h), wanted);
        // A request that names no stack, or no entry, is not followed.
        h.trace_stack.store(0, Ordering::Release);
        entry.stack.store(0, Ordering::Release);
        assert_eq!(requested_site(&h), None);
        h.trace_stack.store(stack, Ordering::Release);
        h.trace
            .site
            .store(tansa_wire::layout::TRACE_SITES as u32, Ordering::Release);
        assert_eq!(requested_site(&h), None);
    }
}
