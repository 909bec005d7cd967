//! The accounting: events in time order in, per-unit figures out.
//!
//! Every unit has the seed's `mem_size` (net bytes), `max_size`/`min_size` (extremes of the
//! running net, starting at 0) and call counts, plus bytes allocated and released. A block's
//! allocation is charged to the unit(s) its stack selects; its release is charged to those
//! same units (`--free-to owner`, so net bytes are live bytes) or to the units of the
//! release's own stack (`--free-to caller`, seed 000 literally).
//!
//! A forked child starts with a copy of its parent's heap. Its releases of blocks it
//! inherited are counted (`inherited_frees`) but charged to nobody: the child never
//! allocated them, and the parent's copy is still live in the parent. The leak check at
//! the child's exit counts the inherited blocks the child lost (see [`super::atexit`]).
//!
//! The per-event path touches only dense arrays and one hash map (live blocks): sessions
//! are indexed by session number, each session's stack targets by stack id, and the sets of
//! units an event is charged to are interned once and referred to by number.

mod finish;
mod interval;
mod sessions;
mod stacks;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tansa_format::memory::{Losses, SessionInfo, Unrecorded};
use tansa_format::meta::{Calibration, ExitStatus};
use tansa_wire::event::{AllocOp, ImproperOp, LeakClass};

use super::atexit::{Findings, Holder, holder};
use super::classify::{By, Charge, FreeTo, Target, targets};
use super::ids::{SessionId, StackId, UnitSetId};
use super::lineage::Lineage;
use super::merge::{Event, EventKind};
use super::model::Registry;
use super::report::{Calls, JobClock, RecordingReport, Stats};

pub use finish::stack_report;
pub use interval::MAX_INTERVALS;
pub use stacks::StackFigures;

use sessions::Sessions;
use stacks::StackTally;

/// Stack ids up to `STACK_SLACK + 2 *` (the stacks a session defined) have their unit sets
/// cached in a vector; larger (sparse, crafted) ids in a map.
const STACK_SLACK: usize = 64;

/// What to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Unit.
    pub by: By,
    /// Charge policy.
    pub charge: Charge,
    /// Free accounting.
    pub free_to: FreeTo,
    /// Interval length for `By::Interval`, in nanoseconds.
    pub interval_ns: u64,
    /// Only report on this process id (every image of it).
    pub pid: Option<u32>,
    /// Only report on the processes of this MPI rank (see [`Origin::rank`]).
    pub rank: Option<u32>,
    /// Split every unit's figures per interval of `interval_ns`, as `By::Interval` does
    /// for libraries: each row is then one unit in one interval, with its start, end and
    /// cumulative net (the HTML report's time-range filter). Calls (`By::Call`) are never
    /// split: they carry their own start and end.
    pub split_intervals: bool,
}

impl Config {
    /// Whether rows are per unit per interval.
    pub fn per_interval(&self) -> bool {
        match self.by {
            By::Interval => true,
            By::Call => false,
            By::Library | By::Function | By::Thread | By::Rank | By::Program => {
                self.split_intervals
            }
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            by: By::Library,
            charge: Charge::First,
            free_to: FreeTo::Owner,
            interval_ns: 100_000_000,
            pid: None,
            rank: None,
            split_intervals: false,
        }
    }
}

/// Where a process image ran, when a report covers several recordings or an MPI job: the
/// recording it is in (by index, in the order the recordings were given), the host that
/// recording was made on, and the MPI rank of the process (from the recording's
/// `SESSION_PLACE` frame), if it had one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// Index of the recording.
    pub recording: u32,
    /// Host name of the recording's machine (empty when unknown).
    pub host: Arc<str>,
    /// MPI rank.
    pub rank: Option<u32>,
    /// When the process image ended, in the aggregator's clock (`None`: unknown).
    pub end_ticks: Option<u64>,
}

/// Marks a stack whose targets were not computed yet.
const UNSET: u32 = u32::MAX;
/// A unit set not computed yet.
const UNSET_SET: UnitSetId = UnitSetId(u32::MAX);

/// The call an event counts as, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    None,
    Malloc,
    Calloc,
    Memalign,
    Realloc,
    Free,
}

impl Call {
    /// Counts `n` calls (more than one for a sampled block, which stands for several).
    #[inline]
    fn bump(self, c: &mut Calls, n: u64) {
        let field = match self {
            Call::None => return,
            Call::Malloc => &mut c.malloc,
            Call::Calloc => &mut c.calloc,
            Call::Memalign => &mut c.memalign,
            Call::Realloc => &mut c.realloc,
            Call::Free => &mut c.free,
        };
        *field = field.saturating_add(n);
    }
}

#[derive(Debug)]
struct SessionState {
    meta: SessionInfo,
    main_name: Arc<str>,
    exit: ExitStatus,
    lost: u64,
    /// What the agent could not record, by cause (recordings that carry it).
    losses: Losses,
    events: u64,
    included: bool,
    /// Unit set of each stack id (`UNSET` until computed), for ids that are not sparse.
    targets: Vec<UnitSetId>,
    /// The same for sparse stack ids.
    sparse_targets: FxHashMap<StackId, UnitSetId>,
    /// `--by call`: the targets of the current run and its call instances.
    call_last: UnitSetId,
    call_set: UnitSetId,
    /// Where it ran.
    origin: Origin,
    /// Its own heap: the figures of the blocks it allocated (net, peak, allocated, ...).
    heap: Stats,
    /// Its slot in `ranks`.
    rank_slot: u32,
}

