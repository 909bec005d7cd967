//! Real `perf_event_open`: sample this very test thread with the software `task-clock`
//! event while it spins in a known function, then read the samples back from the ring.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tansa_perf::{
    Event, EventAttr, EventKind, Record, RecordKind, Ring, Sample, SampleFormat, SoftwareEvent,
};

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spins until this thread has used `cpu` more CPU time (however busy the machine is, up to
/// a minute of wall time).
#[inline(never)]
fn spin(cpu: Duration) -> u64 {
    let until = thread_cpu() + cpu;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut x = 0u64;
    while thread_cpu() < until && Instant::now() < deadline {
        for i in 0..100_000u64 {
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
    // 200 ms of this thread's CPU time (not of wall time: on a loaded machine the thread
    // may get a small part of it).
    black_box(spin(Duration::from_millis(200)));
    event.disable().unwrap();
    let counted = event.count().unwrap();
    assert!(
        counted >= 100_000_000,
        "task-clock counted {counted} ns of a spin of 200 ms of CPU time"
    );

    let mut records: Vec<Record> = Vec::new();
    ring.drain_into(&mut records);
    let samples: Vec<Sample> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Sample)
        .map(|r| Sample::parse(&r.body, format).unwrap())
        .collect();
    // 200 ms of CPU at one sample per 100 µs: about 2000.
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
    // clock_gettime, hence not all).
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
