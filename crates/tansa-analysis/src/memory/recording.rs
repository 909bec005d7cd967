//! Reading a memory recording, in two passes.
//!
//! Pass one reads every frame but the event chunks' contents: sessions, how they ended,
//! calibration, symbols, the meta streams (modules and stacks), and the position of every
//! thread chunk. Pass two merges the thread streams by time, decompressing each chunk when
//! its stream needs it. A damaged or truncated file is read up to the damage; what was
//! lost is reported as a warning.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Seek};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use tansa_format::FormatError;
use tansa_format::container::{FramePos, FrameType, Kind, Reader};
use tansa_format::memory::{
    self, SessionEnd, SessionInfo, SessionLosses, Unrecorded, split_meta_chunk, split_thread_chunk,
};
use tansa_format::meta::{Calibration, RecordingMeta};
use tansa_format::symtab::SymbolTable;
use tansa_wire::event::{Decoder, Record};

use super::aggregate::{Aggregator, Config, StackProfileData};
use super::ids::{SessionId, StackId};
use super::merge::{Event, EventSource, Merger, StreamDecoder, StreamError};
use super::model::{AddressResolver, ModuleInfo, Registry, Resolution, SourceFrame};
use super::report::MemoryReport;

/// Errors opening a memory recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// The container could not be read at all.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The file is a recording of another kind.
    #[error("this is a {found}, not a memory recording")]
    WrongKind {
        /// What it is.
        found: &'static str,
    },
}

/// A memory recording after pass one.
#[derive(Debug)]
pub struct MemoryRecording<R> {
    reader: RefCell<Reader<R>>,
    /// Payload buffer for chunks read without the prefetcher.
    payload: RefCell<Vec<u8>>,
    stream_warnings: RefCell<Vec<String>>,
    /// Who recorded what.
    pub meta: Option<RecordingMeta>,
    /// The sessions in order.
    pub sessions: Vec<SessionInfo>,
    /// How sessions ended.
    pub ends: Vec<SessionEnd>,
    /// What each session's agent could not record, by cause (sessions with a loss only).
    pub losses: Vec<SessionLosses>,
    /// Processes of the tree that ran without being recorded.
    pub unrecorded: Vec<Unrecorded>,
    /// The ranks of sessions that ran in a parallel job (one per such session).
    pub places: Vec<tansa_format::memory::SessionPlace>,
    /// What `tansa record --leak-cause` traced (`None` for other recordings).
    pub leak_cause: Option<tansa_format::memory::LeakCause>,
    /// Clock calibration.
    pub calibration: Calibration,
    /// Resolved modules and stacks.
    pub registry: Registry,
    /// Problems found while reading.
    pub warnings: Vec<String>,
    /// Whether pass one found the file truncated or damaged (the report covers what
    /// precedes the damage); see [`MemoryRecording::is_damaged`] for the whole file.
    pub damaged: bool,
    /// Whether pass two found damaged event streams.
    streams_damaged: std::cell::Cell<bool>,
    chunks: BTreeMap<(u32, u32), Vec<FramePos>>,
    symbols_present: bool,
    prefetch: Option<Prefetch>,
}

/// What the prefetch thread produced for one chunk: its events, decoded with the state of
/// its stream (and, on a stream's last chunk, a warning if the stream ended damaged), or
/// why it could not.
type Batch = Result<(Vec<Event>, Option<String>), String>;

/// What every warning about damage ends with: what the report still is.
const PARTIAL: &str = "the report covers what was recorded before it";

/// Chunks decompressed and decoded ahead by a second thread reading the same file. The
/// merge asks for them: each stream keeps [`LOOK_AHEAD`] chunks requested beyond the one it
/// reads, so the thread works in the order the merge will need the chunks and holds at
/// most that many decoded chunks per stream (reading in file order instead can mean
/// decoding the whole file ahead: a stream's first chunk may come last in the file).
#[derive(Debug)]
struct Prefetch {
    requests: Sender<Request>,
    rx: Receiver<(FramePos, Batch)>,
    ready: RefCell<rustc_hash::FxHashMap<FramePos, Batch>>,
    /// Emptied event buffers go back to the thread, so that it does not allocate (and
    /// fault in) fresh memory for every chunk.
    recycle: Sender<Vec<Event>>,
    /// Whether a merge already used it (its decoders' state belongs to that merge).
    used: std::cell::Cell<bool>,
    _thread: JoinHandle<()>,
}