/// The heap of one MPI rank (all its process images), or of the processes without a rank.
#[derive(Debug, Clone, Default)]
struct RankHeap {
    rank: Option<u32>,
    stats: Stats,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum BaseKey {
    Named(Arc<str>),
    Thread(u32, u32),
    Call(Arc<str>, u64),
    /// `--by rank`: a rank, or every process without one.
    Rank(Option<u32>),
    /// `--by program`: an executable's path.
    Program(Arc<str>),
}

#[derive(Debug)]
struct Base {
    key: BaseKey,
    start_ns: u64,
    end_ns: u64,
    net: i64,
    /// Row of this base when rows are not per interval.
    row: u32,
}

#[derive(Debug)]
struct Row {
    base: u32,
    interval: u64,
    stats: Stats,
    cumulative: i64,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    /// The unit set charged for the allocation.
    set: UnitSetId,
    /// The allocation's stack.
    stack: StackId,
    /// How many blocks it stands for (1; more for a sampled block).
    weight: u32,
    ts: u64,
}

#[derive(Debug)]
struct Improper {
    op: ImproperOp,
    count: u64,
    ptr: u64,
    pid: u32,
    refused: bool,
}

/// Timestamp conversion with the current calibration segment cached.
#[derive(Debug)]
struct Clock {
    calibration: Calibration,
    identity: bool,
    lo: u64,
    hi: u64,
    base_ticks: u64,
    base_ns: f64,
    slope: f64,
}

impl Clock {
    fn new(calibration: Calibration) -> Self {
        let identity = calibration.source == tansa_format::meta::ClockSource::Monotonic;
        Clock {
            calibration,
            identity,
            lo: 1,
            hi: 0,
            base_ticks: 0,
            base_ns: 0.0,
            slope: 1.0,
        }
    }

    #[inline]
    fn ns(&mut self, ticks: u64) -> u64 {
        if self.identity {
            return ticks;
        }
        if ticks < self.lo || ticks >= self.hi {
            let pts = &self.calibration.points;
            if pts.len() < 2 {
                return self.calibration.to_ns(ticks);
            }
            let i = pts
                .partition_point(|p| p.ticks <= ticks)
                .clamp(1, pts.len() - 1);
            let (a, b) = (pts[i - 1], pts[i]);
            self.base_ticks = a.ticks;
            self.base_ns = a.ns as f64;
            self.slope =
                (b.ns as f64 - a.ns as f64) / b.ticks.saturating_sub(a.ticks).max(1) as f64;
            self.lo = if i == 1 { 0 } else { a.ticks };
            self.hi = if i == pts.len() - 1 {
                u64::MAX
            } else {
                b.ticks
            };
        }
        (self.base_ns + (ticks as f64 - self.base_ticks as f64) * self.slope).max(0.0) as u64
    }
}

/// The aggregator.
#[derive(Debug)]
pub struct Aggregator {
    config: Config,
    clock: Clock,
    sessions: Sessions<SessionState>,
    order: Vec<SessionId>,
    /// The images' parents.
    lineage: Lineage,
    /// The interval length in use (`--by interval`): the configured one, or a multiple of
    /// it when that would make too many intervals.
    interval_ns: u64,
    bases: Vec<Base>,
    base_index: FxHashMap<BaseKey, u32>,
    rows: Vec<Row>,
    interval_rows: FxHashMap<(u32, u64), u32>,
    /// Interned unit sets (sets of bases an event is charged to).
    sets: Vec<Box<[u32]>>,
    set_index: FxHashMap<Box<[u32]>, UnitSetId>,
    /// The same sets laid out flat for the per-event path: each set's span of
    /// `set_members`, and for each member its row once known (always `UNSET` per
    /// interval, where the row depends on the time).
    set_spans: Vec<(u32, u32)>,
    set_members: Vec<u32>,
    set_rows: Vec<u32>,
    live: FxHashMap<(SessionId, u64), Block>,
    /// Each thread's last allocation (its address and timestamp): a release of that block
    /// by the same thread before the thread allocates again is a temporary allocation.
    /// (The timestamp tells the block from a later one at the same address, allocated by
    /// another thread once this one was released elsewhere.)
    last_alloc: FxHashMap<(SessionId, u32), (u64, u64)>,
    thread_sets: FxHashMap<(SessionId, u32), UnitSetId>,
    /// `--by program`: how many process images of each program had events.
    program_images: FxHashMap<Arc<str>, u64>,
    call_counter: FxHashMap<Arc<str>, u64>,
    names: FxHashMap<String, Arc<str>>,
    totals: Stats,
    improper: FxHashMap<(SessionId, StackId, bool, bool), Improper>,
    inherited_frees: u64,
    events: u64,
    t0_ns: u64,
    last_ticks: u64,
    thread_names: FxHashMap<(u32, u32), String>,
    anomalies: u64,
    /// Processes of the tree that ran without being recorded.
    unrecorded: Vec<Unrecorded>,
    /// Per-stack figures, when asked for ([`Aggregator::track_stacks`]).
    stacks: Option<Box<StackTally>>,
    /// Mean bytes between samples of a sampled recording (0: every allocation recorded).
    sample_rate: u64,
    /// The heap of each rank (and of the processes without one), by slot.
    ranks: Vec<RankHeap>,
    rank_slots: FxHashMap<Option<u32>, u32>,
    /// What the report says about the job, when it covers several recordings or an MPI
    /// job ([`Aggregator::set_job`]).
    job: Option<JobSetup>,
    /// The leak check's findings, for a recording made with it
    /// ([`Aggregator::set_leak_check`]).
    leak_check: Option<Box<Findings<Inherited>>>,
}

/// A block a forked child inherited, as the leak check of the child found it lost: the
/// image that allocated it and the block there.
#[derive(Debug, Clone, Copy)]
struct Inherited {
    owner: SessionId,
    block: Block,
}

/// What an aggregator over several recordings, or over an MPI job, is told about them
/// (see [`Aggregator::set_job`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSetup {
    /// The job id, if the processes' environment gave one.
    pub id: Option<String>,
    /// The number of ranks, if known.
    pub size: Option<u32>,
    /// The recordings, in order.
    pub recordings: Vec<RecordingReport>,
    /// How their timelines were put together.
    pub clock: JobClock,
}

