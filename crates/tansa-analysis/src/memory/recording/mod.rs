//! Reading memory recordings, in two passes: one recording, or several read as one (the
//! recordings of one MPI job, from one node or many).
//!
//! Pass one reads every frame but the event chunks' contents: sessions, how they ended,
//! calibration, symbols, the meta streams (modules and stacks), and the position of every
//! thread chunk. Pass two merges the thread streams by time, decompressing each chunk when
//! its stream needs it. A damaged or truncated file is read up to the damage; what was
//! lost is reported as a warning.
//!
//! Several recordings ([`MemoryRecording::new_job`], [`MemoryRecording::add`]) become one:
//! the sessions of each are numbered after those of the recordings before it (a process
//! is a (recording, pid) pair: pids collide across hosts and runs), one registry holds
//! every module and stack, and pass two merges the streams of every recording, their
//! timestamps put on one timeline (see `job.rs`).

mod chunks;
mod job;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{Read, Seek};

use tansa_format::FormatError;
use tansa_format::container::{FramePos, FrameType, Kind, Reader};
use tansa_format::memory::{
    self, SessionEnd, SessionInfo, SessionLosses, Unrecorded, split_meta_chunk, split_thread_chunk,
};
use tansa_format::meta::{Calibration, RecordingMeta};
use tansa_format::symtab::SymbolTable;
use tansa_wire::event::{Decoder, Record};

use super::aggregate::{Aggregator, Config, Origin, StackProfileData};
use super::ids::{SessionId, StackId};
use super::merge::{Event, Merger, StreamDecoder};
use super::model::{AddressResolver, ModuleInfo, Registry, Resolution, SourceFrame};
use super::report::{JobClock, MemoryReport};

pub use chunks::ChunkSource;
use chunks::{Prefetch, ToJob};
pub use tansa_format::memory::SessionPlace as Place;

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
    /// More process images than a report can number (only crafted files get there).
    #[error("the recordings number more process images than one report can hold")]
    TooManySessions,
}

/// What every warning about damage ends with: what the report still is.
const PARTIAL: &str = "the report covers what was recorded before it";

/// One recording of a report (there are several in a job's).
#[derive(Debug, Clone)]
pub struct RecordingPart {
    /// The name the caller gave it (its path).
    pub name: String,
    /// Who recorded it, where and when.
    pub meta: Option<RecordingMeta>,
    /// Its clock calibration.
    pub calibration: Calibration,
    /// The report's session numbers of its sessions: `base..base + span`.
    pub base: u32,
    /// See `base`.
    pub span: u64,
    /// What its timestamps were shifted by, on the report's timeline (after calibration).
    pub shift_ns: u64,
    /// Whether pass one found it truncated or damaged.
    pub damaged: bool,
}

impl RecordingPart {
    /// Its host name (empty when unknown).
    pub fn host(&self) -> &str {
        self.meta.as_ref().map_or("", |m| m.hostname.as_str())
    }

    /// Whether the report's session `s` is one of its sessions.
    pub fn holds(&self, s: u32) -> bool {
        s >= self.base && u64::from(s - self.base) < self.span
    }
}

/// What is read of one file.
#[derive(Debug)]
struct Part<R> {
    reader: RefCell<Reader<R>>,
    /// Payload buffer for chunks read without the prefetcher.
    payload: RefCell<Vec<u8>>,
    /// Chunks by (session as the file numbers it, stream).
    chunks: BTreeMap<(u32, u32), Vec<FramePos>>,
    prefetch: Option<Prefetch>,
    /// To the report's timeline (`None`: timestamps as recorded, a single recording).
    to_job: Option<ToJob>,
}

