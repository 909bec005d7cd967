//! Every fuzz target on its corpus and its regression inputs, then on mutants of them for
//! a bounded time (`TANSA_FUZZ_SECONDS` per target: 30 in CI, 2 elsewhere; `TANSA_FUZZ_SEED`
//! to repeat a run). An input that panics, aborts, allocates beyond its bound or takes too
//! long is a failure; it is saved under `target/tansa-fuzz/` to be minimized and kept in
//! `fuzz/regressions/<target>/`.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tansa_fuzz::Target;
use tansa_fuzz::alloc::{self, Counting};
use tansa_fuzz::mutate::Mutator;

#[global_allocator]
static ALLOC: Counting = Counting;

/// One target at a time: the memory bound is measured on the whole process.
static SERIAL: Mutex<()> = Mutex::new(());
/// The input being run, for the hook that saves it when it exceeds its bound.
static CURRENT: Mutex<Option<(Target, Vec<u8>)>> = Mutex::new(None);
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Longest time one input may take (a debug build; the CI's release build is faster).
const SLOW: Duration = Duration::from_secs(20);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.path(),
                std::fs::read(e.path()).expect("readable corpus file"),
            )
        })
        .collect();
    out.sort();
    out
}

fn save(target: Target, data: &[u8], why: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tansa-fuzz");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!(
        "{}-{why}-{:08x}",
        target.name(),
        crc32fast::hash(data)
    ));
    let _ = std::fs::write(&path, data);
    path
}

fn exceeded(by: usize) {
    if let Ok(guard) = CURRENT.try_lock()
        && let Some((target, data)) = guard.as_ref()
    {
        let path = save(*target, data, "memory");
        eprintln!(
            "{}: an input went {by} bytes beyond its memory bound; saved as {}",
            target.name(),
            path.display()
        );
    }
}

fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        assert!(alloc::counting(), "the counting allocator is installed");
        alloc::on_exceeded(exceeded);
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::Relaxed);
            // A backtrace (RUST_BACKTRACE=1) loads debug information: not the input's.
            alloc::unbounded(|| default(info));
        }));
    });
}

/// Runs `target` on `data`; a failure is described.
fn check(target: Target, data: &[u8]) -> Result<(), String> {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some((target, data.to_vec()));
    let panics = PANICS.load(Ordering::Relaxed);
    let started = Instant::now();
    let limit = target.memory_limit(data);
    let (result, _peak) = alloc::bounded(limit, || {
        std::panic::catch_unwind(AssertUnwindSafe(|| target.run(data)))
    });
    let took = started.elapsed();
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let why = if result.is_err() || PANICS.load(Ordering::Relaxed) != panics {
        "panic"
    } else if took > SLOW {
        "slow"
    } else {
        return Ok(());
    };
    let path = save(target, data, why);
    Err(format!(
        "{}: {why} ({took:?}) on an input saved as {}",
        target.name(),
        path.display()
    ))
}

/// Seconds of mutation per target: `TANSA_FUZZ_SECONDS`, else 30 in CI (the `CI`
/// variable set, as `.ci/run` does) and 2 elsewhere.
fn seconds() -> f64 {
    std::env::var("TANSA_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::var_os("CI").is_some() {
            30.0
        } else {
            2.0
        })
}

fn fuzz(target: Target) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    setup();
    let corpus = inputs(&fuzz_dir().join("corpus").join(target.name()));
    let regressions = inputs(&fuzz_dir().join("regressions").join(target.name()));
    assert!(
        !corpus.is_empty(),
        "no corpus for {} in fuzz/corpus (see fuzz/README.md)",
        target.name()
    );
    let mut failures = Vec::new();
    for (path, data) in corpus.iter().chain(&regressions) {
        if let Err(e) = check(target, data) {
            failures.push(format!("{} ({})", e, path.display()));
        }
    }
    let seed = std::env::var("TANSA_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut m = Mutator::new(seed);
    let mut rng = fastrand::Rng::with_seed(seed);
    let budget = Duration::from_secs_f64(seconds());
    let started = Instant::now();
    let mut executions = 0u64;
    let max_len = corpus
        .iter()
        .map(|c| c.1.len())
        .max()
        .unwrap_or(0)
        .max(4096)
        * 2;
    while started.elapsed() < budget && failures.len() < 5 {
        let base = &corpus[rng.usize(..corpus.len())].1;
        let other = &corpus[rng.usize(..corpus.len())].1;
        let mut data = base.clone();
        for _ in 0..1 + rng.usize(..4) {
            m.mutate(target, &mut data, other, max_len);
        }
        if let Err(e) = check(target, &data) {
            failures.push(e);
        }
        executions += 1;
    }
    eprintln!(
        "{}: {} corpus and {} regression inputs, {executions} executions in {:.1} s (seed {seed})",
        target.name(),
        corpus.len(),
        regressions.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn container() {
    fuzz(Target::Container);
}

#[test]
fn frames() {
    fuzz(Target::Frames);
}

#[test]
fn memory() {
    fuzz(Target::Memory);
}

#[test]
fn cpu() {
    fuzz(Target::Cpu);
}

#[test]
fn retrace() {
    fuzz(Target::Retrace);
}

#[test]
fn plan() {
    fuzz(Target::Plan);
}

#[test]
fn segment() {
    fuzz(Target::Segment);
}

#[test]
fn leftover() {
    fuzz(Target::Leftover);
}

#[test]
fn cpu_leftover() {
    fuzz(Target::CpuLeftover);
}

/// The bound of one input counts its own thread only: another target's allocations on a
/// parallel test thread, made while the input runs, neither push it over its bound (which
/// would abort the process) nor count in its peak.
#[test]
fn bounds_are_per_thread() {
    setup();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let (done, wait_done) = std::sync::mpsc::channel::<()>();
    let (release, wait_release) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        wait_go.recv().unwrap();
        let big = std::hint::black_box(vec![1u8; 64 << 20]);
        done.send(()).unwrap();
        wait_release.recv().unwrap();
        drop(big);
    });
    let (len, peak) = alloc::bounded(1 << 20, || {
        let mine = std::hint::black_box(vec![2u8; 512 << 10]);
        go.send(()).unwrap();
        wait_done.recv().unwrap();
        mine.len()
    });
    release.send(()).unwrap();
    other.join().unwrap();
    assert_eq!(len, 512 << 10);
    assert!(
        (512 << 10..1 << 20).contains(&peak),
        "peak {peak}: this thread's 512 KiB only"
    );
}

#[test]
fn perf_map() {
    fuzz(Target::PerfMap);
}