/// Per-stack figures of a whole run (see [`Aggregator::track_stacks`]).
#[derive(Debug, Clone, Default)]
pub struct StackProfileData {
    /// Every allocation stack of the included processes, in order of first allocation.
    pub stacks: Vec<StackFigures>,
    /// Live bytes when the heap peaked (the total's `max_bytes`).
    pub peak_bytes: u64,
    /// When the heap peaked, in nanoseconds from the start of the recording.
    pub peak_ns: u64,
}

/// A block size as a change of net bytes (sizes above `i64::MAX` are damage and were
/// refused by the decoder; this only keeps the arithmetic from wrapping).
#[inline]
fn size_delta(size: u64) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

fn intern_in(names: &mut FxHashMap<String, Arc<str>>, s: String) -> Arc<str> {
    if let Some(a) = names.get(&s) {
        return Arc::clone(a);
    }
    let a: Arc<str> = Arc::from(s.as_str());
    names.insert(s, Arc::clone(&a));
    a
}

impl Aggregator {
    /// An aggregator; `clock` converts timestamps to nanoseconds.
    pub fn new(config: Config, clock: Calibration) -> Self {
        let mut a = Aggregator {
            config,
            clock: Clock::new(clock),
            sessions: Sessions::default(),
            order: Vec::new(),
            lineage: Lineage::default(),
            interval_ns: config.interval_ns.max(1),
            bases: Vec::new(),
            base_index: FxHashMap::default(),
            rows: Vec::new(),
            interval_rows: FxHashMap::default(),
            sets: Vec::new(),
            set_index: FxHashMap::default(),
            set_spans: Vec::new(),
            set_members: Vec::new(),
            set_rows: Vec::new(),
            live: FxHashMap::default(),
            last_alloc: FxHashMap::default(),
            thread_sets: FxHashMap::default(),
            program_images: FxHashMap::default(),
            call_counter: FxHashMap::default(),
            names: FxHashMap::default(),
            totals: Stats::default(),
            improper: FxHashMap::default(),
            inherited_frees: 0,
            events: 0,
            t0_ns: u64::MAX,
            last_ticks: 0,
            thread_names: FxHashMap::default(),
            anomalies: 0,
            unrecorded: Vec::new(),
            stacks: None,
            sample_rate: 0,
            ranks: Vec::new(),
            rank_slots: FxHashMap::default(),
            job: None,
            leak_check: None,
        };
        // Set 0 is the empty set (events not charged: sessions outside `--pid`).
        a.intern_set(Vec::new());
        a
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Reads the events of a sampled recording (`tansa record --sample-rate`): allocations
    /// were sampled every `rate` bytes on average (a Poisson process over bytes), and only
    /// the releases of sampled blocks were recorded. Each sampled block of `s` bytes is
    /// counted as `1 / (1 - exp(-s / rate))` blocks and that many times `s` bytes, the
    /// inverse of its chance to be sampled, so every figure is an unbiased estimate; the
    /// releases of blocks never seen allocated are expected and ignored.
    pub fn set_sample_rate(&mut self, rate: u64) {
        self.sample_rate = rate;
    }

    /// Reads the events of a recording made with the leak check at exit (`tansa record
    /// --leak-check`): the report then says, per process image and in total, what the
    /// check found of the blocks still allocated at the end ([`MemoryReport::leak_check`]).
    /// `images` are those of the recordings made with the check (`None`: every image).
    pub fn set_leak_check(&mut self, images: Option<Vec<SessionId>>) {
        self.leak_check = Some(Box::new(Findings::new(images)));
    }

    /// What a sampled block of `size` bytes stands for: (bytes, blocks). Blocks are rounded
    /// up or down at random (seeded by the event) so that their sum stays unbiased.
    fn scaled(&self, size: u64, seed: u64) -> (u64, u32) {
        if self.sample_rate == 0 || size == 0 {
            return (size, 1);
        }
        let p = -(-(size as f64) / self.sample_rate as f64).exp_m1();
        if p <= 0.0 {
            return (size, 1);
        }
        let blocks = 1.0 / p;
        let bytes = (size as f64 * blocks).round().min(i64::MAX as f64 / 4.0) as u64;
        let whole = blocks.floor();
        let frac = blocks - whole;
        let draw = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) as f64 / (1u64 << 53) as f64;
        let n = whole + if draw < frac { 1.0 } else { 0.0 };
        (bytes, n.clamp(1.0, u32::MAX as f64) as u32)
    }

