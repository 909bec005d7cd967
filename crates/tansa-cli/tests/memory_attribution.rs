//! Exact attribution of the seed 000 Fig. 3 program (tests/programs/fig3.c) per library,
//! function, thread, call and interval, for every charge policy and both free modes,
//! offline (record, then report) and online, built both without optimisation and with
//! `-O2 -fomit-frame-pointer`.
//!
//! The expected figures follow from the program's phases (see fig3.c):
//! A 10x100 bytes via liba->libb, B calloc 200 in liba, C 300 in libb freed by main,
//! D 50->70->90->110 in the executable, E memalign family 128+256+384+512+100 (384 leaked),
//! F plugin 1000->2000 freed by the plugin, G liba frees A's blocks, H 777 leaked,
//! I two threads each 5x40 via liba->libb, two freed by the thread.

mod common;

use common::*;
use serde_json::Value;

/// (unit, allocated, net, max, min, (malloc, calloc, realloc, free, memalign))
type Row = (&'static str, i64, i64, i64, i64, (u64, u64, u64, u64, u64));

const PLUG: Row = ("libplug.so", 3000, 0, 2000, 0, (1, 0, 1, 1, 0));
const EXE_OWNER: Row = ("fig3", 2477, 1161, 1380, 0, (2, 0, 3, 5, 5));
const EXE_CALLER: Row = ("fig3", 2477, 701, 1080, -300, (2, 0, 3, 10, 5));

fn expected(charge: &str, free_to: &str) -> Vec<Row> {
    match (charge, free_to) {
        ("first", "owner") => vec![
            ("liba.so", 1600, 440, 1200, 0, (20, 1, 0, 14, 0)),
            ("libb.so", 300, 0, 300, 0, (1, 0, 0, 1, 0)),
            PLUG,
            EXE_OWNER,
        ],
        ("last", "owner") => vec![
            ("liba.so", 200, 200, 200, 0, (0, 1, 0, 0, 0)),
            ("libb.so", 1700, 240, 1300, 0, (21, 0, 0, 15, 0)),
            PLUG,
            EXE_OWNER,
        ],
        ("all", "owner") => vec![
            ("liba.so", 1600, 440, 1200, 0, (20, 1, 0, 14, 0)),
            ("libb.so", 1700, 240, 1300, 0, (21, 0, 0, 15, 0)),
            PLUG,
            EXE_OWNER,
        ],
        ("first", "caller") => vec![
            ("liba.so", 1600, 600, 1200, 0, (20, 1, 0, 10, 0)),
            ("libb.so", 300, 300, 300, 0, (1, 0, 0, 0, 0)),
            PLUG,
            EXE_CALLER,
        ],
        // The teardown function of liba releases what libb allocated: liba's minimum goes
        // negative, as seed 000 §5.4 describes.
        ("last", "caller") => vec![
            ("liba.so", 200, -800, 200, -800, (0, 1, 0, 10, 0)),
            ("libb.so", 1700, 1700, 1700, 0, (21, 0, 0, 0, 0)),
            PLUG,
            EXE_CALLER,
        ],
        ("all", "caller") => vec![
            ("liba.so", 1600, 600, 1200, 0, (20, 1, 0, 10, 0)),
            ("libb.so", 1700, 1700, 1700, 0, (21, 0, 0, 0, 0)),
            PLUG,
            EXE_CALLER,
        ],
        _ => unreachable!(),
    }
}

const POLICIES: [(&str, &str); 6] = [
    ("first", "owner"),
    ("last", "owner"),
    ("all", "owner"),
    ("first", "caller"),
    ("last", "caller"),
    ("all", "caller"),
];

fn check_rows(report: &Value, rows: &[Row], context: &str) {
    for &(name, allocated, net, max, min, c) in rows {
        let u = unit(report, name);
        assert_eq!(
            bytes(u),
            (allocated, net, max, min),
            "{context}: bytes of {name} (allocated, net, max, min)"
        );
        assert_eq!(
            calls(u),
            c,
            "{context}: calls of {name} (malloc, calloc, realloc, free, memalign)"
        );
    }
}

fn record_fig3(variant: &str, opt: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    record_fig3_with(variant, opt, &[])
}

/// [`record_fig3`] with `extra` options of `tansa record`.
fn record_fig3_with(
    variant: &str,
    opt: &[&str],
    extra: &[&str],
) -> (tempfile::TempDir, std::path::PathBuf) {
    let f = fig3(variant, opt);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fig3.tansa");
    let out = record(
        &file,
        extra,
        &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap()],
    );
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (dir, file)
}

fn all_policies_offline(variant: &str, opt: &[&str]) {
    let (_dir, file) = record_fig3(variant, opt);
    check_all_policies(&file, variant);
}

/// Checks the reports of every charge policy and free mode of a recording of Fig. 3.
fn check_all_policies(file: &std::path::Path, variant: &str) {
    for (charge, free_to) in POLICIES {
        let r = report_json(file, &["--charge", charge, "--free-to", free_to]);
        assert_eq!(r["schema"], "tansa.memory-report.v1");
        assert_eq!(
            (
                r["by"].as_str(),
                r["charge"].as_str(),
                r["free_to"].as_str()
            ),
            (Some("library"), Some(charge), Some(free_to))
        );
        assert_eq!(r["process"]["exit"]["kind"], "exited");
        assert_eq!(r["process"]["exit"]["code"], 0);
        check_rows(
            &r,
            &expected(charge, free_to),
            &format!("{variant} offline {charge}/{free_to}"),
        );
        assert!(
            r["improper"].as_array().unwrap().is_empty(),
            "no improper use: {}",
            r["improper"]
        );
    }
}

