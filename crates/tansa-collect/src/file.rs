//! Writing a memory recording.
//!
//! Ring bytes are buffered per stream and written as chunks (at 256 KiB, when a stream
//! closes, and at least once a second), compressed on a writer thread so the collector's
//! draining never waits for zstd; the chunks of thread and meta streams are stored
//! uncompressed while the CPUs are busy ([`Compression::Auto`]). When the target is gone, the meta streams are parsed to
//! find every address used, those are resolved to symbols, and the symbol table, the clock
//! calibration and the end frame close the file.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tansa_format::container::{FrameEncoder, FrameType, Kind, Writer};
use tansa_format::memory::{
    self, OwnAllocator, SessionEnd, SessionInfo, SessionLosses, SessionPlace, Unrecorded,
    VolatileSegment, meta_chunk_prefix, thread_chunk_prefix,
};
use tansa_format::meta::{Calibration, CalibrationPoint, ClockSource, RecordingMeta};

use crate::contention::CpuContention;
use crate::symbolize::{AddressSet, BackgroundResolver, module_file};
use crate::{CollectError, Sink};
use tansa_wire::event::{DecodeError, Decoder, Record, StreamState};

const CHUNK: usize = 256 * 1024;
const MAX_AGE: Duration = Duration::from_secs(1);
/// How often a recording writes its clock calibration so far.
const CALIBRATION_EVERY: Duration = Duration::from_secs(2);

/// A stream of a session: a thread stream, or (`None`) the meta stream.
type StreamKey = (u32, Option<u32>);

/// Said back by the writer thread of a durable recording: the stream's first `.1` bytes
/// are in the file (written with `write(2)`: in the page cache, which outlives us).
type Ack = (StreamKey, u64);

enum Job {
    /// A frame, and what its being in the file means for a durable recording.
    Frame(FrameType, Vec<u8>, Option<Ack>),
    /// A chunk of an event stream (thread events, or a process's module and stack
    /// definitions), compressed as [`Compression`] decides. When `keyed`, its first 8
    /// payload bytes (session and stream) are stored raw, so that readers index thread
    /// chunks without decompressing them.
    Events {
        ty: FrameType,
        payload: Vec<u8>,
        ack: Option<Ack>,
        keyed: bool,
    },
    Flush,
}

struct Buffer {
    bytes: Vec<u8>,
    since: Instant,
}

/// A [`Sink`] that writes a recording file.
pub struct FileSink {
    path: PathBuf,
    jobs: Option<SyncSender<Job>>,
    writer: Option<JoinHandle<io::Result<Written>>>,
    threads: HashMap<(u32, u32), Buffer>,
    metas: HashMap<u32, Buffer>,
    meta_all: HashMap<u32, Vec<u8>>,
    calibration: Vec<CalibrationPoint>,
    clock: ClockSource,
    raw_bytes: u64,
    /// Reads the files the recording's stacks go through while it runs.
    resolver: BackgroundResolver,
    /// How far each session's meta stream was scanned for modules and stacks.
    scanned: HashMap<u32, (usize, StreamState)>,
    /// The file of each module (numbered by the resolver), by session and module id.
    module_files: FxHashMap<(u32, u32), u32>,
    /// Durable recording: what the writer says is in the file, and per stream the bytes
    /// handed to it and those it has written.
    durable: Option<Durable>,
    last_calibration_frame: Instant,
    /// The recorded executables and runtime modules, for the programs that allocate past
    /// the agent's hooks.
    own: crate::own_allocator::Watch,
}

/// A durable recording's bookkeeping (see [`Sink::stored`]).
#[derive(Debug)]
struct Durable {
    acks: Receiver<Ack>,
    sent: HashMap<StreamKey, u64>,
    stored: HashMap<StreamKey, u64>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// When the chunks of a recording's event streams (thread events, module and stack
/// definitions) are compressed (the other frames always are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Unless the CPUs were busy lately (see [`crate::contention`]): compressing would
    /// then take CPU time from the program recorded.
    #[default]
    Auto,
    /// Always: the smallest file, whatever it costs the program.
    Always,
    /// Never: the least CPU time; files are about 4 times larger.
    Never,
}