    /// Makes the report a job's: each process says its host, rank, recording, peak and
    /// end, and the report lists the ranks and which ended first.
    pub fn set_job(&mut self, job: JobSetup) {
        self.job = Some(job);
    }

    /// Also keeps figures per allocation stack (allocated, live at the end, live at the
    /// peak), for stack profiles; see [`Aggregator::take_stack_figures`]. Costs one hash
    /// lookup per allocation and release.
    pub fn track_stacks(&mut self) {
        self.stacks.get_or_insert_with(Box::default);
    }

    /// The per-stack figures kept since [`Aggregator::track_stacks`] (taken: a second call
    /// gives `None`).
    pub fn take_stack_figures(&mut self) -> Option<StackProfileData> {
        let tally = self.stacks.take()?;
        let peak_ticks = tally.peak_ticks;
        let (mut stacks, peak_bytes) = tally.finish();
        for f in &mut stacks {
            f.pid = self.sessions.get(f.session.0).map_or(0, |s| s.meta.pid);
        }
        if self.leak_check.is_some() {
            // The blocks the leak check found lost, by allocation stack.
            let index: FxHashMap<(SessionId, StackId), usize> = stacks
                .iter()
                .enumerate()
                .map(|(i, f)| ((f.session, f.stack), i))
                .collect();
            // An inherited block a child lost counts at the stack that allocated it.
            for (_, owner, block, class) in self.checked_blocks() {
                let lost = matches!(class, Some(LeakClass::Definite | LeakClass::Indirect));
                if lost && let Some(&i) = index.get(&(owner, block.stack)) {
                    stacks[i].lost_objects += 1;
                    stacks[i].lost_bytes = stacks[i].lost_bytes.saturating_add(block.size);
                }
            }
        }
        let t0 = if self.t0_ns == u64::MAX {
            0
        } else {
            self.t0_ns
        };
        let peak_ns = if peak_ticks == 0 {
            0
        } else {
            self.clock.ns(peak_ticks).saturating_sub(t0)
        };
        Some(StackProfileData {
            stacks,
            peak_bytes,
            peak_ns,
        })
    }

    /// The figures of every event charged so far, all units together (`net_bytes` is the
    /// live heap of the included processes).
    pub fn totals(&self) -> &Stats {
        &self.totals
    }

    /// Replaces the clock calibration (online mode learns it as it goes).
    pub fn set_clock(&mut self, clock: Calibration) {
        self.clock = Clock::new(clock);
    }

    fn intern(&mut self, s: String) -> Arc<str> {
        intern_in(&mut self.names, s)
    }

    fn intern_set(&mut self, bases: Vec<u32>) -> UnitSetId {
        if let Some(&id) = self.set_index.get(bases.as_slice()) {
            return id;
        }
        let id = UnitSetId(self.sets.len() as u32);
        let start = self.set_members.len() as u32;
        // Rows are made when a set is first charged (a set may only serve to find
        // others, as the library sets of `--by call` do, and must not show up as units).
        self.set_members.extend_from_slice(&bases);
        self.set_rows.resize(self.set_members.len(), UNSET);
        self.set_spans.push((start, bases.len() as u32));
        let b: Box<[u32]> = bases.into();
        self.sets.push(b.clone());
        self.set_index.insert(b, id);
        id
    }

    fn session(&self, id: SessionId) -> &SessionState {
        self.sessions.get(id.0).expect("known session")
    }

    fn session_mut(&mut self, id: SessionId) -> &mut SessionState {
        self.sessions.get_mut(id.0).expect("known session")
    }

    /// Registers a process image (before its events). A session number registered
    /// already is ignored (only a damaged recording repeats one).
    pub fn add_session(&mut self, info: &SessionInfo) {
        self.add_session_from(info, Origin::default());
    }

