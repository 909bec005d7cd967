//! `tansa sample`, `tansa report` on CPU recordings and `tansa annotate`, end to end:
//! real `perf_event_open` sampling of C programs compiled at test time
//! (`tests/programs/cpu/`, flags in its README).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{
    FileChange, build_dir, change_program_later, compile, ensure_agent, first_line,
    limit_open_files, output_within, require, share_tolerance, stderr, tansa, warnings,
};
use serde_json::Value;

fn cpu_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs/cpu")
        .join(name)
}

/// The built programs (once per test process).
struct Programs {
    share: PathBuf,
    deep: PathBuf,
    forker: PathBuf,
    child: PathBuf,
    short: PathBuf,
    noperf: PathBuf,
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    P.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = build_dir().join("cpu");
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libcpushare.so");
        compile(
            &lib,
            &[cpu_source("libshare.c")],
            &["-shared", "-fPIC", "-g", "-O1"],
        );
        let share = dir.join("cpu_share");
        let ldir = format!("-L{}", dir.display());
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        compile(
            &share,
            &[cpu_source("share.c")],
            &["-g", "-O1", &ldir, "-lcpushare", &rpath],
        );
        let deep = dir.join("cpu_deep");
        compile(
            &deep,
            &[cpu_source("deep.c")],
            &["-g", "-O2", "-fomit-frame-pointer"],
        );
        let child = dir.join("cpu_child");
        compile(&child, &[cpu_source("spinner.c")], &["-g", "-O1"]);
        let short = dir.join("cpu_short");
        compile(&short, &[cpu_source("spinner.c")], &["-g", "-O1"]);
        let forker = dir.join("cpu_forker");
        compile(&forker, &[cpu_source("forker.c")], &["-g", "-O1"]);
        let noperf = dir.join("noperf");
        compile(&noperf, &[cpu_source("noperf.c")], &["-O1"]);
        Programs {
            share,
            deep,
            forker,
            child,
            short,
            noperf,
        }
    })
}

fn run(args: &[&str]) -> Output {
    Command::new(tansa())
        .args(args)
        .output()
        .expect("run tansa")
}

fn sample(file: &Path, extra: &[&str], cmd: &[&str]) -> Output {
    let mut args = vec!["sample", "-o", file.to_str().unwrap()];
    args.extend(extra);
    args.push("--");
    args.extend(cmd);
    let out = run(&args);
    assert!(
        out.status.success(),
        "tansa sample failed: {}",
        stderr(&out)
    );
    out
}

fn report(file: &Path, by: &str) -> Value {
    let out = run(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        by,
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "report failed: {}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    assert_eq!(v["schema"], "tansa.cpu-report.v1");
    assert_eq!(v["by"], by);
    v
}

fn units(r: &Value) -> &Vec<Value> {
    r["units"].as_array().expect("units")
}

fn unit<'a>(r: &'a Value, name: &str) -> &'a Value {
    units(r)
        .iter()
        .find(|u| u["unit"] == name)
        .unwrap_or_else(|| {
            let names: Vec<&str> = units(r).iter().filter_map(|u| u["unit"].as_str()).collect();
            panic!("no unit {name}; units: {names:?}")
        })
}

fn n(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Line number (1-based) of the first line of `file` containing `needle`.
fn line_of(file: &Path, needle: &str) -> u32 {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("{needle} not in {}", file.display()))
}

