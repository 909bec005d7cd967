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
//! allocated them, and the parent's copy is still live in the parent.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tansa_format::meta::{Calibration, ExitStatus};
use tansa_wire::event::{AllocOp, ImproperOp};

use super::classify::{By, Charge, FreeTo, Target, targets};
use super::merge::{Event, EventKind};
use super::model::Registry;
use super::report::{
    Calls, FrameReport, ImproperReport, MemoryReport, ProcessReport, SCHEMA, Stats, ThreadReport,
    UnitReport,
};

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            by: By::Library,
            charge: Charge::First,
            free_to: FreeTo::Owner,
            interval_ns: 100_000_000,
            pid: None,
        }
    }
}

/// A process image, as the aggregator needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMeta {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Start timestamp (recording clock).
    pub start_ticks: u64,
}

#[derive(Debug)]
struct SessionState {
    meta: SessionMeta,
    main_name: Arc<str>,
    parent: Option<u32>,
    exit: ExitStatus,
    lost: u64,
    events: u64,
    included: bool,
    call_last: Option<Arc<[u32]>>,
    call_bases: Arc<[u32]>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum BaseKey {
    Named(Arc<str>),
    Thread(u32, u32),
    Call(Arc<str>, u64),
}

#[derive(Debug)]
struct Base {
    key: BaseKey,
    start_ns: u64,
    end_ns: u64,
    net: i64,
}

#[derive(Debug)]
struct Row {
    base: u32,
    interval: u64,
    stats: Stats,
    cumulative: i64,
}

#[derive(Debug, Clone)]
struct Block {
    size: u64,
    bases: Arc<[u32]>,
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

/// The aggregator.
#[derive(Debug)]
pub struct Aggregator {
    config: Config,
    clock: Calibration,
    sessions: FxHashMap<u32, SessionState>,
    order: Vec<u32>,
    bases: Vec<Base>,
    base_index: FxHashMap<BaseKey, u32>,
    rows: Vec<Row>,
    row_index: FxHashMap<(u32, u64), u32>,
    live: FxHashMap<(u32, u64), Block>,
    targets_cache: FxHashMap<(u32, u32), Arc<[u32]>>,
    call_counter: FxHashMap<Arc<str>, u64>,
    names: FxHashMap<String, Arc<str>>,
    totals: Stats,
    improper: FxHashMap<(u32, u32, bool, bool), Improper>,
    inherited_frees: u64,
    events: u64,
    t0_ns: u64,
    last_ns: u64,
    thread_names: FxHashMap<(u32, u32), String>,
    anomalies: u64,
}

impl Aggregator {
    /// An aggregator; `clock` converts timestamps to nanoseconds.
    pub fn new(config: Config, clock: Calibration) -> Self {
        Aggregator {
            config,
            clock,
            sessions: FxHashMap::default(),
            order: Vec::new(),
            bases: Vec::new(),
            base_index: FxHashMap::default(),
            rows: Vec::new(),
            row_index: FxHashMap::default(),
            live: FxHashMap::default(),
            targets_cache: FxHashMap::default(),
            call_counter: FxHashMap::default(),
            names: FxHashMap::default(),
            totals: Stats::default(),
            improper: FxHashMap::default(),
            inherited_frees: 0,
            events: 0,
            t0_ns: u64::MAX,
            last_ns: 0,
            thread_names: FxHashMap::default(),
            anomalies: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Replaces the clock calibration (online mode learns it as it goes).
    pub fn set_clock(&mut self, clock: Calibration) {
        self.clock = clock;
    }

    fn intern(&mut self, s: String) -> Arc<str> {
        intern_in(&mut self.names, s)
    }

    /// Registers a process image (before its events).
    pub fn add_session(&mut self, id: u32, meta: SessionMeta) {
        let parent = self.order.iter().rev().copied().find(|s| {
            let p = &self.sessions[s].meta;
            p.pid == meta.ppid && p.start_ticks <= meta.start_ticks
        });
        let exe_name = meta.exe.rsplit('/').next().unwrap_or(&meta.exe).to_string();
        let main_name = self.intern(exe_name);
        let included = self.config.pid.is_none_or(|p| p == meta.pid);
        if included {
            self.t0_ns = self.t0_ns.min(self.clock.to_ns(meta.start_ticks));
        }
        self.sessions.insert(
            id,
            SessionState {
                meta,
                main_name,
                parent,
                exit: ExitStatus::Running,
                lost: 0,
                events: 0,
                included,
                call_last: None,
                call_bases: Arc::from([]),
            },
        );
        self.order.push(id);
    }

    /// Records how a process image ended.
    pub fn end_session(&mut self, id: u32, exit: ExitStatus, lost: u64) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.exit = exit;
            s.lost = s.lost.max(lost);
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
        });
        self.base_index.insert(key, b);
        b
    }