    /// [`Aggregator::add_session`] for a report over several recordings or an MPI job:
    /// the image ran where `origin` says (`--rank` selects by its rank, `--by rank`
    /// charges it to its rank).
    pub fn add_session_from(&mut self, info: &SessionInfo, origin: Origin) {
        let id = SessionId(info.session);
        let meta = info.clone();
        if self.sessions.contains(id.0) {
            return;
        }
        self.lineage.add(id, meta.pid, meta.ppid, meta.start_ticks);
        let exe_name = meta.exe.rsplit('/').next().unwrap_or(&meta.exe).to_string();
        let main_name = self.intern(exe_name);
        let included = self.config.pid.is_none_or(|p| p == meta.pid)
            && self.config.rank.is_none_or(|r| Some(r) == origin.rank);
        let rank_slot = match self.rank_slots.get(&origin.rank) {
            Some(&s) => s,
            None => {
                let s = self.ranks.len() as u32;
                self.ranks.push(RankHeap {
                    rank: origin.rank,
                    stats: Stats::default(),
                });
                self.rank_slots.insert(origin.rank, s);
                s
            }
        };
        if included {
            let start = self.clock.ns(meta.start_ticks);
            self.t0_ns = self.t0_ns.min(start);
        }
        self.sessions.insert(
            id.0,
            SessionState {
                meta,
                main_name,
                exit: ExitStatus::Running,
                lost: 0,
                losses: Losses::default(),
                events: 0,
                included,
                targets: Vec::new(),
                sparse_targets: FxHashMap::default(),
                call_last: UNSET_SET,
                call_set: UnitSetId(0),
                origin,
                heap: Stats::default(),
                rank_slot,
            },
        );
        self.order.push(id);
    }

    /// Records how a process image ended.
    pub fn end_session(&mut self, id: SessionId, exit: ExitStatus, lost: u64) {
        if let Some(s) = self.sessions.get_mut(id.0) {
            s.exit = exit;
            s.lost = s.lost.max(lost);
        }
    }

    /// Records what a process image's agent could not record, by cause.
    pub fn session_losses(&mut self, id: SessionId, losses: &Losses) {
        if let Some(s) = self.sessions.get_mut(id.0) {
            s.losses = *losses;
            s.lost = s.lost.max(losses.lost());
        }
    }

    /// Records a process of the tree that ran without being recorded.
    pub fn unrecorded(&mut self, process: Unrecorded) {
        if self.config.pid.is_none_or(|p| p == process.pid) {
            self.unrecorded.push(process);
        }
    }

    fn base(&mut self, key: BaseKey, ts_ns: u64) -> u32 {
        if let Some(&b) = self.base_index.get(&key) {
            let base = &mut self.bases[b as usize];
            base.end_ns = base.end_ns.max(ts_ns);
            return b;
        }
        let b = self.bases.len() as u32;
        self.bases.push(Base {
            key: key.clone(),
            start_ns: ts_ns,
            end_ns: ts_ns,
            net: 0,
            row: UNSET,
        });
        self.base_index.insert(key, b);
        b
    }

    #[inline]
    fn row(&mut self, base: u32, ts_ns: u64) -> usize {
        if !self.config.per_interval() {
            let r = self.bases[base as usize].row;
            if r != UNSET {
                return r as usize;
            }
            let r = self.new_row(base, u64::MAX);
            self.bases[base as usize].row = r;
            return r as usize;
        }
        let interval = self.interval_of(ts_ns);
        if let Some(&r) = self.interval_rows.get(&(base, interval)) {
            return r as usize;
        }
        let r = self.new_row(base, interval);
        self.interval_rows.insert((base, interval), r);
        r as usize
    }

    fn new_row(&mut self, base: u32, interval: u64) -> u32 {
        let r = self.rows.len() as u32;
        self.rows.push(Row {
            base,
            interval,
            stats: Stats::default(),
            cumulative: self.bases[base as usize].net,
        });
        r
    }

    /// The unit set (library or function units) of a stack, cached per session and stack.
    fn stack_targets(
        &mut self,
        reg: &Registry,
        session: SessionId,
        stack: StackId,
        ts_ns: u64,
    ) -> UnitSetId {
        let state = self.session(session);
        let cached = match state.targets.get(stack.0 as usize) {
            Some(&t) => t,
            None if state.sparse_targets.is_empty() => UNSET_SET,
            None => state
                .sparse_targets
                .get(&stack)
                .copied()
                .unwrap_or(UNSET_SET),
        };
        if cached != UNSET_SET {
            return cached;
        }
        let by_function = self.config.by == By::Function;
        let main_name = Arc::clone(&self.session(session).main_name);
        let st = stack.is_some().then(|| reg.stack(session, stack)).flatten();
        let charge = self.config.charge;
        let names = &mut self.names;
        let ts = targets(
            st.map(|s| &**s),
            reg,
            by_function,
            charge,
            &main_name,
            &mut |s| intern_in(names, s),
        );
        let bases: Vec<u32> = ts
            .into_iter()
            .map(|t| {
                let name = match t {
                    Target::Library(n) | Target::Function(n) => n,
                    Target::Unknown => self.intern("[unknown]".to_string()),
                };
                self.base(BaseKey::Named(name), ts_ns)
            })
            .collect();
        let set = self.intern_set(bases);
        // Only cache stacks that were known: an unknown one may be defined later (online).
        if st.is_some() || stack.is_none() {
            // Ids are numbered from 1 as stacks are defined: a vector indexed by id fits,
            // unless the id is far beyond the stacks defined (damage).
            let dense = STACK_SLACK + 2 * reg.stack_count(session) as usize;
            let s = self.session_mut(session);
            let i = stack.0 as usize;
            if i < s.targets.len() {
                s.targets[i] = set;
            } else if i <= dense {
                s.targets.resize(i + 1, UNSET_SET);
                s.targets[i] = set;
            } else {
                s.sparse_targets.insert(stack, set);
            }
        }
        set
    }

