//! Shared helpers of the integration tests: build the agent and the test programs, run
//! `tansa`, read its JSON.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `tansa export FILE --format collapsed --weight WEIGHT` summed per leaf frame (the
/// function that allocated): leaf, weight.
pub fn collapsed_by_leaf(file: &Path, weight: &str) -> std::collections::BTreeMap<String, u64> {
    let mut by_leaf = std::collections::BTreeMap::new();
    for (stack, n) in collapsed(file, weight) {
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *by_leaf.entry(leaf).or_insert(0) += n;
    }
    by_leaf
}

/// `tansa export FILE --format collapsed --weight WEIGHT`: each stack (outermost first,
/// `;`-separated) with its weight.
pub fn collapsed(file: &Path, weight: &str) -> Vec<(String, u64)> {
    let out = run_tansa(&[
        "export",
        file.to_str().unwrap(),
        "--format",
        "collapsed",
        "--weight",
        weight,
        "-o",
        "-",
    ]);
    assert!(out.status.success(), "export failed: {}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (stack, n) = line.rsplit_once(' ').expect("stack and weight");
            (stack.to_string(), n.parse::<u64>().unwrap())
        })
        .collect()
}

/// The `tansa` binary under test.
pub fn tansa() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tansa"))
}

/// A collector configuration for tests that drive `tansa_collect::record` with a sink of
/// their own: `command` under the agent built next to `tansa` ([`ensure_agent`] first),
/// recording heap events with their free stacks, every other setting off or the default.
pub fn collect_config(command: Vec<std::ffi::OsString>) -> tansa_collect::Config {
    tansa_collect::Config {
        command,
        agent: tansa().parent().expect("bin dir").join("libtansa_agent.so"),
        online: false,
        free_stacks: true,
        ring_kb: None,
        max_frames: None,
        monotonic_clock: false,
        sample_hz: None,
        leak_cause: false,
        leak_check: false,
        sample_rate: None,
        events: None,
        segment_dir: None,
    }
}

/// Builds `libtansa_agent.so` next to the `tansa` binary (once per test process), with the
/// same profile.
pub fn ensure_agent() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let bin = tansa();
        let profile_dir = bin.parent().expect("bin dir");
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let target_dir = profile_dir.parent().expect("target dir");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", "tansa-agent", "--target-dir"])
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build for the agent");
        assert!(status.success(), "building the agent failed");
        assert!(
            profile_dir.join("libtansa_agent.so").is_file(),
            "agent not found after build"
        );
    });
}

/// Directory for build products of this test process.
pub fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("programs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create build dir");
        d
    })
}

/// Path of a test program source.
pub fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// Compiles with `cc` (or `c++` for `.cpp`), panicking with the compiler's output on failure.
pub use tansa_testkit::compile;

/// The built Fig. 3 program of one variant.
#[derive(Debug, Clone)]
pub struct Fig3 {
    /// The executable.
    pub exe: PathBuf,
    /// The plugin to dlopen.
    pub plugin: PathBuf,
}

/// Builds the Fig. 3 program and its libraries with `opt` flags (once per variant).
pub fn fig3(variant: &str, opt: &[&str]) -> Fig3 {
    static BUILT: OnceLock<Mutex<HashMap<String, Fig3>>> = OnceLock::new();
    let map = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = map.get(variant) {
        return f.clone();
    }
    let dir = build_dir().join(variant);
    std::fs::create_dir_all(&dir).unwrap();
    let lib = |name: &str, src: &str| {
        let out = dir.join(name);
        let mut flags = vec!["-shared", "-fPIC", "-g"];
        flags.extend(opt);
        compile(&out, &[source(src)], &flags);
        out
    };
    lib("libb.so", "libb.c");
    lib("liba.so", "liba.c");
    let plugin = lib("libplug.so", "libplug.c");
    let exe = dir.join("fig3");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let ldir = format!("-L{}", dir.display());
    let mut flags = vec!["-g", "-pthread"];
    flags.extend(opt);
    flags.extend([ldir.as_str(), "-la", "-lb", "-ldl", rpath.as_str()]);
    compile(&exe, &[source("fig3.c")], &flags);
    let f = Fig3 { exe, plugin };
    map.insert(variant.to_string(), f.clone());
    f
}