/// Chunks each stream has requested beyond the one being read.
const LOOK_AHEAD: usize = 2;

/// A chunk to decode: its offset, its stream, and whether it is the stream's last.
#[derive(Debug, Clone, Copy)]
struct Request {
    pos: FramePos,
    session: u32,
    stream: u32,
    last: bool,
}

impl Prefetch {
    /// The events of the chunk at `offset` (requested earlier), once decoded; `None` if
    /// the thread stopped.
    fn take(&self, pos: FramePos) -> Option<Batch> {
        if let Some(p) = self.ready.borrow_mut().remove(&pos) {
            return Some(p);
        }
        while let Ok((at, payload)) = self.rx.recv() {
            if at == pos {
                return Some(payload);
            }
            self.ready.borrow_mut().insert(at, payload);
        }
        None
    }
}

/// Resolves from a recording's symbol table.
#[derive(Debug)]
pub struct TableResolver {
    table: SymbolTable,
    index: rustc_hash::FxHashMap<(String, Vec<u8>), usize>,
}

impl TableResolver {
    /// A resolver over `table`.
    pub fn new(table: SymbolTable) -> Self {
        let index = table
            .modules
            .iter()
            .enumerate()
            .map(|(i, m)| ((m.path.clone(), m.build_id.clone()), i))
            .collect();
        TableResolver { table, index }
    }
}

impl AddressResolver for TableResolver {
    fn resolve(&mut self, module: &ModuleInfo, offset: u64) -> Resolution {
        let key = (module.path.clone(), module.build_id.clone());
        let Some(&i) = self.index.get(&key) else {
            return Resolution::default();
        };
        let m = &self.table.modules[i];
        let Some(a) = m.lookup(offset) else {
            return Resolution::default();
        };
        // At most MAX_INLINED frames are kept per address (see `Registry`): the innermost
        // ones and the physical function.
        let n = a.frames.len();
        let kept = a
            .frames
            .iter()
            .enumerate()
            .filter(|&(i, _)| i + 1 < super::model::MAX_INLINED || i + 1 == n);
        Resolution {
            frames: kept
                .map(|(_, f)| f)
                .map(|f| SourceFrame {
                    function: self.table.string(f.function).map(str::to_string),
                    file: self.table.string(f.file).map(str::to_string),
                    line: f.line,
                })
                .collect(),
            function_start: a.function_start,
        }
    }
}