    /// The unit set charged for an event of `stack` by this thread, under the configured
    /// unit.
    fn caller_set(&mut self, reg: &Registry, e: &Event, stack: StackId, ts_ns: u64) -> UnitSetId {
        match self.config.by {
            By::Thread => {
                if let Some(&s) = self.thread_sets.get(&(e.session, e.tid)) {
                    return s;
                }
                let pid = self.session(e.session).meta.pid;
                let b = self.base(BaseKey::Thread(pid, e.tid), ts_ns);
                let s = self.intern_set(vec![b]);
                self.thread_sets.insert((e.session, e.tid), s);
                s
            }
            By::Rank => {
                // One set per image: its rank's (keyed with a thread id no thread has;
                // `thread_sets` serves `--by thread` otherwise).
                if let Some(&s) = self.thread_sets.get(&(e.session, u32::MAX)) {
                    return s;
                }
                let rank = self.session(e.session).origin.rank;
                let b = self.base(BaseKey::Rank(rank), ts_ns);
                let s = self.intern_set(vec![b]);
                self.thread_sets.insert((e.session, u32::MAX), s);
                s
            }
            By::Program => {
                // One set per image, its program's (keyed as for ranks).
                if let Some(&s) = self.thread_sets.get(&(e.session, u32::MAX)) {
                    return s;
                }
                let meta = &self.session(e.session).meta;
                let exe = crate::program::image_program(&meta.exe, &meta.cmdline);
                let path = self.intern(exe);
                *self.program_images.entry(Arc::clone(&path)).or_default() += 1;
                let b = self.base(BaseKey::Program(path), ts_ns);
                let s = self.intern_set(vec![b]);
                self.thread_sets.insert((e.session, u32::MAX), s);
                s
            }
            By::Call => self.call_set(reg, e, stack, ts_ns),
            By::Library | By::Function | By::Interval => {
                self.stack_targets(reg, e.session, stack, ts_ns)
            }
        }
    }

    /// `--by call`: the current call instances of the event's session, starting new ones
    /// when the charged libraries change.
    fn call_set(&mut self, reg: &Registry, e: &Event, stack: StackId, ts_ns: u64) -> UnitSetId {
        let s = self.session(e.session);
        if stack.is_none() && s.call_last != UNSET_SET {
            return s.call_set;
        }
        let t = self.stack_targets(reg, e.session, stack, ts_ns);
        if self.session(e.session).call_last != t {
            let libs = self.sets[t.0 as usize].clone();
            let mut instances = Vec::with_capacity(libs.len());
            for &lib in libs.iter() {
                let BaseKey::Named(name) = self.bases[lib as usize].key.clone() else {
                    continue;
                };
                let counter = self.call_counter.entry(Arc::clone(&name)).or_insert(0);
                let index = *counter;
                *counter += 1;
                instances.push(self.base(BaseKey::Call(name, index), ts_ns));
            }
            let set = self.intern_set(instances);
            let s = self.session_mut(e.session);
            s.call_last = t;
            s.call_set = set;
        }
        let set = self.session(e.session).call_set;
        for i in 0..self.sets[set.0 as usize].len() {
            let b = self.sets[set.0 as usize][i] as usize;
            self.bases[b].end_ns = self.bases[b].end_ns.max(ts_ns);
        }
        set
    }

    /// Charges `delta` bytes (none when 0) and one `call` to every unit of `set`.
    #[inline]
    fn apply(&mut self, set: UnitSetId, delta: i64, call: (Call, u64), ts_ns: u64) {
        self.apply_counting(set, delta, call, ts_ns, 0);
    }

    /// [`Self::apply`], counting `temporary` temporary allocations too.
    #[inline]
    fn apply_counting(
        &mut self,
        set: UnitSetId,
        delta: i64,
        (call, n): (Call, u64),
        ts_ns: u64,
        temporary: u64,
    ) {
        let (start, len) = self.set_spans[set.0 as usize];
        for k in start as usize..(start + len) as usize {
            let b = self.set_members[k];
            let r = match self.set_rows[k] {
                UNSET => {
                    let r = self.row(b, ts_ns);
                    if !self.config.per_interval() {
                        self.set_rows[k] = r as u32;
                    }
                    r
                }
                r => r as usize,
            };
            let base = &mut self.bases[b as usize];
            base.net = base.net.saturating_add(delta);
            let net = base.net;
            let row = &mut self.rows[r];
            if delta != 0 {
                row.stats.add(delta);
                if delta > 0 {
                    row.stats.allocated_bytes =
                        row.stats.allocated_bytes.saturating_add(delta as u64);
                } else {
                    row.stats.freed_bytes =
                        row.stats.freed_bytes.saturating_add(delta.unsigned_abs());
                }
            }
            row.cumulative = net;
            call.bump(&mut row.stats.calls, n);
            row.stats.temporary_allocations += temporary;
        }
    }

