//! The leak report of a heap recording (`tansa leaks`, schema `tansa.leaks.v1`).
//!
//! Every recording: per allocation site (one allocation stack of one process image), its
//! allocations, frees, the blocks and bytes still allocated at the end, and its judgement
//! ([`tansa_leakcause::judge`]) from the outstanding blocks at [`CHECKPOINTS`] moments evenly
//! spread over its process's allocations and releases. A `--leak-cause` recording adds, for
//! the sites it traced, the range end, the distinct freed (F) and not-freed (E) paths and
//! their grammar, and the cause functions and branches ([`tansa_leakcause::identify`]). Several recordings of a job
//! read as one keep their processes apart, and each recording's leak-cause tracing.

use std::collections::BTreeMap;
use std::io::{Read, Seek};

use rustc_hash::FxHashMap;
use serde::Serialize;
use tansa_format::memory::{LeakCause, PathStep, TracedSite};
use tansa_leakcause::identify::{self, Event, Step};

/// Scans in a row at which a site's outstanding blocks must grow for it to be leaking.
pub use tansa_leakcause::judge::GROWING_SCANS;
use tansa_leakcause::judge::{Judgement, judge};
use tansa_leakcause::sequitur::{End, PathSet};

pub use super::atexit::{AtExit, LeakCheckSummary};
use super::atexit::{Findings, holder};
use super::classify;
use super::ids::{SessionId, StackId};
use super::lineage::Lineage;
use super::merge::EventKind;
use super::model::Registry;
use super::recording::MemoryRecording;

/// Moments of the process's work at which each site's outstanding blocks are counted for the
/// judgement.
pub const CHECKPOINTS: usize = 8;
/// Moments at which outstanding blocks are counted while reading (the checkpoints are
/// chosen among them).
const SLOTS: usize = 64;
/// Largest total length of a site's paths for which the grammar is shown.
const MAX_GRAMMAR_SYMBOLS: usize = 4096;

/// The leak report.
#[derive(Debug, Clone, Serialize)]
pub struct LeaksReport {
    /// `tansa.leaks.v1`.
    pub schema: &'static str,
    /// Whether the recording was made with `--leak-cause`.
    pub leak_cause: bool,
    /// How often the recorder judged the sites while the program ran, in milliseconds
    /// (`--scan-interval`; leak-cause recordings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scan_interval_ms: Option<u32>,
    /// What the leak check at exit found (`tansa record --leak-check`), in every process
    /// image it checked; absent for recordings made without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_check: Option<LeakCheckSummary>,
    /// Sites, leaking first, then by bytes lost at exit, then by bytes still allocated.
    pub sites: Vec<SiteReport>,
    /// Trace requests that could not be followed (first few).
    pub trace_failures: Vec<String>,
    /// Problems with the recording.
    pub warnings: Vec<String>,
}

/// A place in the code.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq, Hash)]
pub struct CodePlace {
    /// `module!function`.
    pub function: String,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
}

/// Traces taken at a site, by how they ended.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceCounts {
    /// Ended with the block freed (F).
    pub freed: u32,
    /// Ended at the range end with the block still allocated (E).
    pub not_freed: u32,
    /// Ended with the block freed by another thread than the one followed (a later
    /// addition): no freeing path of the followed thread, and not in `paths`.
    pub freed_elsewhere: u32,
}

/// [`SiteReport::cause_not_found`] when the blocks of a site's traces that were freed were
/// all freed by other threads than the ones followed.
pub const FREED_BY_ANOTHER_THREAD: &str = "freed-by-another-thread";

/// A distinct traced path.
#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    /// `F` or `E`.
    pub end: &'static str,
    /// Traces that followed it.
    pub count: u32,
    /// Its function entries and exits (`module!function-S`, `-E`) and branches
    /// (`@function+0xOFF taken|not-taken`).
    pub steps: Vec<String>,
}

/// A cause branch.
#[derive(Debug, Clone, Serialize)]
pub struct BranchReport {
    /// The function holding it (`module!function`).
    pub function: String,
    /// Its offset from the function's entry.
    pub offset: u64,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// The instruction.
    pub instruction: String,
    /// Whether it jumped on the leaking path.
    pub taken_on_leak: bool,
}