/// What the writer wrote.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Written {
    /// Size of the recording in bytes.
    pub size: u64,
    /// Event bytes stored uncompressed because the CPUs were busy ([`Compression::Auto`]).
    pub stored_while_busy: u64,
    /// The CPU quota of tansa's control group (in CPUs) when it was used up at times, one
    /// reason the CPUs counted as busy.
    pub quota_used_up: Option<f64>,
    /// The module files whose symbols could not be read, one line each, as reports warn
    /// ([`tansa_format::symtab::SymbolTable::unresolved_notes`]).
    pub unresolved: Vec<String>,
    /// The recorded executables that allocate past the agent's hooks, one line each, as
    /// reports warn ([`tansa_format::memory::OwnAllocator::note`]).
    pub own_allocators: Vec<String>,
}

fn writer_thread(
    mut writer: Writer<BufWriter<File>>,
    jobs: Receiver<Job>,
    acks: Option<Sender<Ack>>,
    compression: Compression,
) -> io::Result<Written> {
    let mut stored_while_busy = 0;
    let mut encoder = FrameEncoder::new(-1)?;
    let mut contention = (compression == Compression::Auto).then(CpuContention::start);
    let mut scratch = Vec::new();
    for job in jobs {
        let ack = match job {
            Job::Frame(ty, payload, ack) => {
                scratch.clear();
                encoder.encode(ty, &payload, &mut scratch)?;
                writer.raw(&scratch)?;
                ack
            }
            Job::Events {
                ty,
                payload,
                ack,
                keyed,
            } => {
                let busy = contention.as_mut().is_some_and(CpuContention::cpus_busy);
                if busy {
                    stored_while_busy += payload.len() as u64;
                }
                encoder.set_compress(compression != Compression::Never && !busy);
                scratch.clear();
                if keyed {
                    encoder.encode_keyed(ty, &payload, &mut scratch)?;
                } else {
                    encoder.encode(ty, &payload, &mut scratch)?;
                }
                encoder.set_compress(true);
                writer.raw(&scratch)?;
                ack
            }
            Job::Flush => {
                writer.flush()?;
                None
            }
        };
        if let (Some(ack), Some(acks)) = (ack, &acks) {
            // In the file (everything before it too: frames are written in order) before
            // the collector lets the agent reuse that ring space.
            writer.flush()?;
            // The collector may be gone (it finished): nothing to tell then.
            let _ = acks.send(ack);
        }
    }
    let size = writer.bytes_written();
    writer.finish()?;
    Ok(Written {
        size,
        stored_while_busy,
        quota_used_up: contention.as_ref().and_then(CpuContention::quota_used_up),
        unresolved: Vec::new(),
        own_allocators: Vec::new(),
    })
}

impl FileSink {
    /// Writes the recording into `file` (created by the caller, see
    /// `tansa_format::output`; `path` names it in messages), starting with its first frame.
    pub fn create(
        file: File,
        path: &Path,
        meta: &RecordingMeta,
        clock: ClockSource,
        compression: Compression,
    ) -> Result<FileSink, CollectError> {
        Self::create_with(file, path, meta, clock, compression, false)
    }

    /// [`FileSink::create`] for a durable recording ([`crate::Config::segment_dir`]): the
    /// sink tells the collector which stream bytes are in the file ([`Sink::stored`]).
    pub fn create_durable(
        file: File,
        path: &Path,
        meta: &RecordingMeta,
        clock: ClockSource,
        compression: Compression,
    ) -> Result<FileSink, CollectError> {
        Self::create_with(file, path, meta, clock, compression, true)
    }