/// Builds a single-file program (once per name) with `flags`.
pub fn program(name: &str, src: &str, flags: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let map = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = map.get(name) {
        return p.clone();
    }
    let out = build_dir().join(name);
    compile(&out, &[source(src)], flags);
    map.insert(name.to_string(), out.clone());
    out
}

/// `livegrow` and its `liblive.so` (`tests/programs/README.md`), built once.
pub fn livegrow() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = build_dir().join("live");
            std::fs::create_dir_all(&dir).unwrap();
            compile(
                &dir.join("liblive.so"),
                &[source("liblive.c")],
                &["-shared", "-fPIC", "-g", "-O1"],
            );
            let exe = dir.join("livegrow");
            let ldir = format!("-L{}", dir.display());
            let rpath = format!("-Wl,-rpath,{}", dir.display());
            compile(
                &exe,
                &[source("livegrow.c")],
                &["-g", "-O1", &ldir, "-llive", &rpath],
            );
            exe
        })
        .clone()
}

/// How long one `tansa` run of a test may take before it is killed and the test fails:
/// a hang (a deadlocked target, a collector that never sees the end) fails the test instead
/// of stalling the suite.
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// Runs `tansa` with `args`.
pub fn run_tansa(args: &[&str]) -> Output {
    ensure_agent();
    let mut cmd = Command::new(tansa());
    cmd.args(args);
    output_within(cmd, RUN_DEADLINE)
}

/// Runs `cmd` in its own process group, capturing its output; past `deadline` the whole
/// group is killed and the caller panics with what the command had printed.
pub fn output_within(mut cmd: Command, deadline: Duration) -> Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {shown}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            let stderr = err.join().unwrap_or_default();
            panic!(
                "{shown} did not finish within {deadline:?}; killed. stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// `sigqueue.c` and the shim `raiser.c` it runs behind the agent (a signal raised inside the
/// agent's malloc hook): the program and the shim.
pub fn sigqueue_with_raiser() -> (PathBuf, PathBuf) {
    let raiser = build_dir().join("raiser.so");
    compile(
        &raiser,
        &[source("raiser.c")],
        &["-shared", "-fPIC", "-O1", "-ldl"],
    );
    (program("sigqueue", "sigqueue.c", &["-g", "-O1"]), raiser)
}

/// [`record`] with variables set in tansa's environment (and so the program's).
pub fn record_env(file: &Path, extra: &[&str], cmd: &[&str], env: &[(&str, &str)]) -> Output {
    ensure_agent();
    let mut c = Command::new(tansa());
    c.args(["record", "-o", file.to_str().unwrap()])
        .args(extra)
        .arg("--")
        .args(cmd);
    for (k, v) in env {
        c.env(k, v);
    }
    output_within(c, RUN_DEADLINE)
}

/// Runs `tansa record -o FILE [extra] -- cmd...`, returning its output.
pub fn record(file: &Path, extra: &[&str], cmd: &[&str]) -> Output {
    let mut args = vec!["record", "-o", file.to_str().unwrap()];
    args.extend(extra);
    args.push("--");
    args.extend(cmd);
    run_tansa(&args)
}

/// Runs `tansa record --online --format json -o FILE [extra] -- cmd...` and parses the
/// report it wrote.
pub fn online_report_json(file: &Path, extra: &[&str], cmd: &[&str]) -> Value {
    let mut args = vec!["--online", "--format", "json"];
    args.extend(extra);
    let out = record(file, &args, cmd);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&std::fs::read(file).unwrap()).expect("online report JSON parses")
}

