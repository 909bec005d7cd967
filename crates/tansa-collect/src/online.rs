//! Online mode (`tansa record --online`): the collector's events go straight into the
//! memory aggregator of `tansa-analysis`, ordered by the collector's watermark, and no event
//! log is written (seed 000, embodiment 2). Addresses are resolved from the binaries as
//! stacks arrive. [`record_online`] runs a command this way and returns its report.
//!
//! With a [`LiveFeed`], the sink also hands a [`LiveSnapshot`] (the reports so far and the
//! heap over time) to a live view every [`LiveFeed::every`], from the collector's periodic
//! tick: the collector never waits for the view (see [`LiveSlot::offer`]). The view can
//! switch units, so the sink then aggregates every event under each of the feed's units
//! as well (one more aggregator each); the final report is the one of `--by` alone, the
//! same as without a view.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{CollectError, Config as CollectConfig, Outcome, Sink};
use rustc_hash::FxHashMap;
use tansa_analysis::memory::aggregate::Aggregator;
use tansa_analysis::memory::live::{HeapPoint, HeapSeries, LiveSlot, LiveSnapshot};
use tansa_analysis::memory::merge::{OnlineOrder, StreamDecoder};
use tansa_analysis::memory::model::{
    AddressResolver, ModuleInfo, Registry, Resolution, SourceFrame,
};
use tansa_analysis::memory::{By, Config, MemoryReport, SessionId, StackId, StreamId};
use tansa_format::memory::{SessionEnd, SessionInfo, SessionLosses, Unrecorded};
use tansa_format::meta::{Calibration, CalibrationPoint, ClockSource};
use tansa_symbols::{ModuleResolution, Resolver};
use tansa_wire::event::{DecodeError, Decoder, Record, StreamState};

/// Resolves addresses from the binaries on disk, module by module, as the recording's
/// symbol table would (so online and offline reports name functions alike).
struct LiveResolver {
    resolver: Resolver,
    /// Per module path and build id.
    modules: FxHashMap<(String, Vec<u8>), ModuleResolution>,
}

impl std::fmt::Debug for LiveResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveResolver")
    }
}

impl AddressResolver for LiveResolver {
    fn resolve(&mut self, module: &ModuleInfo, offset: u64) -> Resolution {
        if module.vdso || module.path.is_empty() {
            return Resolution::default();
        }
        let m = self
            .modules
            .entry((module.path.clone(), module.build_id.clone()))
            .or_insert_with(|| ModuleResolution::open(&module.path, &module.build_id));
        match m.lookup(&self.resolver, offset.saturating_sub(1)) {
            Some(r) if !r.frames.is_empty() => Resolution {
                frames: r
                    .frames
                    .iter()
                    .map(|f| SourceFrame {
                        function: f.function.clone(),
                        file: f.file.clone(),
                        line: f.line,
                    })
                    .collect(),
                function_start: r.function_start,
            },
            _ => Resolution::default(),
        }
    }
}

/// What a live view wants from an online recording.
#[derive(Debug, Clone)]
pub struct LiveFeed {
    /// Units the view can switch to besides the recording's own (`--by`); a unit equal to
    /// it, or given twice, is aggregated once.
    pub units: Vec<By>,
    /// How often a snapshot is taken (the collector ticks every 100 ms; a shorter period
    /// is that).
    pub every: Duration,
    /// Where snapshots are left.
    pub slot: Arc<LiveSlot>,
}

/// Most points of the heap-over-time series (at 4 points a second, 17 minutes before
/// they are thinned).
const HEAP_POINTS: usize = 4096;

/// A live feed in progress.
#[derive(Debug)]
struct Live {
    feed: LiveFeed,
    /// An aggregator per extra unit of the feed.
    views: Vec<Aggregator>,
    started: Instant,
    last: Option<Instant>,
    heap: HeapSeries,
}

/// The online sink: a [`Sink`] that aggregates instead of writing.
#[derive(Debug)]
pub struct OnlineSink {
    registry: Registry,
    aggregator: Aggregator,
    live: Option<Live>,
    order: OnlineOrder,
    decoders: FxHashMap<(SessionId, StreamId), StreamDecoder>,
    meta_carry: FxHashMap<u32, Vec<u8>>,
    resolver: LiveResolver,
    calibration: Calibration,
    /// The recorded executables and runtime modules, for the programs that allocate past
    /// the agent's hooks.
    own: crate::own_allocator::Watch,
    /// The agent's frame limit, and how many stacks reached it (their outermost frames may
    /// be cut: the report says so).
    frame_limit: Option<usize>,
    at_frame_limit: u64,
}