/// One allocation site.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SiteReport {
    /// Its number in this report (1 first), for `--site`.
    pub index: usize,
    /// Process id of its process image.
    pub pid: u32,
    /// The executable of that image (a process that runs `exec` has one image per
    /// program; empty when unknown).
    pub exe: String,
    /// The MPI rank of that process, if it had one.
    pub rank: Option<u32>,
    /// Session (process image) number in the recording (in a job of several recordings,
    /// numbered across them).
    pub session: u32,
    /// The allocation stack's id in that session (in `inherited_from`'s, when set).
    pub stack_id: u32,
    /// For the blocks a forked child inherited from an ancestor and lost (the leak check
    /// at exit): the session of the ancestor image that allocated them, whose site this
    /// is. The child never allocated there: `allocations` and `frees` are 0, and the
    /// blocks are those the child lost. Absent for an image's own sites.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherited_from: Option<InheritedFrom>,
    /// Where the allocation is made (the allocator's caller).
    pub site: CodePlace,
    /// The allocation stack, innermost first.
    pub stack: Vec<CodePlace>,
    /// The index of `site` in `stack`: the frames before it are the allocator's (C++
    /// `operator new` and `std::allocator`, Rust's allocation shims), 0 for a direct call
    /// of `malloc`.
    pub site_frame: usize,
    /// `leaking`, `freed`, `no-free-site` or `not-growing`.
    pub judgement: &'static str,
    /// Allocations made at the site.
    pub allocations: u64,
    /// Frees of its blocks.
    pub frees: u64,
    /// Blocks still allocated at the end.
    pub leaked_blocks: u64,
    /// Bytes still allocated at the end.
    pub leaked_bytes: u64,
    /// Those blocks as the leak check at exit found them (absent when its process image
    /// was not checked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_exit: Option<AtExit>,
    /// Blocks allocated at the checkpoints of the judgement (evenly spread over the
    /// process's allocations and releases; the last is its end).
    pub outstanding: Vec<u64>,
    /// The function whose exit ends each trace (leak-cause recordings).
    pub range_end: Option<String>,
    /// Times the range end moved one caller up (a block outlived it).
    pub range_moves: u32,
    /// Traces by end.
    pub traces: TraceCounts,
    /// Why tracing stopped: `covered`, `limit`, `ended`, or why it could not start.
    pub tracing: Option<String>,
    /// Milliseconds the traced threads spent being followed.
    pub tracing_ms: f64,
    /// The distinct paths.
    pub paths: Vec<PathReport>,
    /// Their Sequitur grammar (spec §12.5), one rule per line.
    pub grammar: Option<String>,
    /// Where the leaking paths leave the freeing ones: functions.
    pub cause_functions: Vec<CodePlace>,
    /// ... and branches.
    pub cause_branches: Vec<BranchReport>,
    /// Why a traced site with leaking paths has no cause (a later addition):
    /// [`FREED_BY_ANOTHER_THREAD`], or `None`.
    pub cause_not_found: Option<&'static str>,
}

/// The ancestor image whose site a forked child's lost inherited blocks are charged to
/// ([`SiteReport::inherited_from`]).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct InheritedFrom {
    /// Its session number.
    pub session: u32,
    /// Its process id.
    pub pid: u32,
}

impl SiteReport {
    /// Whether the leak check at exit found blocks of it lost.
    pub fn lost_at_exit(&self) -> bool {
        self.at_exit.is_some_and(|x| x.lost_blocks() > 0)
    }

    /// Whether `tansa leaks` shows it without `--all`: it is leaking, or it lost blocks.
    pub fn worth_showing(&self) -> bool {
        self.judgement == Judgement::Leaking.name() || self.lost_at_exit()
    }
}

/// The moments at which one process image's sites are counted: after every `stride` of its
/// allocations and releases. When [`SLOTS`] moments are taken, every other one is dropped
/// and the stride doubles, so that the moments stay evenly spread over its work, however
/// much of it there is.
#[derive(Debug)]
struct Grid {
    /// Allocations and releases of the image so far.
    events: u64,
    stride: u64,
    /// Moments counted so far (fewer than SLOTS).
    taken: usize,
}

