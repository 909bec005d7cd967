//! Real `perf_event_open`: sample this very test thread with the software `task-clock`
//! event while it spins in a known function, then read the samples back from the ring.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tansa_perf::{
    Event, EventAttr, EventKind, Record, RecordKind, Ring, Sample, SampleFormat, SoftwareEvent,
};

#[inline(never)]
fn spin(until: Instant) -> u64 {
    let mut x = 0u64;
    while Instant::now() < until {
        for i in 0..1000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

#[test]
fn task_clock_samples_carry_this_thread_and_its_code() {
    let format = SampleFormat::IP | SampleFormat::TID | SampleFormat::TIME | SampleFormat::PERIOD;
    let attr = EventAttr::new(EventKind::Software(SoftwareEvent::TaskClock))
        .sample_period(100_000) // every 100 µs of this thread's CPU time
        .sample_format(format)
        .disabled(true);
    let event = Event::open(&attr, 0).expect("software events are available to our own thread");
    let mut ring = Ring::new(&event, 64).unwrap();
    event.enable().unwrap();
    black_box(spin(Instant::now() + Duration::from_millis(200)));
    event.disable().unwrap();
    let counted = event.count().unwrap();
    assert!(
        counted >= 100_000_000,
        "task-clock counted {counted} ns of a 200 ms spin"
    );

    let mut records: Vec<Record> = Vec::new();
    ring.drain_into(&mut records);
    let samples: Vec<Sample> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Sample)
        .map(|r| Sample::parse(&r.body, format).unwrap())
        .collect();
    // 200 ms of CPU at one sample per 100 µs: about 2000; a loaded machine gives fewer
    // CPU-milliseconds, never none.
    assert!(samples.len() >= 100, "{} samples", samples.len());
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    assert!(
        samples
            .iter()
            .all(|s| s.tid == Some(tid) && s.pid == Some(std::process::id()))
    );
    assert!(samples.iter().all(|s| s.period == Some(100_000)));
    assert!(samples.windows(2).all(|w| w[0].time <= w[1].time));
    // All samples are user-mode IPs; most land in the spin loop's code (which calls
    // Instant::now, hence not all).
    let user = records
        .iter()
        .filter(|r| r.kind == RecordKind::Sample)
        .all(|r| r.misc & 7 == 2);
    assert!(user, "exclude_kernel keeps kernel samples out");
    // A second drain finds nothing new.
    let mut again = Vec::new();
    ring.drain_into(&mut again);
    assert!(again.iter().all(|r| r.kind != RecordKind::Sample));
}

#[test]
fn unsupported_events_are_recognised() {
    // A raw event type no kernel has.
    let attr = EventAttr::new(EventKind::Raw {
        ty: 0x7fff_fff0,
        config: 0,
    });
    let err = Event::open(&attr, 0).unwrap_err();
    assert!(err.is_unsupported(), "{err}");
}