/// Runs `tansa report FILE --format json [args]` and parses the result.
pub fn report_json(file: &Path, args: &[&str]) -> Value {
    let mut a = vec!["report", file.to_str().unwrap(), "--format", "json"];
    a.extend(args);
    let out = run_tansa(&a);
    assert!(
        out.status.success(),
        "tansa report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report JSON parses")
}

/// The unit named `name` of a report (panics with the units present if absent).
pub fn unit<'a>(report: &'a Value, name: &str) -> &'a Value {
    let units = report["units"].as_array().expect("units array");
    units.iter().find(|u| u["unit"] == name).unwrap_or_else(|| {
        let names: Vec<&str> = units.iter().filter_map(|u| u["unit"].as_str()).collect();
        panic!("no unit {name} in report; units: {names:?}")
    })
}

/// Whether a report has a unit named `name`.
pub fn has_unit(report: &Value, name: &str) -> bool {
    report["units"]
        .as_array()
        .is_some_and(|u| u.iter().any(|u| u["unit"] == name))
}

/// The figures of a unit: (allocated, net, max, min).
pub fn bytes(u: &Value) -> (i64, i64, i64, i64) {
    (
        u["allocated_bytes"].as_i64().unwrap(),
        u["net_bytes"].as_i64().unwrap(),
        u["max_bytes"].as_i64().unwrap(),
        u["min_bytes"].as_i64().unwrap(),
    )
}

/// The call counts of a unit: (malloc, calloc, realloc, free, memalign).
pub fn calls(u: &Value) -> (u64, u64, u64, u64, u64) {
    let c = &u["calls"];
    (
        c["malloc"].as_u64().unwrap(),
        c["calloc"].as_u64().unwrap(),
        c["realloc"].as_u64().unwrap(),
        c["free"].as_u64().unwrap(),
        c["memalign"].as_u64().unwrap(),
    )
}

/// Standard error of an output, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `warnings` of a JSON report.
pub fn warnings(report: &Value) -> Vec<String> {
    report["warnings"]
        .as_array()
        .expect("a report's warnings")
        .iter()
        .map(|w| w.as_str().expect("a warning is text").to_string())
        .collect()
}