#[test]
fn libraries_every_policy_offline_unoptimised() {
    all_policies_offline("O0", &["-O0", "-fno-omit-frame-pointer"]);
}

#[test]
fn libraries_every_policy_offline_without_frame_pointers() {
    all_policies_offline("O2", &["-O2", "-fomit-frame-pointer"]);
}

/// The chunks of a recording's event streams (thread events, module and stack definitions)
/// are compressed or stored as they are (`--compress`; `auto` stores them while the CPUs
/// are busy, and a run as short as this one counts as busy; the other frames are always
/// compressed): the reports are the same, `always` compresses the chunks (into fewer bytes
/// than they hold) and `never` stores every one as it is. (The whole files are compared on a
/// larger recording in `busy_cpus_get_stored_events_and_a_note`: this one is some 4 KB, in
/// which the two runs' timestamps and ids can outweigh what compression saves.)
#[test]
fn compressed_and_stored_events_give_the_same_reports() {
    let opt = ["-O2", "-fomit-frame-pointer"];
    for when in ["always", "never"] {
        let (_dir, file) = record_fig3_with("O2", &opt, &["--compress", when]);
        check_all_policies(&file, &format!("O2 --compress {when}"));
        let chunks = event_chunks(&file);
        assert!(!chunks.is_empty(), "--compress {when}: no event chunk");
        let compressed = chunks.iter().filter(|c| c.compressed).count();
        let (stored, raw) = chunks.iter().fold((0, 0), |(s, r), c| {
            (s + u64::from(c.stored_len), r + c.payload.len() as u64)
        });
        if when == "never" {
            assert_eq!(compressed, 0, "--compress never: {compressed} compressed");
            assert_eq!(stored, raw, "--compress never");
        } else {
            assert!(compressed > 0, "--compress always: no chunk compressed");
            assert!(
                stored < raw,
                "--compress always: {stored} bytes stored for {raw}"
            );
        }
    }
}

