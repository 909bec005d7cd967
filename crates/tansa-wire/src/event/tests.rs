//! Round trips of every record kind, delta state, truncation and corruption.

extern crate std;
use super::*;
use std::vec::Vec;

struct VecSink(Vec<u8>);
impl ByteSink for VecSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

fn sample_stream() -> (Vec<u8>, Vec<Record<'static>>) {
    let mut sink = VecSink(Vec::new());
    let mut st = StreamState::default();
    encode_thread_start(&mut sink, &mut st, 42, 43, 1_000_000, b"worker");
    let mut out = Vec::new();
    let events = [
        Record::Alloc(AllocEvent {
            op: AllocOp::Malloc,
            ts: 1_000_100,
            ptr: 0x5555_0000_1000,
            size: 100,
            align: 0,
            stack: 1,
        }),
        Record::Alloc(AllocEvent {
            op: AllocOp::AlignedAlloc,
            ts: 1_000_200,
            ptr: 0x5555_0000_2000,
            size: 4096,
            align: 64,
            stack: 2,
        }),
        Record::Realloc(ReallocEvent {
            array: false,
            ts_begin: 1_000_300,
            ts_end: 1_000_350,
            old_ptr: 0x5555_0000_1000,
            new_ptr: 0x5555_0000_0800,
            size: 200,
            stack: 1,
        }),
        // A timestamp that goes backwards (clock skew between CPUs) must survive.
        Record::Free(FreeEvent {
            ts: 1_000_340,
            ptr: 0x5555_0000_0800,
            stack: 0,
        }),
        Record::Improper(ImproperEvent {
            op: ImproperOp::Realloc,
            ts: 1_000_400,
            ptr: 0xdead,
            size: 8,
            stack: 3,
        }),
        Record::Lost { count: 7 },
        Record::Sample {
            ts: 1_000_450,
            stack: 4,
            weight: 3,
        },
        Record::Unreached {
            ptr: 0x5555_0000_0800,
            class: LeakClass::Definite,
        },
        Record::Unreached {
            ptr: 0x7f00_0000_0010,
            class: LeakClass::Indirect,
        },
        Record::LeakScan(LeakScan {
            ts: 1_000_480,
            blocks: 12,
            reachable: 10,
            root_bytes: 1 << 20,
            status: SCAN_UNREADABLE,
        }),
        Record::ThreadEnd { ts: 1_000_500 },
    ];
    for ev in events {
        let mut buf = EventBuf::new();
        match ev {
            Record::Alloc(a) => st.encode_alloc(&a, &mut buf),
            Record::Realloc(r) => st.encode_realloc(&r, &mut buf),
            Record::Free(f) => st.encode_free(&f, &mut buf),
            Record::Improper(i) => st.encode_improper(&i, &mut buf),
            Record::Lost { count } => st.encode_lost(count, &mut buf),
            Record::Sample { ts, stack, weight } => st.encode_sample(ts, stack, weight, &mut buf),
            Record::Unreached { ptr, class } => st.encode_unreached(ptr, class, &mut buf),
            Record::LeakScan(scan) => st.encode_leak_scan(&scan, &mut buf),
            Record::ThreadEnd { ts } => st.encode_thread_end(ts, &mut buf),
            _ => unreachable!(),
        }
        sink.put(buf.as_bytes());
        out.push(ev);
    }
    (sink.0, out)
}

/// Encoding in place (into a ring's free space, as the agent does) writes the same bytes as
/// encoding into an owned buffer, and nothing beyond the record.
#[test]
fn in_place_encoding_matches_the_owned_buffer() {
    let (bytes, expected) = sample_stream();
    let mut st = StreamState {
        prev_ts: 1_000_000,
        prev_ptr: 0,
    };
    let mut again = Vec::new();
    for ev in &expected {
        let mut block = [0xa5u8; EVENT_BUF_LEN];
        let mut buf = EventBuf::in_place(&mut block);
        match *ev {
            Record::Alloc(a) => st.encode_alloc(&a, &mut buf),
            Record::Realloc(r) => st.encode_realloc(&r, &mut buf),
            Record::Free(f) => st.encode_free(&f, &mut buf),
            Record::Improper(i) => st.encode_improper(&i, &mut buf),
            Record::Lost { count } => st.encode_lost(count, &mut buf),
            Record::Sample { ts, stack, weight } => st.encode_sample(ts, stack, weight, &mut buf),
            Record::Unreached { ptr, class } => st.encode_unreached(ptr, class, &mut buf),
            Record::LeakScan(scan) => st.encode_leak_scan(&scan, &mut buf),
            Record::ThreadEnd { ts } => st.encode_thread_end(ts, &mut buf),
            _ => unreachable!(),
        }
        let len = buf.len();
        assert!(!buf.is_empty() && len <= MAX_EVENT_LEN);
        assert!(
            block[len..].iter().all(|&b| b == 0xa5),
            "scratch beyond the record"
        );
        again.extend_from_slice(&block[..len]);
    }
    assert!(bytes.ends_with(&again), "same bytes as the owned buffer");
}

