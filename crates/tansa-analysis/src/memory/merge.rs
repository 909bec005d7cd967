//! From thread streams to one time-ordered sequence of events.
//!
//! Each thread writes its own stream; causality between threads (a block freed by one
//! thread and handed out again to another) is only visible in timestamps. The agent takes
//! the timestamp of a release before the release and that of an allocation after it, so
//! ordering all events by timestamp puts every release before the allocation that reuses
//! its address. A `realloc` is split in two events for that reason: its release at the
//! time the call began and its allocation at the time it returned.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use tansa_wire::event::{
    AllocOp, DecodeError, Decoder, ImproperEvent, LeakClass, LeakScan, Record, StreamState,
};

use super::ids::{SessionId, StackId};
use super::model::StackAliases;

/// Largest block an allocator can hand out (`PTRDIFF_MAX`): a recorded allocation that is
/// larger is damage.
pub const MAX_BLOCK_SIZE: u64 = i64::MAX as u64;

/// Longest record a thread stream holds (a thread's start with its name is the longest,
/// about 100 bytes): an unfinished record that grows beyond this is damage, not a record
/// continued in the next chunk.
pub const MAX_THREAD_RECORD: usize = 4096;

/// Why a thread stream stopped being decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The stream ends inside a record (normal for a process that died while writing).
    #[error("the stream ends in the middle of an event record")]
    Truncated,
    /// A byte that starts no known record, or a malformed field.
    #[error("an unreadable event record")]
    Unreadable {
        /// Offset of the record in the stream (from its first chunk).
        offset: u64,
    },
    /// An allocation larger than any allocator can return.
    #[error("an allocation of {size} bytes, more than any allocator can return")]
    ImpossibleSize {
        /// The size recorded.
        size: u64,
        /// Offset of the record in the stream.
        offset: u64,
    },
    /// A record that does not end within [`MAX_THREAD_RECORD`] bytes.
    #[error("an event record that never ends")]
    Unending {
        /// Offset of the record in the stream.
        offset: u64,
    },
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// An allocation.
    Alloc {
        /// Function.
        op: AllocOp,
        /// Block.
        ptr: u64,
        /// Bytes requested.
        size: u64,
        /// Stack id.
        stack: StackId,
    },
    /// A `free`.
    Free {
        /// Block (0 for `free(NULL)`).
        ptr: u64,
        /// Stack id (0 if free stacks were not recorded).
        stack: StackId,
    },
    /// The release half of a `realloc` (also the whole of `realloc(p, 0)`).
    ReallocRelease {
        /// Old block (0 for `realloc(NULL, n)`).
        old: u64,
        /// New block (0 when the call freed the old block).
        new: u64,
        /// Stack id.
        stack: StackId,
    },
    /// The allocation half of a `realloc` (only when it returned a block; the old block
    /// is in the release half).
    ReallocAlloc {
        /// New block.
        new: u64,
        /// Bytes requested.
        size: u64,
        /// Stack id.
        stack: StackId,
    },
    /// A call refused because its pointer was never allocated (online mode). Boxed: it is
    /// rare, and keeps every event small.
    Improper(Box<ImproperEvent>),
    /// The thread's name (when it started writing, or changed).
    ThreadName(Box<str>),
    /// The agent could not record this many events.
    Lost(u64),
    /// The leak check at exit found this block unreachable (it is live at this point of
    /// its thread's stream).
    Unreached {
        /// Block.
        ptr: u64,
        /// How.
        class: LeakClass,
    },
    /// The leak check at exit ended. Boxed: one per process image.
    LeakScan(Box<LeakScan>),
}

impl EventKind {
    /// The stack the event was recorded with ([`StackId::NONE`] for kinds without one).
    pub fn stack(&self) -> StackId {
        match self {
            EventKind::Alloc { stack, .. }
            | EventKind::Free { stack, .. }
            | EventKind::ReallocRelease { stack, .. }
            | EventKind::ReallocAlloc { stack, .. } => *stack,
            EventKind::Improper(i) => StackId(i.stack),
            _ => StackId::NONE,
        }
    }

    /// Replaces the event's stack id with `f` of it (kinds without one are left as they are).
    pub fn map_stack(&mut self, f: impl FnOnce(StackId) -> StackId) {
        match self {
            EventKind::Alloc { stack, .. }
            | EventKind::Free { stack, .. }
            | EventKind::ReallocRelease { stack, .. }
            | EventKind::ReallocAlloc { stack, .. } => *stack = f(*stack),
            EventKind::Improper(i) => i.stack = f(StackId(i.stack)).0,
            _ => {}
        }
    }
}