/// `--top N` shows the N largest units of the table and sums the others' calls in one row
/// (the total row stays that of every unit); JSON and reports in time order refuse it.
#[test]
fn top_shows_the_largest_units_and_sums_the_rest() {
    let (_dir, file) = record_fig3("O2", &["-O2", "-fomit-frame-pointer"]);
    let path = file.to_str().unwrap();
    let all = report_json(&file, &[]);
    let units = all["units"].as_array().unwrap();
    assert!(units.len() >= 3, "{all}");
    let o = run_tansa(&["report", path, "--top", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("unit "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 3, "one unit, the rest, the total: {text}");
    assert!(
        rows[0].starts_with(units[0]["unit"].as_str().unwrap()),
        "{text}"
    );
    assert!(
        rows[1].starts_with(&format!("({} more)", units.len() - 1)),
        "{text}"
    );
    assert!(rows[2].starts_with("(total)"), "{text}");
    // The calls and temporary allocations of the units not shown, summed: the row's last
    // six columns.
    let (mut m, mut c, mut r, mut f, mut a, mut t) = (0, 0, 0, 0, 0, 0);
    for u in &units[1..] {
        let k = calls(u);
        (m, c, r, f, a) = (m + k.0, c + k.1, r + k.2, f + k.3, a + k.4);
        t += u["temporary_allocations"].as_u64().unwrap();
    }
    let columns: Vec<&str> = rows[1].split_whitespace().collect();
    assert_eq!(
        columns[columns.len() - 6..],
        [m, c, r, f, a, t].map(|v| v.to_string()),
        "{text}"
    );
    let whole = run_tansa(&["report", path]);
    let total = |t: &str| -> Vec<String> {
        let row = t.lines().find(|l| l.starts_with("(total)")).unwrap();
        row.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(total(&text), total(&String::from_utf8_lossy(&whole.stdout)));
    // With --charge all, an event counts in every library on its stack: the units'
    // figures overlap, and the row of the others gives only their number.
    let o = run_tansa(&["report", path, "--charge", "all", "--top", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rest = text
        .lines()
        .find(|l| l.starts_with('(') && l.contains(" more)"))
        .unwrap_or_else(|| panic!("no row of the others in {text}"));
    assert_eq!(rest.split_whitespace().count(), 2, "{text}");
    for refused in [
        &["--top", "1", "--format", "json"][..],
        &["--top", "1", "--by", "interval"],
        &["--top", "0"],
    ] {
        let mut args = vec!["report", path];
        args.extend(refused);
        let o = run_tansa(&args);
        assert_eq!(o.status.code(), Some(2), "{refused:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--top"), "{refused:?}: {}", stderr(&o));
    }
}

/// The frames of a heap recording that hold its event streams.
fn event_chunks(file: &std::path::Path) -> Vec<tansa_format::container::Frame> {
    use tansa_format::memory::{META_CHUNK, THREAD_CHUNK};
    let input = std::io::BufReader::new(std::fs::File::open(file).unwrap());
    let mut reader = tansa_format::container::Reader::new(input).unwrap();
    let mut chunks = Vec::new();
    while let Some(frame) = reader.next_frame().unwrap() {
        if frame.ty == META_CHUNK || frame.ty == THREAD_CHUNK {
            chunks.push(frame);
        }
    }
    assert!(reader.is_complete(), "{} has no end frame", file.display());
    chunks
}

/// On CPUs that are all busy, `tansa record` (`--compress auto`) stores the events as they
/// are, says so, and records them exactly; `--compress always` compresses them anyway and
/// says nothing. 900,000 allocations and frees: some 5 MiB of events, above the 4 MiB from
/// which the note is printed.
#[test]
fn busy_cpus_get_stored_events_and_a_note() {
    // Enough for several of the collector's 100 ms windows at half a CPU, even alone on an
    // idle machine (450,000 took 40 ms there: no window was ever judged).
    const PAIRS: u64 = 2_000_000;
    let exe = program("allocer", "allocer.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let spinning = tansa_testkit::BusyCpus::start();
    let recorded: Vec<_> = ["auto", "always"]
        .map(|when| {
            let file = dir.path().join(format!("{when}.tansa"));
            let out = record(
                &file,
                &["--compress", when],
                &[exe.to_str().unwrap(), "0", &PAIRS.to_string()],
            );
            (when, file, out)
        })
        .into();
    drop(spinning);
    let mut sizes = Vec::new();
    for (when, file, out) in recorded {
        assert!(out.status.success(), "{}", stderr(&out));
        let noted = stderr(&out).contains("of events stored uncompressed");
        assert_eq!(noted, when == "auto", "--compress {when}: {}", stderr(&out));
        let r = report_json(&file, &["--by", "function"]);
        let main = unit(&r, "allocer!main");
        assert_eq!(calls(main), (PAIRS, 0, 0, PAIRS, 0), "--compress {when}");
        assert_eq!(bytes(main).0, 1111 * PAIRS as i64, "--compress {when}");
        sizes.push(std::fs::metadata(&file).unwrap().len());
    }
    assert!(
        sizes[0] > 2 * sizes[1],
        "stored {} bytes, compressed {} bytes",
        sizes[0],
        sizes[1]
    );
}

/// A control group with a CPU quota, for the tests (root only): its directories (one per
/// hierarchy: version 1's `cpu` and `cpuacct`, or version 2's), removed on drop.
struct QuotaGroup {
    dirs: Vec<std::path::PathBuf>,
}

impl QuotaGroup {
    /// A new group allowed `quota_us` of CPU time every `period_us`, under the hierarchies
    /// of the calling process's mounts.
    fn create(quota_us: u64, period_us: u64) -> Result<QuotaGroup, String> {
        use tansa_proc::cgroup::parse_mountinfo;
        let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap());
        let name = format!("tansa-test-{}", std::process::id());
        let v1 = |controller: &str| {
            mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))
                .map(|m| m.point.join(&name))
        };
        let mut group = QuotaGroup { dirs: Vec::new() };
        let make = |group: &mut QuotaGroup, dir: std::path::PathBuf| {
            if !group.dirs.contains(&dir) {
                std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                group.dirs.push(dir);
            }
            Ok::<(), String>(())
        };
        let write = |file: std::path::PathBuf, text: &str| {
            std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))
        };
        if let (Some(cpu), Some(acct)) = (v1("cpu"), v1("cpuacct")) {
            make(&mut group, cpu.clone())?;
            make(&mut group, acct)?;
            write(cpu.join("cpu.cfs_period_us"), &period_us.to_string())?;
            write(cpu.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
            return Ok(group);
        }
        let root = mounts
            .iter()
            .find(|m| m.fstype == "cgroup2")
            .ok_or("no cgroup file system with the cpu controller")?
            .point
            .clone();
        write(root.join("cgroup.subtree_control"), "+cpu")?;
        make(&mut group, root.join(&name))?;
        write(
            root.join(&name).join("cpu.max"),
            &format!("{quota_us} {period_us}"),
        )?;
        Ok(group)
    }

    /// A shell command that moves the shell into the group.
    fn join_command(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("echo $$ > {}/cgroup.procs; ", d.display()))
            .collect()
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            // Empty once its processes have exited.
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// In a control group held to a CPU quota (a container's), the machine's CPUs may idle
/// while the group is throttled: `tansa record` stores the events as they are, and says
/// that the group's quota was used up. The program alone needs a whole CPU; the group is
/// allowed half of one.
#[test]
fn a_control_group_at_its_cpu_quota_gets_stored_events_and_says_why() {
    // Enough for several of the collector's 100 ms windows at half a CPU, even alone on an
    // idle machine (450,000 took 40 ms there: no window was ever judged).
    const PAIRS: u64 = 2_000_000;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !require(root, "root, to make a control group with a CPU quota") {
        return;
    }
    ensure_agent();
    let exe = program("allocer", "allocer.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quota.tansa");
    // A short period: the program runs for some 40 ms alone on an idle machine, less than
    // one 100 ms period, in which half a CPU is never used up.
    let group = QuotaGroup::create(5_000, 10_000).expect("a control group with a CPU quota");
    let script = format!(
        "{}exec {} record -o {} -- {} 0 {PAIRS}",
        group.join_command(),
        tansa().display(),
        file.display(),
        exe.display()
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script]);
    let out = output_within(cmd, RUN_DEADLINE);
    drop(group);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("of events stored uncompressed")
            && stderr(&out).contains("this control group's CPU quota of 0.50 CPU was used up"),
        "{}",
        stderr(&out)
    );
    let r = report_json(&file, &["--by", "function"]);
    let main = unit(&r, "allocer!main");
    assert_eq!(calls(main), (PAIRS, 0, 0, PAIRS, 0));
}

fn all_policies_online(variant: &str, opt: &[&str]) {
    let f = fig3(variant, opt);
    for (charge, free_to) in POLICIES {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("report.json");
        let out = record(
            &json,
            &[
                "--online",
                "--format",
                "json",
                "--charge",
                charge,
                "--free-to",
                free_to,
            ],
            &[f.exe.to_str().unwrap(), f.plugin.to_str().unwrap()],
        );
        assert!(
            out.status.success(),
            "online record failed: {}",
            stderr(&out)
        );
        let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        check_rows(
            &r,
            &expected(charge, free_to),
            &format!("{variant} online {charge}/{free_to}"),
        );
        // Online mode writes no event log.
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "only the report is written");
    }
}