/// A memory recording after pass one (or several, read as one).
#[derive(Debug)]
pub struct MemoryRecording<R> {
    parts: Vec<Part<R>>,
    stream_warnings: RefCell<Vec<String>>,
    /// Who recorded what (the first recording's, in a job).
    pub meta: Option<RecordingMeta>,
    /// The sessions in order (a job's: each recording's in turn, renumbered).
    pub sessions: Vec<SessionInfo>,
    /// How sessions ended.
    pub ends: Vec<SessionEnd>,
    /// What each session's agent could not record, by cause (sessions with a loss only).
    pub losses: Vec<SessionLosses>,
    /// Processes of the tree that ran without being recorded.
    pub unrecorded: Vec<Unrecorded>,
    /// What `tansa record --leak-cause` traced (`None` for other recordings).
    pub leak_cause: Option<tansa_format::memory::LeakCause>,
    /// Clock calibration (a job's events are already in nanoseconds: the identity).
    pub calibration: Calibration,
    /// Resolved modules and stacks.
    pub registry: Registry,
    /// The MPI rank (and job) of the sessions whose agent found one in their environment.
    pub places: Vec<Place>,
    /// The recordings read, in order (one unless several were added).
    pub parts_info: Vec<RecordingPart>,
    /// How the recordings' timelines were put together.
    pub clock: JobClock,
    /// Problems found while reading.
    pub warnings: Vec<String>,
    /// Whether pass one found the file truncated or damaged (the report covers what
    /// precedes the damage); see [`MemoryRecording::is_damaged`] for the whole file.
    pub damaged: bool,
    /// Whether pass two found damaged event streams.
    streams_damaged: std::cell::Cell<bool>,
    /// The next recording's first session number (`None` when the sessions read so far
    /// leave no room for another recording's: only crafted files number that high).
    next_base: Option<u32>,
}

/// Resolves from a recording's symbol table.
#[derive(Debug)]
pub struct TableResolver {
    table: SymbolTable,
    index: rustc_hash::FxHashMap<(String, Vec<u8>), usize>,
    /// The function names several functions of one module share (by module key): such
    /// a function is named with its start (`helper@0x1180`), as CPU reports name it.
    homonyms: rustc_hash::FxHashSet<(u32, String)>,
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
        let homonyms = crate::cpu::names::homonyms(&table)
            .into_keys()
            .map(|(module, function)| (module, function.to_string()))
            .collect();
        TableResolver {
            table,
            index,
            homonyms,
        }
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
        let homonyms = &self.homonyms;
        let table = &self.table;
        Resolution {
            frames: kept
                .map(|(i, f)| {
                    let function = table.string(f.function).map(|name| {
                        // The physical function (the last frame), told apart from the
                        // module's others of its name; inlined ones keep the bare name.
                        match a.function_start {
                            Some(start)
                                if i + 1 == n
                                    && !homonyms.is_empty()
                                    && homonyms.contains(&(m.key as u32, name.to_string())) =>
                            {
                                crate::cpu::names::distinct_name(name, Some(start)).into_owned()
                            }
                            _ => name.to_string(),
                        }
                    });
                    SourceFrame {
                        function,
                        file: table.string(f.file).map(str::to_string),
                        line: f.line,
                    }
                })
                .collect(),
            function_start: a.function_start,
        }
    }
}

impl<R: Read + Seek> MemoryRecording<R> {
    /// Reads pass one of one recording.
    pub fn open(input: R) -> Result<Self, RecordingError> {
        let mut rec = Self::new_job();
        rec.add(String::new(), input)?;
        Ok(rec)
    }

    /// An empty report source, to [`MemoryRecording::add`] recordings to, then
    /// [`MemoryRecording::finish_job`].
    pub fn new_job() -> Self {
        MemoryRecording {
            parts: Vec::new(),
            stream_warnings: RefCell::new(Vec::new()),
            meta: None,
            sessions: Vec::new(),
            ends: Vec::new(),
            losses: Vec::new(),
            unrecorded: Vec::new(),
            leak_cause: None,
            calibration: Calibration::monotonic(),
            registry: Registry::default(),
            places: Vec::new(),
            parts_info: Vec::new(),
            clock: JobClock::Shared,
            warnings: Vec::new(),
            damaged: false,
            streams_damaged: std::cell::Cell::new(false),
            next_base: Some(0),
        }
    }