/// An event of one thread of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Timestamp (recording clock).
    pub ts: u64,
    /// Session.
    pub session: SessionId,
    /// Thread id.
    pub tid: u32,
    /// What happened.
    pub kind: EventKind,
}

impl StreamError {
    /// Offset of the bad record in the stream, when known.
    pub fn offset(&self) -> Option<u64> {
        match *self {
            StreamError::Truncated => None,
            StreamError::Unreadable { offset }
            | StreamError::ImpossibleSize { offset, .. }
            | StreamError::Unending { offset } => Some(offset),
        }
    }
}

/// Decodes one thread stream delivered in arbitrary pieces.
#[derive(Debug)]
pub struct StreamDecoder {
    session: SessionId,
    tid: u32,
    state: StreamState,
    carry: Vec<u8>,
    /// Stream offset of the first byte of `carry` (or of the next piece).
    consumed: u64,
    error: Option<StreamError>,
    reported: bool,
    /// Stack ids its session defined twice (see [`StackAliases`]).
    aliases: Option<Arc<StackAliases>>,
    /// The leak check's findings read so far, held until its `LeakScan` record says when
    /// the check ended (see [`StreamDecoder::decode`]).
    unreached: Vec<(u64, LeakClass)>,
}

impl StreamDecoder {
    /// A decoder for a stream of `session`.
    pub fn new(session: SessionId) -> Self {
        StreamDecoder {
            session,
            tid: 0,
            state: StreamState::default(),
            carry: Vec::new(),
            consumed: 0,
            error: None,
            reported: false,
            aliases: None,
            unreached: Vec::new(),
        }
    }

    /// Gives each event the first id of its stack (from [`Registry::stack_aliases`]:
    /// the recording's definitions must all be read before its events are).
    ///
    /// [`Registry::stack_aliases`]: super::model::Registry::stack_aliases
    pub fn with_stack_aliases(mut self, aliases: Option<Arc<StackAliases>>) -> Self {
        self.aliases = aliases;
        self
    }

    /// Decodes the complete records in `bytes` (after any carried partial record), handing
    /// each event to `out`. A partial record at the end is kept for the next call.
    pub fn push(&mut self, bytes: &[u8], out: &mut dyn FnMut(Event)) {
        if self.error.is_some() {
            return;
        }
        if self.carry.is_empty() {
            let used = self.decode(bytes, out);
            self.carry.extend_from_slice(&bytes[used..]);
            self.consumed += used as u64;
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(bytes);
            let used = self.decode(&joined, out);
            joined.drain(..used);
            self.carry = joined;
            self.consumed += used as u64;
        }
        if self.error.is_none() && self.carry.len() > MAX_THREAD_RECORD {
            self.error = Some(StreamError::Unending {
                offset: self.consumed,
            });
            self.carry = Vec::new();
        }
    }

    /// Ends the stream: an incomplete record left over is reported.
    pub fn finish(&mut self) -> Option<StreamError> {
        if self.error.is_none() && !self.carry.is_empty() {
            self.error = Some(StreamError::Truncated);
        }
        self.error
    }

    /// The decoding error that stopped this stream, if any.
    pub fn error(&self) -> Option<StreamError> {
        self.error
    }

    /// The damage that stopped this stream, the first time it is asked for after it
    /// happened (a record cut short at the very end of the stream is not damage).
    pub fn new_damage(&mut self) -> Option<StreamError> {
        match self.error {
            Some(StreamError::Truncated) | None => None,
            Some(e) if !self.reported => {
                self.reported = true;
                Some(e)
            }
            Some(_) => None,
        }
    }