impl Default for Grid {
    fn default() -> Self {
        Grid {
            events: 0,
            stride: 1,
            taken: 0,
        }
    }
}

#[derive(Debug, Default, Clone)]
struct SiteStats {
    allocations: u64,
    frees: u64,
    live_blocks: u64,
    live_bytes: u64,
    history: Vec<u64>,
    at_exit: AtExit,
}

/// Builds the leak report of `rec` (pass two: reads every event), every site with its stack.
pub fn report<R: Read + Seek>(rec: &MemoryRecording<R>) -> LeaksReport {
    let mut report = report_without_stacks(rec);
    fill_stacks(&mut report, rec, |_| true);
    report
}

/// [`report`] with every site judged, ranked and numbered, but without its place and stack
/// (`site` and `stack` are empty): [`fill_stacks`] adds them to the sites to be shown. A
/// build's compilers make hundreds of thousands of sites, each with a stack of some twenty
/// frames, of which a view shows a few dozen: naming every frame of every site took a third
/// of the time of `tansa html`.
pub fn report_without_stacks<R: Read + Seek>(rec: &MemoryRecording<R>) -> LeaksReport {
    // Outstanding blocks per site at up to SLOTS moments of its own process image's work,
    // spread evenly over the image's allocations and releases, and at its end. Moments of
    // work rather than of time: a pause (the process descheduled on a busy machine, a
    // server idle after its load, a sleep before exit) does not look like growth that
    // stopped, and a process that ran for part of the recording (a child, or one recording
    // of a job read with others, made minutes apart) is judged over its own run. The
    // judgement then takes CHECKPOINTS of them, evenly spread.
    let mut grids: FxHashMap<SessionId, Grid> = FxHashMap::default();
    let mut sites: BTreeMap<(SessionId, StackId), SiteStats> = BTreeMap::new();
    // Each live block's stack, size and allocation timestamp.
    let mut live: FxHashMap<(SessionId, u64), (StackId, u64, u64)> = FxHashMap::default();
    // The leak check at exit: the blocks it found unreachable (while they stay live), and
    // each image's summary; an inherited block a child lost as its ancestor's site
    // (session and stack) and size.
    let mut findings: Findings<(SessionId, StackId, u64)> =
        Findings::new(Some(rec.leak_check_images()));
    let leak_check = rec.leak_check();
    let mut lineage = Lineage::default();
    for image in &rec.sessions {
        lineage.add(
            SessionId(image.session),
            image.pid,
            image.ppid,
            image.start_ticks,
        );
    }
    let session_sites = |session: SessionId| (session, StackId(0))..=(session, StackId(u32::MAX));
    let snapshot =
        |sites: &mut BTreeMap<(SessionId, StackId), SiteStats>, session: SessionId, k: usize| {
            for (_, s) in sites.range_mut(session_sites(session)) {
                s.history.resize(k, 0);
                s.history.push(s.live_blocks);
            }
        };
    rec.for_each_event(|e| {
        let found = match &e.kind {
            EventKind::Unreached { ptr, .. } => {
                holder(&lineage, &findings, e.session, *ptr, |image| {
                    live.get(&(image, *ptr))
                        .map(|&(stack, size, ts)| (ts, (image, stack, size)))
                })
            }
            _ => super::atexit::Holder::None,
        };
        if findings.take(e.session, &e.kind, |_| found) {
            return;
        }
        let mut alloc = |ptr: u64, size: u64, stack: StackId| {
            live.insert((e.session, ptr), (stack, size, e.ts));
            let s = sites.entry((e.session, stack)).or_default();
            s.allocations += 1;
            s.live_blocks += 1;
            s.live_bytes = s.live_bytes.saturating_add(size);
        };
        match &e.kind {
            EventKind::Alloc {
                ptr, size, stack, ..
            } => alloc(*ptr, *size, *stack),
            EventKind::ReallocAlloc { new, size, stack } => alloc(*new, *size, *stack),
            EventKind::Free { ptr, .. } | EventKind::ReallocRelease { old: ptr, .. } => {
                findings.released(e.session, *ptr);
                match live.remove(&(e.session, *ptr)) {
                    Some((stack, size, _)) => {
                        if let Some(s) = sites.get_mut(&(e.session, stack)) {
                            s.frees += 1;
                            s.live_blocks = s.live_blocks.saturating_sub(1);
                            s.live_bytes = s.live_bytes.saturating_sub(size);
                        }
                    }
                    // A forked child's release of a block it inherited: its copy only.
                    None if leak_check
                        && *ptr != 0
                        && lineage
                            .inherited(
                                e.session,
                                |image| live.get(&(image, *ptr)).map(|b| (b.2, ())),
                                |_| false,
                            )
                            .is_some() =>
                    {
                        findings.released_inherited(e.session, *ptr);
                    }
                    None => {}
                }
            }
            _ => return,
        }
        let g = grids.entry(e.session).or_default();
        g.events += 1;
        if g.events.is_multiple_of(g.stride) {
            snapshot(&mut sites, e.session, g.taken);
            g.taken += 1;
            if g.taken == SLOTS {
                // Keep the moments at even multiples of the stride (every site of the
                // image has all SLOTS of them: each moment counts every site).
                for (_, s) in sites.range_mut(session_sites(e.session)) {
                    s.history = s.history.iter().skip(1).step_by(2).copied().collect();
                }
                g.taken = SLOTS / 2;
                g.stride *= 2;
            }
        }
    });
    // The blocks still allocated at the end of each image the leak check classified.
    for (&(session, ptr), &(stack, size, _)) in &live {
        if findings.classified(session)
            && let Some(s) = sites.get_mut(&(session, stack))
        {
            s.at_exit.add(findings.class(session, ptr), size);
        }
    }
    // The inherited blocks each child lost, by child and ancestor's site.
    let mut inherited: BTreeMap<(SessionId, SessionId, StackId), AtExit> = BTreeMap::new();
    for (session, &(owner, stack, size), class) in findings.inherited_lost() {
        inherited
            .entry((session, owner, stack))
            .or_default()
            .add(Some(class), size);
    }
    // The last moment: each image's end.
    let mut moments: FxHashMap<SessionId, usize> = FxHashMap::default();
    for (&session, g) in &grids {
        snapshot(&mut sites, session, g.taken);
        moments.insert(session, g.taken + 1);
    }
    // The checkpoints of an image of `n` moments: CHECKPOINTS of them evenly spread, the
    // last its end.
    let checkpoints = |n: usize| -> Vec<usize> {
        (1..=CHECKPOINTS)
            .map(|k| (n * k / CHECKPOINTS).saturating_sub(1))
            .collect()
    };
    for (&(session, _), s) in sites.iter_mut() {
        let n = moments.get(&session).copied().unwrap_or(1);
        let h: Vec<u64> = checkpoints(n)
            .iter()
            .map(|&k| s.history.get(k).copied().unwrap_or(s.live_blocks))
            .collect();
        s.history = h;
    }
    // By the stack's first id, as the events have it: the agent traced the site under the
    // id its own table gave the stack, which can be another (see `StackAliases`). Of two
    // traced sites that are one, the one traced more.
    let mut traced: BTreeMap<(u32, u32), &TracedSite> = BTreeMap::new();
    for t in rec.leak_cause.iter().flat_map(|lc| lc.sites.iter()) {
        let first = rec
            .registry
            .canonical_stack(SessionId(t.session), StackId(t.stack));
        let slot = traced.entry((t.session, first.0)).or_insert(t);
        if (t.traces, t.paths.len()) > (slot.traces, slot.paths.len()) {
            *slot = t;
        }
    }
    let image_of = |session: u32| rec.sessions.iter().find(|s| s.session == session);
    let pid_of = |session: u32| image_of(session).map_or(0, |s| s.pid);
    let exe_of = |session: u32| image_of(session).map_or_else(String::new, |s| s.exe.clone());
    let rank_of = |session: u32| {
        rec.places
            .iter()
            .find(|p| p.session == session)
            .map(|p| p.rank)
    };
    let mut out: Vec<SiteReport> = sites
        .iter()
        .map(|(&(session, stack_id), s)| {
            let judgement = judge(&s.history, s.frees);
            let mut site = SiteReport {
                index: 0,
                pid: pid_of(session.0),
                exe: exe_of(session.0),
                rank: rank_of(session.0),
                session: session.0,
                stack_id: stack_id.0,
                judgement: judgement.name(),
                allocations: s.allocations,
                frees: s.frees,
                leaked_blocks: s.live_blocks,
                leaked_bytes: s.live_bytes,
                at_exit: findings.classified(session).then_some(s.at_exit),
                outstanding: s.history.clone(),
                ..SiteReport::default()
            };
            if let (Some(lc), Some(t)) = (&rec.leak_cause, traced.get(&(session.0, stack_id.0))) {
                add_causes(&mut site, lc, t);
            }
            site
        })
        .collect();
    out.extend(inherited.iter().map(|(&(session, owner, stack_id), x)| {
        let blocks = x.lost_blocks();
        SiteReport {
            index: 0,
            pid: pid_of(session.0),
            exe: exe_of(session.0),
            rank: rank_of(session.0),
            session: session.0,
            stack_id: stack_id.0,
            inherited_from: Some(InheritedFrom {
                session: owner.0,
                pid: pid_of(owner.0),
            }),
            judgement: judge(&[blocks], 0).name(),
            allocations: 0,
            frees: 0,
            leaked_blocks: blocks,
            leaked_bytes: x.lost_bytes(),
            at_exit: Some(*x),
            // Held from the child's start to its end.
            outstanding: vec![blocks; CHECKPOINTS],
            ..SiteReport::default()
        }
    }));
    out.sort_by(|a, b| {
        let leaking = |s: &SiteReport| s.judgement != Judgement::Leaking.name();
        let lost = |s: &SiteReport| std::cmp::Reverse(s.at_exit.map_or(0, |x| x.lost_bytes()));
        (
            leaking(a),
            lost(a),
            std::cmp::Reverse(a.leaked_bytes),
            a.session,
            a.inherited_from,
            a.stack_id,
        )
            .cmp(&(
                leaking(b),
                lost(b),
                std::cmp::Reverse(b.leaked_bytes),
                b.session,
                b.inherited_from,
                b.stack_id,
            ))
    });
    for (i, s) in out.iter_mut().enumerate() {
        s.index = i + 1;
    }
    let mut warnings = rec.warnings.clone();
    warnings.extend(rec.stream_warnings());
    let lost: u64 = rec
        .ends
        .iter()
        .fold(0u64, |sum, e| sum.saturating_add(e.lost_events));
    if lost > 0 {
        warnings.push(format!(
            "the agent could not record {lost} event(s): the counts are incomplete, and a \
             block whose release was lost looks held"
        ));
    }
    if let Some(rate) = rec.sample_rate() {
        warnings.push(format!(
            "the recording is sampled (an allocation every {rate} bytes on average): the \
             allocations, frees and blocks counted here are the sampled ones only (`tansa \
             report` estimates the totals), and a site with few sampled blocks may be judged \
             otherwise than it would be from every allocation"
        ));
    }
    let leak_check = rec.leak_check().then(|| {
        let mut at_exit = AtExit::default();
        for site in &out {
            if let Some(x) = &site.at_exit {
                at_exit.sum(x);
            }
        }
        let images = rec
            .sessions
            .iter()
            .map(|image| (SessionId(image.session), image.pid));
        findings.summary(images, at_exit, &mut warnings)
    });
    LeaksReport {
        schema: "tansa.leaks.v1",
        leak_check,
        leak_cause: rec.leak_cause.is_some(),
        scan_interval_ms: rec.leak_cause.as_ref().map(|l| l.scan_interval_ms),
        sites: out,
        trace_failures: rec
            .leak_cause
            .as_ref()
            .map(|l| l.failures.clone())
            .unwrap_or_default(),
        warnings,
    }
}