    /// Charges `delta` bytes to the heap of the image that owns the block (allocations
    /// and releases are the owner's: a block lives in the process that allocated it), and
    /// to its rank's.
    #[inline]
    fn own_heap(&mut self, session: SessionId, delta: i64) {
        let Some(s) = self.sessions.get_mut(session.0) else {
            return;
        };
        let slot = s.rank_slot as usize;
        for stats in [&mut s.heap, &mut self.ranks[slot].stats] {
            stats.add(delta);
            if delta > 0 {
                stats.allocated_bytes = stats.allocated_bytes.saturating_add(delta as u64);
            } else {
                stats.freed_bytes = stats.freed_bytes.saturating_add(delta.unsigned_abs());
            }
        }
    }

    /// Whether the block at `ptr` that `session` releases is one it inherited (the
    /// release of an unknown block). With the leak check, the image's copy is then gone.
    fn is_inherited(&mut self, session: SessionId, ptr: u64) -> bool {
        let live = &self.live;
        let inherited = self
            .lineage
            .inherited(
                session,
                |image| live.get(&(image, ptr)).map(|b| (b.ts, ())),
                |_| false,
            )
            .is_some();
        if inherited && let Some(f) = self.leak_check.as_deref_mut() {
            f.released_inherited(session, ptr);
        }
        inherited
    }

    fn note_improper(
        &mut self,
        e: &Event,
        op: ImproperOp,
        ptr: u64,
        stack: StackId,
        refused: bool,
    ) {
        let pid = self.session(e.session).meta.pid;
        let entry = self
            .improper
            .entry((e.session, stack, op == ImproperOp::Free, refused))
            .or_insert(Improper {
                op,
                count: 0,
                ptr,
                pid,
                refused,
            });
        entry.count += 1;
    }

    /// Each block still live in a process image the leak check at exit classified, with
    /// its image, the image that allocated it and how the check classified it (`None`:
    /// reachable); then the inherited blocks such an image lost, allocated by an ancestor.
    /// Nothing without the check.
    fn checked_blocks(
        &self,
    ) -> impl Iterator<Item = (SessionId, SessionId, &Block, Option<LeakClass>)> {
        let findings = self.leak_check.as_deref();
        let own = self
            .live
            .iter()
            .filter_map(move |(&(session, ptr), block)| {
                let f = findings.filter(|f| f.classified(session))?;
                Some((session, session, block, f.class(session, ptr)))
            });
        let inherited = findings
            .into_iter()
            .flat_map(|f| f.inherited_lost())
            .map(|(session, i, class)| (session, i.owner, &i.block, Some(class)));
        own.chain(inherited)
    }