    fn decode(&mut self, bytes: &[u8], out: &mut dyn FnMut(Event)) -> usize {
        let mut d = Decoder::with_state(bytes, self.state);
        let mut used = 0;
        let session = self.session;
        let base = self.consumed;
        while let Some(r) = d.next() {
            let rec = match r {
                Ok(rec) => rec,
                Err(DecodeError::Truncated { .. }) => break,
                Err(DecodeError::Corrupt { offset }) => {
                    self.error = Some(StreamError::Unreadable {
                        offset: base + offset as u64,
                    });
                    return bytes.len();
                }
            };
            // Sizes are trusted only as far as an allocator could have returned them.
            let size = match rec {
                Record::Alloc(a) => a.size,
                Record::Realloc(r) if r.new_ptr != 0 => r.size,
                _ => 0,
            };
            if size > MAX_BLOCK_SIZE {
                self.error = Some(StreamError::ImpossibleSize {
                    size,
                    offset: base + used as u64,
                });
                return bytes.len();
            }
            used = d.position();
            self.state = d.state();
            let aliases = self.aliases.as_deref();
            let mut emit = |ts, kind| {
                let mut e = Event {
                    ts,
                    session,
                    tid: self.tid,
                    kind,
                };
                if let Some(a) = aliases {
                    a.apply(&mut e);
                }
                out(e)
            };
            match rec {
                Record::ThreadStart { tid, ts, name, .. } => {
                    self.tid = tid;
                    out(Event {
                        ts,
                        session,
                        tid,
                        kind: EventKind::ThreadName(String::from_utf8_lossy(name).into()),
                    });
                }
                Record::ThreadName { name } => emit(
                    self.state.prev_ts,
                    EventKind::ThreadName(String::from_utf8_lossy(name).into()),
                ),
                Record::ThreadEnd { .. } => {}
                Record::Alloc(a) => emit(
                    a.ts,
                    EventKind::Alloc {
                        op: a.op,
                        ptr: a.ptr,
                        size: a.size,
                        stack: StackId(a.stack),
                    },
                ),
                Record::Realloc(r) => {
                    if r.old_ptr != 0 || r.new_ptr == 0 {
                        emit(
                            r.ts_begin,
                            EventKind::ReallocRelease {
                                old: r.old_ptr,
                                new: r.new_ptr,
                                stack: StackId(r.stack),
                            },
                        );
                    }
                    if r.new_ptr != 0 {
                        emit(
                            r.ts_end,
                            EventKind::ReallocAlloc {
                                new: r.new_ptr,
                                size: r.size,
                                stack: StackId(r.stack),
                            },
                        );
                    }
                }
                Record::Free(f) => emit(
                    f.ts,
                    EventKind::Free {
                        ptr: f.ptr,
                        stack: StackId(f.stack),
                    },
                ),
                Record::Improper(i) => emit(i.ts, EventKind::Improper(Box::new(i))),
                Record::Lost { count } => emit(self.state.prev_ts, EventKind::Lost(count)),
                // The check's findings carry no time of their own, and the thread that made
                // it may have had no event for a long while: other threads allocated
                // meanwhile, and at that thread's last event the blocks they lost were not
                // allocated yet (a finding about a block not allocated is dropped). They
                // are given the time the check ended, with its summary, which follows them.
                // A check cut short (no summary) classified nothing.
                Record::Unreached { ptr, class } => self.unreached.push((ptr, class)),
                Record::LeakScan(scan) => {
                    for (ptr, class) in std::mem::take(&mut self.unreached) {
                        emit(scan.ts, EventKind::Unreached { ptr, class });
                    }
                    emit(scan.ts, EventKind::LeakScan(Box::new(scan)))
                }
                // Meta records never appear in thread streams.
                Record::StackDef { .. } | Record::ModuleLoad(_) | Record::ModuleUnload { .. } => {}
                // CPU samples belong to CPU recordings.
                Record::Sample { .. } => {}
            }
        }
        used
    }
}

/// A source of one stream's events, in stream order.
pub trait EventSource {
    /// Puts the next batch of events in `out` (empty on entry; its allocation may be
    /// reused or replaced); false when the stream is exhausted.
    fn refill(&mut self, out: &mut Vec<Event>) -> bool;
}

/// Merges streams by timestamp (a k-way merge over per-stream batches). Events are taken
/// from the current stream for as long as they are not later than every other stream's
/// head, so the heap is only touched where streams interleave; [`Merger::for_each_event`]
/// hands out such runs by reference, without moving the events.
#[derive(Debug)]
pub struct Merger<S> {
    sources: Vec<S>,
    buffers: Vec<Vec<Event>>,
    /// Next unread event of each buffer.
    pos: Vec<usize>,
    /// Streams other than `current` with a buffered event, by their head's timestamp.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    current: Option<usize>,
    primed: bool,
}

/// What an event taken out of a buffer by [`Merger::next`] leaves behind.
const TAKEN: Event = Event {
    ts: 0,
    session: SessionId(0),
    tid: 0,
    kind: EventKind::Lost(0),
};