/// Adds its place and stack to each site of `report` (made by [`report_without_stacks`]
/// from `rec`) for which `want` holds.
pub fn fill_stacks<R: Read + Seek>(
    report: &mut LeaksReport,
    rec: &MemoryRecording<R>,
    want: impl Fn(&SiteReport) -> bool,
) {
    for site in report.sites.iter_mut().filter(|s| want(s)) {
        let (frames, site_frame) = stack_places(
            &rec.registry,
            SessionId(site.inherited_from.map_or(site.session, |i| i.session)),
            StackId(site.stack_id),
        );
        site.site = frames.get(site_frame).cloned().unwrap_or_default();
        site.stack = frames;
        site.site_frame = site_frame;
    }
}

/// The sites to show in full, each with the later sites that repeat it (by position in
/// `sites`, whose stacks [`fill_stacks`] named): the same program, judgement and named
/// allocation stack, in another image of the program (a script that runs it many times)
/// or in the same image (call paths that differ only where their names do not show it).
/// Sites with traces (leak-cause recordings) are never folded: each has its own
/// diagnosis; nor are the sites of MPI ranks, which a job's report keeps apart. The one
/// rule of `tansa leaks` and of the HTML page.
pub fn fold_repeats(sites: &[&SiteReport]) -> Vec<(usize, Vec<usize>)> {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    // Lost blocks at exit are the news of a site: one that lost some is not folded with one
    // that did not.
    let mut group_of: FxHashMap<(&str, &str, bool, &[CodePlace]), usize> = FxHashMap::default();
    for (i, s) in sites.iter().enumerate() {
        if s.tracing.is_some() || s.rank.is_some() || s.exe.is_empty() {
            groups.push((i, Vec::new()));
            continue;
        }
        let key = (
            s.exe.as_str(),
            s.judgement,
            s.lost_at_exit(),
            s.stack.as_slice(),
        );
        match group_of.entry(key) {
            std::collections::hash_map::Entry::Occupied(g) => groups[*g.get()].1.push(i),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(groups.len());
                groups.push((i, Vec::new()));
            }
        }
    }
    groups
}