/// Every record of `file`'s streams, from `tansa dump --events --format jsonl`
/// (docs/json/dump-events.v1.md).
pub fn dumped_records(file: &Path) -> Vec<serde_json::Value> {
    let out = run_tansa(&[
        "dump",
        "--events",
        "--format",
        "jsonl",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "dump failed: {}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Allocator calls recorded in `file`, by thread id and by function (`malloc`, `calloc`,
/// ..., `realloc`, `free`), counted from the raw records.
pub fn raw_counts(file: &Path) -> HashMap<u32, HashMap<String, u64>> {
    let mut counts: HashMap<u32, HashMap<String, u64>> = HashMap::new();
    for r in dumped_records(file) {
        let kind = match r["kind"].as_str() {
            Some("alloc") | Some("realloc") => r["op"].as_str().unwrap_or("?").to_string(),
            Some("free") => "free".to_string(),
            _ => continue,
        };
        let tid = r["tid"].as_u64().unwrap_or(0) as u32;
        *counts.entry(tid).or_default().entry(kind).or_default() += 1;
    }
    counts
}

/// How far, in percentage points, a measured CPU share may stray from its expected value
/// `expected` (percent) when it comes from `periods` sampling periods of the agent's
/// `SIGPROF` timer or of perf, without the test becoming a coin toss.
///
/// A share measured from `n` independent samples has a binomial standard deviation of
/// `sqrt(p (1 - p) / n)`. The samples are fewer than the periods: a CPU-time timer expires
/// at the scheduler tick (100 to 1000 Hz), so at 1 kHz one delivery may stand for several
/// periods (its overruns); a quarter of the periods is the count of independent samples on
/// a 250 Hz kernel. The bound is four standard deviations of that count (a false failure
/// about once in 15,000 runs), plus one point for the loops' unequal entry and exit costs;
/// a share that is plainly wrong (a function missing, two swapped) is still far outside it.
#[allow(dead_code)]
pub fn share_tolerance(expected: f64, periods: u64) -> f64 {
    let p = expected / 100.0;
    let n = (periods as f64 / 4.0).max(1.0);
    400.0 * (p * (1.0 - p) / n).sqrt() + 1.0
}

pub use tansa_testkit::require;

/// [`require`]s Linux 6.15 or later, whose pidfds keep their process's exit status after
/// its parent collected it: the only way the recorder learns how such a process ended.
pub fn require_pidfd_exit_status() -> bool {
    require(
        tansa_testkit::kernel_at_least(6, 15),
        "Linux 6.15 or later (a pidfd keeps its process's exit status)",
    )
}

/// Whether `tool --version` runs and succeeds.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether Go's toolchain runs (`go version`: it has no `--version`).
pub fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `tansa report FILES... --format json ARGS...` over a job's recordings. A launcher may
/// return before a killed rank's recorder has finished its file (it then still holds the
/// file's lock), or before a rank has let go of its segment files: the report says so, and
/// is tried again (for up to 30 s).
pub fn job_report_json(files: &[PathBuf], args: &[&str]) -> Value {
    let mut a: Vec<String> = vec!["report".into()];
    a.extend(files.iter().map(|f| f.display().to_string()));
    a.extend(["--format", "json"].map(String::from));
    a.extend(args.iter().map(|s| s.to_string()));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let waited = Instant::now();
    let o = loop {
        let o = run_tansa(&a);
        let busy = stderr(&o).contains("still being recorded")
            || stderr(&o).contains("still runs and writes");
        if o.status.success() || !busy || waited.elapsed() > Duration::from_secs(30) {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(o.status.success(), "tansa report: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report JSON")
}

/// `LAUNCHER ARGS... tansa record -o DIR/job-%r.tansa -- PROG abort`: each rank of an MPI
/// job under its own recorder.
pub fn record_each_rank(mut launcher: Command, dir: &Path, prog: &Path) -> Command {
    launcher
        .arg(tansa())
        .args(["record", "-o"])
        .arg(dir.join("job-%r.tansa"))
        .arg("--")
        .arg(prog)
        .arg("abort");
    launcher
}

/// `tansa record -o FILE -- LAUNCHER ARGS... PROG abort`: a whole MPI job under one
/// recorder, with the launcher's environment.
pub fn record_whole_job(launcher: &Command, file: &Path, prog: &Path) -> Command {
    let mut cmd = Command::new(tansa());
    cmd.envs(launcher.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .args(["record", "-o"])
        .arg(file)
        .arg("--")
        .arg(launcher.get_program())
        .args(launcher.get_args())
        .arg(prog)
        .arg("abort");
    cmd
}

/// Starts `cmd` with the open-file limits `soft` and `hard` (`RLIMIT_NOFILE`).
pub fn limit_open_files(cmd: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Checks a 4-rank job of `mpi_ranks.c` run with "abort" (its program's unit `prog`): each
/// rank r keeps exactly (r + 1) MiB in the program's own unit, and rank 2 aborted and is
/// named as the rank that ended first (`by`: how that was found). Returns the job's report.
pub fn check_aborted_job(files: &[PathBuf], prog: &str, mode: &str, by: &str) -> Value {
    const MIB: i64 = 1 << 20;
    let whole = job_report_json(files, &[]);
    let job = &whole["job"];
    assert_eq!(job["ranks"].as_array().unwrap().len(), 4, "{mode}: {job}");
    assert_eq!(job["size"], 4, "{mode}");
    for r in 0..4i64 {
        let one = job_report_json(files, &["--rank", &r.to_string()]);
        assert_eq!(
            unit(&one, prog)["net_bytes"],
            (r + 1) * MIB,
            "{mode}: rank {r}"
        );
    }
    assert_eq!(
        unit(&whole, prog)["net_bytes"],
        10 * MIB,
        "{mode}: 1 + 2 + 3 + 4 MiB"
    );
    let aborted = &job["ranks"][2];
    assert_eq!(aborted["exit"]["kind"], "signaled", "{mode}: {aborted}");
    assert_eq!(
        aborted["exit"]["signal_name"], "SIGABRT",
        "{mode}: {aborted}"
    );
    assert_eq!(
        (&job["first_ended"], &job["first_ended_by"]),
        (&Value::from(2), &Value::from(by)),
        "{mode}: {job}"
    );
    whole
}

/// `mpi_ranks`, built once with mpicc, or `None` (outside CI) without Open MPI.
pub fn mpi_program() -> Option<PathBuf> {
    if !require(
        have("mpicc") && have("mpiexec"),
        "mpicc and mpiexec (Open MPI: .ci/install-deps installs openmpi-bin libopenmpi-dev)",
    ) {
        return None;
    }
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    Some(
        BUILT
            .get_or_init(|| {
                let out = build_dir().join("mpi_ranks");
                let o = Command::new("mpicc")
                    .args(["-O1", "-g"])
                    .arg(source("mpi_ranks.c"))
                    .arg("-o")
                    .arg(&out)
                    .output()
                    .expect("run mpicc");
                assert!(
                    o.status.success(),
                    "mpicc failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                out
            })
            .clone(),
    )
}

/// `mpiexec --oversubscribe -n 4` (and `--allow-run-as-root` as root).
pub fn mpiexec_args() -> Vec<String> {
    let mut a = vec!["mpiexec".to_string()];
    if rustix::process::geteuid().is_root() {
        a.push("--allow-run-as-root".into());
    }
    a.extend(["--oversubscribe", "-n", "4"].map(String::from));
    a
}

/// Records `threadchurn THREADS AT_ONCE`, with `tansa record` options `extra`, and checks
/// that every one of its threads' calls is in the report: 4 mallocs and 4 frees per thread,
/// 367 bytes each, all released, nothing lost, no false "free of a pointer never
/// allocated".
pub fn churn_is_recorded_exactly(threads: u64, at_once: u64, extra: &[&str]) {
    let exe = program("threadchurn", "threadchurn.c", &["-g", "-O2", "-pthread"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("churn.tansa");
    let out = record(
        &file,
        extra,
        &[
            exe.to_str().unwrap(),
            &threads.to_string(),
            &at_once.to_string(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let work = unit(&r, "threadchurn!work");
    assert_eq!(
        calls(work),
        (4 * threads, 0, 0, 4 * threads, 0),
        "{threads} threads, {at_once} at a time: every malloc and free"
    );
    assert_eq!(bytes(work).0, 367 * threads as i64);
    assert_eq!(bytes(work).1, 0, "every block released");
    assert_nothing_improper(&r);
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{}",
        r["warnings"]
    );
    assert_eq!(r["process"]["lost_events"], 0);
}

/// Asserts that a memory report lists no improper release ("free of a pointer never
/// allocated" and the like).
pub fn assert_nothing_improper(report: &Value) {
    assert!(
        report["improper"].as_array().unwrap().is_empty(),
        "{}",
        report["improper"]
    );
}

/// Runs `tansa TANSA_ARGS... -- durable PROGRAM_ARGS...` (`programs/durable.c`: allocates,
/// prints "ready PID", then allocates every millisecond until killed), with `env` for tansa
/// and the program; returns tansa and the program's pid once the program is ready.
pub fn start_durable_program(
    tansa_args: &[&str],
    program_args: &[&str],
    env: &[(&str, &str)],
) -> (Child, u32) {
    ensure_agent();
    let exe = program("durable", "durable.c", &["-g", "-O1", "-pthread"]);
    let mut child = Command::new(tansa())
        .envs(env.iter().copied())
        .args(tansa_args)
        .arg("--")
        .arg(&exe)
        .args(program_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tansa");
    let line = first_line(&mut child);
    let pid = line
        .strip_prefix("ready ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected output from the program: {line:?}"));
    (child, pid)
}

/// The first line `child` writes on its standard output (piped), with its newline: a
/// program's "ready" or "done" line, which the test waits for.
pub fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the child's stdout is piped"))
        .read_line(&mut line)
        .expect("read the child's output");
    line
}

/// Starts `tansa record OPTIONS -o FILE -- PROGRAM ARGS`, the program's standard input and
/// output piped to the test (the recorder's standard error dropped), and waits for the
/// program's first line, `done 0`: `serialprocs N wait` says so once its children are done,
/// then waits for its input to close.
pub fn record_until_done(options: &[&str], file: &Path, program: &Path, args: &[&str]) -> Child {
    let mut recorder = Command::new(tansa())
        .arg("record")
        .args(options)
        .arg("-o")
        .arg(file)
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tansa");
    assert_eq!(first_line(&mut recorder), "done 0\n");
    recorder
}

/// Kills `recorder` (a tansa), then the program it records (`pid`), with SIGKILL.
pub fn kill_both(recorder: &mut Child, pid: u32) {
    kill(recorder.id(), libc::SIGKILL);
    let _ = recorder.wait();
    kill(pid, libc::SIGKILL);
    // Until the program has let go of its memory (and the segment files it maps): a report
    // does not complete a recording that its program still writes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| !m.is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `tansa report FILE --by function --format json` (which completes or salvages it).
pub fn report_by_function_json(file: &Path) -> Output {
    run_tansa(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        "function",
        "--format",
        "json",
    ])
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, signal) };
}

/// The types of the whole frames written so far to the recording `file`.
pub fn frame_types(file: &Path) -> Vec<tansa_format::container::FrameType> {
    let mut types = Vec::new();
    let Ok(f) = std::fs::File::open(file) else {
        return types;
    };
    let Ok(mut frames) = tansa_format::container::Reader::new(BufReader::new(f)) else {
        return types;
    };
    while let Ok(Some(frame)) = frames.next_frame() {
        types.push(frame.ty);
    }
    types
}

/// Asserts that `tansa report FILE` refuses a recording that process `recorder` still
/// writes, naming it.
/// Opens `file` and takes its lock, as a report completing it would: held until the file
/// returned is dropped.
pub fn hold_lock(file: &Path) -> std::fs::File {
    let held = std::fs::File::open(file).expect("open the file to lock");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
    // SAFETY: flock on a descriptor we own; released when `held` closes.
    let locked = unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0, "{} is locked already", file.display());
    held
}

pub fn assert_still_recording(file: &Path, recorder: u32) {
    let busy = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(!busy.status.success());
    assert!(
        stderr(&busy).contains(&format!("still being recorded by pid {recorder}")),
        "{}",
        stderr(&busy)
    );
}

/// How [`change_program_later`] changes a program's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileChange {
    /// A new file put in its place, as a build does (copied beside it, renamed over it: a
    /// new inode at the same path).
    Rebuilt,
    /// The file removed.
    Deleted,
}

/// After `delay`, on another thread, changes the file `exe` (`other` is the program put in
/// its place when it is rebuilt).
pub fn change_program_later(
    exe: &Path,
    other: &Path,
    change: FileChange,
    delay: std::time::Duration,
) -> std::thread::JoinHandle<()> {
    let (exe, other) = (exe.to_path_buf(), other.to_path_buf());
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        match change {
            FileChange::Rebuilt => {
                let next = exe.with_extension("next");
                std::fs::copy(&other, &next).unwrap();
                std::fs::rename(&next, &exe).unwrap();
            }
            FileChange::Deleted => std::fs::remove_file(&exe).unwrap(),
        }
    })
}