#[test]
fn executable_and_library_shares_follow_iteration_counts() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("share.tansa");
    sample(&file, &[], &[p.share.to_str().unwrap(), "400"]);

    let f = report(&file, "function");
    let exe = n(unit(&f, "cpu_share!exe_work"), "self_samples");
    let lib = n(unit(&f, "libcpushare.so!lib_work"), "self_samples");
    let total = n(&f, "total_samples");
    assert!(
        exe + lib >= total * 9 / 10,
        "the two loops hold the time: {exe} + {lib} of {total}"
    );
    let exe_share = exe as f64 * 100.0 / (exe + lib) as f64;
    assert!(
        (exe_share - 70.0).abs() <= 5.0,
        "exe_work has {exe_share:.1}% of the loop samples, expected 70 ± 5 ({exe} vs {lib})"
    );
    // --top 1: the table shows the largest function, and one row for the others with
    // their self samples.
    let out = run(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        "function",
        "--top",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("self "))
        .skip(1)
        .filter(|l| !l.contains("<-"))
        .collect();
    let first = &units(&f)[0];
    let rest = format!("({} more)", units(&f).len() - 1);
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].ends_with(first["unit"].as_str().unwrap()), "{text}");
    assert!(rows[1].ends_with(&rest), "{text}");
    let rest_samples = rows[1].split_whitespace().next().unwrap();
    assert_eq!(
        rest_samples,
        (total - n(first, "self_samples")).to_string(),
        "{text}"
    );
    // Counts convert to time.
    let u = unit(&f, "cpu_share!exe_work");
    assert_eq!(n(u, "self_ns"), exe * n(&f, "period_ns"));
    // Both are called from main.
    for name in ["cpu_share!exe_work", "libcpushare.so!lib_work"] {
        let callers = unit(&f, name)["callers"].as_array().unwrap();
        assert_eq!(callers[0]["unit"], "cpu_share!main", "{name}: {callers:?}");
    }

    // --by process: the executable's loop in user space, the library's in shared.
    let pr = report(&file, "process");
    let proc_unit = units(&pr)
        .iter()
        .find(|u| u["command"] == "cpu_share")
        .expect("the process");
    let (user, shared) = (n(proc_unit, "user_samples"), n(proc_unit, "shared_samples"));
    assert!(user >= exe && shared >= lib, "user {user} shared {shared}");
    assert!(user <= exe + total / 20 && shared <= lib + total / 20);

    // --by library: the same split by module.
    let l = report(&file, "library");
    assert!(n(unit(&l, "cpu_share"), "self_samples") >= exe);
    assert!(n(unit(&l, "libcpushare.so"), "self_samples") >= lib);

    // --by line: the hot loop's lines hold exe_work's samples.
    let src = cpu_source("share.c");
    let body = line_of(&src, "x = x * 0.999999");
    let for_line = body - 1;
    let lines = report(&file, "line");
    let loop_samples: u64 = units(&lines)
        .iter()
        .filter(|u| {
            u["file"].as_str().is_some_and(|f| f.ends_with("share.c"))
                && !u["file"].as_str().unwrap().ends_with("libshare.c")
                && (u["line"] == body || u["line"] == for_line)
        })
        .map(|u| n(u, "self_samples"))
        .sum();
    assert!(
        loop_samples >= exe * 9 / 10,
        "the loop lines {for_line}-{body} hold {loop_samples} of exe_work's {exe}"
    );

    // --by instruction: every sample is on some instruction, the hottest in exe_work or
    // lib_work.
    let ins = report(&file, "instruction");
    let sum: u64 = units(&ins).iter().map(|u| n(u, "self_samples")).sum();
    assert_eq!(sum, total);
    let hottest = units(&ins)[0]["function"].as_str().unwrap_or("");
    assert!(hottest == "exe_work" || hottest == "lib_work", "{hottest}");

    // annotate --asm: the loop's instructions hold most samples, under the loop's lines.
    let out = run(&["annotate", file.to_str().unwrap(), "exe_work", "--asm"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut current_line = 0u32;
    let (mut in_loop, mut all) = (0u64, 0u64);
    for l in text.lines() {
        let t = l.trim_start();
        if let Some(rest) = t.strip_prefix("share.c:") {
            current_line = rest.split_whitespace().next().unwrap().parse().unwrap();
            continue;
        }
        let fields: Vec<&str> = t.split_whitespace().collect();
        if fields.len() >= 3
            && fields[2].starts_with('+')
            && let Ok(s) = fields[0].parse::<u64>()
        {
            all += s;
            if current_line == body || current_line == for_line {
                in_loop += s;
            }
        }
    }
    assert_eq!(
        all, exe,
        "annotated samples add up to the function's:\n{text}"
    );
    assert!(in_loop >= all * 9 / 10, "loop {in_loop} of {all}:\n{text}");

    // annotate --source: the loop body line with its text and most samples.
    let out = run(&["annotate", file.to_str().unwrap(), "exe_work", "--source"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.contains("x = x * 0.999999"))
        .expect("the loop body's source text");
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields[2], body.to_string(), "{row}");
}

#[test]
fn call_chains_reach_main_without_frame_pointers() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("deep.tansa");
    sample(&file, &[], &[p.deep.to_str().unwrap(), "300"]);
    let f = report(&file, "function");
    let leaf = n(unit(&f, "cpu_deep!level3"), "self_samples");
    assert!(leaf >= 100, "{leaf} samples in level3");
    for (callee, caller) in [
        ("cpu_deep!level3", "cpu_deep!level2"),
        ("cpu_deep!level2", "cpu_deep!level1"),
        ("cpu_deep!level1", "cpu_deep!main"),
    ] {
        let u = unit(&f, callee);
        assert!(n(u, "total_samples") >= leaf * 95 / 100, "{callee}: {u}");
        assert_eq!(u["callers"][0]["unit"], caller, "{callee}: {u}");
    }
    let main = unit(&f, "cpu_deep!main");
    assert!(
        n(main, "total_samples") >= leaf * 95 / 100,
        "chains reach main: {main}"
    );
    let short = |r: &Value| {
        r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w.as_str())
            .find(|w| w.contains("have a call chain that stops before the outermost function"))
            .map(str::to_string)
    };
    // Chains that reach main (the few that stop short, e.g. in a signal's entry, at most
    // 5 %) are not said to be cut; a stack copy too short to reach main is.
    if let Some(w) = short(&f) {
        let cut: u64 = w.split(' ').next().unwrap().parse().unwrap();
        assert!(cut * 20 <= n(&f, "total_samples"), "{w}");
    }
    // Nor said to be cut by the stack copy.
    if let Some(w) = short(&f) {
        assert!(!w.contains("deeper than"), "{w}");
    }
    let cut_file = dir.path().join("cut.tansa");
    let out = sample(
        &cut_file,
        &["--stack-size", "16"],
        &[p.deep.to_str().unwrap(), "100"],
    );
    let c = report(&cut_file, "function");
    let w = short(&c).unwrap_or_else(|| panic!("no warning of cut chains: {c}"));
    let cut: u64 = w.split(' ').next().unwrap().parse().unwrap();
    assert!(cut * 2 > n(&c, "total_samples"), "{w}");
    // Why, and what reaches further: the copy, in the report and when sampling ends.
    let by_copy: u64 = w
        .split_once(" sample(s) have a call chain that stops before the outermost function (")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no count of chains cut by the copy: {w}"));
    assert!(by_copy * 2 > cut, "{w}");
    assert!(
        w.contains(
            "of them because the stack was deeper than the 16 bytes each sample copied \
             (`tansa sample --stack-size 64` copies more)"
        ),
        "{w}"
    );
    assert!(
        stderr(&out).contains("samples' stacks were deeper than the 16 bytes each sample copied"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn forked_exec_and_short_lived_children_are_named() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("forker.tansa");
    sample(
        &file,
        &[],
        &[
            p.forker.to_str().unwrap(),
            p.child.to_str().unwrap(),
            p.short.to_str().unwrap(),
        ],
    );
    let pr = report(&file, "process");
    let by_command = |c: &str| -> u64 {
        units(&pr)
            .iter()
            .filter(|u| u["command"] == c)
            .map(|u| n(u, "self_samples"))
            .sum()
    };
    // 60, 400 and 300 ms of CPU at ~1 kHz.
    assert!(by_command("cpu_short") >= 20, "{pr}");
    assert!(by_command("cpu_child") >= 150, "{pr}");
    assert!(by_command("cpu_forker") >= 100, "{pr}");
    let short = units(&pr)
        .iter()
        .find(|u| u["command"] == "cpu_short")
        .unwrap();
    assert_eq!(
        short["exe"].as_str(),
        Some(p.short.to_str().unwrap()),
        "{short}"
    );
    // Its code was resolved although it exited long before the end.
    let f = report(&file, "function");
    assert!(n(unit(&f, "cpu_short!spin"), "self_samples") >= 10);
    assert!(n(unit(&f, "cpu_child!spin"), "self_samples") >= 100);
    assert!(n(unit(&f, "cpu_forker!parent_spin"), "self_samples") >= 80);
}

/// `--by program`: a script's processes of one program as one row, with how many there
/// were; its figures are the sums of its processes' rows.
#[test]
fn a_scripts_processes_add_up_per_program() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("script.tansa");
    let script = format!("for i in 1 2 3 4; do {} 40; done", p.short.display());
    sample(&file, &[], &["/bin/sh", "-c", &script]);
    let pr = report(&file, "process");
    let of_short: Vec<&Value> = units(&pr)
        .iter()
        .filter(|u| u["exe"].as_str() == p.short.to_str())
        .collect();
    assert_eq!(of_short.len(), 4, "{pr}");
    let g = report(&file, "program");
    let short = unit(&g, "cpu_short");
    assert_eq!(short["processes"], 4, "{short}");
    assert_eq!(short["exe"].as_str(), p.short.to_str(), "{short}");
    for field in [
        "self_samples",
        "total_samples",
        "user_samples",
        "shared_samples",
        "kernel_samples",
        "other_samples",
    ] {
        let sum: u64 = of_short.iter().map(|u| n(u, field)).sum();
        assert_eq!(n(short, field), sum, "{field}: {short}");
    }
    assert!(n(short, "self_samples") >= 80, "{short}");
    // Every sample is in one program's row.
    let all: u64 = units(&g).iter().map(|u| n(u, "self_samples")).sum();
    assert_eq!(all, n(&g, "total_samples"));
    let out = run(&["report", file.to_str().unwrap(), "--by", "program"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cpu_short (4 processes)"), "{text}");
}

#[test]
fn recordings_need_neither_binaries_nor_sources() {
    let p = programs();
    let dir = tmp();
    // A private copy of the program and its library, deleted after sampling.
    let copy = dir.path().join("bin");
    std::fs::create_dir_all(&copy).unwrap();
    let lib = copy.join("libcpushare.so");
    std::fs::copy(p.share.with_file_name("libcpushare.so"), &lib).unwrap();
    let src = copy.join("share.c");
    std::fs::copy(cpu_source("share.c"), &src).unwrap();
    let exe = copy.join("cpu_share");
    let ldir = format!("-L{}", copy.display());
    let rpath = format!("-Wl,-rpath,{}", copy.display());
    compile(
        &exe,
        std::slice::from_ref(&src),
        &["-g", "-O1", &ldir, "-lcpushare", &rpath],
    );
    let file = dir.path().join("gone.tansa");
    sample(&file, &["--timeline"], &[exe.to_str().unwrap(), "150"]);
    std::fs::remove_dir_all(&copy).unwrap();

    let f = report(&file, "function");
    assert!(n(unit(&f, "cpu_share!exe_work"), "self_samples") > 0);
    assert!(n(unit(&f, "libcpushare.so!lib_work"), "self_samples") > 0);
    let out = run(&[
        "annotate",
        file.to_str().unwrap(),
        "cpu_share!exe_work",
        "--source",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("x = x * 0.999999"), "source kept:\n{text}");
    let out = run(&["annotate", file.to_str().unwrap(), "lib_work"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("mulsd"), "code kept:\n{text}");
}

#[test]
fn whole_system_sampling_shows_idle_and_the_kernel() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("all.tansa");
    // Spins for 2 s of CPU: it runs during the whole half second of sampling.
    let mut spinner = Command::new(&p.child)
        .arg("2000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let out = run(&[
        "sample",
        "-a",
        "--duration",
        "0.5",
        "-o",
        file.to_str().unwrap(),
    ]);
    let _ = spinner.kill();
    let _ = spinner.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let pr = report(&file, "process");
    let total = n(&pr, "total_samples");
    // Idle time is sampled too (as the idle task, kernel code only); a machine busy on
    // every CPU has none.
    if let Some(idle) = units(&pr).iter().find(|u| u["unit"] == "idle [0]") {
        assert_eq!(idle["idle"], true);
        assert_eq!(n(idle, "kernel_samples"), n(idle, "self_samples"));
    }
    // A process that was running before sampling started (found by the /proc scan).
    let spinner = units(&pr)
        .iter()
        .find(|u| u["command"] == "cpu_child")
        .unwrap_or_else(|| panic!("no cpu_child in {pr}"));
    assert!(n(spinner, "self_samples") >= 50, "{spinner}");
    assert_eq!(pr["kernel"], true);
    let f = report(&file, "function");
    assert!(n(unit(&f, "cpu_child!spin"), "self_samples") >= 50);
    // Kernel frames are named from /proc/kallsyms (read while sampling runs).
    let kernel: Vec<&str> = units(&f)
        .iter()
        .filter_map(|u| u["unit"].as_str())
        .filter(|u| u.starts_with("[kernel.kallsyms]!"))
        .collect();
    assert!(!kernel.is_empty(), "no kernel function in {f}");
    assert!(
        kernel.iter().all(|u| {
            let name = &u["[kernel.kallsyms]!".len()..];
            name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        }),
        "kernel functions without names: {kernel:?}"
    );
    // Kernel code is not kept: annotating the hottest kernel function says so (it was
    // interrupted; it is not that it has no samples of its own).
    let hottest = units(&f)
        .iter()
        .filter(|u| {
            u["unit"]
                .as_str()
                .is_some_and(|u| u.starts_with("[kernel.kallsyms]!"))
        })
        .max_by_key(|u| n(u, "self_samples"))
        .unwrap();
    assert!(n(hottest, "self_samples") > 0, "{hottest}");
    let name = hottest["unit"].as_str().unwrap();
    let out = run(&["annotate", file.to_str().unwrap(), name]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "`{name}` has {} sample(s) of its own, but its instructions are not in the \
             recording (kernel code is not kept",
            n(hottest, "self_samples")
        )),
        "{}",
        stderr(&out)
    );
    let sum: u64 = units(&pr).iter().map(|u| n(u, "self_samples")).sum();
    assert_eq!(sum, total);
}