/// The frames of a stack as places, innermost first, without the agent's own frames; and
/// the index of the allocation's site among them: the first frame that is not the
/// allocator's ([`classify::is_allocator_entry`]: a `new` in C++ is made where `operator
/// new` is called, not in it), or 0 if every frame is.
fn stack_places(registry: &Registry, session: SessionId, id: StackId) -> (Vec<CodePlace>, usize) {
    let Some(stack) = registry.stack(session, id) else {
        return (Vec::new(), 0);
    };
    let frames: Vec<_> = stack
        .frames()
        .filter(|f| f.module.is_none_or(|m| !registry.module(m).agent))
        .collect();
    let site = frames
        .iter()
        .position(|f| !classify::is_allocator_entry(f, registry))
        .unwrap_or(0);
    let places = frames
        .into_iter()
        .map(|f| {
            let module = f.module.map_or("?", |m| registry.module(m).name.as_str());
            CodePlace {
                function: format!("{module}!{}", f.function.as_deref().unwrap_or("??")),
                file: f.file.as_deref().unwrap_or("").to_string(),
                line: f.line,
            }
        })
        .collect();
    (places, site)
}

fn function_name(lc: &LeakCause, i: u32) -> String {
    lc.functions.get(i as usize).map_or_else(
        || "??".into(),
        |f| {
            let module = f.module.rsplit('/').next().unwrap_or(&f.module);
            let name = if f.name.is_empty() { "??" } else { &f.name };
            format!("{module}!{name}")
        },
    )
}

