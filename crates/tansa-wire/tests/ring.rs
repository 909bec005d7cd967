//! The byte-ring protocol between two real threads: a producer that writes records the way
//! the agent does (`tansa-agent/src/session.rs`: a whole [`EventBuf`] block when it fits
//! before the end of the data area, otherwise a wrapping copy, each record published by a
//! release store of `head`) and a consumer that drains the way the collector does
//! (`tansa-collect/src/session.rs`: the readable slices of `[tail, head)`, then a release
//! store of `tail`), through a ring in a heap buffer laid out as a segment.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::sync::atomic::{AtomicBool, Ordering};

use tansa_wire::event::{
    AllocEvent, AllocOp, ByteSink, DecodeError, Decoder, EVENT_BUF_LEN, EventBuf, FreeEvent,
    Record, StreamState, encode_thread_name,
};
use tansa_wire::layout::{Geometry, RING_HEADER_SIZE, Ring};

/// Bytes after the segment that nobody may write.
const GUARD: usize = 4096;

/// A segment-shaped heap buffer, zeroed like a fresh `memfd`, aligned like a mapping.
struct Segment {
    base: *mut u8,
    layout: Layout,
    geometry: Geometry,
}

impl Segment {
    fn new(geometry: Geometry) -> Segment {
        assert!(geometry.is_valid());
        let layout = Layout::from_size_align(geometry.segment_size() + GUARD, 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        assert!(!base.is_null());
        Segment {
            base,
            layout,
            geometry,
        }
    }

    fn ring(&self, index: u32) -> Ring {
        // SAFETY: the buffer covers the segment, is aligned to a page, and outlives every
        // ring view (the tests drop the views, or join the threads using them, first).
        unsafe { Ring::at(self.base, self.geometry, index) }
    }

    /// The bytes of the buffer outside ring `index`'s header and data area.
    fn outside(&self, index: u32) -> Vec<u8> {
        let total = self.layout.size();
        // SAFETY: the buffer is `total` bytes long, and no thread writes it any more.
        let all = unsafe { std::slice::from_raw_parts(self.base, total) };
        let start = self.geometry.ring_offset(index);
        let end = start + RING_HEADER_SIZE + self.geometry.ring_data_size as usize;
        [&all[..start], &all[end..]].concat()
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: allocated in `Segment::new` with this layout.
        unsafe { dealloc(self.base, self.layout) };
    }
}

struct Bytes(Vec<u8>);

/// Sets its flag when dropped, also when its thread panics, so that the other thread stops
/// waiting for it.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl ByteSink for Bytes {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// Record `i` of the test stream: mostly allocations and releases (timestamp `3 * i`), and
/// now and then a thread name `n<i>-...` of 8 to 64 bytes, so that records of every size
/// meet the end of the data area.
fn record(i: u64, state: &mut StreamState) -> Vec<u8> {
    if i.is_multiple_of(97) {
        let mut name = format!("n{i}-").into_bytes();
        let len = 8 + (i as usize / 97) % 57;
        name.extend((name.len()..len).map(|j| b'a' + ((i as usize + j) % 26) as u8));
        let mut out = Bytes(Vec::new());
        encode_thread_name(&mut out, &name);
        return out.0;
    }
    let mut buf = EventBuf::new();
    let (ts, ptr, stack) = (3 * i, 0x5555_0000_0000 + 16 * (i % 5000), (i % 1000) as u32);
    if i.is_multiple_of(3) {
        state.encode_free(&FreeEvent { ts, ptr, stack }, &mut buf);
    } else {
        state.encode_alloc(
            &AllocEvent {
                op: AllocOp::Malloc,
                ts,
                ptr,
                size: i,
                align: 0,
                stack,
            },
            &mut buf,
        );
    }
    buf.as_bytes().to_vec()
}

/// The sequence number of a decoded record of the test stream.
fn sequence(r: &Record<'_>) -> u64 {
    match *r {
        Record::Alloc(a) => {
            assert_eq!(a.size, a.ts / 3);
            a.ts / 3
        }
        Record::Free(f) => f.ts / 3,
        Record::ThreadName { name } => {
            let name = std::str::from_utf8(name).unwrap();
            name[1..name.find('-').unwrap()].parse().unwrap()
        }
        other => panic!("not a record of the test stream: {other:?}"),
    }
}

/// What the producer saw.
struct Produced {
    bytes: Vec<u8>,
    /// Records written as a whole block (the agent's fast path).
    blocks: u64,
    /// Times a record did not fit and the producer waited for the consumer.
    waits: u64,
}

/// Writes records `0..n` as the agent writes events (until the consumer is `gone`).
fn produce(ring: Ring, n: u64, gone: &AtomicBool) -> Produced {
    let mut state = StreamState::default();
    let mut head = 0u64;
    let mut out = Produced {
        bytes: Vec::new(),
        blocks: 0,
        waits: 0,
    };
    for i in 0..n {
        let bytes = record(i, &mut state);
        let len = bytes.len() as u64;
        let mut block = [0u8; EVENT_BUF_LEN];
        block[..bytes.len().min(EVENT_BUF_LEN)]
            .copy_from_slice(&bytes[..bytes.len().min(EVENT_BUF_LEN)]);
        let fits = len <= EVENT_BUF_LEN as u64 && ring.free_space(head) >= EVENT_BUF_LEN as u64;
        // SAFETY: this thread is the ring's only producer, and a whole block is free after
        // `head`.
        if fits && unsafe { ring.write_block_at(head, &block) } {
            out.blocks += 1;
        } else {
            // A full ring: the producer must not overwrite what the consumer has not read.
            if ring.free_space(head) < len {
                out.waits += 1;
                while ring.free_space(head) < len {
                    assert!(!gone.load(Ordering::Acquire), "the consumer stopped");
                    std::thread::yield_now();
                }
            }
            // SAFETY: as above, with `len` bytes free after `head`.
            unsafe { ring.write_at(head, &bytes) };
        }
        head += len;
        ring.header().head.store(head, Ordering::Release);
        out.bytes.extend_from_slice(&bytes);
    }
    out
}

/// What the consumer saw.
struct Consumed {
    bytes: Vec<u8>,
    sequence: Vec<u64>,
    /// Largest `head - tail` observed.
    fullest: u64,
}

/// Drains the ring as the collector does until `done` and nothing is left, decoding each
/// drained range on its own: it must hold whole records only.
fn consume(ring: Ring, done: &AtomicBool) -> Consumed {
    let mut tail = ring.header().tail.load(Ordering::Relaxed);
    let mut state = StreamState::default();
    let mut out = Consumed {
        bytes: Vec::new(),
        sequence: Vec::new(),
        fullest: 0,
    };
    let mut drains = 0u64;
    loop {
        let finished = done.load(Ordering::Acquire);
        let head = ring.header().head.load(Ordering::Acquire);
        if head == tail {
            if finished {
                return out;
            }
            std::thread::yield_now();
            continue;
        }
        out.fullest = out.fullest.max(head - tail);
        // SAFETY: this thread is the ring's only consumer.
        let (a, b) = unsafe { ring.readable(tail, head) };
        assert_eq!((a.len() + b.len()) as u64, head - tail);
        let drained = [a, b].concat();
        let mut d = Decoder::with_state(&drained, state);
        for r in d.by_ref() {
            match r {
                Ok(r) => out.sequence.push(sequence(&r)),
                Err(DecodeError::Truncated { offset }) => {
                    panic!("a record published half-written at byte {offset} of {head}")
                }
                Err(e) => panic!("{e:?} in bytes published up to {head}"),
            }
        }
        assert_eq!(d.position(), drained.len());
        state = d.state();
        out.bytes.extend_from_slice(&drained);
        tail = head;
        ring.header().tail.store(tail, Ordering::Release);
        // Now and then a slow collector, so that the producer finds the ring full.
        drains += 1;
        if drains.is_multiple_of(64) {
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }
}

#[test]
fn every_record_crosses_a_wrapping_ring_once_in_order_byte_for_byte() {
    let geometry = Geometry {
        ring_count: 3,
        ring_data_size: 4096,
    };
    let segment = Segment::new(geometry);
    let ring = segment.ring(1);
    let n = 200_000u64;
    let done = AtomicBool::new(false);
    let gone = AtomicBool::new(false);
    let (produced, consumed) = std::thread::scope(|s| {
        let consumer = s.spawn(|| {
            let _gone = SetOnDrop(&gone);
            consume(ring, &done)
        });
        let producer = s.spawn(|| {
            let _done = SetOnDrop(&done);
            produce(ring, n, &gone)
        });
        (producer.join().unwrap(), consumer.join().unwrap())
    });
    let size = u64::from(geometry.ring_data_size);
    let total = produced.bytes.len() as u64;
    assert!(
        total / size >= 300,
        "the stream wraps the ring many times: {total} bytes through {size}"
    );
    assert!(
        consumed.bytes == produced.bytes,
        "the consumer read exactly the bytes written ({} of {total})",
        consumed.bytes.len()
    );
    assert_eq!(consumed.sequence.len() as u64, n);
    if let Some(i) = (0..n).find(|&i| consumed.sequence[i as usize] != i) {
        panic!(
            "record {i} arrived as record {}",
            consumed.sequence[i as usize]
        );
    }
    assert_eq!(ring.header().head.load(Ordering::Relaxed), total);
    assert_eq!(ring.header().tail.load(Ordering::Relaxed), total);
    // Both ways of writing were taken, and the ring was full at times, never over-full.
    assert!(
        produced.blocks > 0 && produced.blocks < n,
        "{}",
        produced.blocks
    );
    assert!(produced.waits > 0, "the producer never found the ring full");
    assert!(consumed.fullest <= size, "{} > {size}", consumed.fullest);
    // The producer waits only when the next record (at most a 64-byte name and its two
    // header bytes) does not fit: the ring was then that full.
    assert!(consumed.fullest > size - 66, "{}", consumed.fullest);
    // Nothing was written outside the ring.
    assert!(segment.outside(1).iter().all(|&b| b == 0));
}

#[test]
fn a_full_ring_has_no_free_space_and_reads_back_whole() {
    let geometry = Geometry {
        ring_count: 1,
        ring_data_size: 4096,
    };
    let segment = Segment::new(geometry);
    let ring = segment.ring(0);
    let size = ring.size();
    assert_eq!(ring.free_space(0), size);
    // Fill the ring exactly, starting in the middle so that the data wraps.
    let start = 1000u64;
    ring.header().tail.store(start, Ordering::Release);
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    // SAFETY: single-threaded; `[start, start + size)` is free with `tail == start`.
    unsafe { ring.write_at(start, &data) };
    let head = start + size;
    ring.header().head.store(head, Ordering::Release);
    assert_eq!(ring.free_space(head), 0, "a full ring has no room");
    let block = [0xeeu8; EVENT_BUF_LEN];
    // A block that would run past the end of the data area is not written.
    // SAFETY: single-threaded; the call writes nothing when it returns false.
    assert!(!unsafe { ring.write_block_at(size - 10, &block) });
    // SAFETY: single-threaded consumer.
    let (a, b) = unsafe { ring.readable(start, head) };
    assert_eq!(
        (a.len(), b.len()),
        ((size - start) as usize, start as usize)
    );
    assert_eq!([a, b].concat(), data, "the whole ring, oldest byte first");
    // A head more than a ring ahead of the tail (a damaged header) reads one ring at most.
    // SAFETY: as above.
    let (a, b) = unsafe { ring.readable(start, start + 3 * size) };
    assert_eq!(a.len() + b.len(), size as usize);
    // Consuming makes exactly that much room.
    ring.header().tail.store(start + 100, Ordering::Release);
    assert_eq!(ring.free_space(head), 100);
    assert!(segment.outside(0).iter().all(|&b| b == 0));
}