#[test]
fn libraries_every_policy_online_unoptimised() {
    all_policies_online("O0", &["-O0", "-fno-omit-frame-pointer"]);
}

#[test]
fn libraries_every_policy_online_without_frame_pointers() {
    all_policies_online("O2", &["-O2", "-fomit-frame-pointer"]);
}

fn functions(variant: &str, opt: &[&str]) {
    let (_dir, file) = record_fig3(variant, opt);
    let r = report_json(&file, &["--by", "function"]);
    let ctx = format!("{variant} by function, first");
    check_rows(
        &r,
        &[
            ("liba.so!func_a0", 1400, 240, 1000, 0, (20, 0, 0, 14, 0)),
            ("liba.so!liba_alloc", 200, 200, 200, 0, (0, 1, 0, 0, 0)),
            ("libb.so!libb_alloc", 300, 0, 300, 0, (1, 0, 0, 1, 0)),
            ("libplug.so!plug_work", 3000, 0, 2000, 0, (1, 0, 1, 1, 0)),
            ("fig3!exe_grow", 320, 0, 110, 0, (1, 0, 3, 1, 0)),
            ("fig3!exe_aligned", 1380, 384, 1380, 0, (0, 0, 0, 4, 5)),
            ("fig3!leak", 777, 777, 777, 0, (1, 0, 0, 0, 0)),
        ],
        &ctx,
    );
    let r = report_json(&file, &["--by", "function", "--charge", "last"]);
    check_rows(
        &r,
        &[
            ("libb.so!func_b0", 1400, 240, 1000, 0, (20, 0, 0, 14, 0)),
            ("liba.so!liba_alloc", 200, 200, 200, 0, (0, 1, 0, 0, 0)),
        ],
        &format!("{variant} by function, last"),
    );
    let r = report_json(&file, &["--by", "function", "--charge", "all"]);
    for f in ["liba.so!func_a0", "liba.so!func_a1", "libb.so!func_b0"] {
        check_rows(
            &r,
            &[(f, 1400, 240, 1000, 0, (20, 0, 0, 14, 0))],
            &format!("{variant} by function, all"),
        );
    }
    // No frame outside the root (start-up code) or the allocator is ever a unit.
    for u in r["units"].as_array().unwrap() {
        let name = u["unit"].as_str().unwrap();
        assert!(
            !name.contains("__libc_start") && !name.contains("!_start"),
            "start-up frame charged: {name}"
        );
    }
}

#[test]
fn functions_unoptimised() {
    functions("O0", &["-O0", "-fno-omit-frame-pointer"]);
}

#[test]
fn functions_without_frame_pointers() {
    functions("O2", &["-O2", "-fomit-frame-pointer"]);
}