    /// Releases a block (a `free`, or the release half of a `realloc`), charging it and
    /// `call` when `charge`. Returns the unit set charged, or `None` when the block was not
    /// live.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn release(
        &mut self,
        reg: &Registry,
        e: &Event,
        ptr: u64,
        stack: StackId,
        ts_ns: u64,
        charge: bool,
        call: Call,
    ) -> Option<UnitSetId> {
        let block = self.live.remove(&(e.session, ptr))?;
        if let Some(f) = self.leak_check.as_deref_mut() {
            f.released(e.session, ptr);
        }
        if !charge {
            return Some(block.set);
        }
        let temporary = call == Call::Free
            && self.sample_rate == 0
            && self.last_alloc.get(&(e.session, e.tid)) == Some(&(ptr, block.ts));
        if let Some(t) = self.stacks.as_deref_mut() {
            t.release_counting(e.session, block.stack, block.size, block.weight, temporary);
        }
        let set = match self.config.free_to {
            FreeTo::Owner => block.set,
            FreeTo::Caller => self.caller_set(reg, e, stack, ts_ns),
        };
        let delta = -size_delta(block.size);
        let n = u64::from(block.weight);
        // A temporary allocation is the allocation's units': counted with the release when
        // they are charged it (releases to the owner), else on its own.
        let with_release = temporary && set == block.set;
        self.apply_counting(set, delta, (call, n), ts_ns, u64::from(with_release));
        if temporary {
            self.totals.temporary_allocations += 1;
            if !with_release {
                self.apply_counting(block.set, 0, (Call::None, 0), ts_ns, 1);
            }
        }
        self.totals.add(delta);
        self.totals.freed_bytes = self.totals.freed_bytes.saturating_add(block.size);
        self.own_heap(e.session, delta);
        call.bump(&mut self.totals.calls, n);
        Some(set)
    }

    /// Makes a block live, charging it and `call` to `set` when `charge`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn allocate(
        &mut self,
        e: &Event,
        ptr: u64,
        size: u64,
        (set, stack): (UnitSetId, StackId),
        ts_ns: u64,
        charge: bool,
        call: Call,
    ) {
        let (size, weight) = self.scaled(size, ptr ^ e.ts.rotate_left(32));
        if charge && self.sample_rate == 0 {
            self.last_alloc.insert((e.session, e.tid), (ptr, e.ts));
        }
        if charge {
            if let Some(t) = self.stacks.as_deref_mut() {
                t.allocate(e.session, stack, size, weight, e.ts);
            }
            let n = u64::from(weight);
            self.apply(set, size_delta(size), (call, n), ts_ns);
            self.totals.add(size_delta(size));
            self.totals.allocated_bytes = self.totals.allocated_bytes.saturating_add(size);
            self.own_heap(e.session, size_delta(size));
            call.bump(&mut self.totals.calls, n);
        }
        let block = Block {
            size,
            set,
            stack,
            weight,
            ts: e.ts,
        };
        if let Some(old) = self.live.insert((e.session, ptr), block) {
            // An address handed out twice without a release in between: the release was
            // not recorded (e.g. lost). Treat the old block as gone.
            self.anomalies += 1;
            if charge {
                if let Some(t) = self.stacks.as_deref_mut() {
                    t.release(e.session, old.stack, old.size, old.weight);
                }
                let delta = -size_delta(old.size);
                self.apply(old.set, delta, (Call::None, 0), ts_ns);
                self.totals.add(delta);
                self.own_heap(e.session, delta);
            }
        }
    }

    /// Processes one event. Events must come in time order (see [`super::merge`]).
    pub fn event(&mut self, reg: &Registry, e: &Event) {
        // The leak check's findings are not calls of the program.
        if matches!(e.kind, EventKind::Unreached { .. } | EventKind::LeakScan(_)) {
            if let Some(f) = self.leak_check.as_deref_mut() {
                let live = &self.live;
                let lineage = &self.lineage;
                let found = |ptr| {
                    holder(lineage, f, e.session, ptr, |image| {
                        live.get(&(image, ptr)).map(|b| {
                            (
                                b.ts,
                                Inherited {
                                    owner: image,
                                    block: *b,
                                },
                            )
                        })
                    })
                };
                let found: Holder<Inherited> = match &e.kind {
                    EventKind::Unreached { ptr, .. } => found(*ptr),
                    _ => Holder::None,
                };
                f.take(e.session, &e.kind, |_| found);
            }
            return;
        }
        let Some(state) = self.sessions.get_mut(e.session.0) else {
            return;
        };
        let included = state.included;
        if included {
            state.events += 1;
        }
        // Nanoseconds are only needed per event for calls and intervals; otherwise the last
        // timestamp is converted once, at the end.
        let ts_ns = if self.config.by == By::Call || self.config.per_interval() {
            self.clock.ns(e.ts)
        } else {
            0
        };
        if included {
            self.events += 1;
            self.last_ticks = self.last_ticks.max(e.ts);
        }
        match &e.kind {
            EventKind::ThreadName(name) => {
                let pid = self.session(e.session).meta.pid;
                self.thread_names.insert((pid, e.tid), name.to_string());
            }
            EventKind::Lost(n) => {
                let s = self.session_mut(e.session);
                s.lost = s.lost.saturating_add(*n);
            }
            EventKind::Unreached { .. } | EventKind::LeakScan(_) => {}
            &EventKind::Alloc {
                op,
                ptr,
                size,
                stack,
            } => {
                let set = if included {
                    self.caller_set(reg, e, stack, ts_ns)
                } else {
                    UnitSetId(0)
                };
                let call = match op {
                    AllocOp::Malloc => Call::Malloc,
                    AllocOp::Calloc => Call::Calloc,
                    _ => Call::Memalign,
                };
                self.allocate(e, ptr, size, (set, stack), ts_ns, included, call);
            }
            &EventKind::Free { ptr, stack } => {
                let released = if ptr != 0 {
                    self.release(reg, e, ptr, stack, ts_ns, included, Call::Free)
                } else {
                    None
                };
                if !included || released.is_some() || self.sample_rate != 0 {
                    // (Sampled: the releases of blocks that were not sampled are expected.)
                    return;
                }
                // Not a live block: counted where it was called from.
                if ptr != 0 {
                    if self.is_inherited(e.session, ptr) {
                        self.inherited_frees += 1;
                    } else {
                        self.note_improper(e, ImproperOp::Free, ptr, stack, false);
                    }
                }
                let set = self.caller_set(reg, e, stack, ts_ns);
                self.apply(set, 0, (Call::Free, 1), ts_ns);
                self.totals.calls.free += 1;
            }
            &EventKind::ReallocRelease { old, new, stack } => {
                if old != 0
                    && self
                        .release(reg, e, old, stack, ts_ns, included, Call::None)
                        .is_none()
                    && included
                    && self.sample_rate == 0
                {
                    if self.is_inherited(e.session, old) {
                        self.inherited_frees += 1;
                    } else {
                        self.note_improper(e, ImproperOp::Realloc, old, stack, false);
                    }
                }
                if new == 0 && included {
                    let set = self.caller_set(reg, e, stack, ts_ns);
                    self.apply(set, 0, (Call::Realloc, 1), ts_ns);
                    self.totals.calls.realloc += 1;
                }
            }
            &EventKind::ReallocAlloc {
                new, size, stack, ..
            } => {
                let set = if included {
                    self.caller_set(reg, e, stack, ts_ns)
                } else {
                    UnitSetId(0)
                };
                self.allocate(e, new, size, (set, stack), ts_ns, included, Call::Realloc);
            }
            EventKind::Improper(i) => {
                if included {
                    self.note_improper(e, i.op, i.ptr, StackId(i.stack), true);
                }
            }
        }
    }

    /// Whether `stack` of `session` is still undefined (online mode waits for it).
    pub fn needs_stack(&self, reg: &Registry, session: SessionId, stack: StackId) -> bool {
        stack.is_some() && reg.stack(session, stack).is_none()
    }
}