    /// Reads pass one of another recording, called `name` in messages: its sessions are
    /// numbered after those read so far, its modules and stacks join the one registry.
    /// Warnings about it start with its name when there are several.
    pub fn add(&mut self, name: String, input: R) -> Result<(), RecordingError> {
        let reader = Reader::new(input)?;
        match reader.kind() {
            Kind::Memory => {}
            other => {
                return Err(RecordingError::WrongKind {
                    found: other.describe(),
                });
            }
        }
        let base = self.next_base.ok_or(RecordingError::TooManySessions)?;
        let shift = |s: u32| base.checked_add(s).ok_or(RecordingError::TooManySessions);
        let mut part = Part {
            reader: RefCell::new(reader),
            payload: RefCell::new(Vec::new()),
            chunks: BTreeMap::new(),
            prefetch: None,
            to_job: None,
        };
        let mut info = RecordingPart {
            name,
            meta: None,
            calibration: Calibration::monotonic(),
            base,
            span: 0,
            shift_ns: 0,
            damaged: false,
        };
        let mut warnings = Vec::new();
        let mut max_session: Option<u32> = None;
        let mut metas: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        let mut seen_sessions: rustc_hash::FxHashSet<u32> = rustc_hash::FxHashSet::default();
        let mut placed: rustc_hash::FxHashSet<u32> = rustc_hash::FxHashSet::default();
        let mut symbols = SymbolTable::default();
        let mut symbols_present = false;
        // Durable recordings: segments that were in memory, and whether a salvage ran.
        let mut volatile: Vec<memory::VolatileSegment> = Vec::new();
        let mut salvaged = false;
        // This recording's leak-cause tracing (the last frame of it counts).
        let mut leak_cause: Option<tansa_format::memory::LeakCause> = None;
        loop {
            // Thread chunks are only indexed here: their keys say which stream they are.
            let next = part
                .reader
                .get_mut()
                .next_frame_skimming(|ty| ty == memory::THREAD_CHUNK);
            let frame = match next {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) if e.is_damage() => {
                    warnings.push(format!("{e}; {PARTIAL}"));
                    info.damaged = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let mut too_many = false;
            let decoded: Result<(), FormatError> = (|| {
                let mut shifted = |s: u32| {
                    max_session = max_session.max(Some(s));
                    shift(s).unwrap_or_else(|_| {
                        too_many = true;
                        0
                    })
                };
                match frame.ty {
                    FrameType::META => info.meta = Some(frame.decode()?),
                    FrameType::CALIBRATION => info.calibration = frame.decode()?,
                    FrameType::SYMBOLS => {
                        symbols = frame.decode()?;
                        symbols_present = true;
                    }
                    memory::SESSION => {
                        let mut s: SessionInfo = frame.decode()?;
                        if !seen_sessions.insert(s.session) {
                            warnings.push(format!(
                                "a second start of process image {} at {}; it is left out of \
                                 the report",
                                s.session,
                                frame.place()
                            ));
                            info.damaged = true;
                        } else {
                            s.session = shifted(s.session);
                            self.sessions.push(s);
                        }
                    }
                    memory::SESSION_END => {
                        let mut e: SessionEnd = frame.decode()?;
                        e.session = shifted(e.session);
                        self.ends.push(e);
                    }
                    memory::SESSION_LOSSES => {
                        let mut l: SessionLosses = frame.decode()?;
                        l.session = shifted(l.session);
                        self.losses.push(l);
                    }
                    memory::SESSION_PLACE => {
                        let mut p: Place = frame.decode()?;
                        if !placed.insert(p.session) {
                            warnings.push(format!(
                                "a second rank for process image {} at {}; the first is kept",
                                p.session,
                                frame.place()
                            ));
                        } else {
                            p.session = shifted(p.session);
                            self.places.push(p);
                        }
                    }
                    memory::UNRECORDED => self.unrecorded.push(frame.decode()?),
                    memory::LEAK_CAUSE => {
                        let mut l: tansa_format::memory::LeakCause = frame.decode()?;
                        for site in &mut l.sites {
                            site.session = shifted(site.session);
                        }
                        leak_cause = Some(l);
                    }
                    memory::FREED_ELSEWHERE => {
                        let f: Vec<memory::FreedElsewhere> = frame.decode()?;
                        if let Some(l) = &mut leak_cause {
                            let shifted: Vec<memory::FreedElsewhere> = f
                                .into_iter()
                                .map(|e| memory::FreedElsewhere {
                                    session: shifted(e.session),
                                    ..e
                                })
                                .collect();
                            l.add_freed_elsewhere(&shifted);
                        }
                    }
                    memory::VOLATILE_SEGMENT => volatile.push(frame.decode()?),
                    memory::OWN_ALLOCATORS => {
                        let own: Vec<memory::OwnAllocator> = frame.decode()?;
                        warnings.extend(own.iter().map(memory::OwnAllocator::note));
                    }
                    memory::SALVAGED => {
                        salvaged = true;
                        let s: memory::Salvage = frame.decode()?;
                        // A recording completed without segment files (not durable)
                        // recovered nothing from rings: no count to give, and what the
                        // programs did after the recorder died is in no file.
                        let durable = info.meta.as_ref().is_some_and(super::is_durable);
                        let recovered = if durable {
                            format!(
                                "{} event(s) recovered from the agents' shared rings; ",
                                s.events
                            )
                        } else {
                            String::new()
                        };
                        warnings.push(format!(
                            "the recorder was killed before it finished this recording; it \
                             was salvaged afterwards ({recovered}{} process image(s) end \
                             there){}",
                            s.sessions_ended,
                            if durable {
                                ""
                            } else {
                                ": what the programs did after that, and what the agents' \
                                 buffers still held, is not in it (each program's agent said \
                                 how many events it could not record on the program's \
                                 standard error; `tansa record --durable` keeps them)"
                            }
                        ));
                    }
                    memory::META_CHUNK => {
                        if let Some((s, bytes)) = split_meta_chunk(&frame.payload) {
                            metas.entry(s).or_default().extend_from_slice(bytes);
                        }
                    }
                    memory::THREAD_CHUNK => {
                        if let Some((s, stream, _)) = split_thread_chunk(&frame.payload) {
                            max_session = max_session.max(Some(s));
                            part.chunks
                                .entry((s, stream))
                                .or_default()
                                .push(frame.pos());
                        }
                    }
                    _ => {}
                }
                Ok(())
            })();
            if too_many {
                return Err(RecordingError::TooManySessions);
            }
            if let Err(e) = decoded {
                warnings.push(format!("{e}; this part is left out of the report"));
                info.damaged = true;
            }
        }
        if !part.reader.get_mut().is_complete() && !info.damaged {
            info.damaged = true;
            warnings.push(format!(
                "the file ends without its end marker at byte {} (tansa record did not finish \
                 writing it); {PARTIAL}",
                part.reader.get_mut().offset()
            ));
        }
        if salvaged && !volatile.is_empty() {
            let sessions: BTreeSet<u32> = volatile.iter().map(|v| v.session).collect();
            warnings.push(format!(
                "{} shared segment(s) of {} process image(s) were in memory, not in files next \
                 to the recording (the segment directory could not hold them: out of space?); \
                 what their rings held when the recorder was killed is lost, and not counted",
                volatile.len(),
                sessions.len()
            ));
        }
        if !symbols_present {
            warnings
                .push("the recording has no symbol table: functions are shown as addresses".into());
        }
        warnings.extend(symbols.unresolved_notes());
        let mut resolver = TableResolver::new(symbols);
        // Stacks as deep as the agent's limit: their outermost frames may be cut.
        let limit = info.meta.as_ref().and_then(super::max_frames);
        let mut at_limit = 0u64;
        for (session, bytes) in &metas {
            max_session = max_session.max(Some(*session));
            let Ok(global) = shift(*session) else {
                return Err(RecordingError::TooManySessions);
            };
            let mut stacks = Vec::new();
            for r in Decoder::new(bytes) {
                match r {
                    Ok(Record::ModuleLoad(m)) => self.registry.add_module(SessionId(global), &m),
                    Ok(Record::StackDef { id, frames }) => stacks.push((id, frames)),
                    Ok(_) => {}
                    // A process that died while writing leaves a record cut short.
                    Err(tansa_wire::event::DecodeError::Truncated { .. }) => break,
                    Err(tansa_wire::event::DecodeError::Corrupt { offset }) => {
                        warnings.push(format!(
                            "an unreadable module or stack definition at byte {offset} of the \
                             definitions of process image {session}; the stacks defined after \
                             it are shown as unknown"
                        ));
                        info.damaged = true;
                        break;
                    }
                }
            }
            for (id, frames) in stacks {
                let deep = limit.is_some_and(|n| frames.len() >= n);
                self.registry
                    .add_stack(SessionId(global), StackId(id), frames, &mut resolver);
                // A stack defined twice (see `StackAliases`) counts once.
                at_limit += u64::from(
                    deep && self
                        .registry
                        .canonical_stack(SessionId(global), StackId(id))
                        == StackId(id),
                );
            }
        }
        if let (Some(n), 1..) = (limit, at_limit) {
            warnings.push(super::frame_limit_note(at_limit, n));
        }
        self.registry.resolve_pending(&mut resolver, true);
        info.span = max_session.map_or(0, |m| u64::from(m) + 1);
        self.next_base = u32::try_from(u64::from(base) + info.span).ok();
        if self.parts.is_empty() {
            self.meta = info.meta.clone();
            self.calibration = info.calibration.clone();
        }
        self.damaged |= info.damaged;
        // A job's recordings each traced their own processes: all are kept.
        match (&mut self.leak_cause, leak_cause) {
            (Some(job), Some(l)) => job.absorb(l),
            (job, l @ Some(_)) => *job = l,
            (_, None) => {}
        }
        if info.name.is_empty() {
            self.warnings.extend(warnings);
        } else {
            let name = &info.name;
            self.warnings
                .extend(warnings.into_iter().map(|w| format!("{name}: {w}")));
        }
        self.parts.push(part);
        self.parts_info.push(info);
        Ok(())
    }

    /// Puts the recordings added on one timeline (see `job.rs`), once every one was
    /// added; nothing to do for a single recording. Returns the warnings it adds (to
    /// [`MemoryRecording::warnings`] too): recordings of different jobs.
    pub fn finish_job(&mut self) -> Vec<String> {
        job::finish(self)
    }

    /// Whether it reads several recordings.
    pub fn is_job(&self) -> bool {
        self.parts.len() > 1
    }

    /// Decompresses the event chunks of the (first) recording on a second thread, reading
    /// `input` (the same recording, opened again), so that pass two does not wait for
    /// decompression.
    pub fn prefetch_from<R2: Read + Seek + Send + 'static>(&mut self, input: R2) {
        self.prefetch_part(0, input);
    }