impl<S: EventSource> Merger<S> {
    /// A merger over `sources`.
    pub fn new(sources: Vec<S>) -> Self {
        let n = sources.len();
        Merger {
            sources,
            buffers: (0..n).map(|_| Vec::new()).collect(),
            pos: vec![0; n],
            heap: BinaryHeap::with_capacity(n),
            current: None,
            primed: false,
        }
    }

    /// Makes sure stream `i` has an unread event; false when it is exhausted.
    fn fill(&mut self, i: usize) -> bool {
        while self.pos[i] >= self.buffers[i].len() {
            self.buffers[i].clear();
            self.pos[i] = 0;
            if !self.sources[i].refill(&mut self.buffers[i]) {
                return false;
            }
        }
        true
    }

    fn prime(&mut self) {
        if !self.primed {
            self.primed = true;
            for i in 0..self.sources.len() {
                if self.fill(i) {
                    let ts = self.buffers[i][self.pos[i]].ts;
                    self.heap.push(Reverse((ts, i)));
                }
            }
        }
    }

    /// Hands every remaining event to `f`, in time order, by reference.
    pub fn for_each_event(&mut self, mut f: impl FnMut(&Event)) {
        self.prime();
        loop {
            let i = match self.current.take() {
                Some(i) => i,
                None => match self.heap.pop() {
                    Some(Reverse((_, i))) => i,
                    None => return,
                },
            };
            if !self.fill(i) {
                continue;
            }
            let limit = self.heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
            let buf = &self.buffers[i];
            let mut p = self.pos[i];
            while let Some(e) = buf.get(p)
                && e.ts <= limit
            {
                f(e);
                p += 1;
            }
            self.pos[i] = p;
            match buf.get(p) {
                // Another stream's head comes first now.
                Some(e) => self.heap.push(Reverse((e.ts, i))),
                // The batch is done: refill and go on with this stream.
                None => self.current = Some(i),
            }
        }
    }
}

impl<S: EventSource> Iterator for Merger<S> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.prime();
        loop {
            if let Some(i) = self.current {
                if !self.fill(i) {
                    self.current = None;
                    continue;
                }
                let p = self.pos[i];
                let ts = self.buffers[i][p].ts;
                if self.heap.peek().is_none_or(|Reverse((t, _))| ts <= *t) {
                    self.pos[i] = p + 1;
                    return Some(std::mem::replace(&mut self.buffers[i][p], TAKEN));
                }
                self.heap.push(Reverse((ts, i)));
                self.current = None;
            }
            let Reverse((_, i)) = self.heap.pop()?;
            self.current = Some(i);
        }
    }
}

/// Orders events that arrive incrementally (online mode): events are held until the
/// collector's watermark says nothing earlier can still arrive.
#[derive(Debug, Default)]
pub struct OnlineOrder {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    events: rustc_hash::FxHashMap<u64, Event>,
    seq: u64,
}

impl OnlineOrder {
    /// Adds an event.
    pub fn push(&mut self, e: Event) {
        self.seq += 1;
        self.heap.push(Reverse((e.ts, self.seq)));
        self.events.insert(self.seq, e);
    }

    /// The earliest held event if its timestamp is below `watermark`.
    pub fn peek_before(&self, watermark: u64) -> Option<&Event> {
        let Reverse((ts, seq)) = self.heap.peek()?;
        (*ts < watermark).then(|| &self.events[seq])
    }