impl OnlineSink {
    /// A sink aggregating with `config`.
    pub fn new(config: Config, clock: ClockSource) -> Self {
        let calibration = Calibration {
            source: clock,
            points: Vec::new(),
        };
        OnlineSink {
            registry: Registry::default(),
            aggregator: Aggregator::new(config, calibration.clone()),
            live: None,
            order: OnlineOrder::default(),
            decoders: FxHashMap::default(),
            meta_carry: FxHashMap::default(),
            resolver: LiveResolver {
                resolver: Resolver::new(),
                modules: FxHashMap::default(),
            },
            calibration,
            own: Default::default(),
            frame_limit: None,
            at_frame_limit: 0,
        }
    }

    /// A sink aggregating with `config` that also feeds a live view.
    pub fn with_live(config: Config, clock: ClockSource, feed: LiveFeed) -> Self {
        let mut sink = OnlineSink::new(config, clock);
        let mut units: Vec<By> = Vec::new();
        for &by in &feed.units {
            if by != config.by && !units.contains(&by) {
                units.push(by);
            }
        }
        let views = units
            .into_iter()
            .map(|by| Aggregator::new(Config { by, ..config }, sink.calibration.clone()))
            .collect();
        sink.live = Some(Live {
            feed,
            views,
            started: Instant::now(),
            last: None,
            heap: HeapSeries::new(HEAP_POINTS),
        });
        sink
    }

    /// Every aggregator: the recording's own, then the live view's.
    fn aggregators(&mut self) -> impl Iterator<Item = &mut Aggregator> {
        std::iter::once(&mut self.aggregator).chain(
            self.live
                .as_mut()
                .map(|l| l.views.as_mut_slice())
                .unwrap_or_default(),
        )
    }

    /// The state so far, as the live view is handed it: the report under each unit (the
    /// recording's own first) and the heap over time (a point is added at each call).
    pub fn snapshot(&mut self) -> Option<LiveSnapshot> {
        let live = self.live.as_mut()?;
        let elapsed_ms = u64::try_from(live.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        live.heap.push(HeapPoint {
            ms: elapsed_ms,
            bytes: self.aggregator.totals().net_bytes,
        });
        let mut reports = Vec::with_capacity(1 + live.views.len());
        reports.push(self.aggregator.report(&self.registry));
        for v in &mut live.views {
            reports.push(v.report(&self.registry));
        }
        Some(LiveSnapshot {
            elapsed_ms,
            reports,
            heap: live.heap.clone(),
        })
    }

    /// Leaves a snapshot for the live view when one is due.
    fn feed_live(&mut self) {
        let Some(live) = &self.live else {
            return;
        };
        if live.last.is_some_and(|t| t.elapsed() < live.feed.every) {
            return;
        }
        if let Some(snapshot) = self.snapshot()
            && let Some(live) = &mut self.live
        {
            live.last = Some(Instant::now());
            live.feed.slot.offer(snapshot);
        }
    }

    /// The report, once the collector returned (every stack still unresolved is resolved,
    /// every event still waiting for its stack is aggregated).
    pub fn finish(mut self) -> MemoryReport {
        self.registry.resolve_pending(&mut self.resolver, true);
        self.drain(u64::MAX);
        let mut report = self.aggregator.finish(&self.registry);
        let own = self.own.own_allocators();
        report
            .warnings
            .extend(own.iter().map(tansa_format::memory::OwnAllocator::note));
        if let (Some(n), 1..) = (self.frame_limit, self.at_frame_limit) {
            report
                .warnings
                .push(tansa_analysis::memory::frame_limit_note(
                    self.at_frame_limit,
                    n,
                ));
        }
        report
    }

    fn drain(&mut self, watermark: u64) {
        while let Some(e) = self.order.peek_before(watermark) {
            // A stack is defined before any event using it, but its definition may still be
            // on the way; wait for it unless this is the end.
            if watermark != u64::MAX
                && self
                    .aggregator
                    .needs_stack(&self.registry, e.session, e.kind.stack())
            {
                break;
            }
            let Some(mut e) = self.order.pop() else {
                break;
            };
            self.registry.canonicalize(&mut e);
            self.aggregator.event(&self.registry, &e);
            if let Some(live) = &mut self.live {
                for v in &mut live.views {
                    v.event(&self.registry, &e);
                }
            }
        }
    }
}

impl Sink for OnlineSink {
    fn session_started(&mut self, info: &SessionInfo) -> Result<(), CollectError> {
        self.own.session(info);
        for a in self.aggregators() {
            a.add_session(info);
        }
        Ok(())
    }

    fn session_python_malloc(&mut self, session: u32) {
        self.own.python_malloc(session);
    }