#[test]
fn cycles_fall_back_to_cpu_clock_without_a_pmu() {
    let p = programs();
    let dir = tmp();
    let cycles = dir.path().join("cycles.tansa");
    let out = run(&[
        "sample",
        "--event",
        "cycles",
        "-o",
        cycles.to_str().unwrap(),
        "--",
        p.child.to_str().unwrap(),
        "50",
    ]);
    let has_pmu = out.status.success();
    if !has_pmu {
        let e = stderr(&out);
        assert!(e.contains("cycles"), "{e}");
        assert!(!cycles.exists(), "no recording is left behind");
    }
    let auto = dir.path().join("auto.tansa");
    let out = sample(&auto, &[], &[p.child.to_str().unwrap(), "50"]);
    let r = report(&auto, "process");
    if has_pmu {
        assert_eq!(r["event"], "cycles");
    } else {
        assert_eq!(r["event"], "cpu-clock");
        assert!(
            r["notes"][0]
                .as_str()
                .is_some_and(|n| n.contains("no hardware PMU")),
            "{r}"
        );
        assert!(stderr(&out).contains("cpu-clock"));
    }
}

/// `-p` names processes: a pid given twice, or given with the id of its own thread, is
/// sampled once (each sample was counted once per id). A single-threaded spinner then uses
/// at most the wall time of sampling, not twice it.
#[test]
fn a_process_named_twice_with_dash_p_is_sampled_once() {
    let mut child = Command::new(&programs().child)
        .arg("4000")
        .spawn()
        .expect("start the spinner");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let pid = child.id().to_string();
    let dir = tmp();
    let file = dir.path().join("twice.tansa");
    let f = file.to_str().unwrap();
    let ids = format!("{pid},{pid}");
    let out = run(&["sample", "-p", &ids, "-o", f, "--duration", "0.6"]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report(&file, "process");
    let cpu_ns = n(&r, "total_samples") * n(&r, "period_ns");
    let wall_ns = n(&r, "duration_ns");
    assert!(n(&r, "total_samples") > 100, "{r}");
    assert!(
        (cpu_ns as f64) < wall_ns as f64 * 1.15,
        "{cpu_ns} ns of CPU time in {wall_ns} ns of one thread: {r}"
    );
    let rows: Vec<&Value> = units(&r)
        .iter()
        .filter(|u| u["pid"].as_u64().is_some())
        .collect();
    assert_eq!(rows.len(), 1, "{r}");
}

/// `tansa sample -p PID --duration 0.5` with limits `soft` and `hard` on open files.
fn sample_pid_with_open_files(pid: u32, file: &Path, soft: u64, hard: u64) -> Output {
    let mut cmd = Command::new(tansa());
    cmd.args(["sample", "-p", &pid.to_string(), "--duration", "0.5", "-o"])
        .arg(file);
    limit_open_files(&mut cmd, soft, hard);
    cmd.output().expect("run tansa")
}

/// `-p` on a process of 1,500 threads, under the usual soft limit of 1,024 open files:
/// perf needs an event per thread per CPU, so tansa raises its soft limit to the hard one
/// (before, it failed: "perf_event_open(cpu-clock) failed: Too many open files"). Where
/// the hard limit is too low, the error says how many files are needed and why.
#[test]
fn a_process_of_fifteen_hundred_threads_is_sampled_under_a_soft_limit_of_1024_files() {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(1 << 20);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    if !require(
        hard >= 1600 * cpus + 512,
        "a hard open-file limit of 1,600 per CPU",
    ) {
        return;
    }
    let exe = threaded_program("manythreads");
    let mut child = Command::new(&exe)
        .arg("1500")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start manythreads");
    assert_eq!(first_line(&mut child), "ready\n");
    let dir = tmp();
    let file = dir.path().join("threads.tansa");
    let raised = sample_pid_with_open_files(child.id(), &file, 1024, hard);
    let capped_file = dir.path().join("capped.tansa");
    let capped = sample_pid_with_open_files(child.id(), &capped_file, 1024, 1024);
    let _ = child.kill();
    let _ = child.wait();
    assert!(raised.status.success(), "{}", stderr(&raised));
    let r = report(&file, "process");
    assert!(n(&r, "total_samples") > 50, "{r}");
    assert!(!capped.status.success());
    let expect = format!(
        "sampling 1501 thread(s) on {cpus} CPU(s) needs {} open files (an event per thread \
         per CPU), beyond the open-file limit of 1024",
        1501 * cpus + 256
    );
    assert!(stderr(&capped).contains(&expect), "{}", stderr(&capped));
}

#[test]
fn bad_input_gets_clear_messages() {
    let dir = tmp();
    let file = dir.path().join("x.tansa");
    let f = file.to_str().unwrap();

    // A process that does not exist (pids are below pid_max ≤ 4194304).
    let out = run(&["sample", "-p", "4194304", "-o", f, "--duration", "1"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no process with id 4194304"),
        "{}",
        stderr(&out)
    );

    // A command that does not exist.
    let out = run(&["sample", "-o", f, "--", "/nonexistent/tansa-test-cmd"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("cannot run `/nonexistent/tansa-test-cmd`") && e.contains("No such file"),
        "{e}"
    );
    assert!(!file.exists(), "no recording is left behind");

    // No target at all.
    let out = run(&["sample", "-o", f]);
    assert!(!out.status.success());

    // A garbage recording.
    std::fs::write(&file, b"this is not a recording\n").unwrap();
    for cmd in [vec!["report", f], vec!["annotate", f, "main"]] {
        let out = run(&cmd);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        assert!(
            stderr(&out).contains("not a tansa recording"),
            "{cmd:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn flags_of_the_other_kind_and_damage_are_reported() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("c.tansa");
    sample(&file, &[], &[p.child.to_str().unwrap(), "100"]);
    let f = file.to_str().unwrap();
    // Options that do not apply to the file, or name what is not in it: misuse (2).
    let out = run(&["report", f, "--by", "call"]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("--by call applies to memory recordings")
            && e.contains("process, program, thread, space, library, function, line, instruction"),
        "{e}"
    );
    let out = run(&["report", f, "--charge", "last"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--charge applies to memory recordings"));
    // (CPU reports come in samples' order.)
    let out = run(&["report", f, "--sort", "temporary"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--sort applies to memory recordings"));
    // A wrapper named as an allocator means nothing to CPU samples, in any heap command.
    let html = dir.path().join("c.html");
    for args in [
        vec!["report", f, "--alloc-fn", "my_alloc"],
        vec!["diff", f, f, "--alloc-fn", "my_alloc"],
        vec![
            "html",
            f,
            "-o",
            html.to_str().unwrap(),
            "--alloc-fn",
            "my_alloc",
        ],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("--alloc-fn applies to"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(!html.exists());
    let out = run(&["annotate", f, "no_such_function"]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("no function `no_such_function`") && e.contains("cpu_child!spin"),
        "{e}"
    );
    let out = run(&["report", f, "--pid", "4194304"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("process 4194304 is not in"));
    // `annotate` too (it listed the function with no samples, and succeeded).
    let out = run(&["annotate", f, "cpu_child!spin", "--pid", "4194304"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("process 4194304 is not in"));
    assert!(out.stdout.is_empty());

    // Cut short: the report covers what is there and says so with exit status 3.
    let bytes = std::fs::read(&file).unwrap();
    let cut = dir.path().join("cut.tansa");
    std::fs::write(&cut, &bytes[..bytes.len() - 30]).unwrap();
    let out = run(&["report", cut.to_str().unwrap(), "--by", "function"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cpu_child!spin"));
    // Cut in the middle, before its symbols: `annotate` finds no such function, and says
    // that the recording is damaged, with the damage, rather than that the name is wrong.
    let half = dir.path().join("half.tansa");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let out = run(&["annotate", half.to_str().unwrap(), "cpu_child!spin"]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains("tansa: warning: ") && e.contains("half.tansa"),
        "{e}"
    );
    assert!(e.contains("the recording is damaged"), "{e}");
}

#[test]
fn unprivileged_users_get_user_only_sampling_or_a_clear_refusal() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !require(
        root && Command::new("setpriv").arg("--version").output().is_ok(),
        "needs root and setpriv to drop privileges",
    ) {
        return;
    }
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let p = programs();
    let dir = tmp();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |args: &[&str]| -> Output {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(tansa())
            .args(args)
            .output()
            .expect("run setpriv")
    };
    if !require(
        as_nobody(&["--version"]).status.success(),
        "the tansa binary must be executable by nobody (a world-readable checkout)",
    ) {
        return;
    }
    let all = dir.path().join("all.tansa");
    let out = as_nobody(&[
        "sample",
        "-a",
        "--duration",
        "0.2",
        "-o",
        all.to_str().unwrap(),
    ]);
    if paranoid > 0 {
        assert!(!out.status.success());
        let e = stderr(&out);
        assert!(
            e.contains("kernel.perf_event_paranoid") && e.contains("CAP_PERFMON"),
            "{e}"
        );
    }
    if paranoid == 2 {
        let file = dir.path().join("user.tansa");
        let out = as_nobody(&[
            "sample",
            "-o",
            file.to_str().unwrap(),
            "--",
            p.child.to_str().unwrap(),
            "100",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("kernel code not sampled"),
            "{}",
            stderr(&out)
        );
        let r = report(&file, "process");
        assert_eq!(r["kernel"], false);
        assert!(n(&r, "total_samples") > 0);
    }
}

/// Share of `exe_work` among the two loops' self samples, in percent.
fn exe_share(f: &Value) -> f64 {
    let exe = n(unit(f, "cpu_share!exe_work"), "self_samples");
    let lib = n(unit(f, "libcpushare.so!lib_work"), "self_samples");
    exe as f64 * 100.0 / (exe + lib) as f64
}

#[test]
fn sigprof_fallback_gives_the_same_shares() {
    let p = programs();
    let dir = tmp();
    let agent_file = dir.path().join("agent.tansa");
    let out = sample(
        &agent_file,
        &["--source", "agent"],
        &[p.share.to_str().unwrap(), "1600"],
    );
    assert!(stderr(&out).contains("user code only"), "{}", stderr(&out));
    let f = report(&agent_file, "function");
    assert_eq!(f["source"], "agent");
    let total = n(&f, "total_samples");
    assert!(total >= 100, "{total} samples");
    let agent_share = exe_share(&f);
    let agent_tolerance = share_tolerance(70.0, total);
    assert!(
        (agent_share - 70.0).abs() <= agent_tolerance,
        "agent: {agent_share:.1}% of {total} periods (70 +- {agent_tolerance:.1})"
    );
    // Against perf on the same program: the same shares within 5 points.
    let perf_file = dir.path().join("perf.tansa");
    sample(
        &perf_file,
        &["--source", "perf"],
        &[p.share.to_str().unwrap(), "1600"],
    );
    let perf_report = report(&perf_file, "function");
    let perf_share = exe_share(&perf_report);
    // Two independent measurements: their difference has the sum of their variances.
    let perf_tolerance = share_tolerance(70.0, n(&perf_report, "total_samples"));
    let both = (agent_tolerance.powi(2) + perf_tolerance.powi(2)).sqrt();
    assert!(
        (agent_share - perf_share).abs() <= both,
        "agent {agent_share:.1}% vs perf {perf_share:.1}% (+- {both:.1})"
    );
    // Call chains reach main, and the process split puts the loops in the right spaces.
    for name in ["cpu_share!exe_work", "libcpushare.so!lib_work"] {
        let callers = unit(&f, name)["callers"].as_array().unwrap();
        assert_eq!(callers[0]["unit"], "cpu_share!main", "{name}: {callers:?}");
    }
    let pr = report(&agent_file, "process");
    let proc_unit = units(&pr)
        .iter()
        .find(|u| u["command"] == "cpu_share")
        .expect("the process");
    let exe = n(unit(&f, "cpu_share!exe_work"), "self_samples");
    let lib = n(unit(&f, "libcpushare.so!lib_work"), "self_samples");
    assert!(n(proc_unit, "user_samples") >= exe, "{proc_unit}");
    assert!(n(proc_unit, "shared_samples") >= lib, "{proc_unit}");
    assert_eq!(
        n(proc_unit, "kernel_samples"),
        0,
        "user code only: {proc_unit}"
    );
}

/// The agent's timers are checked at the kernel's tick (`HZ`, at most 1000): above it, each
/// signal stands for several periods, and the report says so (how many signals, how many
/// samples), rather than let the frequency suggest that many distinct stacks were seen.
/// Below it, every period is its own signal and nothing is said.
#[test]
fn agent_signals_that_stand_for_several_periods_are_noted_in_the_report() {
    let p = programs();
    let dir = tmp();
    let notes = |hz: &str| {
        let file = dir.path().join(format!("hz{hz}.tansa"));
        sample(
            &file,
            &["--source", "agent", "-F", hz],
            &[p.share.to_str().unwrap(), "800"],
        );
        let f = report(&file, "function");
        let notes: Vec<String> = f["notes"]
            .as_array()
            .expect("notes")
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        (n(&f, "total_samples"), notes)
    };
    let (total, fast) = notes("5000");
    let note = fast
        .iter()
        .find(|n| n.contains("timer signals stood for"))
        .unwrap_or_else(|| panic!("no note of the tick among {fast:?}"));
    let words: Vec<&str> = note.split_whitespace().collect();
    let signals: u64 = words[0].parse().unwrap();
    assert_eq!(
        words[5].parse::<u64>().unwrap(),
        total,
        "the samples are the report's: {note}"
    );
    assert!(
        signals * 5 <= total,
        "at most 1000 signals a second: {note}"
    );
    let (_, slow) = notes("50");
    assert!(
        !slow.iter().any(|n| n.contains("timer signals stood for")),
        "{slow:?}"
    );
}

/// Where the kernel refuses `perf_event_open` (here a seccomp filter, as container runtimes
/// install), `--source auto` says so and samples with the agent; `--source perf` fails with
/// the reason.
/// SIGINT sent to `tansa sample --source agent` ends the command with SIGTERM and
/// finishes the recording, as it does with perf (it was ignored: the command ran on).
#[test]
fn sigint_ends_an_agent_sampled_command() {
    ensure_agent();
    let dir = tmp();
    let file = dir.path().join("int.tansa");
    let mut tansa_run = Command::new(tansa())
        .args([
            "sample",
            "--source",
            "agent",
            "-o",
            file.to_str().unwrap(),
            "--",
        ])
        .arg(&programs().child)
        .arg("60000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start tansa");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let asked = std::time::Instant::now();
    // SAFETY: kill with a pid of our own child.
    unsafe { libc::kill(tansa_run.id() as i32, libc::SIGINT) };
    let status = tansa_run.wait().expect("wait for tansa");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    assert!(asked.elapsed() < std::time::Duration::from_secs(30));
    let r = report(&file, "function");
    assert!(n(&r, "total_samples") > 0, "{r}");
}

#[test]
fn refused_perf_falls_back_to_the_agent_automatically() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("auto.tansa");
    let tansa_path = tansa();
    let mut cmd = Command::new(&p.noperf);
    cmd.arg(&tansa_path)
        .args(["sample", "-o", file.to_str().unwrap(), "--"])
        .args([p.share.to_str().unwrap(), "1600"]);
    let out = output_within(cmd, Duration::from_secs(300));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("falling back to the agent"), "{err}");
    assert!(err.contains("seccomp"), "the reason names seccomp: {err}");
    let f = report(&file, "function");
    assert_eq!(f["source"], "agent");
    let share = exe_share(&f);
    let total = n(&f, "total_samples");
    let tolerance = share_tolerance(70.0, total);
    assert!(
        (share - 70.0).abs() <= tolerance,
        "agent: {share:.1}% of {total} periods (70 +- {tolerance:.1})"
    );

    let refused = dir.path().join("perf-only.tansa");
    let mut cmd = Command::new(&p.noperf);
    cmd.arg(&tansa_path)
        .args([
            "sample",
            "--source",
            "perf",
            "-o",
            refused.to_str().unwrap(),
        ])
        .args(["--", p.share.to_str().unwrap(), "10"]);
    let out = output_within(cmd, Duration::from_secs(300));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("perf_event_open is not permitted"), "{err}");
    assert!(!refused.exists(), "no partial recording is left behind");
}

#[test]
fn sigprof_fallback_unwinds_without_frame_pointers_and_annotates() {
    let p = programs();
    let dir = tmp();
    let file = dir.path().join("deep-agent.tansa");
    sample(
        &file,
        &["--source", "agent"],
        &[p.deep.to_str().unwrap(), "300"],
    );
    let f = report(&file, "function");
    let leaf = n(unit(&f, "cpu_deep!level3"), "self_samples");
    assert!(leaf >= 50, "{leaf} samples in level3");
    let main = unit(&f, "cpu_deep!main");
    assert!(
        n(main, "total_samples") >= leaf * 95 / 100,
        "chains reach main: {main}"
    );
    let out = run(&["annotate", file.to_str().unwrap(), "level3", "--asm"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("level3"));
}

/// `tests/programs/cpu/NAME.c` built with threads, and the agent (for `--source agent`).
fn threaded_program(name: &str) -> PathBuf {
    ensure_agent();
    let dir = build_dir().join("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    compile(
        &exe,
        &[cpu_source(&format!("{name}.c"))],
        &["-g", "-O1", "-pthread"],
    );
    exe
}

/// A program run under `tansa sample --source agent` that prints "cpu NS", the CPU time it
/// measured itself: what it printed, `tansa sample`'s standard error, that time, the report
/// by process, and the sampled and unsampled time of the report.
struct Accounted {
    said: String,
    stderr: String,
    measured: u64,
    report: Value,
    sampled: u64,
    unsampled: u64,
}

impl Accounted {
    fn of(file: &Path, exe: &Path, args: &[&str]) -> Accounted {
        let mut command = vec![exe.to_str().unwrap()];
        command.extend(args);
        let out = sample(file, &["--source", "agent"], &command);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let measured: u64 = said
            .lines()
            .find_map(|l| l.strip_prefix("cpu "))
            .unwrap_or_else(|| panic!("{said}"))
            .parse()
            .unwrap();
        let report = report(file, "process");
        Accounted {
            said,
            stderr: stderr(&out),
            measured,
            sampled: n(&report, "total_samples") * n(&report, "period_ns"),
            unsampled: n(&report, "unsampled_ns"),
            report,
        }
    }

    /// Checks that the sampled and the unsampled time add up to the time measured, within
    /// `slack` ns.
    fn adds_up(&self, what: &str, slack: u64) {
        let (sampled, unsampled, measured) = (self.sampled, self.unsampled, self.measured);
        assert!(
            (sampled + unsampled).abs_diff(measured) <= slack,
            "{what}: sampled {sampled} ns + unsampled {unsampled} ns against {measured} ns \
             measured"
        );
    }
}

/// Short-lived threads under the in-process sampler: the part of each thread's last period
/// that had not ended when the thread ended is in no sample (and the kernel checks CPU-time
/// timers at its tick, so a 3 ms thread may get no sample at all). That time is counted
/// and stated, not lost silently: the sampled time and the unsampled time add up to the
/// CPU time the program measured for its threads.
#[test]
fn cpu_time_of_short_threads_in_no_sample_is_stated() {
    let exe = threaded_program("shortthreads");
    let tmp = tmp();
    let a = Accounted::of(&tmp.path().join("short.tansa"), &exe, &["60", "3000"]);
    assert!(
        a.stderr.contains("ms of CPU time is in no sample"),
        "{}",
        a.stderr
    );
    assert!(a.unsampled > 0, "{}", a.report);
    a.adds_up("short threads", a.measured / 10 + 3_000_000);
    let warning = format!("{:.1} ms of CPU time (", a.unsampled as f64 / 1e6);
    let all = warnings(&a.report);
    assert!(all.iter().any(|w| w.starts_with(&warning)), "{all:?}");
}

/// Threads still running when their process exits, under the in-process sampler: their
/// last partial period is counted as unsampled by the exit (they never end by themselves),
/// and so is the main thread's (its timer, the first of the process, has the id 0, which
/// was taken for "no timer"). Before, both were lost without a word: 40 threads of 2.5 ms
/// each came out as 19 samples and 0 unsampled against 104 ms used, and a program whose
/// main thread alone ran 2.5 ms as 0 samples and 0 unsampled.
#[test]
fn cpu_time_of_threads_running_at_exit_in_no_sample_is_stated() {
    let exe = threaded_program("liveatexit");
    let tmp = tmp();
    for threads in ["0", "40"] {
        let file = tmp.path().join(format!("live{threads}.tansa"));
        let a = Accounted::of(&file, &exe, &[threads, "2500"]);
        assert!(a.unsampled > 0, "{threads} threads: {}", a.report);
        // The program measures from `main`; the agent's own start after the timer was
        // armed is sampled too (up to 2 ms in a debug build).
        a.adds_up(&format!("{threads} threads"), a.measured / 10 + 4_000_000);
    }
}

/// Ten thousand threads running at the exit, under the in-process sampler: each one's
/// unsampled time is counted. The agent kept the threads it counts at the exit in a fixed
/// table of 8192; with 12,000 threads of 0.3 ms each, 1.2 s of the 4.0 s the program
/// measured was then neither sampled nor counted, and the warning spoke of 8192 threads.
#[test]
fn cpu_time_of_ten_thousand_threads_running_at_exit_is_all_stated() {
    let exe = threaded_program("liveatexit");
    let tmp = tmp();
    let threads = 10_000;
    let a = Accounted::of(
        &tmp.path().join("many.tansa"),
        &exe,
        &[&threads.to_string(), "300"],
    );
    a.adds_up("10,000 threads", a.measured / 10 + 4_000_000);
    // Every thread ran less than a tick: all of them, and main, left time unsampled.
    let said = format!("is in no sample: {} thread(s) ended", threads + 1);
    let all = warnings(&a.report);
    assert!(all.iter().any(|w| w.contains(&said)), "{all:?}");
}

/// A command that `--duration` ends (with SIGTERM, as perf does) under the agent's timers
/// runs none of the agent's exit code, so its threads' last partial periods cannot be
/// counted as unsampled: the report says so, naming the process and the signal.
#[test]
fn a_command_ended_by_a_signal_under_the_agent_is_said_to_miss_its_last_periods() {
    let p = programs();
    let tmp = tmp();
    let file = tmp.path().join("ended.tansa");
    let out = run(&[
        "sample",
        "-o",
        file.to_str().unwrap(),
        "--source",
        "agent",
        "--duration",
        "0.5",
        "--",
        p.child.to_str().unwrap(),
        "20000",
    ]);
    // The command's status: SIGTERM.
    assert_eq!(out.status.code(), Some(128 + 15), "{}", stderr(&out));
    let r = report(&file, "process");
    let pid = units(&r)
        .iter()
        .find(|u| u["command"] == "cpu_child")
        .and_then(|u| u["pid"].as_u64())
        .unwrap_or_else(|| panic!("no cpu_child in {r}"));
    let warning = format!("1 process(es) ended by a signal ({pid} (SIGTERM)): ");
    let all = warnings(&r);
    assert!(all.iter().any(|w| w.starts_with(&warning)), "{all:?}");
}

/// The child of `vfork` shares its parent's memory and thread-local state until it executes
/// a program or ends: a child whose `exec` failed and that called `_exit` counted its
/// parent's thread as ended (and, before, reset the CPU time its parent's count starts
/// from, so that the parent's sampled time was counted again as unsampled).
#[test]
fn a_vfork_child_that_fails_to_execute_leaves_its_parents_count_alone() {
    let exe = threaded_program("vforkfail");
    let tmp = tmp();
    let a = Accounted::of(&tmp.path().join("vfork.tansa"), &exe, &["20500"]);
    assert!(a.said.contains("child 127"), "{}", a.said);
    // As above: the agent's start after the timer was armed is sampled, not measured.
    a.adds_up("vfork", a.measured / 10 + 3_000_000);
}

/// `--by thread`: each thread by the name it took, with its share, from perf and from the
/// agent. Two threads run at once, one for twice the other's CPU time. (With perf, the
/// threads' renames, recorded on other CPUs than their process's exec, were applied before
/// it and lost: a thread was shown under the process's name.)
#[test]
fn threads_are_reported_by_their_names() {
    let exe = threaded_program("named");
    let tmp = tmp();
    for source in ["perf", "agent"] {
        let file = tmp.path().join(format!("{source}.tansa"));
        let out = sample(
            &file,
            &["--source", source],
            &[exe.to_str().unwrap(), "300"],
        );
        let said = String::from_utf8_lossy(&out.stdout);
        let tid_of = |name: &str| -> u64 {
            said.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name}: {said}"))
        };
        let r = report(&file, "thread");
        let thread = |name: &str| {
            units(&r)
                .iter()
                .find(|u| u["thread"] == name)
                .unwrap_or_else(|| panic!("{source}: no thread {name}: {r:#}"))
        };
        let (heavy, light) = (thread("heavy"), thread("light"));
        assert_eq!(heavy["tid"].as_u64(), Some(tid_of("heavy")), "{heavy}");
        assert_eq!(light["tid"].as_u64(), Some(tid_of("light")), "{light}");
        let ratio = n(heavy, "self_samples") as f64 / n(light, "self_samples") as f64;
        // The agent's timers fire at the kernel's tick, each signal standing for several
        // periods (4.5 on average in a CI run: 181 signals for 818 samples), so its ratio
        // rests on some 120 and 60 signals: a relative spread of about 16 %, and a CI run
        // gave 2.65. perf takes every period.
        let bounds = if source == "perf" {
            1.6..=2.5
        } else {
            1.3..=3.0
        };
        assert!(
            bounds.contains(&ratio),
            "{source}: heavy / light = {ratio:.2}: {r:#}"
        );
        let sum: u64 = units(&r).iter().map(|u| n(u, "self_samples")).sum();
        assert_eq!(sum, n(&r, "total_samples"), "{source}: {r:#}");
        let table = run(&["report", file.to_str().unwrap(), "--by", "thread"]);
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(
            text.contains(&format!("heavy [{}] of named [", tid_of("heavy"))),
            "{text}"
        );
    }
}

/// The vDSO has no file, but its functions have names, and unwind information: read from
/// tansa's own vDSO (the same image, checked by build id). A program that reads the clock in a loop spends most
/// of its time there (this machine's clock source is one the vDSO reads: the test says so
/// if it is not).
#[test]
fn vdso_functions_are_named() {
    let clocksource =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    assert!(
        ["tsc", "kvm-clock"].contains(&clocksource.trim()),
        "clock source {clocksource:?}: clock_gettime would enter the kernel, not run in the vDSO"
    );
    let dir = build_dir().join("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("clocks");
    compile(&exe, &[cpu_source("clocks.c")], &["-g", "-O1"]);
    for source in ["perf", "agent"] {
        let t = tmp();
        let file = t.path().join("clocks.tansa");
        sample(&file, &["--source", source], &[exe.to_str().unwrap(), "1"]);
        let r = report(&file, "function");
        let total = n(&r, "total_samples");
        let vdso: Vec<&Value> = units(&r)
            .iter()
            .filter(|u| u["unit"].as_str().is_some_and(|s| s.starts_with("[vdso]!")))
            .collect();
        let named: u64 = vdso
            .iter()
            .filter(|u| {
                u["unit"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("clock_gettime"))
            })
            .map(|u| n(u, "self_samples"))
            .sum();
        let unnamed: u64 = vdso
            .iter()
            .filter(|u| u["unit"].as_str().is_some_and(|s| s.contains("??")))
            .map(|u| n(u, "self_samples"))
            .sum();
        assert!(
            named * 2 > total && unnamed * 20 < total,
            "{source}: {named} named and {unnamed} unnamed vDSO samples of {total}: {vdso:?}"
        );
        // And unwound through: each of those samples has the C library's clock_gettime
        // as its caller (the vDSO's unwind information is read from the same image).
        for u in &vdso {
            for c in u["callers"].as_array().into_iter().flatten() {
                assert!(
                    c["unit"].as_str().is_some_and(|s| s.starts_with("libc.so")),
                    "{source}: a caller of {}: {c}",
                    u["unit"]
                );
            }
        }
    }
}

/// Options only perf's sampler uses are named when the agent samples, not dropped
/// silently.
#[test]
fn perf_only_options_are_named_when_the_agent_samples() {
    ensure_agent();
    let t = tmp();
    let file = t.path().join("agent.tansa");
    let out = sample(
        &file,
        &[
            "--source",
            "agent",
            "--call-graph",
            "fp",
            "--stack-size",
            "1024",
        ],
        &["true"],
    );
    assert!(
        stderr(&out)
            .contains("warning: --call-graph, --stack-size are for perf's sampler only: the agent"),
        "{}",
        stderr(&out)
    );
    let plain = sample(&file, &["--source", "agent"], &["true"]);
    assert!(
        !stderr(&plain).contains("sampler only"),
        "{}",
        stderr(&plain)
    );
}

/// With `--timeline`, a report by interval shows when the time went: a program that spins
/// in one function, sleeps, then spins in another has the first function on top of the
/// early intervals, idle intervals in the middle, and the second function on top of the
/// late ones; the intervals are contiguous and their samples add up to the total.
#[test]
fn a_timeline_is_reported_by_interval() {
    let dir = build_dir().join("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("phases");
    compile(&exe, &[cpu_source("phases.c")], &["-g", "-O1"]);
    let t = tmp();
    let file = t.path().join("phases.tansa");
    sample(&file, &["--timeline"], &[exe.to_str().unwrap(), "0.4"]);
    let out = run(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        "interval",
        "--interval",
        "100ms",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["by"], "interval");
    let us = units(&r);
    let mut sum = 0;
    for (k, u) in us.iter().enumerate() {
        assert_eq!(n(u, "start_ns"), k as u64 * 100_000_000, "{u}");
        assert_eq!(n(u, "end_ns"), (k as u64 + 1) * 100_000_000, "{u}");
        sum += n(u, "self_samples");
    }
    assert_eq!(sum, n(&r, "total_samples"));
    let top = |u: &Value| u["top_function"].as_str().unwrap_or("").to_string();
    let last_first = us
        .iter()
        .rposition(|u| top(u) == "phases!first_phase")
        .expect("first_phase on top somewhere");
    let first_second = us
        .iter()
        .position(|u| top(u) == "phases!second_phase")
        .expect("second_phase on top somewhere");
    let idle = us[last_first..first_second]
        .iter()
        .filter(|u| n(u, "self_samples") == 0)
        .count();
    assert!(
        last_first < first_second && idle >= 2,
        "first_phase last on top at {last_first}, second_phase first at {first_second}, {idle} idle intervals between: {us:?}"
    );
    // The table and CSV forms.
    let table = run(&["report", file.to_str().unwrap(), "--by", "interval"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("most interrupted function"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
    // Without per-sample times, the report says how to get them.
    let plain = t.path().join("plain.tansa");
    sample(&plain, &[], &[exe.to_str().unwrap(), "0.05"]);
    let refused = run(&["report", plain.to_str().unwrap(), "--by", "interval"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("record it with `tansa sample --timeline`"),
        "{}",
        stderr(&refused)
    );
    // --interval with another unit is said to be ignored.
    let other = run(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        "function",
        "--interval",
        "1s",
    ]);
    assert!(other.status.success(), "{}", stderr(&other));
    assert!(
        stderr(&other).contains("--interval applies to --by interval"),
        "{}",
        stderr(&other)
    );
}

/// `tansa annotate` takes a C++ method by its short names, and says why a function cannot
/// be annotated: inlined into another (which is named), or never interrupted itself.
#[test]
fn annotate_takes_short_names_and_explains_what_it_cannot_annotate() {
    let dir = build_dir().join("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("names");
    compile(&exe, &[cpu_source("names.cpp")], &["-g", "-O2"]);
    let t = tmp();
    let file = t.path().join("names.tansa");
    sample(&file, &[], &[exe.to_str().unwrap()]);
    for name in [
        "area",
        "Square::area",
        "shapes::Square::area",
        "names!Square::area",
        // As the table by function shows it.
        "names!shapes::Square::area(…) const",
    ] {
        let out = run(&["annotate", file.to_str().unwrap(), name, "--asm"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("names!shapes::Square::area(long) const"),
            "{name}: {text}"
        );
    }
    let inlined = run(&["annotate", file.to_str().unwrap(), "mix"]);
    assert!(!inlined.status.success());
    assert!(
        stderr(&inlined).contains("`mix` has no code of its own: it was inlined into names!outer"),
        "{}",
        stderr(&inlined)
    );
    let caller = run(&["annotate", file.to_str().unwrap(), "driver"]);
    assert!(!caller.status.success());
    assert!(
        stderr(&caller).contains("`names!driver(long)` has no samples of its own")
            || stderr(&caller).contains("`names!driver` has no samples of its own"),
        "{}",
        stderr(&caller)
    );
    let unknown = run(&["annotate", file.to_str().unwrap(), "nowhere"]);
    assert!(
        stderr(&unknown).contains("no function `nowhere` with samples in the recording"),
        "{}",
        stderr(&unknown)
    );
}

/// A program rebuilt (a new file put in place of the one running) or deleted while it is
/// sampled keeps its own names: the file as it was mapped is resolved, never the file
/// found at its path later. Before, the functions sampled after a rebuild were named after
/// whatever the new file had at their addresses (`_fini`, called from
/// `register_tm_clones`), without a warning.
#[test]
fn a_program_rebuilt_or_deleted_while_sampled_keeps_its_names() {
    let dir = build_dir().join("cpu");
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("rebuilt_other");
    compile(&other, &[cpu_source("spinner.c")], &["-g", "-O1"]);
    ensure_agent();
    for (change, source) in [
        (FileChange::Rebuilt, "perf"),
        (FileChange::Deleted, "perf"),
        (FileChange::Rebuilt, "agent"),
    ] {
        let t = tmp();
        let exe = t.path().join("phases");
        compile(&exe, &[cpu_source("phases.c")], &["-g", "-O1"]);
        let file = t.path().join("phases.tansa");
        // The program spins 1 s in first_phase, sleeps 1 s, then spins 1 s in
        // second_phase; its file changes half a second in.
        let changer = change_program_later(&exe, &other, change, Duration::from_millis(500));
        sample(&file, &["--source", source], &[exe.to_str().unwrap(), "1"]);
        changer.join().unwrap();
        let r = report(&file, "function");
        let total = n(&r, "total_samples");
        let own = |name: &str| {
            units(&r)
                .iter()
                .find(|u| u["unit"] == name)
                .map_or(0, |u| n(u, "self_samples"))
        };
        let (first, second) = (own("phases!first_phase"), own("phases!second_phase"));
        let names: Vec<&str> = units(&r)
            .iter()
            .filter_map(|u| u["unit"].as_str())
            .collect();
        assert!(
            // Each phase spins for a second of wall time: on a loaded machine it may get
            // less of the CPU, so only a tenth of the samples is asked of each.
            first * 10 > total && second * 10 > total,
            "{change:?}, {source}: first_phase {first} and second_phase {second} of {total} samples; units {names:?}"
        );
        // Every function of the program sampled is one of its own: none of the other
        // file's, nor the start-up glue that the other file has at those addresses.
        // `atof` is the program's too: glibc's <stdlib.h> defines it inline (calling
        // `strtod`), so its DWARF names it within `main`; the first sample, a millisecond
        // of CPU time after the exec, lands there now and then (once in CI).
        let own_functions = [
            "main",
            "first_phase",
            "second_phase",
            "now",
            "_start",
            "atof",
        ];
        let foreign: Vec<&&str> = names
            .iter()
            .filter(|u| {
                u.strip_prefix("phases!")
                    .is_some_and(|f| !own_functions.contains(&f) && !f.ends_with("@plt"))
            })
            .collect();
        assert!(
            foreign.is_empty(),
            "{change:?}, {source}: functions the program does not have: {foreign:?} (units {names:?})"
        );
    }
}

/// The process id of `program`'s process in a `--by process` report.
fn pid_of(file: &Path, program: &str) -> u64 {
    let pr = report(file, "process");
    units(&pr)
        .iter()
        .find(|u| u["command"] == program)
        .map(|u| n(u, "pid"))
        .unwrap_or_else(|| panic!("no process {program} in {pr}"))
}

/// Removes a perf map the program left in /tmp (the test's own: its pid's).
struct RemoveLater(PathBuf);

impl Drop for RemoveLater {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn jit_code_is_named_from_its_perf_map_and_a_planted_map_is_refused() {
    let t = tmp();
    let exe = t.path().join("cpu_jit");
    compile(&exe, &[cpu_source("jit.c")], &["-g", "-O1"]);

    // A map the program wrote: each generated function is its own row, named, in the
    // share of time the program gives it (3:1), with either sampler (the agent's knows
    // only the files the dynamic linker loaded: what is outside them is generated code).
    ensure_agent();
    for source in ["perf", "agent"] {
        let file = t.path().join(format!("map-{source}.tansa"));
        sample(
            &file,
            &["--source", source],
            &[exe.to_str().unwrap(), "map", "800"],
        );
        let pid = pid_of(&file, "cpu_jit");
        let _map = RemoveLater(PathBuf::from(format!("/tmp/perf-{pid}.map")));
        let f = report(&file, "function");
        let module = format!("[jit {pid}]");
        let hot = n(unit(&f, &format!("{module}!jit_hot")), "self_samples");
        let cold = n(unit(&f, &format!("{module}!jit_cold")), "self_samples");
        let total = n(&f, "total_samples");
        assert!(
            hot + cold >= total * 9 / 10,
            "{source}: {hot} + {cold} of {total}"
        );
        let share = hot as f64 / (hot + cold) as f64 * 100.0;
        let tolerance = share_tolerance(75.0, hot + cold).max(6.0);
        assert!(
            (share - 75.0).abs() <= tolerance,
            "{source}: jit_hot has {share:.1} % of the generated code's samples, expected 75 ± {tolerance:.1}"
        );
        let l = report(&file, "library");
        assert!(n(unit(&l, &module), "self_samples") >= hot + cold);
        assert!(
            !f["notes"].to_string().contains("has no names"),
            "{source}: named code taken for unnamed: {}",
            f["notes"]
        );
        // Its instructions are gone with the process: annotate says so.
        let out = run(&["annotate", file.to_str().unwrap(), "jit_hot"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("generated at run time"),
            "{}",
            stderr(&out)
        );
        // Generated code has no unwind information: chains that end there are said to be
        // cut short, not taken for whole ones (perf's sampler; the agent unwinds in the
        // program).
        if source == "perf" {
            assert!(
                warnings(&f)
                    .iter()
                    .any(|w| w.contains("stops before the outermost function")),
                "{:?}",
                warnings(&f)
            );
        }
    }

    // No map: one unnamed row, nothing to warn about, and a note on how to have the
    // runtime name its code.
    let file = t.path().join("none.tansa");
    sample(&file, &[], &[exe.to_str().unwrap(), "none", "300"]);
    let pid = pid_of(&file, "cpu_jit");
    let f = report(&file, "function");
    assert!(n(unit(&f, &format!("[jit {pid}]!??")), "self_samples") > 0);
    assert!(
        !warnings(&f).iter().any(|w| w.contains("perf map")),
        "{:?}",
        warnings(&f)
    );
    let notes = |f: &Value| -> Vec<String> {
        f["notes"]
            .as_array()
            .expect("notes")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    assert!(
        notes(&f)
            .iter()
            .any(|n| n.contains("generated at run time that has no names")
                && n.contains("--perf-basic-prof")),
        "{:?}",
        notes(&f)
    );

    // A map dated before the process started, as one an earlier process with the same id
    // left in /tmp would be: it names other code, so it is not read, and that is said.
    let file = t.path().join("stale.tansa");
    sample(&file, &[], &[exe.to_str().unwrap(), "stale", "300"]);
    let pid = pid_of(&file, "cpu_jit");
    let _stale = RemoveLater(PathBuf::from(format!("/tmp/perf-{pid}.map")));
    let f = report(&file, "function");
    assert!(n(unit(&f, &format!("[jit {pid}]!??")), "self_samples") > 0);
    assert!(
        warnings(&f)
            .iter()
            .any(|w| w.contains("was last written before the process started")),
        "{:?}",
        warnings(&f)
    );

    // The map is a symbolic link to another file (tansa may run as root): not read, and
    // said.
    let file = t.path().join("link.tansa");
    let target = t.path().join("elsewhere.map");
    sample(
        &file,
        &[],
        &[
            exe.to_str().unwrap(),
            "link",
            "300",
            target.to_str().unwrap(),
        ],
    );
    let pid = pid_of(&file, "cpu_jit");
    let _link = RemoveLater(PathBuf::from(format!("/tmp/perf-{pid}.map")));
    let f = report(&file, "function");
    assert!(
        !units(&f).iter().any(|u| u["unit"]
            .as_str()
            .is_some_and(|s| s.contains("secret_name"))),
        "a name from the link's target: {f}"
    );
    assert!(n(unit(&f, &format!("[jit {pid}]!??")), "self_samples") > 0);
    assert!(
        warnings(&f).iter().any(|w| w.contains(&format!(
            "its perf map /tmp/perf-{pid}.map was not read: it is a symbolic link"
        ))),
        "{:?}",
        warnings(&f)
    );
}

#[test]
fn node_code_is_named_from_the_map_of_perf_basic_prof() {
    if !require(
        common::have("node"),
        "node (Debian's nodejs, installed by .ci/install-deps)",
    ) {
        return;
    }
    let t = tmp();
    let script = t.path().join("fib.js");
    std::fs::write(
        &script,
        "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
         let s = 0; const t = Date.now();\n\
         while (Date.now() - t < 1000) { s += fib(22); }\n\
         console.log(s > 0);\n",
    )
    .unwrap();
    let file = t.path().join("node.tansa");
    // In the temporary directory: V8 also writes a log of its own where it runs.
    let out = Command::new(tansa())
        .current_dir(t.path())
        .args(["sample", "-o", file.to_str().unwrap(), "--"])
        .args(["node", "--perf-basic-prof", script.to_str().unwrap()])
        .output()
        .expect("run tansa");
    assert!(
        out.status.success(),
        "tansa sample failed: {}",
        stderr(&out)
    );
    let pid = pid_of(&file, "node");
    let _map = RemoveLater(PathBuf::from(format!("/tmp/perf-{pid}.map")));
    let f = report(&file, "function");
    let total = n(&f, "total_samples");
    // V8 names optimized code `JS:*fib <script>:1:...` (older versions `LazyCompile:*fib`).
    let prefix = format!("[jit {pid}]!");
    let fib: u64 = units(&f)
        .iter()
        .filter(|u| {
            u["unit"].as_str().is_some_and(|s| {
                s.starts_with(&prefix) && s.contains("fib ") && s.contains("fib.js")
            })
        })
        .map(|u| n(u, "self_samples"))
        .sum();
    assert!(
        fib * 2 > total,
        "fib's generated code has {fib} of {total} samples; units {:?}",
        units(&f)
            .iter()
            .take(10)
            .map(|u| u["unit"].clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_source_modified_after_its_program_was_built_is_flagged() {
    let dir = tmp();
    let src = dir.path().join("edited.c");
    std::fs::write(
        &src,
        "volatile unsigned long sink;\n\
         __attribute__((noinline)) void hot(void) {\n\
         \x20   for (unsigned long i = 0; i < 300000000; i++) sink += i;\n\
         }\n\
         int main(void) { hot(); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("edited");
    compile(&exe, std::slice::from_ref(&src), &["-g", "-O0"]);
    let annotate = |file: &Path| {
        let out = run(&["annotate", file.to_str().unwrap(), "hot", "--source"]);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let notes = |file: &Path| {
        let out = run(&["report", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out)
    };

    // As built: no warning (the control).
    let fresh = dir.path().join("fresh.tansa");
    sample(&fresh, &[], &[exe.to_str().unwrap()]);
    let text = annotate(&fresh);
    assert!(!text.contains("was modified"), "{text}");
    assert!(text.contains("sink += i"), "{text}");

    // Two lines inserted above the loop, ten seconds after the build: the loop's samples
    // would be shown on line 3, which now holds something else.
    let edited = format!(
        "#include <stdlib.h>\n#include <stdio.h>\n{}",
        std::fs::read_to_string(&src).unwrap()
    );
    std::fs::write(&src, edited).unwrap();
    let later = std::fs::metadata(&exe).unwrap().modified().unwrap() + Duration::from_secs(10);
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let stale = dir.path().join("stale.tansa");
    sample(&stale, &[], &[exe.to_str().unwrap()]);
    let text = annotate(&stale);
    let warning = format!(
        "Warning: {} was modified 10 s after {} was built",
        src.display(),
        exe.display()
    );
    assert!(text.contains(&warning), "{text}");
    let asm = run(&["annotate", stale.to_str().unwrap(), "hot", "--asm"]);
    assert!(
        String::from_utf8_lossy(&asm.stdout).contains(&warning),
        "{}",
        String::from_utf8_lossy(&asm.stdout)
    );
    let text = notes(&stale);
    assert!(
        text.contains("1 source file(s) were modified after the module naming them was built"),
        "{text}"
    );
}