    fn create_with(
        file: File,
        path: &Path,
        meta: &RecordingMeta,
        clock: ClockSource,
        compression: Compression,
        durable: bool,
    ) -> Result<FileSink, CollectError> {
        let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, file), Kind::Memory)?;
        writer.value(FrameType::META, meta)?;
        // The clock and a first point, at once: a recording whose recorder is killed outright
        // can then still be completed with the right clock (`salvage`). Readers use the
        // last calibration frame.
        writer.value(
            FrameType::CALIBRATION,
            &Calibration {
                source: clock,
                points: vec![CalibrationPoint {
                    ticks: crate::clock_now(clock == ClockSource::Tsc),
                    ns: crate::sys::monotonic_ns(),
                }],
            },
        )?;
        if durable {
            // The header and META in the file at once: a salvage needs them.
            writer.flush()?;
        }
        let (tx, rx) = sync_channel(64);
        let (ack_tx, ack_rx) = if durable {
            let (t, r) = channel();
            (Some(t), Some(r))
        } else {
            (None, None)
        };
        let handle = std::thread::Builder::new()
            .name("tansa-writer".into())
            .spawn(move || writer_thread(writer, rx, ack_tx, compression))?;
        Ok(FileSink {
            path: path.to_path_buf(),
            jobs: Some(tx),
            writer: Some(handle),
            threads: HashMap::new(),
            metas: HashMap::new(),
            meta_all: HashMap::new(),
            calibration: Vec::new(),
            clock,
            raw_bytes: 0,
            resolver: BackgroundResolver::start(),
            scanned: HashMap::new(),
            module_files: FxHashMap::default(),
            durable: ack_rx.map(|acks| Durable {
                acks,
                sent: HashMap::new(),
                stored: HashMap::new(),
            }),
            last_calibration_frame: Instant::now(),
            own: Default::default(),
        })
    }

    /// Counts `payload_bytes` more bytes of `key` handed to the writer; the ack to ask for.
    fn sending(&mut self, key: StreamKey, payload_bytes: usize) -> Option<Ack> {
        let d = self.durable.as_mut()?;
        let sent = d.sent.entry(key).or_insert(0);
        *sent += payload_bytes as u64;
        Some((key, *sent))
    }

    fn send(&self, job: Job) -> Result<(), CollectError> {
        self.jobs
            .as_ref()
            .and_then(|tx| tx.send(job).ok())
            .ok_or_else(|| CollectError::Sink("the recording writer stopped (disk full?)".into()))
    }

    fn flush_thread(&mut self, key: (u32, u32)) -> Result<(), CollectError> {
        if let Some(buf) = self.threads.get_mut(&key)
            && buf.bytes.len() > 8
        {
            let payload =
                std::mem::replace(&mut buf.bytes, thread_chunk_prefix(key.0, key.1).to_vec());
            buf.since = Instant::now();
            let ack = self.sending((key.0, Some(key.1)), payload.len() - 8);
            self.send(Job::Events {
                ty: memory::THREAD_CHUNK,
                payload,
                ack,
                keyed: true,
            })?;
        }
        Ok(())
    }

    fn flush_meta(&mut self, session: u32) -> Result<(), CollectError> {
        if let Some(buf) = self.metas.get_mut(&session)
            && buf.bytes.len() > 4
        {
            let payload = std::mem::replace(&mut buf.bytes, meta_chunk_prefix(session).to_vec());
            buf.since = Instant::now();
            let ack = self.sending((session, None), payload.len() - 4);
            self.send(Job::Events {
                ty: memory::META_CHUNK,
                payload,
                ack,
                keyed: false,
            })?;
        }
        Ok(())
    }

    /// Scans the complete records added to a session's meta stream, asking the resolver
    /// to resolve ahead the frames of every stack defined.
    fn scan_meta(&mut self, session: u32) {
        let Some(all) = self.meta_all.get(&session) else {
            return;
        };
        let (pos, state) = self.scanned.get(&session).copied().unwrap_or_default();
        let Some(rest) = all.get(pos..) else {
            return;
        };
        let mut d = Decoder::with_state(rest, state);
        let mut used = 0;
        while let Some(r) = d.next() {
            match r {
                Ok(Record::ModuleLoad(m)) => {
                    self.own.module(session, m.path);
                    let file = self.resolver.file_id(module_file(&m));
                    self.module_files.insert((session, m.id), file);
                }
                Ok(Record::StackDef { frames, .. }) => {
                    for f in frames.filter(|f| f.module != 0) {
                        if let Some(&file) = self.module_files.get(&(session, f.module)) {
                            self.resolver.ahead_in(file, f.offset);
                        }
                    }
                }
                Ok(_) => {}
                Err(DecodeError::Truncated { .. }) => break,
                // A damaged stream: the end of the recording reports it.
                Err(_) => {
                    used = rest.len();
                    break;
                }
            }
            used = d.position();
        }
        self.scanned.insert(session, (pos + used, d.state()));
        self.resolver.send_ahead();
    }

    /// Uncompressed stream bytes received so far.
    pub fn raw_bytes(&self) -> u64 {
        self.raw_bytes
    }

    /// Adds a frame (written before the symbols and the end marker).
    pub fn add_frame(&mut self, ty: FrameType, payload: Vec<u8>) -> Result<(), CollectError> {
        self.send(Job::Frame(ty, payload, None))
    }

    /// Adds a frame whose payload is `value` serialized with postcard.
    pub fn add_value<T: serde::Serialize>(
        &mut self,
        ty: FrameType,
        value: &T,
    ) -> Result<(), CollectError> {
        let bytes = postcard::to_stdvec(value)
            .map_err(|e| CollectError::Sink(format!("cannot encode frame {ty:?}: {e}")))?;
        self.add_frame(ty, bytes)
    }

    /// Flushes every buffer, resolves symbols and closes the file. `progress` is called
    /// before each module is symbolized with (index, count, path).
    pub fn finish(
        mut self,
        progress: &mut dyn FnMut(usize, usize, &str),
    ) -> Result<Written, CollectError> {
        let keys: Vec<_> = self.threads.keys().copied().collect();
        for k in keys {
            self.flush_thread(k)?;
        }
        let sessions: Vec<_> = self.metas.keys().copied().collect();
        for s in sessions {
            self.flush_meta(s)?;
        }
        let calibration = Calibration {
            source: self.clock,
            points: std::mem::take(&mut self.calibration),
        };
        self.send(Job::Frame(
            FrameType::CALIBRATION,
            encode(&calibration)?,
            None,
        ))?;
        let mut addresses = AddressSet::default();
        let mut ids: Vec<_> = self.meta_all.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            addresses.add_meta_stream(id, &self.meta_all[&id]);
        }
        let own = self.own.own_allocators();
        if !own.is_empty() {
            self.send(Job::Frame(memory::OWN_ALLOCATORS, encode(&own)?, None))?;
        }
        let resolver = std::mem::take(&mut self.resolver);
        let table = resolver.resolve(addresses, progress);
        let unresolved = table.unresolved_notes();
        self.send(Job::Frame(FrameType::SYMBOLS, encode(&table)?, None))?;
        drop(self.jobs.take());
        let written = self
            .writer
            .take()
            .map(|h| h.join())
            .transpose()
            .map_err(|_| CollectError::Sink("the recording writer panicked".into()))?
            .transpose()?
            .unwrap_or_default();
        Ok(Written {
            unresolved,
            own_allocators: own.iter().map(OwnAllocator::note).collect(),
            ..written
        })
    }
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CollectError> {
    postcard::to_stdvec(value).map_err(|e| CollectError::Sink(format!("cannot encode: {e}")))
}

