//! Online mode (`tansa record --online`): the collector's events go straight into the
//! memory aggregator of `tansa-analysis`, ordered by the collector's watermark, and no event
//! log is written (seed 000, embodiment 2). Addresses are resolved from the binaries as
//! stacks arrive. [`record_online`] runs a command this way and returns its report.

use std::path::Path;

use crate::{CollectError, Config as CollectConfig, Outcome, Sink};
use rustc_hash::FxHashMap;
use tansa_analysis::memory::aggregate::Aggregator;
use tansa_analysis::memory::merge::{EventKind, OnlineOrder, StreamDecoder};
use tansa_analysis::memory::model::{
    AddressResolver, ModuleInfo, Registry, Resolution, SourceFrame,
};
use tansa_analysis::memory::{Config, MemoryReport, SessionId, StackId, StreamId};
use tansa_format::memory::{SessionEnd, SessionInfo, SessionLosses, Unrecorded};
use tansa_format::meta::{Calibration, CalibrationPoint, ClockSource};
use tansa_symbols::{ElfFile, Resolver, Unnamed};
use tansa_wire::event::{DecodeError, Decoder, Record, StreamState};

/// Resolves addresses from the binaries on disk.
struct LiveResolver {
    resolver: Resolver,
    /// Names for code without symbols, per module path (`None`: not an ELF file).
    unnamed: FxHashMap<String, Option<Unnamed>>,
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
        match self
            .resolver
            .resolve(Path::new(&module.path), &[offset.saturating_sub(1)])
        {
            Ok(mut r) if r.first().is_some_and(|r| !r.frames.is_empty()) => {
                let r = r.swap_remove(0);
                Resolution {
                    frames: r
                        .frames
                        .into_iter()
                        .map(|f| SourceFrame {
                            function: f.function,
                            file: f.file,
                            line: f.line,
                        })
                        .collect(),
                    function_start: r.function_start,
                }
            }
            _ => {
                let unnamed = self
                    .unnamed
                    .entry(module.path.clone())
                    .or_insert_with(|| ElfFile::open(&module.path).ok().map(|e| Unnamed::new(&e)));
                match unnamed
                    .as_ref()
                    .and_then(|u| u.name(offset.saturating_sub(1)))
                {
                    Some((name, start)) => Resolution {
                        frames: vec![SourceFrame {
                            function: Some(name),
                            file: None,
                            line: 0,
                        }],
                        function_start: start,
                    },
                    None => Resolution::default(),
                }
            }
        }
    }
}

/// The online sink: a [`Sink`] that aggregates instead of writing.
#[derive(Debug)]
pub struct OnlineSink {
    registry: Registry,
    aggregator: Aggregator,
    order: OnlineOrder,
    decoders: FxHashMap<(SessionId, StreamId), StreamDecoder>,
    meta_carry: FxHashMap<u32, Vec<u8>>,
    resolver: LiveResolver,
    calibration: Calibration,
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
            order: OnlineOrder::default(),
            decoders: FxHashMap::default(),
            meta_carry: FxHashMap::default(),
            resolver: LiveResolver {
                resolver: Resolver::new(),
                unnamed: FxHashMap::default(),
            },
            calibration,
        }
    }

    /// The report, once the collector returned (every stack still unresolved is resolved,
    /// every event still waiting for its stack is aggregated).
    pub fn finish(mut self) -> MemoryReport {
        self.registry.resolve_pending(&mut self.resolver, true);
        self.drain(u64::MAX);
        self.aggregator.finish(&self.registry)
    }

    fn drain(&mut self, watermark: u64) {
        while let Some(e) = self.order.peek_before(watermark) {
            let stack = match &e.kind {
                EventKind::Alloc { stack, .. }
                | EventKind::Free { stack, .. }
                | EventKind::ReallocRelease { stack, .. }
                | EventKind::ReallocAlloc { stack, .. } => *stack,
                EventKind::Improper(i) => StackId(i.stack),
                _ => StackId::NONE,
            };
            // A stack is defined before any event using it, but its definition may still be
            // on the way; wait for it unless this is the end.
            if watermark != u64::MAX
                && self
                    .aggregator
                    .needs_stack(&self.registry, e.session, stack)
            {
                break;
            }
            let Some(e) = self.order.pop() else {
                break;
            };
            self.aggregator.event(&self.registry, &e);
        }
    }
}

impl Sink for OnlineSink {
    fn session_started(&mut self, info: &SessionInfo) -> Result<(), CollectError> {
        self.aggregator.add_session(info);
        Ok(())
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
            self.registry
                .add_stack(SessionId(session), StackId(id), frames, &mut self.resolver);
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
        self.aggregator
            .end_session(SessionId(end.session), end.exit, end.lost_events);
        Ok(())
    }

    fn session_losses(&mut self, losses: &SessionLosses) -> Result<(), CollectError> {
        self.aggregator
            .session_losses(SessionId(losses.session), &losses.losses);
        Ok(())
    }

    fn unrecorded(&mut self, process: &Unrecorded) -> Result<(), CollectError> {
        self.aggregator.unrecorded(process.clone());
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
            self.aggregator.set_clock(self.calibration.clone());
        }
        Ok(())
    }
}

/// Runs `config`'s command under the agent, aggregating with `analysis` as events arrive,
/// and returns the collector's outcome with the report (which is complete even when the
/// command died by a signal: the rings outlive it).
///
/// # Errors
///
/// What [`crate::record`] returns.
pub fn record_online(
    config: &CollectConfig,
    analysis: Config,
) -> Result<(Outcome, MemoryReport), CollectError> {
    let mut config = config.clone();
    config.online = true;
    // Intervals need nanoseconds as events arrive; the TSC would need calibration first.
    config.monotonic_clock = true;
    let mut sink = OnlineSink::new(analysis, ClockSource::Monotonic);
    let outcome = crate::record(&config, &mut sink)?;
    Ok((outcome, sink.finish()))
}