    fn row(&mut self, base: u32, ts_ns: u64) -> u32 {
        let interval = if self.config.by == By::Interval {
            ts_ns.saturating_sub(self.t0_ns) / self.config.interval_ns.max(1)
        } else {
            u64::MAX
        };
        if let Some(&r) = self.row_index.get(&(base, interval)) {
            return r;
        }
        let r = self.rows.len() as u32;
        self.rows.push(Row {
            base,
            interval,
            stats: Stats::default(),
            cumulative: self.bases[base as usize].net,
        });
        self.row_index.insert((base, interval), r);
        r
    }

    /// The targets (library or function units) of a stack, cached per stack.
    fn stack_targets(
        &mut self,
        reg: &Registry,
        session: u32,
        stack: u32,
        ts_ns: u64,
    ) -> Arc<[u32]> {
        if let Some(t) = self.targets_cache.get(&(session, stack)) {
            return Arc::clone(t);
        }
        let by_function = self.config.by == By::Function;
        let main_name = Arc::clone(&self.sessions[&session].main_name);
        let st = (stack != 0).then(|| reg.stack(session, stack)).flatten();
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
        let ids: Vec<u32> = ts
            .into_iter()
            .map(|t| {
                let name = match t {
                    Target::Library(n) | Target::Function(n) => n,
                    Target::Unknown => self.intern("[unknown]".to_string()),
                };
                self.base(BaseKey::Named(name), ts_ns)
            })
            .collect();
        let ids: Arc<[u32]> = ids.into();
        // Only cache stacks that were known: an unknown one may be defined later (online).
        if st.is_some() || stack == 0 {
            self.targets_cache
                .insert((session, stack), Arc::clone(&ids));
        }
        ids
    }

    /// Units charged for an event of `stack` by this thread, under the configured unit.
    fn caller_bases(&mut self, reg: &Registry, e: &Event, stack: u32, ts_ns: u64) -> Arc<[u32]> {
        match self.config.by {
            By::Thread => {
                let pid = self.sessions[&e.session].meta.pid;
                Arc::from([self.base(BaseKey::Thread(pid, e.tid), ts_ns)])
            }
            By::Call => {
                if stack == 0 {
                    let current = Arc::clone(&self.sessions[&e.session].call_bases);
                    if !current.is_empty() {
                        return current;
                    }
                }
                let t = self.stack_targets(reg, e.session, stack, ts_ns);
                let same = self.sessions[&e.session]
                    .call_last
                    .as_ref()
                    .is_some_and(|last| **last == *t);
                if !same {
                    let mut instances = Vec::with_capacity(t.len());
                    for &lib in t.iter() {
                        let BaseKey::Named(name) = self.bases[lib as usize].key.clone() else {
                            continue;
                        };
                        let counter = self.call_counter.entry(Arc::clone(&name)).or_insert(0);
                        let index = *counter;
                        *counter += 1;
                        instances.push(self.base(BaseKey::Call(name, index), ts_ns));
                    }
                    let s = self.sessions.get_mut(&e.session).expect("session exists");
                    s.call_last = Some(t);
                    s.call_bases = instances.into();
                }
                let bases = Arc::clone(&self.sessions[&e.session].call_bases);
                for &b in bases.iter() {
                    let base = &mut self.bases[b as usize];
                    base.end_ns = base.end_ns.max(ts_ns);
                }
                bases
            }
            By::Library | By::Function | By::Interval => {
                self.stack_targets(reg, e.session, stack, ts_ns)
            }
        }
    }