impl Sink for FileSink {
    fn session_started(&mut self, info: &SessionInfo) -> Result<(), CollectError> {
        self.own.session(info);
        self.send(Job::Frame(memory::SESSION, encode(info)?, None))?;
        self.metas.insert(
            info.session,
            Buffer {
                bytes: meta_chunk_prefix(info.session).to_vec(),
                since: Instant::now(),
            },
        );
        Ok(())
    }

    fn session_place(&mut self, place: &SessionPlace) -> Result<(), CollectError> {
        self.send(Job::Frame(memory::SESSION_PLACE, encode(place)?, None))
    }

    fn session_python_malloc(&mut self, session: u32) {
        self.own.python_malloc(session);
    }

    fn volatile_segment(&mut self, segment: &VolatileSegment) -> Result<(), CollectError> {
        // In the file at once: it matters only if the recorder is killed.
        self.send(Job::Frame(memory::VOLATILE_SEGMENT, encode(segment)?, None))?;
        self.send(Job::Flush)
    }

    fn meta(&mut self, session: u32, bytes: &[u8]) -> Result<(), CollectError> {
        self.raw_bytes += bytes.len() as u64;
        self.meta_all
            .entry(session)
            .or_default()
            .extend_from_slice(bytes);
        let buf = self.metas.entry(session).or_insert_with(|| Buffer {
            bytes: meta_chunk_prefix(session).to_vec(),
            since: Instant::now(),
        });
        buf.bytes.extend_from_slice(bytes);
        if buf.bytes.len() >= CHUNK {
            self.flush_meta(session)?;
        }
        self.scan_meta(session);
        Ok(())
    }