#[test]
fn thread_stream_round_trips() {
    let (bytes, expected) = sample_stream();
    let decoded: Vec<_> = Decoder::new(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        decoded[0],
        Record::ThreadStart {
            pid: 42,
            tid: 43,
            ts: 1_000_000,
            name: b"worker"
        }
    );
    assert_eq!(&decoded[1..], &expected[..]);
}

#[test]
fn every_truncation_is_reported_not_misread() {
    let (bytes, _) = sample_stream();
    let full: Vec<_> = Decoder::new(&bytes).map(Result::unwrap).collect();
    for cut in 0..bytes.len() {
        let mut ok = Vec::new();
        let mut err = None;
        for r in Decoder::new(&bytes[..cut]) {
            match r {
                Ok(rec) => ok.push(rec),
                Err(e) => err = Some(e),
            }
        }
        // Whatever decodes is a prefix of the full stream.
        assert_eq!(&full[..ok.len()], &ok[..], "cut at {cut}");
        if let Some(e) = err {
            assert!(
                matches!(e, DecodeError::Truncated { .. }),
                "cut at {cut}: {e:?}"
            );
        }
    }
}

#[test]
fn unknown_tag_is_corrupt() {
    let bytes = [0x7fu8, 1, 2, 3];
    let mut d = Decoder::new(&bytes);
    assert_eq!(d.next(), Some(Err(DecodeError::Corrupt { offset: 0 })));
    assert_eq!(d.next(), None);
}

#[test]
fn meta_records_round_trip() {
    let mut sink = VecSink(Vec::new());
    let frames = [
        StackFrame {
            module: 1,
            offset: 0x1234,
        },
        StackFrame {
            module: 0,
            offset: 0x7fff_0000_0000,
        },
    ];
    encode_stack_def(&mut sink, 9, frames.iter().copied());
    let segs = [LoadSegment {
        vaddr: 0,
        memsz: 0x2000,
        file_offset: 0,
        flags: 5,
    }];
    encode_module_load(
        &mut sink,
        3,
        77,
        0x7f00_0000_0000,
        MODULE_MAIN,
        &[0xab, 0xcd],
        b"/usr/bin/true",
        segs.iter().copied(),
    );
    encode_module_unload(&mut sink, 3, 99);
    let mut counted = CountingSink::default();
    encode_stack_def(&mut counted, 9, frames.iter().copied());
    let recs: Vec<_> = Decoder::new(&sink.0).map(Result::unwrap).collect();
    assert_eq!(recs.len(), 3);
    match recs[0] {
        Record::StackDef { id, frames: f } => {
            assert_eq!(id, 9);
            assert_eq!(f.len(), 2);
            assert_eq!(f.collect::<Vec<_>>(), frames);
        }
        other => panic!("{other:?}"),
    }
    match recs[1] {
        Record::ModuleLoad(m) => {
            assert_eq!(
                (m.id, m.ts, m.bias, m.flags),
                (3, 77, 0x7f00_0000_0000, MODULE_MAIN)
            );
            assert_eq!(m.build_id, &[0xab, 0xcd]);
            assert_eq!(m.path, b"/usr/bin/true");
            assert_eq!(m.segments.collect::<Vec<_>>(), segs);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(recs[2], Record::ModuleUnload { id: 3, ts: 99 });
    let mut d = Decoder::new(&sink.0);
    d.next();
    assert_eq!(counted.0, d.position(), "counting sink measures the record");
}

#[test]
fn the_counting_sink_measures_varints_of_every_length() {
    // The smallest and largest value of each length, 1 to 10 bytes.
    let mut values = std::vec![0u64, u64::MAX];
    for bits in (7..64).step_by(7) {
        values.push((1u64 << bits) - 1);
        values.push(1u64 << bits);
    }
    for &v in &values {
        let mut counted = CountingSink::default();
        counted.put_varint(v);
        let mut sink = VecSink(Vec::new());
        sink.put_varint(v);
        assert_eq!(counted.0, sink.0.len(), "length of {v:#x}");
    }
    let frames: Vec<StackFrame> = values
        .iter()
        .enumerate()
        .map(|(i, &offset)| StackFrame {
            module: (i as u32).wrapping_mul(0x0101_0101),
            offset,
        })
        .collect();
    let mut counted = CountingSink::default();
    encode_stack_def(&mut counted, u32::MAX, frames.iter().copied());
    let mut sink = VecSink(Vec::new());
    encode_stack_def(&mut sink, u32::MAX, frames.iter().copied());
    assert_eq!(counted.0, sink.0.len(), "length of a stack definition");
}

#[test]
fn a_stack_definition_never_exceeds_its_bound() {
    for n in [0usize, 1, 2, 255, 256, 1000] {
        let worst = (0..n).map(|_| StackFrame {
            module: u32::MAX,
            offset: u64::MAX,
        });
        let mut sink = VecSink(Vec::new());
        encode_stack_def(&mut sink, u32::MAX, worst);
        assert!(
            sink.0.len() <= stack_def_max_len(n),
            "{} bytes for {n} frames, bound {}",
            sink.0.len(),
            stack_def_max_len(n)
        );
    }
}