    fn charge(&mut self, bases: &[u32], delta: i64, ts_ns: u64) {
        for &b in bases {
            let r = self.row(b, ts_ns) as usize;
            self.bases[b as usize].net += delta;
            let net = self.bases[b as usize].net;
            let row = &mut self.rows[r];
            row.stats.add(delta);
            if delta > 0 {
                row.stats.allocated_bytes += delta as u64;
            } else {
                row.stats.freed_bytes += delta.unsigned_abs();
            }
            row.cumulative = net;
        }
    }

    fn count(&mut self, bases: &[u32], ts_ns: u64, f: fn(&mut Calls)) {
        for &b in bases {
            let r = self.row(b, ts_ns) as usize;
            f(&mut self.rows[r].stats.calls);
        }
    }

    fn is_inherited(&self, session: u32, ptr: u64) -> bool {
        let mut s = session;
        while let Some(state) = self.sessions.get(&s) {
            let Some(parent) = state.parent else {
                return false;
            };
            if self
                .live
                .get(&(parent, ptr))
                .is_some_and(|b| b.ts <= state.meta.start_ticks)
            {
                return true;
            }
            s = parent;
        }
        false
    }

    fn note_improper(&mut self, e: &Event, op: ImproperOp, ptr: u64, stack: u32, refused: bool) {
        let pid = self.sessions[&e.session].meta.pid;
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

    /// Releases a block (a `free`, or the release half of a `realloc`). Returns the units
    /// charged, or `None` when the block was not live.
    fn release(
        &mut self,
        reg: &Registry,
        e: &Event,
        ptr: u64,
        stack: u32,
        ts_ns: u64,
        charge: bool,
    ) -> Option<Arc<[u32]>> {
        let block = self.live.remove(&(e.session, ptr))?;
        if !charge {
            return Some(block.bases);
        }
        let bases = match self.config.free_to {
            FreeTo::Owner => Arc::clone(&block.bases),
            FreeTo::Caller => self.caller_bases(reg, e, stack, ts_ns),
        };
        let delta = -(block.size as i64);
        self.charge(&bases, delta, ts_ns);
        self.totals.add(delta);
        self.totals.freed_bytes += block.size;
        Some(bases)
    }

    fn allocate(
        &mut self,
        e: &Event,
        ptr: u64,
        size: u64,
        bases: Arc<[u32]>,
        ts_ns: u64,
        charge: bool,
    ) {
        if charge {
            self.charge(&bases, size as i64, ts_ns);
            self.totals.add(size as i64);
            self.totals.allocated_bytes += size;
        }
        let block = Block {
            size,
            bases,
            ts: e.ts,
        };
        if let Some(old) = self.live.insert((e.session, ptr), block) {
            // An address handed out twice without a release in between: the release was
            // not recorded (e.g. lost). Treat the old block as gone.
            self.anomalies += 1;
            if charge {
                let delta = -(old.size as i64);
                self.charge(&old.bases, delta, ts_ns);
                self.totals.add(delta);
            }
        }
    }

    /// Processes one event. Events must come in time order (see [`super::merge`]).
    pub fn event(&mut self, reg: &Registry, e: &Event) {
        let Some(state) = self.sessions.get_mut(&e.session) else {
            return;
        };
        let included = state.included;
        if included {
            state.events += 1;
        }
        let ts_ns = self.clock.to_ns(e.ts);
        if included {
            self.events += 1;
            self.last_ns = self.last_ns.max(ts_ns);
        }
        match &e.kind {
            EventKind::ThreadName(name) => {
                let pid = self.sessions[&e.session].meta.pid;
                self.thread_names.insert((pid, e.tid), name.clone());
            }
            EventKind::Lost(n) => {
                if let Some(s) = self.sessions.get_mut(&e.session) {
                    s.lost += n;
                }
            }
            &EventKind::Alloc {
                op,
                ptr,
                size,
                stack,
            } => {
                let bases = if included {
                    self.caller_bases(reg, e, stack, ts_ns)
                } else {
                    Arc::from([])
                };
                if included {
                    let bump: fn(&mut Calls) = match op {
                        AllocOp::Malloc => |c| c.malloc += 1,
                        AllocOp::Calloc => |c| c.calloc += 1,
                        _ => |c| c.memalign += 1,
                    };
                    self.count(&bases, ts_ns, bump);
                    bump(&mut self.totals.calls);
                }
                self.allocate(e, ptr, size, bases, ts_ns, included);
            }
            &EventKind::Free { ptr, stack } => {
                let released = if ptr != 0 {
                    self.release(reg, e, ptr, stack, ts_ns, included)
                } else {
                    None
                };
                if !included {
                    return;
                }
                self.totals.calls.free += 1;
                let bases = match (released, self.config.free_to) {
                    (Some(owner), FreeTo::Owner) => owner,
                    (Some(caller), FreeTo::Caller) => caller,
                    (None, _) => {
                        if ptr != 0 {
                            if self.is_inherited(e.session, ptr) {
                                self.inherited_frees += 1;
                            } else {
                                self.note_improper(e, ImproperOp::Free, ptr, stack, false);
                            }
                        }
                        self.caller_bases(reg, e, stack, ts_ns)
                    }
                };
                self.count(&bases, ts_ns, |c| c.free += 1);
            }
            &EventKind::ReallocRelease { old, new, stack } => {
                if old != 0
                    && self.release(reg, e, old, stack, ts_ns, included).is_none()
                    && included
                {
                    if self.is_inherited(e.session, old) {
                        self.inherited_frees += 1;
                    } else {
                        self.note_improper(e, ImproperOp::Realloc, old, stack, false);
                    }
                }
                if new == 0 && included {
                    let bases = self.caller_bases(reg, e, stack, ts_ns);
                    self.count(&bases, ts_ns, |c| c.realloc += 1);
                    self.totals.calls.realloc += 1;
                }
            }
            &EventKind::ReallocAlloc {
                new, size, stack, ..
            } => {
                let bases = if included {
                    self.caller_bases(reg, e, stack, ts_ns)
                } else {
                    Arc::from([])
                };
                if included {
                    self.count(&bases, ts_ns, |c| c.realloc += 1);
                    self.totals.calls.realloc += 1;
                }
                self.allocate(e, new, size, bases, ts_ns, included);
            }
            EventKind::Improper(i) => {
                if included {
                    self.note_improper(e, i.op, i.ptr, i.stack, true);
                }
            }
        }
    }

    /// Whether `stack` of `session` is still undefined (online mode waits for it).
    pub fn needs_stack(&self, reg: &Registry, session: u32, stack: u32) -> bool {
        stack != 0 && reg.stack(session, stack).is_none()
    }

    /// The report.
    pub fn finish(self, reg: &Registry) -> MemoryReport {
        let t0 = if self.t0_ns == u64::MAX {
            0
        } else {
            self.t0_ns
        };
        let interval = self.config.interval_ns.max(1);
        let thread_name = |pid: u32, tid: u32| {
            self.thread_names
                .get(&(pid, tid))
                .cloned()
                .unwrap_or_default()
        };
        let mut units: Vec<(UnitReport, u64)> = self
            .rows
            .iter()
            .map(|row| {
                let base = &self.bases[row.base as usize];
                let mut u = UnitReport {
                    unit: String::new(),
                    stats: row.stats,
                    thread: None,
                    call_index: None,
                    start_ns: None,
                    end_ns: None,
                    cumulative_net_bytes: None,
                };
                match &base.key {
                    BaseKey::Named(n) => u.unit = n.to_string(),
                    BaseKey::Thread(pid, tid) => {
                        let name = thread_name(*pid, *tid);
                        u.unit = format!("{name} [{tid}]");
                        u.thread = Some(ThreadReport {
                            pid: *pid,
                            tid: *tid,
                            name,
                        });
                    }
                    BaseKey::Call(n, i) => {
                        u.unit = n.to_string();
                        u.call_index = Some(*i);
                        u.start_ns = Some(base.start_ns.saturating_sub(t0));
                        u.end_ns = Some(base.end_ns.saturating_sub(t0));
                    }
                }
                if self.config.by == By::Interval {
                    u.start_ns = Some(row.interval * interval);
                    u.end_ns = Some((row.interval + 1) * interval);
                    u.cumulative_net_bytes = Some(row.cumulative);
                }
                (u, row.interval)
            })
            .collect();
        match self.config.by {
            By::Call => units.sort_by(|a, b| {
                (a.0.start_ns, &a.0.unit, a.0.call_index).cmp(&(
                    b.0.start_ns,
                    &b.0.unit,
                    b.0.call_index,
                ))
            }),
            By::Interval => units.sort_by(|a, b| (a.1, &a.0.unit).cmp(&(b.1, &b.0.unit))),
            _ => units.sort_by(|a, b| {
                (b.0.stats.max_bytes, b.0.stats.allocated_bytes, &a.0.unit).cmp(&(
                    a.0.stats.max_bytes,
                    a.0.stats.allocated_bytes,
                    &b.0.unit,
                ))
            }),
        }
        let process_report = |id: &u32| {
            let s = &self.sessions[id];
            ProcessReport {
                pid: s.meta.pid,
                ppid: s.meta.ppid,
                exe: s.meta.exe.clone(),
                command: s.meta.cmdline.clone(),
                exit: s.exit.into(),
                events: s.events,
                lost_events: s.lost,
            }
        };
        let processes: Vec<ProcessReport> = self.order.iter().map(process_report).collect();
        let process = self
            .order
            .iter()
            .find(|id| self.sessions[id].included)
            .map(process_report)
            .unwrap_or_else(|| ProcessReport {
                pid: self.config.pid.unwrap_or(0),
                ppid: 0,
                exe: String::new(),
                command: Vec::new(),
                exit: ExitStatus::Running.into(),
                events: 0,
                lost_events: 0,
            });
        let mut improper: Vec<ImproperReport> = self
            .improper
            .iter()
            .map(|(&(session, stack, _, _), imp)| ImproperReport {
                op: match imp.op {
                    ImproperOp::Free => "free",
                    ImproperOp::Realloc => "realloc",
                },
                count: imp.count,
                ptr: format!("{:#x}", imp.ptr),
                pid: imp.pid,
                refused: imp.refused,
                stack: stack_report(reg, session, stack),
            })
            .collect();
        improper.sort_by(|a, b| b.count.cmp(&a.count).then(a.ptr.cmp(&b.ptr)));
        let mut warnings = Vec::new();
        let lost: u64 = self
            .sessions
            .values()
            .filter(|s| s.included)
            .map(|s| s.lost)
            .sum();
        if lost > 0 {
            warnings.push(format!(
                "the agent could not record {lost} event(s); figures may be incomplete"
            ));
        }
        if self.anomalies > 0 {
            warnings.push(format!(
                "{} address(es) were handed out again without a recorded release",
                self.anomalies
            ));
        }
        MemoryReport {
            schema: SCHEMA,
            by: self.config.by.name(),
            charge: self.config.charge.name(),
            free_to: self.config.free_to.name(),
            interval_ns: (self.config.by == By::Interval).then_some(interval),
            process,
            processes,
            totals: self.totals,
            units: units.into_iter().map(|(u, _)| u).collect(),
            improper,
            inherited_frees: self.inherited_frees,
            events: self.events,
            duration_ns: self.last_ns.saturating_sub(t0),
            warnings,
        }
    }
}

fn intern_in(names: &mut FxHashMap<String, Arc<str>>, s: String) -> Arc<str> {
    if let Some(a) = names.get(&s) {
        return Arc::clone(a);
    }
    let a: Arc<str> = Arc::from(s.as_str());
    names.insert(s, Arc::clone(&a));
    a
}

/// A stack for printing.
pub fn stack_report(reg: &Registry, session: u32, stack: u32) -> Vec<FrameReport> {
    let Some(st) = reg.stack(session, stack) else {
        return Vec::new();
    };
    st.frames
        .iter()
        .map(|f| FrameReport {
            module: f
                .module
                .map_or_else(|| "[unknown]".to_string(), |m| reg.module(m).name.clone()),
            function: f.function.as_deref().map(str::to_string),
            file: f.file.as_deref().map(str::to_string),
            line: (f.line != 0).then_some(f.line),
            offset: format!("{:#x}", f.offset),
        })
        .collect()
}
