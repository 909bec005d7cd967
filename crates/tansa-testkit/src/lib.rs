//! Test support shared by tansa's crates (a dev-dependency only): the one place that
//! compiles the small C, C++ and Rust programs the tests run under the real agent, the real
//! `perf_event_open` and the real ptrace. Every test program records its build flags in its
//! own header comment; tests pass the same flags here. [`browser`] loads pages in headless
//! Chromium for the HTML report tests.

pub mod browser;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `sources` into `out` with `flags`, using `c++` when a source is `.cpp`, `rustc`
/// (the toolchain's, which the tests are built with) when it is `.rs`, and `cc` otherwise.
/// Panics with the compiler's own messages when it fails (a test cannot go on without its
/// program).
pub fn compile(out: &Path, sources: &[PathBuf], flags: &[&str]) {
    let has = |ext: &str| {
        sources
            .iter()
            .any(|s| s.extension().is_some_and(|e| e == ext))
    };
    let compiler = if has("cpp") {
        "c++"
    } else if has("rs") {
        "rustc"
    } else {
        "cc"
    };
    // Built under a name of its own, then renamed into place: two tests that build the same
    // program at once each run a whole file, never one the other's linker is rewriting (a
    // run of `liveatexit` failed with EACCES so).
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = out.file_name().map_or_else(
        || panic!("{} has no file name", out.display()),
        |n| n.to_string_lossy().into_owned(),
    );
    let partial = out.with_file_name(format!(".{name}.{}.{n}.building", std::process::id()));
    let output = Command::new(compiler)
        .args(sources)
        .args(flags)
        .arg("-o")
        .arg(&partial)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    if !output.status.success() {
        let _ = std::fs::remove_file(&partial);
        panic!(
            "compiling {} failed:\n{}",
            out.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::rename(&partial, out).unwrap_or_else(|e| {
        panic!(
            "cannot move {} to {}: {e}",
            partial.display(),
            out.display()
        )
    });
}

/// Compiles the single source `src` into `dir`, named after the source's stem, and returns
/// the executable (or library, with `-shared` in `flags`).
pub fn build(src: &Path, dir: &Path, flags: &[&str]) -> PathBuf {
    let name = src
        .file_stem()
        .unwrap_or_else(|| panic!("{} has no file name", src.display()));
    let out = dir.join(name);
    compile(&out, &[src.to_path_buf()], flags);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_program_and_reports_a_broken_one() {
        let dir = std::env::temp_dir().join(format!("tansa-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("ok.c");
        std::fs::write(&src, "int main(void) { return 7; }\n").unwrap();
        let exe = build(&src, &dir, &["-O1"]);
        let status = Command::new(&exe).status().unwrap();
        assert_eq!(status.code(), Some(7));
        let bad = dir.join("bad.c");
        std::fs::write(&bad, "int main(void) { return }\n").unwrap();
        let err = std::panic::catch_unwind(|| build(&bad, &dir, &[])).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("compiling") && msg.contains("bad"), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Threads that spin on every CPU, twice over, until dropped: no CPU idles meanwhile, and
/// a thread that wants one waits. For tests of what tansa does on a machine the program
/// keeps busy.
#[derive(Debug)]
pub struct BusyCpus {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyCpus {
    /// Starts the spinning threads and gives them a moment to take the CPUs.
    pub fn start() -> BusyCpus {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..2 * cpus)
            .map(|_| {
                let stop = std::sync::Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        BusyCpus { stop, threads }
    }
}

impl Drop for BusyCpus {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether a test's precondition (`met`) holds. In CI (`CI` set, as `.ci/run` does, which
/// runs as root with every tool installed) a missing precondition fails the test; elsewhere
/// the test says why it does not run and returns early (so a developer without root can
/// still run the suite), which the message makes visible with `--nocapture`.
pub fn require(met: bool, what: &str) -> bool {
    if met {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what}: this precondition must hold in CI"
    );
    eprintln!("not run here: {what}");
    false
}

/// Whether the running kernel is version `major`.`minor` or later.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (major, minor)
}