impl<R: Read + Seek> MemoryRecording<R> {
    /// Reads pass one.
    pub fn open(input: R) -> Result<Self, RecordingError> {
        let reader = Reader::new(input)?;
        match reader.kind() {
            Kind::Memory => {}
            other => {
                return Err(RecordingError::WrongKind {
                    found: other.describe(),
                });
            }
        }
        let mut rec = MemoryRecording {
            reader: RefCell::new(reader),
            payload: RefCell::new(Vec::new()),
            stream_warnings: RefCell::new(Vec::new()),
            meta: None,
            sessions: Vec::new(),
            ends: Vec::new(),
            losses: Vec::new(),
            unrecorded: Vec::new(),
            places: Vec::new(),
            leak_cause: None,
            calibration: Calibration::monotonic(),
            registry: Registry::default(),
            warnings: Vec::new(),
            damaged: false,
            streams_damaged: std::cell::Cell::new(false),
            chunks: BTreeMap::new(),
            symbols_present: false,
            prefetch: None,
        };
        let mut metas: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        let mut seen_sessions: rustc_hash::FxHashSet<u32> = rustc_hash::FxHashSet::default();
        let mut symbols = SymbolTable::default();
        loop {
            // Thread chunks are only indexed here: their keys say which stream they are.
            let next = rec
                .reader
                .get_mut()
                .next_frame_skimming(|ty| ty == memory::THREAD_CHUNK);
            let frame = match next {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) if e.is_damage() => {
                    rec.warnings.push(format!("{e}; {PARTIAL}"));
                    rec.damaged = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let decoded: Result<(), FormatError> = (|| {
                match frame.ty {
                    FrameType::META => rec.meta = Some(frame.decode()?),
                    FrameType::CALIBRATION => rec.calibration = frame.decode()?,
                    FrameType::SYMBOLS => {
                        symbols = frame.decode()?;
                        rec.symbols_present = true;
                    }
                    memory::SESSION => {
                        let info: SessionInfo = frame.decode()?;
                        if !seen_sessions.insert(info.session) {
                            rec.warnings.push(format!(
                                "a second start of process image {} at {}; it is left out of \
                                 the report",
                                info.session,
                                frame.place()
                            ));
                            rec.damaged = true;
                        } else {
                            rec.sessions.push(info);
                        }
                    }
                    memory::SESSION_END => rec.ends.push(frame.decode()?),
                    memory::SESSION_LOSSES => rec.losses.push(frame.decode()?),
                    memory::UNRECORDED => rec.unrecorded.push(frame.decode()?),
                    memory::SESSION_PLACE => {
                        let place: tansa_format::memory::SessionPlace = frame.decode()?;
                        if rec.places.iter().any(|p| p.session == place.session) {
                            rec.warnings.push(format!(
                                "a second rank for process image {} at {}; the first is kept",
                                place.session,
                                frame.place()
                            ));
                        } else {
                            rec.places.push(place);
                        }
                    }
                    memory::LEAK_CAUSE => rec.leak_cause = Some(frame.decode()?),
                    memory::SALVAGED => {
                        let s: memory::Salvage = frame.decode()?;
                        rec.warnings.push(format!(
                            "the recorder was killed before it finished this recording; it \
                             was salvaged afterwards ({} event(s) recovered from the agents' \
                             shared rings; {} process image(s) end there)",
                            s.events, s.sessions_ended
                        ));
                    }
                    memory::META_CHUNK => {
                        if let Some((s, bytes)) = split_meta_chunk(&frame.payload) {
                            metas.entry(s).or_default().extend_from_slice(bytes);
                        }
                    }
                    memory::THREAD_CHUNK => {
                        if let Some((s, stream, _)) = split_thread_chunk(&frame.payload) {
                            rec.chunks.entry((s, stream)).or_default().push(frame.pos());
                        }
                    }
                    _ => {}
                }
                Ok(())
            })();
            if let Err(e) = decoded {
                rec.warnings
                    .push(format!("{e}; this part is left out of the report"));
                rec.damaged = true;
            }
        }
        if !rec.reader.get_mut().is_complete() && !rec.damaged {
            rec.damaged = true;
            rec.warnings.push(format!(
                "the file ends without its end marker at byte {} (tansa record did not finish \
                 writing it); {PARTIAL}",
                rec.reader.get_mut().offset()
            ));
        }
        if !rec.symbols_present {
            rec.warnings
                .push("the recording has no symbol table: functions are shown as addresses".into());
        }
        let mut resolver = TableResolver::new(symbols);
        for (session, bytes) in &metas {
            let mut stacks = Vec::new();
            for r in Decoder::new(bytes) {
                match r {
                    Ok(Record::ModuleLoad(m)) => rec.registry.add_module(SessionId(*session), &m),
                    Ok(Record::StackDef { id, frames }) => stacks.push((id, frames)),
                    Ok(_) => {}
                    // A process that died while writing leaves a record cut short.
                    Err(tansa_wire::event::DecodeError::Truncated { .. }) => break,
                    Err(tansa_wire::event::DecodeError::Corrupt { offset }) => {
                        rec.warnings.push(format!(
                            "an unreadable module or stack definition at byte {offset} of the \
                             definitions of process image {session}; the stacks defined after \
                             it are shown as unknown"
                        ));
                        rec.damaged = true;
                        break;
                    }
                }
            }
            for (id, frames) in stacks {
                rec.registry
                    .add_stack(SessionId(*session), StackId(id), frames, &mut resolver);
            }
        }
        rec.registry.resolve_pending(&mut resolver, true);
        Ok(rec)
    }

    /// Decompresses event chunks on a second thread, reading `input` (the same recording,
    /// opened again), so that pass two does not wait for decompression.
    pub fn prefetch_from<R2: Read + Seek + Send + 'static>(&mut self, input: R2) {
        let (requests, requested) = channel::<Request>();
        let (tx, rx) = channel();
        let (recycle, recycled) = channel::<Vec<Event>>();
        let pids = self.pids();
        let thread = std::thread::Builder::new()
            .name("tansa-decode".into())
            .spawn(move || {
                let Ok(mut reader) = Reader::new(input) else {
                    return;
                };
                let mut decoders: rustc_hash::FxHashMap<(u32, u32), StreamDecoder> =
                    rustc_hash::FxHashMap::default();
                let mut payload = Vec::new();
                for r in requested {
                    let batch = match reader.payload_at(r.pos, &mut payload) {
                        Ok(_) => match split_thread_chunk(&payload) {
                            Some((_, _, bytes)) => {
                                let d = decoders
                                    .entry((r.session, r.stream))
                                    .or_insert_with(|| StreamDecoder::new(SessionId(r.session)));
                                let mut events = recycled
                                    .try_recv()
                                    .unwrap_or_else(|_| Vec::with_capacity(bytes.len() / 4));
                                events.clear();
                                d.push(bytes, &mut |e| events.push(e));
                                if r.last {
                                    d.finish();
                                }
                                let warning = d
                                    .new_damage()
                                    .map(|e| stream_damage(e, pids.get(&r.session), r.pos));
                                Ok((events, warning))
                            }
                            None => Ok((Vec::new(), None)),
                        },
                        Err(e) => Err(unreadable_chunk(&e)),
                    };
                    if tx.send((r.pos, batch)).is_err() {
                        return;
                    }
                }
            });
        if let Ok(thread) = thread {
            self.prefetch = Some(Prefetch {
                requests,
                rx,
                ready: RefCell::new(rustc_hash::FxHashMap::default()),
                recycle,
                used: std::cell::Cell::new(false),
                _thread: thread,
            });
        }
    }