    /// [`MemoryRecording::prefetch_from`] for recording `index` (in the order added),
    /// after [`MemoryRecording::finish_job`].
    pub fn prefetch_part<R2: Read + Seek + Send + 'static>(&mut self, index: usize, input: R2) {
        let pids = self.pids();
        let Some(info) = self.parts_info.get(index) else {
            return;
        };
        let base = info.base;
        let aliases = self.registry.stack_aliases();
        let Some(part) = self.parts.get_mut(index) else {
            return;
        };
        part.prefetch = Prefetch::start(input, base, pids, part.to_job.clone(), aliases);
    }

    /// Process id of each session.
    fn pids(&self) -> rustc_hash::FxHashMap<u32, u32> {
        self.sessions.iter().map(|s| (s.session, s.pid)).collect()
    }

    /// Where each session ran, for the aggregator (reports over several recordings or an
    /// MPI job).
    fn origins(&self) -> rustc_hash::FxHashMap<u32, Origin> {
        let ranks: rustc_hash::FxHashMap<u32, u32> =
            self.places.iter().map(|p| (p.session, p.rank)).collect();
        // A recorder stamps the end of every session it still had when it finished with
        // that moment: an end time shared by several sessions of one recording is not
        // theirs (only the recording of one rank, which ends with it, tells it).
        let mut shared: rustc_hash::FxHashMap<(usize, u64), u32> = Default::default();
        let part_of = |s: u32| self.parts_info.iter().position(|p| p.holds(s)).unwrap_or(0);
        for e in &self.ends {
            *shared.entry((part_of(e.session), e.end_ticks)).or_default() += 1;
        }
        // Nor is the end of a session whose recorder was killed: the salvage stamps it
        // with its own moment, which may come long after.
        let ends: rustc_hash::FxHashMap<u32, u64> = self
            .ends
            .iter()
            .filter(|e| shared[&(part_of(e.session), e.end_ticks)] == 1)
            .filter(|e| e.exit != tansa_format::meta::ExitStatus::RecorderKilled)
            .map(|e| (e.session, e.end_ticks))
            .collect();
        let hosts: Vec<std::sync::Arc<str>> = self
            .parts_info
            .iter()
            .map(|p| std::sync::Arc::from(p.host()))
            .collect();
        self.sessions
            .iter()
            .map(|s| {
                let recording = self
                    .parts_info
                    .iter()
                    .position(|p| p.holds(s.session))
                    .unwrap_or(0);
                let origin = Origin {
                    recording: recording as u32,
                    host: hosts.get(recording).cloned().unwrap_or_else(|| "".into()),
                    rank: ranks.get(&s.session).copied(),
                    end_ticks: ends.get(&s.session).copied(),
                };
                (s.session, origin)
            })
            .collect()
    }

    /// The events of every thread stream, merged in time order (pass two). Problems met
    /// while reading them are added to [`MemoryRecording::stream_warnings`].
    pub fn events(&self) -> Merger<ChunkSource<'_, R>> {
        let pids = self.pids();
        let aliases = self.registry.stack_aliases();
        let mut sources = Vec::new();
        for (part, info) in self.parts.iter().zip(&self.parts_info) {
            // The prefetcher serves one merge (its decoders carry that merge's stream state).
            let prefetch = part.prefetch.as_ref().filter(|p| !p.used.replace(true));
            for (&(session, stream), positions) in &part.chunks {
                let global = info.base.wrapping_add(session);
                let mut source = ChunkSource {
                    reader: &part.reader,
                    prefetch,
                    warnings: &self.stream_warnings,
                    damaged: &self.streams_damaged,
                    positions: positions.iter().copied().collect::<VecDeque<_>>(),
                    requested: 0,
                    session,
                    pid: pids.get(&global).copied(),
                    stream,
                    decoder: StreamDecoder::new(SessionId(global))
                        .with_stack_aliases(aliases.clone()),
                    payload: &part.payload,
                    to_job: part.to_job.as_ref(),
                };
                source.request_ahead();
                sources.push(source);
            }
        }
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
        let job = self.job_setup();
        let origins = if job.is_some() {
            self.origins()
        } else {
            Default::default()
        };
        let mut aggs: Vec<Aggregator> = configs
            .iter()
            .map(|&config| {
                let mut agg = Aggregator::new(config, self.calibration.clone());
                if let Some(rate) = self.sample_rate() {
                    agg.set_sample_rate(rate);
                }
                if self.leak_check() {
                    agg.set_leak_check(Some(self.leak_check_images()));
                }
                if let Some(setup) = &job {
                    agg.set_job(setup.clone());
                    for s in &self.sessions {
                        let origin = origins.get(&s.session).cloned().unwrap_or_default();
                        agg.add_session_from(s, origin);
                    }
                } else {
                    for s in &self.sessions {
                        agg.add_session(s);
                    }
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

    /// Whether the recording (one of the recordings, in a job's) was made with the leak
    /// check at exit (`tansa record --leak-check`).
    pub fn leak_check(&self) -> bool {
        self.parts_info
            .iter()
            .any(|p| p.meta.as_ref().is_some_and(super::asked_leak_check))
    }

    /// The process images of the recordings made with the leak check at exit: those it
    /// was to check (in a job read with recordings made without it, not all).
    pub fn leak_check_images(&self) -> Vec<super::SessionId> {
        self.sessions
            .iter()
            .map(|s| s.session)
            .filter(|&s| {
                self.parts_info
                    .iter()
                    .any(|p| p.holds(s) && p.meta.as_ref().is_some_and(super::asked_leak_check))
            })
            .map(super::SessionId)
            .collect()
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
