//! Reading the event chunks of a recording: on the merge's thread, or decompressed and
//! decoded ahead by a second thread (the prefetcher); and the warnings for damaged streams.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{Read, Seek};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use tansa_format::FormatError;
use tansa_format::container::{FramePos, Reader};
use tansa_format::memory::{self, split_thread_chunk};
use tansa_format::meta::Calibration;

use super::super::ids::SessionId;
use super::super::merge::{Event, EventSource, StreamDecoder, StreamError};
use super::super::model::StackAliases;

/// How a recording's timestamps become the report's when it covers several recordings:
/// its calibration to `CLOCK_MONOTONIC` nanoseconds, then a shift (see `job.rs`).
#[derive(Debug, Clone)]
pub(super) struct ToJob {
    pub(super) calibration: Calibration,
    pub(super) shift_ns: u64,
}

impl ToJob {
    /// Puts `events` on the report's timeline.
    pub(super) fn convert(&self, events: &mut [Event]) {
        for e in events {
            e.ts = self.calibration.to_ns(e.ts).saturating_add(self.shift_ns);
        }
    }

    /// One timestamp on the report's timeline.
    pub(super) fn ts(&self, ticks: u64) -> u64 {
        self.calibration.to_ns(ticks).saturating_add(self.shift_ns)
    }
}

/// What the prefetch thread produced for one chunk: its events, decoded with the state of
/// its stream (and, on a stream's last chunk, a warning if the stream ended damaged), or
/// why it could not.
type Batch = Result<(Vec<Event>, Option<String>), String>;

/// Chunks decompressed and decoded ahead by a second thread reading the same file. The
/// merge asks for them: each stream keeps [`LOOK_AHEAD`] chunks requested beyond the one it
/// reads, so the thread works in the order the merge will need the chunks and holds at
/// most that many decoded chunks per stream (reading in file order instead can mean
/// decoding the whole file ahead: a stream's first chunk may come last in the file).
#[derive(Debug)]
pub(super) struct Prefetch {
    requests: Sender<Request>,
    rx: Receiver<(FramePos, Batch)>,
    ready: RefCell<rustc_hash::FxHashMap<FramePos, Batch>>,
    /// Emptied event buffers go back to the thread, so that it does not allocate (and
    /// fault in) fresh memory for every chunk.
    recycle: Sender<Vec<Event>>,
    /// Whether a merge already used it (its decoders' state belongs to that merge).
    pub(super) used: std::cell::Cell<bool>,
    _thread: JoinHandle<()>,
}

/// Chunks each stream has requested beyond the one being read.
pub(super) const LOOK_AHEAD: usize = 2;

/// A chunk to decode: its offset, its stream, and whether it is the stream's last.
#[derive(Debug, Clone, Copy)]
struct Request {
    pos: FramePos,
    session: u32,
    stream: u32,
    last: bool,
}

impl Prefetch {
    /// Starts the thread over `input` (a recording opened again), whose session `s` is
    /// the report's session `base + s`; `pids` names the processes in warnings, by the
    /// report's session; `to_job` puts timestamps on the report's timeline.
    pub(super) fn start<R: Read + Seek + Send + 'static>(
        input: R,
        base: u32,
        pids: rustc_hash::FxHashMap<u32, u32>,
        to_job: Option<ToJob>,
        aliases: Option<std::sync::Arc<StackAliases>>,
    ) -> Option<Prefetch> {
        let (requests, requested) = channel::<Request>();
        let (tx, rx) = channel();
        let (recycle, recycled) = channel::<Vec<Event>>();
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
                    let session = base.wrapping_add(r.session);
                    let batch = match reader.payload_at(r.pos, &mut payload) {
                        Ok(_) => match split_thread_chunk(&payload) {
                            Some((_, _, bytes)) => {
                                let d =
                                    decoders.entry((r.session, r.stream)).or_insert_with(|| {
                                        StreamDecoder::new(SessionId(session))
                                            .with_stack_aliases(aliases.clone())
                                    });
                                let mut events = recycled
                                    .try_recv()
                                    .unwrap_or_else(|_| Vec::with_capacity(bytes.len() / 4));
                                events.clear();
                                d.push(bytes, &mut |e| events.push(e));
                                if r.last {
                                    d.finish();
                                }
                                if let Some(j) = &to_job {
                                    j.convert(&mut events);
                                }
                                let warning = d
                                    .new_damage()
                                    .map(|e| stream_damage(e, pids.get(&session), r.pos));
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
        thread.ok().map(|thread| Prefetch {
            requests,
            rx,
            ready: RefCell::new(rustc_hash::FxHashMap::default()),
            recycle,
            used: std::cell::Cell::new(false),
            _thread: thread,
        })
    }

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

/// The warning for a thread stream found damaged in the chunk at `pos`.
pub(super) fn stream_damage(e: StreamError, pid: Option<&u32>, pos: FramePos) -> String {
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
    pub(super) reader: &'a RefCell<Reader<R>>,
    pub(super) prefetch: Option<&'a Prefetch>,
    pub(super) warnings: &'a RefCell<Vec<String>>,
    pub(super) damaged: &'a std::cell::Cell<bool>,
    pub(super) positions: VecDeque<FramePos>,
    /// How many of `positions` (from the front) were requested from the prefetcher.
    pub(super) requested: usize,
    /// The session as its file numbers it.
    pub(super) session: u32,
    pub(super) pid: Option<u32>,
    pub(super) stream: u32,
    pub(super) decoder: StreamDecoder,
    /// Payload buffer shared by all streams (its allocation is reused).
    pub(super) payload: &'a RefCell<Vec<u8>>,
    /// To the report's timeline (reports over several recordings).
    pub(super) to_job: Option<&'a ToJob>,
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
    pub(super) fn request_ahead(&mut self) {
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
                    let start = out.len();
                    self.decoder.push(bytes, &mut |e| out.push(e));
                    if let Some(j) = self.to_job {
                        j.convert(&mut out[start..]);
                    }
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