    /// Process id of each session.
    fn pids(&self) -> rustc_hash::FxHashMap<u32, u32> {
        self.sessions.iter().map(|s| (s.session, s.pid)).collect()
    }

    /// The events of every thread stream, merged in time order (pass two). Problems met
    /// while reading them are added to [`MemoryRecording::stream_warnings`].
    pub fn events(&self) -> Merger<ChunkSource<'_, R>> {
        // The prefetcher serves one merge (its decoders carry that merge's stream state).
        let prefetch = self.prefetch.as_ref().filter(|p| !p.used.replace(true));
        let pids = self.pids();
        let sources = self
            .chunks
            .iter()
            .map(|(&(session, stream), positions)| {
                let mut source = ChunkSource {
                    reader: &self.reader,
                    prefetch,
                    warnings: &self.stream_warnings,
                    damaged: &self.streams_damaged,
                    positions: positions.iter().copied().collect(),
                    requested: 0,
                    session,
                    pid: pids.get(&session).copied(),
                    stream,
                    decoder: StreamDecoder::new(SessionId(session)),
                    payload: &self.payload,
                };
                source.request_ahead();
                source
            })
            .collect();
        Merger::new(sources)
    }

    /// Hands every event of every thread stream to `f`, merged in time order (pass two),
    /// by reference: the fast way to read a recording. Problems met while reading them are
    /// added to [`MemoryRecording::stream_warnings`].
    pub fn for_each_event(&self, f: impl FnMut(&Event)) {
        self.events().for_each_event(f);
    }

    /// The report on this recording under `config` (pass two): every session, how it
    /// ended, every event in time order. `progress` is called with the number of events
    /// read so far, every 2^20 events. The report's warnings start with the problems
    /// found in the file.
    pub fn report(&self, config: Config, progress: impl FnMut(u64)) -> MemoryReport {
        self.analyse(&[config], false, progress).0.swap_remove(0)
    }

    /// [`MemoryRecording::report`], and the figures of every allocation stack (for stack
    /// profiles: pprof, flame graphs), from the same pass.
    pub fn report_with_stacks(
        &self,
        config: Config,
        progress: impl FnMut(u64),
    ) -> (MemoryReport, StackProfileData) {
        let (mut reports, stacks) = self.analyse(&[config], true, progress);
        (reports.swap_remove(0), stacks.unwrap_or_default())
    }

    /// The reports under each of `configs`, from one pass over the events (which are
    /// read, decoded and merged once): as many reports as configurations, in their order,
    /// each the one [`MemoryRecording::report`] makes.
    pub fn reports(&self, configs: &[Config], progress: impl FnMut(u64)) -> Vec<MemoryReport> {
        self.analyse(configs, false, progress).0
    }

    /// [`MemoryRecording::reports`], and the figures of every allocation stack under the
    /// first configuration's process selection, from the same pass.
    pub fn reports_with_stacks(
        &self,
        configs: &[Config],
        progress: impl FnMut(u64),
    ) -> (Vec<MemoryReport>, StackProfileData) {
        let (reports, stacks) = self.analyse(configs, true, progress);
        (reports, stacks.unwrap_or_default())
    }

    fn analyse(
        &self,
        configs: &[Config],
        stacks: bool,
        mut progress: impl FnMut(u64),
    ) -> (Vec<MemoryReport>, Option<StackProfileData>) {
        let mut aggs: Vec<Aggregator> = configs
            .iter()
            .map(|&config| {
                let mut agg = Aggregator::new(config, self.calibration.clone());
                if let Some(rate) = self.sample_rate() {
                    agg.set_sample_rate(rate);
                }
                for s in &self.sessions {
                    agg.add_session(s);
                }
                for e in &self.ends {
                    agg.end_session(SessionId(e.session), e.exit, e.lost_events);
                }
                for l in &self.losses {
                    agg.session_losses(SessionId(l.session), &l.losses);
                }
                for u in &self.unrecorded {
                    agg.unrecorded(u.clone());
                }
                agg
            })
            .collect();
        if stacks && let Some(first) = aggs.first_mut() {
            first.track_stacks();
        }
        let mut n = 0u64;
        self.for_each_event(|e| {
            for agg in &mut aggs {
                agg.event(&self.registry, e);
            }
            n += 1;
            if n.is_multiple_of(1 << 20) {
                progress(n);
            }
        });
        let stack_figures = aggs.first_mut().and_then(Aggregator::take_stack_figures);
        let stream_warnings = self.stream_warnings();
        let reports = aggs
            .into_iter()
            .map(|agg| {
                let mut report = agg.finish(&self.registry);
                let mut warnings = self.warnings.clone();
                warnings.extend(stream_warnings.iter().cloned());
                warnings.append(&mut report.warnings);
                report.warnings = warnings;
                report
            })
            .collect();
        (reports, stack_figures)
    }

    /// The mean bytes between samples of a sampled recording (`tansa record
    /// --sample-rate`), `None` when every allocation was recorded.
    pub fn sample_rate(&self) -> Option<u64> {
        self.meta
            .as_ref()?
            .options
            .iter()
            .find(|(k, _)| k == super::SAMPLE_RATE_OPTION)
            .and_then(|(_, v)| v.parse().ok())
            .filter(|&r| r > 0)
    }

    /// The time from the first session's start to the last session's end, in nanoseconds,
    /// as far as pass one knows it (0 when no session ended).
    pub fn span_ns(&self) -> u64 {
        let start = self.sessions.iter().map(|s| s.start_ticks).min();
        let end = self.ends.iter().map(|e| e.end_ticks).max();
        match (start, end) {
            (Some(s), Some(e)) => self
                .calibration
                .to_ns(e)
                .saturating_sub(self.calibration.to_ns(s)),
            _ => 0,
        }
    }

    /// Problems met while reading events (after [`MemoryRecording::events`]).
    pub fn stream_warnings(&self) -> Vec<String> {
        self.stream_warnings.borrow().clone()
    }

    /// Whether the file is truncated or damaged anywhere found so far (pass one, and the
    /// event streams once read): the report then covers part of the recording.
    pub fn is_damaged(&self) -> bool {
        self.damaged || self.streams_damaged.get()
    }
}