    /// Removes the earliest held event.
    pub fn pop(&mut self) -> Option<Event> {
        let Reverse((_, seq)) = self.heap.pop()?;
        self.events.remove(&seq)
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use tansa_wire::event::{
        AllocEvent, ByteSink, EventBuf, FreeEvent, ReallocEvent, encode_thread_start,
    };

    struct V(Vec<u8>);
    impl ByteSink for V {
        fn put(&mut self, b: &[u8]) {
            self.0.extend_from_slice(b);
        }
    }

    fn stream(tid: u32, events: &[(u64, u64, bool)]) -> Vec<u8> {
        // (ts, ptr, is_alloc)
        let mut v = V(Vec::new());
        let mut st = StreamState::default();
        encode_thread_start(&mut v, &mut st, 1, tid, 0, b"t");
        for &(ts, ptr, alloc) in events {
            let mut b = EventBuf::new();
            if alloc {
                st.encode_alloc(
                    &AllocEvent {
                        op: AllocOp::Malloc,
                        ts,
                        ptr,
                        size: 8,
                        align: 0,
                        stack: 1,
                    },
                    &mut b,
                );
            } else {
                st.encode_free(&FreeEvent { ts, ptr, stack: 1 }, &mut b);
            }
            v.put(b.as_bytes());
        }
        v.0
    }

    struct Chunks(VecDeque<Vec<u8>>, StreamDecoder);
    impl EventSource for Chunks {
        fn refill(&mut self, out: &mut Vec<Event>) -> bool {
            match self.0.pop_front() {
                Some(c) => {
                    self.1.push(&c, &mut |e| out.push(e));
                    true
                }
                None => false,
            }
        }
    }

    #[test]
    fn events_are_small() {
        // Tens of millions of them pass from the decoding thread to the aggregator.
        assert!(
            std::mem::size_of::<Event>() <= 40,
            "{}",
            std::mem::size_of::<Event>()
        );
    }

    #[test]
    fn split_chunks_decode_like_whole_streams_and_merge_in_time_order() {
        let a = stream(
            10,
            &[(5, 0x1000, true), (20, 0x1000, false), (40, 0x3000, true)],
        );
        let b = stream(
            11,
            &[(10, 0x2000, true), (30, 0x1000, true), (35, 0x2000, false)],
        );
        // Cut each stream at every position into two chunks: the merged order is the same.
        for cut_a in 0..a.len() {
            let cut_b = cut_a % b.len();
            let make = || {
                vec![
                    Chunks(
                        VecDeque::from(vec![a[..cut_a].to_vec(), a[cut_a..].to_vec()]),
                        StreamDecoder::new(SessionId(0)),
                    ),
                    Chunks(
                        VecDeque::from(vec![b[..cut_b].to_vec(), b[cut_b..].to_vec()]),
                        StreamDecoder::new(SessionId(0)),
                    ),
                ]
            };
            let ts: Vec<u64> = Merger::new(make())
                .filter(|e| !matches!(e.kind, EventKind::ThreadName(_)))
                .map(|e| e.ts)
                .collect();
            assert_eq!(ts, vec![5, 10, 20, 30, 35, 40], "cut {cut_a}");
            // Runs by reference give the same order as the iterator.
            let mut by_ref = Vec::new();
            Merger::new(make()).for_each_event(|e| {
                if !matches!(e.kind, EventKind::ThreadName(_)) {
                    by_ref.push(e.ts);
                }
            });
            assert_eq!(by_ref, ts, "cut {cut_a}");
        }
    }

    #[test]
    fn realloc_is_split_into_release_and_allocation() {
        let mut v = V(Vec::new());
        let mut st = StreamState::default();
        encode_thread_start(&mut v, &mut st, 1, 7, 0, b"t");
        let mut b = EventBuf::new();
        st.encode_realloc(
            &ReallocEvent {
                array: false,
                ts_begin: 100,
                ts_end: 150,
                old_ptr: 0x10,
                new_ptr: 0x20,
                size: 64,
                stack: 3,
            },
            &mut b,
        );
        v.put(b.as_bytes());
        let mut events = Vec::new();
        let mut d = StreamDecoder::new(SessionId(2));
        d.push(&v.0, &mut |e| events.push(e));
        assert!(d.finish().is_none());
        assert_eq!(events.len(), 3);
        assert_eq!(events[1].ts, 100);
        assert!(matches!(
            events[1].kind,
            EventKind::ReallocRelease {
                old: 0x10,
                new: 0x20,
                ..
            }
        ));
        assert_eq!(events[2].ts, 150);
        assert!(matches!(
            events[2].kind,
            EventKind::ReallocAlloc { size: 64, .. }
        ));
        assert!(
            events
                .iter()
                .all(|e| e.tid == 7 && e.session == SessionId(2))
        );
    }

    #[test]
    fn online_order_holds_events_until_the_watermark() {
        let mut o = OnlineOrder::default();
        for ts in [30, 10, 20] {
            o.push(Event {
                ts,
                session: SessionId(0),
                tid: 1,
                kind: EventKind::Lost(1),
            });
        }
        assert!(o.peek_before(10).is_none());
        assert_eq!(o.peek_before(11).map(|e| e.ts), Some(10));
        o.pop();
        assert_eq!(o.pop().map(|e| e.ts), Some(20));
        assert_eq!(o.len(), 1);
    }
}