#[test]
fn threads_are_units_with_their_names() {
    let (_dir, file) = record_fig3("O0", &["-O0", "-fno-omit-frame-pointer"]);
    let r = report_json(&file, &["--by", "thread"]);
    let units = r["units"].as_array().unwrap();
    let raw = raw_counts(&file);
    for name in ["worker-1", "worker-2"] {
        let u = units
            .iter()
            .find(|u| u["thread"]["name"] == name)
            .unwrap_or_else(|| panic!("no thread {name}: {units:?}"));
        assert_eq!(bytes(u), (200, 120, 200, 0), "thread {name}");
        // The worker's own 5 mallocs and 2 frees, plus whatever the C library frees when the
        // thread exits (glibc calls free(NULL) for per-thread buffers): every free call the
        // thread made, as counted from the raw records.
        let tid = u["thread"]["tid"].as_u64().unwrap() as u32;
        let thread_frees = raw[&tid].get("free").copied().unwrap_or(0);
        assert!(thread_frees >= 2);
        assert_eq!(calls(u), (5, 0, 0, thread_frees, 0), "thread {name}");
        assert!(
            u["unit"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{name} ["))
        );
    }
    let main = units
        .iter()
        .find(|u| u["thread"]["name"] == "fig3")
        .expect("main thread unit");
    // The program's own main-thread allocations (A..H), plus whatever the C library
    // allocates on its behalf (dlopen, thread creation).
    assert!(
        main["allocated_bytes"].as_i64().unwrap() >= 1000 + 200 + 300 + 320 + 1380 + 3000 + 777
    );
    // Caller mode charges the workers' releases to the releasing thread: same here.
    let r = report_json(&file, &["--by", "thread", "--free-to", "caller"]);
    let w1 = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["thread"]["name"] == "worker-1")
        .unwrap();
    assert_eq!(bytes(w1), (200, 120, 200, 0));
    // Nothing is charged to tansa's own code, nor to "nobody" when a stack is known.
    for u in report_json(&file, &["--by", "function"])["units"]
        .as_array()
        .unwrap()
    {
        let name = u["unit"].as_str().unwrap();
        assert!(
            !name.starts_with("libtansa_agent"),
            "agent frame charged: {name}"
        );
        assert_ne!(
            name, "[unknown]",
            "a release with a stack was charged to nobody"
        );
    }
}

#[test]
fn calls_and_intervals() {
    let (_dir, file) = record_fig3("O0", &["-O0", "-fno-omit-frame-pointer"]);
    let r = report_json(&file, &["--by", "call"]);
    let liba: Vec<&Value> = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["unit"] == "liba.so")
        .collect();
    // Phases A and B are one run of liba (11 consecutive events): one call.
    let first = liba
        .iter()
        .find(|u| u["call_index"] == 0)
        .expect("first call of liba");
    assert_eq!(first["allocated_bytes"], 1200);
    assert_eq!(
        calls(first),
        (10, 1, 0, 10, 0),
        "owner mode: G's releases belong to the call that allocated"
    );
    let total: i64 = liba
        .iter()
        .map(|u| u["allocated_bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 1600);
    let starts: Vec<u64> = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["start_ns"].as_u64().unwrap())
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "calls in time order"
    );

    let r = report_json(&file, &["--by", "interval", "--interval", "1ms"]);
    assert_eq!(r["interval_ns"], 1_000_000);
    let liba: Vec<&Value> = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["unit"] == "liba.so")
        .collect();
    assert!(
        liba.len() >= 3,
        "liba is active in several intervals: {liba:?}"
    );
    let total: i64 = liba
        .iter()
        .map(|u| u["allocated_bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 1600);
    assert_eq!(liba.last().unwrap()["cumulative_net_bytes"], 440);
    for u in &liba {
        assert_eq!(
            u["end_ns"].as_u64().unwrap() - u["start_ns"].as_u64().unwrap(),
            1_000_000
        );
        // Each interval starts from zero (seed Fig. 10): its net is the change within it.
        assert!(u["max_bytes"].as_i64().unwrap() >= u["net_bytes"].as_i64().unwrap());
    }
    let net_sum: i64 = liba.iter().map(|u| u["net_bytes"].as_i64().unwrap()).sum();
    assert_eq!(net_sum, 440, "interval nets add up to the final net");
}

#[test]
fn table_and_csv_agree_with_json() {
    let (_dir, file) = record_fig3("O0", &["-O0", "-fno-omit-frame-pointer"]);
    let out = run_tansa(&["report", file.to_str().unwrap()]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let line = table
        .lines()
        .find(|l| l.starts_with("liba.so "))
        .expect("liba row in the table");
    let cells: Vec<&str> = line.split_whitespace().collect();
    // Bytes for people in the table (440, 1200, 0 and 1600 bytes), exact in CSV and JSON.
    assert_eq!(
        &cells[1..9],
        &["440", "B", "1.2", "KiB", "0", "B", "1.6", "KiB"],
        "{line}"
    );
    assert_eq!(cells[9], "20", "malloc calls: {line}");
    assert!(table.contains("exited with code 0"), "{table}");
    let out = run_tansa(&["report", file.to_str().unwrap(), "--format", "csv"]);
    let csv = String::from_utf8(out.stdout).unwrap();
    assert!(
        csv.starts_with("unit,net_bytes,max_bytes,min_bytes,allocated_bytes,freed_bytes,malloc")
    );
    assert!(
        csv.lines()
            .any(|l| l.starts_with("liba.so,440,1200,0,1600,1160,20,1,0,14,0")),
        "{csv}"
    );
}

#[test]
fn decoding_on_a_second_thread_yields_the_same_events() {
    use tansa_analysis::memory::recording::MemoryRecording;
    let (_dir, file) = record_fig3("O0", &["-O0", "-fno-omit-frame-pointer"]);
    let open = || std::io::BufReader::new(std::fs::File::open(&file).unwrap());
    let plain = MemoryRecording::open(open()).unwrap();
    let direct: Vec<_> = plain.events().collect();
    let mut prefetched = MemoryRecording::open(open()).unwrap();
    prefetched.prefetch_from(open());
    let threaded: Vec<_> = prefetched.events().collect();
    assert!(direct.len() > 50, "{} events", direct.len());
    assert_eq!(direct, threaded);
    assert!(
        direct.windows(2).all(|w| w[0].ts <= w[1].ts),
        "events in time order"
    );
}

/// Online and offline reports name functions alike: the online resolver is the recording's
/// own, module by module (it missed the exported names that stand for internal ones, and
/// separate debug files: `libc.so.6!__printf` online, `libc.so.6!printf` offline).
#[test]
fn online_and_offline_name_functions_alike() {
    let exe = program("printer", "printer.c", &["-g", "-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("online.json");
    let out = record(
        &json,
        &["--online", "--format", "json", "--by", "function"],
        &[exe.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let online: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let file = dir.path().join("offline.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let offline = report_json(&file, &["--by", "function"]);
    let rows = |r: &Value| -> Vec<(String, Value)> {
        let mut v: Vec<(String, Value)> = r["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                (
                    u["unit"].as_str().unwrap().to_string(),
                    u["allocated_bytes"].clone(),
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(rows(&online), rows(&offline));
    assert!(
        rows(&online).iter().any(|(u, _)| u == "libc.so.6!printf"),
        "{:?}",
        rows(&online)
    );
    assert!(rows(&online).iter().any(|(u, _)| u == "printer!main"));
    // --interval without --by interval changes nothing, and says so (a CPU report refuses
    // it; a heap report ignored it without a word).
    let ignored = run_tansa(&["report", file.to_str().unwrap(), "--interval", "1s"]);
    assert!(ignored.status.success(), "{}", stderr(&ignored));
    assert!(
        stderr(&ignored)
            .contains("--interval applies to --by interval; the report by library ignores it"),
        "{}",
        stderr(&ignored)
    );
}

/// A program whose one thread allocates from 3,000 functions, each through its own call
/// site: more return addresses than one of framehop's rule caches holds (509, direct-mapped),
/// so that the thread's rules thrash and it is given its extra caches
/// (`tansa_agent::unwind::UnwindCache`). Every function must still be its own unit, with
/// exactly its bytes and calls, in each of the three rounds (the later rounds unwind with
/// the widened caches).
#[test]
fn a_program_with_more_call_sites_than_a_rule_cache_holds_is_attributed_exactly() {
    const FUNCTIONS: usize = 3000;
    const ROUNDS: i64 = 3;
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from("#include <stdlib.h>\nvoid *volatile sink;\n");
    for k in 0..FUNCTIONS {
        src += &format!(
            "__attribute__((noinline)) void f{k}(void) {{ sink = malloc({}); }}\n",
            k + 1
        );
    }
    src += &format!("int main(void) {{\n  for (int r = 0; r < {ROUNDS}; r++) {{\n");
    for k in 0..FUNCTIONS {
        src += &format!("    f{k}();\n");
    }
    src += "  }\n  return 0;\n}\n";
    let c = dir.path().join("sites.c");
    std::fs::write(&c, src).unwrap();
    let exe = dir.path().join("sites");
    compile(&exe, &[c], &["-O2", "-fomit-frame-pointer"]);
    let file = dir.path().join("sites.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap()]);
    assert!(out.status.success(), "tansa record: {}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    for k in 0..FUNCTIONS {
        let name = format!("sites!f{k}");
        let size = (k as i64 + 1) * ROUNDS;
        let u = unit(&r, &name);
        assert_eq!(bytes(u), (size, size, size, 0), "bytes of {name}");
        assert_eq!(calls(u), (ROUNDS as u64, 0, 0, 0, 0), "calls of {name}");
    }
}

/// An allocation made through a C allocation wrapper (`xmalloc`, `xstrdup`, the C
/// library's `strdup`, GLib's `g_malloc`, ...) is made where the wrapper is called, as one
/// through C++'s `operator new`: by function with `--charge last`, and as `tansa leaks`
/// names a site. Before, every such allocation was charged to `wrappers!xmalloc` or
/// `libc.so.6!strdup`. A wrapper of the program's own is one when `--alloc-fn` names it,
/// in reports and online.
#[test]
fn allocations_through_c_wrappers_are_charged_to_their_callers() {
    for (variant, flags) in [
        ("O1", &["-O1", "-g"][..]),
        ("O2", &["-O2", "-g", "-fomit-frame-pointer"][..]),
    ] {
        let exe = program(&format!("wrappers-{variant}"), "wrappers.c", flags);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("w.tansa");
        let out = record(&file, &[], &[exe.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let name = |f: &str| format!("wrappers-{variant}!{f}");
        let r = report_json(&file, &["--by", "function", "--charge", "last"]);
        assert_eq!(bytes(unit(&r, &name("parse"))), (1000, 1000, 1000, 0));
        assert_eq!(bytes(unit(&r, &name("name"))), (120, 120, 120, 0));
        assert_eq!(bytes(unit(&r, &name("label"))), (120, 120, 120, 0));
        assert_eq!(bytes(unit(&r, &name("my_alloc"))), (2000, 2000, 2000, 0));
        for wrapper in [name("xmalloc"), name("xstrdup"), "libc.so.6!strdup".into()] {
            assert!(!has_unit(&r, &wrapper), "{wrapper} is a unit");
        }
        let named = [
            "--by",
            "function",
            "--charge",
            "last",
            "--alloc-fn",
            "my_alloc",
        ];
        let r = report_json(&file, &named);
        assert_eq!(bytes(unit(&r, &name("build"))), (2000, 2000, 2000, 0));
        assert!(!has_unit(&r, &name("my_alloc")));
        // Online, the same.
        let online = online_report_json(
            &dir.path().join("online.json"),
            &named,
            &[exe.to_str().unwrap()],
        );
        assert_eq!(bytes(unit(&online, &name("build"))), (2000, 2000, 2000, 0));
        assert_eq!(bytes(unit(&online, &name("parse"))), (1000, 1000, 1000, 0));
        assert_eq!(bytes(unit(&online, &name("label"))), (120, 120, 120, 0));
        assert!(!has_unit(&online, &name("my_alloc")));
        assert!(!has_unit(&online, &name("xmalloc")));
        let sites = |extra: &[&str]| {
            let mut args = vec!["leaks", file.to_str().unwrap(), "--format", "json"];
            args.extend(extra);
            let out = run_tansa(&args);
            assert!(out.status.success(), "{}", stderr(&out));
            let leaks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut sites: Vec<String> = leaks["sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["site"]["function"].as_str().unwrap().to_string())
                .filter(|f| f.starts_with("wrappers-"))
                .collect();
            sites.sort();
            sites
        };
        assert_eq!(
            sites(&[]),
            [name("label"), name("my_alloc"), name("name"), name("parse")]
        );
        assert_eq!(
            sites(&["--alloc-fn", "my_alloc"]),
            [name("build"), name("label"), name("name"), name("parse")]
        );
    }
    // An offline recording chooses no units: `--alloc-fn` belongs to its reports, and
    // `record` without `--online` refuses it rather than ignore it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("refused.tansa");
    let exe = program("wrappers-O1", "wrappers.c", &["-O1", "-g"]);
    let out = record(&file, &["--alloc-fn", "my_alloc"], &[exe.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--online"), "{}", stderr(&out));
    assert!(!file.exists());
}

/// Temporary allocations (blocks their own thread releases before allocating again, as
/// heaptrack counts them) per function, offline and online, in JSON, CSV and the table:
/// tests/programs/temporary.c makes known numbers of them, among allocations that are not,
/// on three threads. A sampled recording does not count them, and its table and CSV say
/// nothing rather than 0.
#[test]
fn temporary_allocations_per_function() {
    let dir = build_dir().join("temporary");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("temporary");
    compile(&exe, &[source("temporary.c")], &["-g", "-O0", "-pthread"]);
    let exe = exe.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("temporary.tansa");
    let out = record(&file, &[], &[exe]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    // (function, mallocs, temporary allocations)
    let expected = [
        ("temporary!scratch", 500, 500),
        ("temporary!pairs", 200, 100),
        ("temporary!churn", 2000, 2000),
        ("temporary!handed", 1, 0),
        ("temporary!kept", 10, 0),
    ];
    let check = |report: &Value, how: &str| {
        let units = report["units"].as_array().unwrap();
        for (function, mallocs, temporary) in expected {
            let u = units
                .iter()
                .find(|u| u["unit"] == function)
                .unwrap_or_else(|| panic!("{how}: no unit {function}: {units:#?}"));
            assert_eq!(u["calls"]["malloc"], mallocs, "{how}: {function}");
            assert_eq!(u["temporary_allocations"], temporary, "{how}: {function}");
        }
        // The C library's own allocations may add some; the program's are all there.
        let total = report["totals"]["temporary_allocations"].as_u64().unwrap();
        assert!(total >= 2600, "{how}: {total} temporary allocations in all");
    };
    check(&report_json(&file, &["--by", "function"]), "offline");
    let online = online_report_json(
        &tmp.path().join("online.json"),
        &["--by", "function"],
        &[exe],
    );
    check(&online, "online");

    // CSV: the last column; the table: the last one too, with its header.
    let out = run_tansa(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        "function",
        "--format",
        "csv",
    ]);
    let csv = String::from_utf8(out.stdout).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",temporary_allocations"),
        "{csv}"
    );
    let scratch = csv
        .lines()
        .find(|l| l.starts_with("temporary!scratch,"))
        .expect("scratch row");
    assert!(scratch.ends_with(",500"), "{scratch}");
    let out = run_tansa(&["report", file.to_str().unwrap(), "--by", "function"]);
    let table = String::from_utf8(out.stdout).unwrap();
    let header = table
        .lines()
        .find(|l| l.starts_with("unit "))
        .expect("a header");
    assert!(header.trim_end().ends_with("temporary"), "{table}");
    let pairs = table
        .lines()
        .find(|l| l.starts_with("temporary!pairs "))
        .expect("pairs row");
    assert_eq!(pairs.split_whitespace().last(), Some("100"), "{table}");

    // --sort temporary: the most churn first, in JSON and the table (with --top), online
    // too; the default order is by peak.
    let figures = |report: &Value, key: &str| -> Vec<u64> {
        report["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u[key].as_u64().unwrap())
            .collect()
    };
    let sorted = report_json(&file, &["--by", "function", "--sort", "temporary"]);
    let temporary = figures(&sorted, "temporary_allocations");
    assert!(temporary.windows(2).all(|w| w[0] >= w[1]), "{temporary:?}");
    assert_eq!(sorted["units"][0]["unit"], "temporary!churn");
    let peaks = figures(&report_json(&file, &["--by", "function"]), "max_bytes");
    assert!(peaks.windows(2).all(|w| w[0] >= w[1]), "{peaks:?}");
    let out = run_tansa(&[
        "report",
        file.to_str().unwrap(),
        "--by",
        "function",
        "--sort",
        "temporary",
        "--top",
        "2",
    ]);
    let table = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("unit "))
        .skip(1)
        .collect();
    assert!(rows[0].starts_with("temporary!churn "), "{table}");
    assert!(rows[1].starts_with("temporary!scratch "), "{table}");
    let online = online_report_json(
        &tmp.path().join("sorted.json"),
        &["--by", "function", "--sort", "temporary"],
        &[exe],
    );
    assert_eq!(online["units"][0]["unit"], "temporary!churn");
    // Refused where rows come in order, and for CPU recordings.
    for by in ["interval", "call", "rank"] {
        let out = run_tansa(&[
            "report",
            file.to_str().unwrap(),
            "--by",
            by,
            "--sort",
            "net",
        ]);
        assert_eq!(out.status.code(), Some(2), "--by {by}: {}", stderr(&out));
        assert!(stderr(&out).contains("--sort"), "{}", stderr(&out));
    }

    // Exports carry them per allocation stack: collapsed stacks weighted by them sum to
    // the report's total, each function's stacks to its figure.
    let per_function = collapsed_by_leaf(&file, "temporary");
    let report = report_json(&file, &["--by", "function"]);
    assert_eq!(
        per_function.values().sum::<u64>(),
        report["totals"]["temporary_allocations"].as_u64().unwrap(),
        "{per_function:?}"
    );
    for (function, _, temporary) in expected {
        assert_eq!(
            per_function.get(function).copied().unwrap_or(0),
            temporary,
            "{function}: {per_function:?}"
        );
    }

    // tansa diff: twice the churn in scratch, judged by --metric temporary.
    let twice = tmp.path().join("twice.tansa");
    let out = record(&twice, &[], &[exe, "2"]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let (a, b) = (file.to_str().unwrap(), twice.to_str().unwrap());
    let gate = [
        "--by",
        "function",
        "--metric",
        "temporary",
        "--fail-if-growth",
    ];
    let out = run_tansa(&[&["diff", a, b][..], &gate, &["400", "--format", "json"]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["units"][0]["unit"], "temporary!scratch", "{d}");
    assert_eq!(d["units"][0]["delta"]["temporary_allocations"], 500, "{d}");
    assert!(
        stderr(&out).contains("temporary!scratch"),
        "{}",
        stderr(&out)
    );
    let out = run_tansa(&[&["diff", a, b][..], &gate, &["500"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run_tansa(&[&["diff", a, b][..], &gate, &["1KiB"]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("counts allocations"),
        "{}",
        stderr(&out)
    );
    let out = run_tansa(&["diff", a, b, "--by", "function", "--format", "csv"]);
    let csv = String::from_utf8(out.stdout).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(
            ",a_temporary_allocations,b_temporary_allocations,delta_temporary_allocations"
        ),
        "{csv}"
    );
    let scratch = csv
        .lines()
        .find(|l| l.contains("temporary!scratch"))
        .expect("scratch row");
    assert!(scratch.ends_with(",500,1000,500"), "{scratch}");

    // Sampled: no such figure.
    let sampled = tmp.path().join("sampled.tansa");
    let out = record(&sampled, &["--sample-rate", "1KiB"], &[exe]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let out = run_tansa(&["report", sampled.to_str().unwrap(), "--by", "function"]);
    let table = String::from_utf8(out.stdout).unwrap();
    let header = table
        .lines()
        .find(|l| l.starts_with("unit "))
        .expect("a header");
    assert!(header.trim_end().ends_with("memalign"), "{table}");
    let out = run_tansa(&["report", sampled.to_str().unwrap(), "--format", "csv"]);
    let csv = String::from_utf8(out.stdout).unwrap();
    assert!(csv.lines().skip(1).all(|l| l.ends_with(',')), "{csv}");
}

/// A program that allocates only in a signal handler (`sigspin.c`: 200 x 64 bytes in
/// `on_tick`, a `SIGALRM` handler interrupting `spin`): every byte is the program's and
/// its handler's, under every charge; no unit is the C library's signal-return trampoline
/// (once `libc.so.6!fn@0x3c04f`); and the stacks go on through the signal frame into the
/// interrupted function, `...;sigspin!main;sigspin!spin;[signal handler];sigspin!on_tick`.
#[test]
fn a_signal_handlers_allocations_are_the_handlers_and_its_stacks_reach_the_interrupted_code() {
    const BYTES: i64 = 200 * 64;
    for opt in ["-O0", "-O2"] {
        let name = format!("sigspin{opt}");
        let exe = program(&name, "sigspin.c", &["-g", opt]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.tansa");
        let out = record(&file, &[], &[exe.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let only_unit = |args: &[&str], expected: &str| {
            let r = report_json(&file, args);
            let units: Vec<&str> = r["units"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|u| u["unit"].as_str())
                .collect();
            assert_eq!(units, [expected], "{opt} {args:?}: units");
            let u = unit(&r, expected);
            assert_eq!(bytes(u).0, BYTES, "{opt} {args:?}: allocated");
            assert_eq!(calls(u).0, 200, "{opt} {args:?}: mallocs");
        };
        for charge in ["first", "last", "all"] {
            only_unit(&["--charge", charge], &name);
            only_unit(
                &["--by", "function", "--charge", charge],
                &format!("{name}!on_tick"),
            );
        }
        // The collapsed stacks: the handler below the signal frame, and, for nearly every
        // allocation (a signal may land just before or after `spin`), `spin` below it.
        let (mut total, mut through_spin) = (0u64, 0u64);
        let stacks = collapsed(&file, "count");
        for (stack, n) in &stacks {
            let n = *n;
            total += n;
            assert!(
                stack.ends_with(&format!(";[signal handler];{name}!on_tick")),
                "{opt}: a handler's stack without its signal frame: {stack}"
            );
            assert!(!stack.contains("fn@"), "{opt}: an unnamed frame: {stack}");
            if stack.contains(&format!(";{name}!main;{name}!spin;[signal handler];")) {
                through_spin += n;
            }
        }
        assert_eq!(total, 200, "{opt}: allocations in the export:\n{stacks:#?}");
        assert!(
            through_spin >= 190,
            "{opt}: only {through_spin} of 200 stacks reach the interrupted spin:\n{stacks:#?}"
        );
    }
}

/// Two `static` functions named `helper` in one program (one per C file) are two units,
/// each named with its start (`samename!helper@0x1180`, as CPU reports name them), in the
/// report and in the exported profile. They were one row, `samename!helper`, with both
/// files' bytes.
#[test]
fn functions_of_one_name_in_one_module_are_two_units() {
    let exe = build_dir().join("samename");
    compile(
        &exe,
        &[
            source("samename_main.c"),
            source("samename_a.c"),
            source("samename_b.c"),
        ],
        &["-g", "-O1"],
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("samename.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap(), "10"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&file, &["--by", "function"]);
    let mut helpers: Vec<(i64, String)> = r["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["unit"].as_str().unwrap().starts_with("samename!helper"))
        .map(|u| (bytes(u).0, u["unit"].as_str().unwrap().to_string()))
        .collect();
    helpers.sort();
    let allocated: Vec<i64> = helpers.iter().map(|h| h.0).collect();
    assert_eq!(allocated, [10_000, 30_000], "{helpers:?}");
    for (_, name) in &helpers {
        assert!(
            name.strip_prefix("samename!helper@0x")
                .is_some_and(|a| u64::from_str_radix(a, 16).is_ok()),
            "{name}"
        );
    }
    // The collapsed stacks name each the same way, with its bytes.
    let weights = collapsed_by_leaf(&file, "alloc_space");
    for (bytes, name) in &helpers {
        assert_eq!(
            weights.get(name.as_str()).copied(),
            Some(*bytes as u64),
            "{weights:?}"
        );
    }
}