    fn thread(&mut self, session: u32, stream: u32, bytes: &[u8]) -> Result<(), CollectError> {
        self.raw_bytes += bytes.len() as u64;
        let buf = self
            .threads
            .entry((session, stream))
            .or_insert_with(|| Buffer {
                bytes: thread_chunk_prefix(session, stream).to_vec(),
                since: Instant::now(),
            });
        buf.bytes.extend_from_slice(bytes);
        if buf.bytes.len() >= CHUNK {
            self.flush_thread((session, stream))?;
        }
        Ok(())
    }

    fn stream_closed(&mut self, session: u32, stream: u32) -> Result<(), CollectError> {
        self.flush_thread((session, stream))?;
        self.threads.remove(&(session, stream));
        Ok(())
    }

    fn session_ended(&mut self, end: &SessionEnd) -> Result<(), CollectError> {
        self.flush_meta(end.session)?;
        let keys: Vec<_> = self
            .threads
            .keys()
            .filter(|k| k.0 == end.session)
            .copied()
            .collect();
        for k in keys {
            self.flush_thread(k)?;
        }
        self.send(Job::Frame(memory::SESSION_END, encode(end)?, None))
    }

    fn session_losses(&mut self, losses: &SessionLosses) -> Result<(), CollectError> {
        self.send(Job::Frame(memory::SESSION_LOSSES, encode(losses)?, None))
    }

    fn unrecorded(&mut self, process: &Unrecorded) -> Result<(), CollectError> {
        self.send(Job::Frame(memory::UNRECORDED, encode(process)?, None))
    }

    fn watermark(&mut self, _ticks: u64) -> Result<(), CollectError> {
        Ok(())
    }

    fn stored(&mut self, session: u32, stream: Option<u32>) -> Option<u64> {
        let d = self.durable.as_mut()?;
        for (key, upto) in d.acks.try_iter() {
            d.stored.insert(key, upto);
        }
        Some(d.stored.get(&(session, stream)).copied().unwrap_or(0))
    }

    fn store_soon(
        &mut self,
        session: u32,
        stream: Option<u32>,
        at_least: u64,
    ) -> Result<(), CollectError> {
        match stream {
            Some(stream) => {
                let waiting = self
                    .threads
                    .get(&(session, stream))
                    .map_or(0, |b| b.bytes.len().saturating_sub(8));
                if waiting as u64 >= at_least {
                    self.flush_thread((session, stream))?;
                }
            }
            None => {
                let waiting = self
                    .metas
                    .get(&session)
                    .map_or(0, |b| b.bytes.len().saturating_sub(4));
                if waiting as u64 >= at_least {
                    self.flush_meta(session)?;
                }
            }
        }
        Ok(())
    }

    fn tick(&mut self, point: CalibrationPoint) -> Result<(), CollectError> {
        if self
            .calibration
            .last()
            .is_none_or(|p| p.ticks < point.ticks)
        {
            self.calibration.push(point);
        }
        // Every recording has its clock calibration in the file every few seconds (the
        // first and the latest point), for a salvage (readers use the last one).
        if self.calibration.len() >= 2
            && (self.calibration.len() == 2
                || self.last_calibration_frame.elapsed() >= CALIBRATION_EVERY)
        {
            self.last_calibration_frame = Instant::now();
            let n = self.calibration.len();
            let calibration = Calibration {
                source: self.clock,
                points: vec![self.calibration[0], self.calibration[n - 1]],
            };
            self.send(Job::Frame(
                FrameType::CALIBRATION,
                encode(&calibration)?,
                None,
            ))?;
        }
        // Write out anything older than a second, into the file (not only the writer's
        // buffer), so a crash of tansa itself loses little: a recorder killed outright
        // leaves a file that `salvage::complete_leftover` completes.
        let stale_threads: Vec<_> = self
            .threads
            .iter()
            .filter(|(_, b)| b.since.elapsed() >= MAX_AGE)
            .map(|(k, _)| *k)
            .collect();
        let stale_metas: Vec<_> = self
            .metas
            .iter()
            .filter(|(_, b)| b.since.elapsed() >= MAX_AGE)
            .map(|(k, _)| *k)
            .collect();
        if stale_threads.is_empty() && stale_metas.is_empty() {
            return Ok(());
        }
        for k in stale_threads {
            self.flush_thread(k)?;
        }
        for s in stale_metas {
            self.flush_meta(s)?;
        }
        self.send(Job::Flush)
    }
}