/// The warning for a thread stream found damaged in the chunk at `pos`.
fn stream_damage(e: StreamError, pid: Option<&u32>, pos: FramePos) -> String {
    let place = tansa_format::Place {
        offset: pos.offset,
        frame: pos.index,
        ty: Some(memory::THREAD_CHUNK),
    };
    let whose = pid.map_or_else(
        || "an unknown process".to_string(),
        |p| format!("process {p}"),
    );
    let within = e
        .offset()
        .map(|o| format!(", byte {o} of the thread's events"))
        .unwrap_or_default();
    format!(
        "{e} at {place} of {whose}{within}; the thread's later events are left out of the report"
    )
}

/// The warning for an event chunk that cannot be read.
fn unreadable_chunk(e: &FormatError) -> String {
    format!("{e}; the thread's later events are left out of the report")
}

/// One thread stream read chunk by chunk from the file.
pub struct ChunkSource<'a, R> {
    reader: &'a RefCell<Reader<R>>,
    prefetch: Option<&'a Prefetch>,
    warnings: &'a RefCell<Vec<String>>,
    damaged: &'a std::cell::Cell<bool>,
    positions: VecDeque<FramePos>,
    /// How many of `positions` (from the front) were requested from the prefetcher.
    requested: usize,
    session: u32,
    pid: Option<u32>,
    stream: u32,
    decoder: StreamDecoder,
    /// Payload buffer shared by all streams (its allocation is reused).
    payload: &'a RefCell<Vec<u8>>,
}