    fn meta(&mut self, session: u32, bytes: &[u8]) -> Result<(), CollectError> {
        let carry = self.meta_carry.entry(session).or_default();
        carry.extend_from_slice(bytes);
        let buf = std::mem::take(carry);
        let mut used = 0;
        let mut stacks = Vec::new();
        let mut d = Decoder::with_state(&buf, StreamState::default());
        while let Some(r) = d.next() {
            match r {
                Ok(Record::ModuleLoad(m)) => {
                    self.own.module(session, m.path);
                    self.registry.add_module(SessionId(session), &m);
                }
                Ok(Record::StackDef { id, frames }) => stacks.push((id, frames)),
                Ok(_) => {}
                Err(DecodeError::Truncated { .. }) => break,
                Err(DecodeError::Corrupt { offset }) => {
                    return Err(CollectError::Protocol(format!(
                        "corrupt meta stream from session {session} at byte {offset}"
                    )));
                }
            }
            used = d.position();
        }
        for (id, frames) in stacks {
            let deep = self.frame_limit.is_some_and(|n| frames.len() >= n);
            self.registry
                .add_stack(SessionId(session), StackId(id), frames, &mut self.resolver);
            // A stack defined twice (see `StackAliases`) counts once.
            self.at_frame_limit += u64::from(
                deep && self
                    .registry
                    .canonical_stack(SessionId(session), StackId(id))
                    == StackId(id),
            );
        }
        self.registry.resolve_pending(&mut self.resolver, false);
        self.meta_carry.insert(session, buf[used..].to_vec());
        Ok(())
    }

    fn thread(&mut self, session: u32, stream: u32, bytes: &[u8]) -> Result<(), CollectError> {
        let order = &mut self.order;
        self.decoders
            .entry((SessionId(session), StreamId(stream)))
            .or_insert_with(|| StreamDecoder::new(SessionId(session)))
            .push(bytes, &mut |e| order.push(e));
        Ok(())
    }

    fn stream_closed(&mut self, session: u32, stream: u32) -> Result<(), CollectError> {
        if let Some(mut d) = self
            .decoders
            .remove(&(SessionId(session), StreamId(stream)))
        {
            d.finish();
        }
        Ok(())
    }

    fn session_ended(&mut self, end: &SessionEnd) -> Result<(), CollectError> {
        for a in self.aggregators() {
            a.end_session(SessionId(end.session), end.exit, end.lost_events);
        }
        Ok(())
    }

    fn session_losses(&mut self, losses: &SessionLosses) -> Result<(), CollectError> {
        for a in self.aggregators() {
            a.session_losses(SessionId(losses.session), &losses.losses);
        }
        Ok(())
    }

    fn unrecorded(&mut self, process: &Unrecorded) -> Result<(), CollectError> {
        for a in self.aggregators() {
            a.unrecorded(process.clone());
        }
        Ok(())
    }

    fn watermark(&mut self, ticks: u64) -> Result<(), CollectError> {
        self.drain(ticks);
        Ok(())
    }

    fn tick(&mut self, point: CalibrationPoint) -> Result<(), CollectError> {
        if self
            .calibration
            .points
            .last()
            .is_none_or(|p| p.ticks < point.ticks)
        {
            self.calibration.points.push(point);
            let calibration = self.calibration.clone();
            for a in self.aggregators() {
                a.set_clock(calibration.clone());
            }
        }
        self.feed_live();
        Ok(())
    }
}

/// Runs `config`'s command under the agent, aggregating with `analysis` as events arrive,
/// and returns the collector's outcome with the report (which is complete even when the
/// command died by a signal: the rings outlive it). `allocation_functions` are taken for
/// allocation functions, as the built-in wrappers are (`--alloc-fn`). With `live`,
/// snapshots are left for a live view while the command runs; the report is the same.
///
/// # Errors
///
/// What [`crate::record`] returns.
pub fn record_online(
    config: &CollectConfig,
    analysis: Config,
    allocation_functions: &[String],
    live: Option<LiveFeed>,
) -> Result<(Outcome, MemoryReport), CollectError> {
    let mut config = config.clone();
    config.online = true;
    // Intervals need nanoseconds as events arrive; the TSC would need calibration first.
    config.monotonic_clock = true;
    let mut sink = match live {
        Some(feed) => OnlineSink::with_live(analysis, ClockSource::Monotonic, feed),
        None => OnlineSink::new(analysis, ClockSource::Monotonic),
    };
    if config.leak_check {
        sink.aggregator.set_leak_check(None);
    }
    sink.frame_limit = config.max_frames.map(|n| n as usize);
    sink.registry
        .add_allocation_functions(allocation_functions.iter().cloned());
    let outcome = crate::record(&config, &mut sink)?;
    Ok((outcome, sink.finish()))
}