fn function_place(lc: &LeakCause, i: u32) -> CodePlace {
    let f = lc.functions.get(i as usize);
    CodePlace {
        function: function_name(lc, i),
        file: f.map_or(String::new(), |f| f.file.clone()),
        line: f.map_or(0, |f| f.line),
    }
}

fn step_text(lc: &LeakCause, s: &PathStep) -> String {
    match *s {
        PathStep::Enter(f) => format!("{}-S", function_name(lc, f)),
        PathStep::Exit(f) => format!("{}-E", function_name(lc, f)),
        PathStep::Branch { branch, taken } => {
            let b = lc.branches.get(branch as usize);
            format!(
                "@{}+{:#x} {}",
                b.map_or("??".into(), |b| function_name(lc, b.function)),
                b.map_or(0, |b| b.offset.saturating_sub(
                    lc.functions
                        .get(b.function as usize)
                        .map_or(0, |f| f.offset)
                )),
                if taken { "taken" } else { "not-taken" }
            )
        }
    }
}

/// Adds the traced paths and their causes to `site`.
fn add_causes(site: &mut SiteReport, lc: &LeakCause, t: &TracedSite) {
    site.range_end = t.range_end.map(|f| function_name(lc, f));
    site.range_moves = t.range_moves;
    site.tracing = Some(t.status.clone());
    site.tracing_ms = t.tracing_ns as f64 / 1e6;
    let end_of = |freed: bool| if freed { End::Freed } else { End::NotFreed };
    let mut grammar: PathSet<String> = PathSet::default();
    // The grammar is rebuilt by rescanning (quadratic): only for paths of readable size.
    let small = t.paths.iter().map(|p| p.steps.len()).sum::<usize>() <= MAX_GRAMMAR_SYMBOLS;
    for p in &t.paths {
        site.paths.push(PathReport {
            end: if p.freed { "F" } else { "E" },
            count: p.count,
            steps: p.steps.iter().map(|s| step_text(lc, s)).collect(),
        });
        if p.freed {
            site.traces.freed += p.count;
        } else {
            site.traces.not_freed += p.count;
        }
        let calls: Vec<String> = p
            .steps
            .iter()
            .filter(|s| !matches!(s, PathStep::Branch { .. }))
            .map(|s| step_text(lc, s))
            .collect();
        if small {
            for _ in 0..p.count {
                grammar.add(&calls, end_of(p.freed));
            }
        }
    }
    site.grammar = small.then(|| grammar.grammar());
    site.traces.freed_elsewhere = t.freed_elsewhere;
    if site.traces.not_freed > 0 && site.traces.freed == 0 && t.freed_elsewhere > 0 {
        // Every traced block that was freed was freed by another thread: the followed
        // thread's paths never free, so comparing them shows nothing of where freeing and
        // leaking part (that decision is on the other thread). Naming the function where
        // the followed thread's paths happened to differ would blame unrelated code.
        site.cause_not_found = Some(FREED_BY_ANOTHER_THREAD);
        return;
    }
    // Cause functions from the paths (spec §13): function events and branches, each in its
    // call context.
    let steps_of = |p: &tansa_format::memory::TracedPath| -> Vec<Step<u32, u32>> {
        p.steps
            .iter()
            .map(|s| match *s {
                PathStep::Enter(g) => Step::Call(Event::Enter(g)),
                PathStep::Exit(g) => Step::Call(Event::Exit(g)),
                PathStep::Branch { branch, taken } => Step::Branch(branch, taken),
            })
            .collect()
    };
    let full_paths: Vec<(Vec<Step<u32, u32>>, End)> = t
        .paths
        .iter()
        .map(|p| (steps_of(p), end_of(p.freed)))
        .collect();
    let causes = identify::cause_functions(&full_paths, &t.alloc_functions);
    // Cause branches (spec §16, §18) in each cause function, over single executions.
    for &f in &causes {
        // Where the trace starts relative to `f`'s activation: the trace starts in the
        // allocating function (the last of `alloc_functions`), and a cause function among
        // its callers is as many calls above it (the innermost activation, if recursive).
        let start_depth = t
            .alloc_functions
            .iter()
            .rposition(|&g| g == f)
            .map(|k| t.alloc_functions.len() - 1 - k);
        let mut branch_paths: Vec<(Vec<(u32, bool)>, End)> = Vec::new();
        for (steps, end) in &full_paths {
            for execution in identify::branch_paths_of(steps, &f, start_depth) {
                let entry = (execution, *end);
                if !branch_paths.contains(&entry) {
                    branch_paths.push(entry);
                }
            }
        }
        for c in identify::cause_branches(&branch_paths) {
            let Some(b) = lc.branches.get(c.branch as usize) else {
                continue;
            };
            let entry = lc
                .functions
                .get(b.function as usize)
                .map_or(0, |f| f.offset);
            site.cause_branches.push(BranchReport {
                function: function_name(lc, b.function),
                offset: b.offset.saturating_sub(entry),
                file: b.file.clone(),
                line: b.line,
                instruction: b.instruction.clone(),
                taken_on_leak: c.taken_on_leak,
            });
        }
        site.cause_functions.push(function_place(lc, f));
    }
}