impl<R> std::fmt::Debug for ChunkSource<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSource")
            .field("chunks", &self.positions.len())
            .finish()
    }
}

impl<R> ChunkSource<'_, R> {
    /// Asks the prefetcher for this stream's next chunks, up to the look-ahead.
    fn request_ahead(&mut self) {
        let Some(p) = self.prefetch else {
            return;
        };
        while self.requested < self.positions.len().min(LOOK_AHEAD + 1) {
            let pos = self.positions[self.requested];
            let last = self.requested + 1 == self.positions.len();
            let request = Request {
                pos,
                session: self.session,
                stream: self.stream,
                last,
            };
            if p.requests.send(request).is_err() {
                return;
            }
            self.requested += 1;
        }
    }

    fn warn(&self, warning: String) {
        self.warnings.borrow_mut().push(warning);
        self.damaged.set(true);
    }
}

impl<R: Read + Seek> EventSource for ChunkSource<'_, R> {
    fn refill(&mut self, out: &mut Vec<Event>) -> bool {
        let Some(pos) = self.positions.pop_front() else {
            return false;
        };
        self.requested = self.requested.saturating_sub(1);
        self.request_ahead();
        if let Some(prefetch) = self.prefetch
            && let Some(batch) = prefetch.take(pos)
        {
            return match batch {
                Ok((events, warning)) => {
                    if let Some(w) = warning {
                        self.warn(w);
                    }
                    if out.is_empty() {
                        let used = std::mem::replace(out, events);
                        if used.capacity() > 0 {
                            let _ = prefetch.recycle.send(used);
                        }
                    } else {
                        out.extend(events);
                    }
                    true
                }
                Err(e) => {
                    self.warn(e);
                    self.positions.clear();
                    false
                }
            };
        }
        let mut payload = self.payload.borrow_mut();
        let read = self.reader.borrow_mut().payload_at(pos, &mut payload);
        match read {
            Ok(_) => {
                if let Some((_, _, bytes)) = split_thread_chunk(&payload) {
                    self.decoder.push(bytes, &mut |e| out.push(e));
                }
                if self.positions.is_empty() {
                    self.decoder.finish();
                }
                if let Some(e) = self.decoder.new_damage() {
                    self.warn(stream_damage(e, self.pid.as_ref(), pos));
                }
                true
            }
            Err(e) => {
                self.warn(unreadable_chunk(&e));
                self.positions.clear();
                false
            }
        }
    }
}
