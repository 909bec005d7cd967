//! `tansa export` (pprof, collapsed stacks, speedscope) and `tansa flamegraph`, read by the
//! real consumers: `go tool pprof` (Debian's golang-go) must give the totals and the
//! per-function figures of `tansa report` on the same recording, exactly; speedscope files
//! are checked against speedscope's published JSON schema (fetched by `.ci/install-deps`);
//! collapsed stacks are summed; flame graphs are inferno SVGs coloured by library.
//!
//! Programs: `profile_main.c` + `profile_lib.c` (known heap traffic, see the source), and
//! `cpu/export_burn.c` (two functions burning CPU 3:1), all built at -O0.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use common::*;
use serde_json::Value;

struct Programs {
    heap: PathBuf,
    burn: PathBuf,
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    P.get_or_init(|| {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = build_dir().join("export");
        std::fs::create_dir_all(&dir).unwrap();
        compile(
            &dir.join("libprofile.so"),
            &[source("profile_lib.c")],
            &["-shared", "-fPIC", "-g", "-O0"],
        );
        let heap = dir.join("profile_main");
        let ldir = format!("-L{}", dir.display());
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        compile(
            &heap,
            &[source("profile_main.c")],
            &["-g", "-O0", &ldir, "-lprofile", &rpath],
        );
        let burn = dir.join("export_burn");
        compile(&burn, &[source("cpu/export_burn.c")], &["-g", "-O0"]);
        Programs { heap, burn }
    })
}

/// Records `profile_main N` once per N.
fn heap_recording(n: u32) -> PathBuf {
    static DONE: OnceLock<Mutex<HashMap<u32, PathBuf>>> = OnceLock::new();
    let map = DONE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = map.get(&n) {
        return p.clone();
    }
    let file = build_dir().join(format!("profile-{n}.tansa"));
    let exe = programs().heap.to_str().unwrap().to_string();
    let out = record(&file, &[], &[&exe, &n.to_string()]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    map.insert(n, file.clone());
    file
}

fn cpu_recording() -> Option<PathBuf> {
    static DONE: OnceLock<Option<PathBuf>> = OnceLock::new();
    DONE.get_or_init(|| {
        let file = build_dir().join("burn.tansa");
        let out = run_tansa(&[
            "sample",
            "-F",
            "1000",
            "-o",
            file.to_str().unwrap(),
            "--",
            programs().burn.to_str().unwrap(),
            "700",
        ]);
        if !require(
            out.status.success(),
            &format!("tansa sample works here: {}", stderr(&out)),
        ) {
            return None;
        }
        Some(file)
    })
    .clone()
}

/// Runs tansa in `dir`, returning (status code, stdout, stderr).
fn tansa_in(dir: &Path, args: &[&str]) -> (i32, Vec<u8>, String) {
    ensure_agent();
    let out = Command::new(tansa())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tansa");
    let err = stderr(&out);
    (out.status.code().unwrap_or(-1), out.stdout, err)
}

fn export(file: &Path, format: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec![
        "export",
        file.to_str().unwrap(),
        "--format",
        format,
        "-o",
        "-",
    ];
    args.extend(extra);
    let out = run_tansa(&args);
    assert!(out.status.success(), "export failed: {}", stderr(&out));
    out.stdout
}

/// `go tool pprof -top` on `profile` for `sample_index`: (total, flat per function).
fn pprof_top(profile: &Path, sample_index: &str) -> (i64, HashMap<String, i64>) {
    // Figures in the value's own unit, unscaled.
    let unit = if sample_index == "cpu" {
        "-unit=ns"
    } else {
        "-unit=B"
    };
    let out = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            unit,
            "-nodecount=100000",
            "-nodefraction=0",
            "-edgefraction=0",
            &format!("-sample_index={sample_index}"),
        ])
        .arg(profile)
        .env("HOME", build_dir())
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof failed: {}{text}",
        stderr(&out)
    );
    let number = |s: &str| -> i64 {
        s.trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {s} in\n{text}"))
    };
    let mut total = None;
    let mut flat = HashMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if let Some(rest) = line.split(" of ").nth(1)
            && line.starts_with("Showing nodes")
        {
            total = Some(number(rest.trim_end_matches(" total").trim()));
        }
        if line.trim_start().starts_with("flat") {
            in_table = true;
            continue;
        }
        if in_table {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 6 {
                // pprof marks a function's inlined copies with a row of their own,
                // `name (inline)` (a sample in the dynamic linker's inlined
                // `_dl_new_hash` failed a CI run): the function is the same.
                let name = f[5..].join(" ");
                let name = name.strip_suffix(" (inline)").unwrap_or(&name).to_string();
                *flat.entry(name).or_insert(0) += number(f[0]);
            }
        }
    }
    (total.unwrap_or_else(|| panic!("no total in\n{text}")), flat)
}

/// `go tool pprof -raw` on `profile`: its samples, locations and mappings as text.
fn pprof_raw(profile: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(profile)
        .env("HOME", build_dir())
        .output()
        .expect("run go tool pprof");
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The function name of a `module!function` unit.
fn function_of(unit: &str) -> &str {
    unit.split_once('!').map_or(unit, |(_, f)| f)
}

/// The report's `field` summed per function name, as `go tool pprof -top` shows functions:
/// one row per name, whatever module it is in (`libc.so.6!clock_gettime` and
/// `[vdso]!clock_gettime` are one row there). Unnamed functions are left out.
fn per_function_name(report: &Value, field: &str) -> HashMap<String, i64> {
    let mut sums = HashMap::new();
    for u in report["units"].as_array().unwrap() {
        let name = function_of(u["unit"].as_str().unwrap());
        if name != "??" {
            *sums.entry(name.to_string()).or_insert(0) += u[field].as_i64().unwrap();
        }
    }
    sums
}

fn totals(report: &Value) -> (i64, i64, i64, i64) {
    let t = &report["totals"];
    let c = &t["calls"];
    let objects = ["malloc", "calloc", "memalign", "realloc"]
        .iter()
        .map(|k| c[k].as_i64().unwrap())
        .sum();
    (
        t["allocated_bytes"].as_i64().unwrap(),
        t["net_bytes"].as_i64().unwrap(),
        t["max_bytes"].as_i64().unwrap(),
        objects,
    )
}

#[test]
fn heap_pprof_gives_the_reports_figures_exactly() {
    if !require(go_available(), "go (Debian golang-go) is installed") {
        return;
    }
    let file = heap_recording(5);
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("heap.pb.gz");
    std::fs::write(&pb, export(&file, "pprof", &[])).unwrap();
    let report = report_json(&file, &[]);
    let (allocated, net, max, objects) = totals(&report);
    let (t, alloc_space) = pprof_top(&pb, "alloc_space");
    assert_eq!(t, allocated, "alloc_space total");
    let (t, inuse_space) = pprof_top(&pb, "inuse_space");
    assert_eq!(t, net, "inuse_space total");
    let (t, peak_space) = pprof_top(&pb, "peak_space");
    assert_eq!(t, max, "peak_space total is the heap's maximum");
    let (t, alloc_objects) = pprof_top(&pb, "alloc_objects");
    assert_eq!(t, objects, "alloc_objects total");

    // The known figures of the program's functions (see profile_main.c).
    let expect = [
        ("keep_blocks", 5000, 5000, 5000, 5),
        ("scratch_block", 40960, 0, 0, 10),
        ("grow", 600, 0, 300, 3),
        ("peak", 65536, 0, 65536, 1),
    ];
    for (f, alloc, inuse, peak, count) in expect {
        assert_eq!(
            alloc_space.get(f).copied(),
            Some(alloc),
            "alloc_space of {f}"
        );
        assert_eq!(
            inuse_space.get(f).copied().unwrap_or(0),
            inuse,
            "inuse_space of {f}"
        );
        assert_eq!(
            peak_space.get(f).copied().unwrap_or(0),
            peak,
            "peak_space of {f}"
        );
        assert_eq!(
            alloc_objects.get(f).copied(),
            Some(count),
            "alloc_objects of {f}"
        );
    }

    // Per function, pprof's flat figures are the report's, charging each block to the
    // function that called the allocator (--charge last).
    let by_function = report_json(&file, &["--by", "function", "--charge", "last"]);
    let net = per_function_name(&by_function, "net_bytes");
    for (name, a) in per_function_name(&by_function, "allocated_bytes") {
        assert_eq!(
            alloc_space.get(&name).copied().unwrap_or(0),
            a,
            "alloc_space of {name}"
        );
        assert_eq!(
            inuse_space.get(&name).copied().unwrap_or(0),
            net[&name],
            "inuse_space of {name}"
        );
    }
    // The top function is the same.
    let top = |m: &HashMap<String, i64>| {
        m.iter()
            .max_by_key(|(k, v)| (**v, std::cmp::Reverse((*k).clone())))
            .map(|(k, _)| k.clone())
    };
    let report_top = by_function["units"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|u| u["allocated_bytes"].as_i64().unwrap())
        .map(|u| function_of(u["unit"].as_str().unwrap()).to_string());
    assert_eq!(top(&alloc_space), report_top);
    assert_eq!(report_top.as_deref(), Some("peak"));
}

#[test]
fn heap_pprof_carries_mappings_build_ids_lines_and_labels() {
    if !require(go_available(), "go (Debian golang-go) is installed") {
        return;
    }
    let file = heap_recording(5);
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("heap.pb.gz");
    std::fs::write(&pb, export(&file, "pprof", &[])).unwrap();
    let raw = pprof_raw(&pb);
    assert!(
        raw.contains(
            "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes[dflt] \
             peak_objects/count peak_space/bytes"
        ),
        "{raw}"
    );
    // Locations carry the source line of the allocation.
    let lib_line = line_of(&source("profile_lib.c"), "kept[i] = malloc(1000)");
    assert!(
        raw.contains(&format!(
            "keep_blocks {}:{lib_line}",
            source("profile_lib.c").display()
        )),
        "no keep_blocks line {lib_line} in\n{raw}"
    );
    // Mappings with paths and build ids.
    let mappings = raw.split("Mappings").nth(1).expect("a Mappings section");
    let lib = mappings
        .lines()
        .find(|l| l.contains("libprofile.so"))
        .expect("libprofile.so mapping");
    let build_id = tansa_symbols_build_id(&programs().heap.with_file_name("libprofile.so"));
    assert!(lib.contains(&build_id), "{lib} lacks {build_id}");
    // Samples are labelled with their process.
    assert!(raw.contains("pid:["), "{raw}");
}

/// A program started by a shell: pprof's main binary (its first mapping, "File:" in its
/// reports) is the program, whose process holds the heap, not the shell that came first.
#[test]
fn pprof_main_binary_is_the_program_that_weighs_most() {
    if !require(go_available(), "go (Debian golang-go) is installed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script.tansa");
    let exe = programs().heap.to_str().unwrap().to_string();
    let out = record(&file, &[], &["/bin/sh", "-c", &format!("{exe} 5; true")]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let pb = dir.path().join("script.pb.gz");
    std::fs::write(&pb, export(&file, "pprof", &[])).unwrap();
    let raw = pprof_raw(&pb);
    let mappings = raw.split("Mappings").nth(1).expect("a Mappings section");
    let first = mappings
        .lines()
        .find(|l| !l.trim().is_empty())
        .expect("a mapping");
    assert!(
        first.contains(&exe),
        "the first mapping is {first}:\n{mappings}"
    );
    assert!(
        mappings
            .lines()
            .any(|l| l.contains("/sh") || l.contains("dash")),
        "the shell's mapping is there too:\n{mappings}"
    );
}

/// A shell that replaces itself with the program (`sh -c 'exec prog'`): one pid, two
/// programs. Each stack starts with the program that made it, as in CPU profiles: the
/// program's under its own name, the shell's under the shell's (they were all the shell's).
#[test]
fn a_process_that_execs_is_drawn_as_each_program_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exec.tansa");
    let exe = programs().heap.to_str().unwrap().to_string();
    let out = record(&file, &[], &["/bin/sh", "-c", &format!("exec {exe} 5")]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let text = String::from_utf8(export(&file, "collapsed", &["--by-process"])).unwrap();
    let roots: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(';').expect("a process frame and a stack"))
        .collect();
    let program: Vec<&str> = roots
        .iter()
        .filter(|(_, stack)| stack.contains("profile_main!main"))
        .map(|(root, _)| *root)
        .collect();
    let shell: Vec<&str> = roots
        .iter()
        .filter(|(_, stack)| !stack.contains("profile_main!"))
        .map(|(root, _)| *root)
        .collect();
    assert!(!program.is_empty() && !shell.is_empty(), "{text}");
    let pid = |root: &str| root.rsplit_once(' ').map(|(_, p)| p.to_string());
    assert!(
        program.iter().all(|r| r.starts_with("profile_main [")),
        "{text}"
    );
    assert!(
        shell
            .iter()
            .all(|r| r.starts_with("dash [") || r.starts_with("sh [") || r.starts_with("bash [")),
        "{text}"
    );
    assert_eq!(pid(program[0]), pid(shell[0]), "one process: {text}");
}

/// The GNU build id of an ELF file, as hex, read with `readelf -n` would: from the note.
fn tansa_symbols_build_id(path: &Path) -> String {
    let data = std::fs::read(path).unwrap();
    let needle = b"GNU\0";
    let pos = data
        .windows(4)
        .position(|w| w == needle)
        .expect("a GNU note");
    // Note header before the name: namesz, descsz, type (NT_GNU_BUILD_ID = 3).
    let descsz = u32::from_le_bytes(data[pos - 8..pos - 4].try_into().unwrap()) as usize;
    let ty = u32::from_le_bytes(data[pos - 4..pos].try_into().unwrap());
    assert_eq!(ty, 3, "first GNU note is the build id");
    data[pos + 4..pos + 4 + descsz]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn line_of(file: &Path, needle: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not in {}", file.display()))
        + 1
}

#[test]
fn cpu_pprof_gives_the_reports_figures_exactly() {
    if !require(go_available(), "go (Debian golang-go) is installed") {
        return;
    }
    let Some(file) = cpu_recording() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("cpu.pb.gz");
    std::fs::write(&pb, export(&file, "pprof", &[])).unwrap();
    let report = report_json(&file, &["--by", "function"]);
    let total = report["total_samples"].as_i64().unwrap();
    let period = report["period_ns"].as_i64().unwrap();
    assert!(total > 100, "too few samples: {total}");
    let (t, samples) = pprof_top(&pb, "samples");
    assert_eq!(t, total, "samples total");
    let (t, _) = pprof_top(&pb, "cpu");
    assert_eq!(t, total * period, "cpu total is samples times the period");
    // Same-named functions of two modules (libc's clock_gettime calls the vDSO's) are one
    // row in pprof.
    for (name, own) in per_function_name(&report, "self_samples") {
        assert_eq!(
            samples.get(&name).copied().unwrap_or(0),
            own,
            "self samples of {name}"
        );
    }
    let top = report["units"][0]["unit"].as_str().unwrap();
    assert_eq!(function_of(top), "burn_big", "{report}");
}

#[test]
fn collapsed_stacks_sum_to_the_reports_totals() {
    let file = heap_recording(5);
    let report = report_json(&file, &[]);
    let (allocated, net, max, objects) = totals(&report);
    let sum = |weight: &str| -> (i64, Vec<String>) {
        let text = String::from_utf8(export(&file, "collapsed", &["--weight", weight])).unwrap();
        let mut total = 0;
        let mut lines = Vec::new();
        for l in text.lines() {
            let (stack, v) = l.rsplit_once(' ').expect("stack value");
            total += v.parse::<i64>().unwrap();
            lines.push(stack.to_string());
        }
        (total, lines)
    };
    assert_eq!(sum("allocated").0, allocated);
    assert_eq!(sum("live").0, net);
    assert_eq!(sum("peak").0, max);
    assert_eq!(sum("count").0, objects);
    // Frames are module!function, outermost first, ending at the allocator's caller.
    let (_, lines) = sum("live");
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(";profile_main!main;libprofile.so!keep_blocks")),
        "{lines:#?}"
    );
    // The default weight is the peak.
    let text = String::from_utf8(export(&file, "collapsed", &[])).unwrap();
    let total: i64 = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, max);
    // With --by-process every stack starts with the process.
    let text = String::from_utf8(export(&file, "collapsed", &["--by-process"])).unwrap();
    assert!(
        text.lines().all(|l| l.starts_with("profile_main [")),
        "{text}"
    );
}

#[test]
fn cpu_collapsed_stacks_sum_to_the_samples() {
    let Some(file) = cpu_recording() else {
        return;
    };
    let report = report_json(&file, &["--by", "function"]);
    let text = String::from_utf8(export(&file, "collapsed", &[])).unwrap();
    let total: i64 = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, report["total_samples"].as_i64().unwrap());
    assert!(
        text.lines()
            .any(|l| l.contains("export_burn!main;export_burn!burn_big")),
        "{text}"
    );
}

/// speedscope's schema, fetched by `.ci/install-deps` from the npm registry.
fn speedscope_schema() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.ci/cache/speedscope/package/dist/release/file-format-schema.json");
    let jsonschema = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .status()
        .is_ok_and(|s| s.success());
    require(
        p.is_file() && jsonschema,
        "speedscope's schema and python3-jsonschema are installed (.ci/install-deps)",
    )
    .then_some(p)
}

fn validate(schema: &Path, file: &Path) -> Result<(), String> {
    let script = "import json,sys,jsonschema\n\
        s=json.load(open(sys.argv[1]))\n\
        d=json.load(open(sys.argv[2]))\n\
        jsonschema.validate(d, s)\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(schema)
        .arg(file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(stderr(&out))
    }
}

#[test]
fn speedscope_files_follow_the_published_schema() {
    let Some(schema) = speedscope_schema() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The validator itself rejects a wrong file.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":{"frames":[]},"profiles":[{"type":"sampled"}]}"#).unwrap();
    assert!(
        validate(&schema, &bad).is_err(),
        "the schema check must be able to fail"
    );

    let file = heap_recording(5);
    let out = dir.path().join("heap.json");
    std::fs::write(&out, export(&file, "speedscope", &[])).unwrap();
    validate(&schema, &out).unwrap();
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let report = report_json(&file, &[]);
    let (allocated, net, max, _) = totals(&report);
    let end = |i: usize| v["profiles"][i]["endValue"].as_i64().unwrap();
    assert_eq!((end(0), end(1), end(2)), (max, allocated, net));
    assert_eq!(v["profiles"][0]["unit"], "bytes");
    // Split by rank, a recording without ranks is one group, `(no rank)`, with the same
    // figures.
    let by_rank = dir.path().join("heap-by-rank.json");
    std::fs::write(&by_rank, export(&file, "speedscope", &["--by-rank"])).unwrap();
    validate(&schema, &by_rank).unwrap();
    let r: Value = serde_json::from_slice(&std::fs::read(&by_rank).unwrap()).unwrap();
    let profiles = r["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), v["profiles"].as_array().unwrap().len());
    for (split, whole) in profiles.iter().zip(v["profiles"].as_array().unwrap()) {
        assert!(split["name"].as_str().unwrap().contains(": (no rank): "));
        assert_eq!(split["endValue"], whole["endValue"]);
    }
    let frames = v["shared"]["frames"].as_array().unwrap();
    assert!(
        frames
            .iter()
            .any(|f| f["name"] == "libprofile.so!keep_blocks"
                && f["file"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("profile_lib.c"))),
        "{frames:?}"
    );

    if let Some(cpu) = cpu_recording() {
        let out = dir.path().join("cpu.json");
        std::fs::write(&out, export(&cpu, "speedscope", &["--by-process"])).unwrap();
        validate(&schema, &out).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let r = report_json(&cpu, &[]);
        assert_eq!(v["profiles"][0]["unit"], "nanoseconds");
        assert_eq!(
            v["profiles"][0]["endValue"].as_i64().unwrap(),
            r["total_samples"].as_i64().unwrap() * r["period_ns"].as_i64().unwrap()
        );
    }
}

/// The frames of an inferno SVG: (name, title text, fill).
fn svg_frames(svg: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for g in svg.split("<g>").skip(1) {
        let Some(title) = g
            .split("<title>")
            .nth(1)
            .and_then(|t| t.split("</title>").next())
        else {
            continue;
        };
        let Some(fill) = g.split("fill=\"").nth(1).and_then(|f| f.split('"').next()) else {
            continue;
        };
        let name = title.split(" (").next().unwrap_or(title).to_string();
        out.push((name, title.to_string(), fill.to_string()));
    }
    out
}

fn rgb(fill: &str) -> (u8, u8, u8) {
    let inner = fill
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|c| c.trim().parse::<u8>().unwrap())
        .collect::<Vec<_>>();
    (inner[0], inner[1], inner[2])
}

#[test]
fn flame_graphs_are_coloured_by_library_and_weighted_as_asked() {
    let file = heap_recording(5);
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = tansa_in(dir.path(), &["flamegraph", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let svg_path = dir.path().join("profile-5.svg");
    assert!(err.contains("wrote profile-5.svg"), "{err}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    // Interactive: inferno's search and zoom script is in it.
    assert!(
        svg.contains("function search") && svg.contains("zoom"),
        "no script"
    );
    let frames = svg_frames(&svg);
    // Default weight: bytes live at the peak (70836 = 5000 + 300 + 65536).
    let all = frames.iter().find(|f| f.0 == "all").expect("root frame");
    assert!(all.1.contains("70,836 bytes"), "{}", all.1);
    // One hue per library: the frames of libc share one colour family, those of the
    // executable another.
    let fills = |module: &str| -> Vec<(u8, u8, u8)> {
        frames
            .iter()
            .filter(|f| f.0.starts_with(&format!("{module}!")))
            .map(|f| rgb(&f.2))
            .collect()
    };
    let exe = fills("profile_main");
    let lib = fills("libprofile.so");
    assert!(exe.len() >= 2 && !lib.is_empty(), "{frames:?}");
    let hue = |(r, g, b): (u8, u8, u8)| {
        let (r, g, b) = (r as f64, g as f64, b as f64);
        let max = r.max(g).max(b);
        let min = r.min(g).min(b);
        let d = max - min;
        if d == 0.0 {
            0.0
        } else if max == r {
            60.0 * (((g - b) / d).rem_euclid(6.0))
        } else if max == g {
            60.0 * ((b - r) / d + 2.0)
        } else {
            60.0 * ((r - g) / d + 4.0)
        }
    };
    let spread = |v: &[(u8, u8, u8)]| {
        let hs: Vec<f64> = v.iter().map(|&c| hue(c)).collect();
        hs.iter().cloned().fold(f64::MIN, f64::max) - hs.iter().cloned().fold(f64::MAX, f64::min)
    };
    assert!(spread(&exe) < 3.0, "executable frames vary in hue: {exe:?}");
    assert!(
        (hue(exe[0]) - hue(lib[0])).abs() > 20.0,
        "{exe:?} vs {lib:?}"
    );

    // Another weight, icicle and reversed views.
    let out = dir.path().join("alloc.svg");
    let (code, _, err) = tansa_in(
        dir.path(),
        &[
            "flamegraph",
            file.to_str().unwrap(),
            "--weight",
            "allocated",
            "--icicle",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let report = report_json(&file, &[]);
    let allocated = report["totals"]["allocated_bytes"].as_i64().unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    let all = svg_frames(&svg).into_iter().find(|f| f.0 == "all").unwrap();
    let shown = allocated
        .to_string()
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join(",");
    assert!(
        all.1.contains(&format!("{shown} bytes")),
        "{} vs {shown}",
        all.1
    );
    let reversed = dir.path().join("rev.svg");
    let (code, _, err) = tansa_in(
        dir.path(),
        &[
            "flamegraph",
            file.to_str().unwrap(),
            "--weight",
            "live",
            "--reverse",
            "-o",
            reversed.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&reversed).unwrap();
    // Reversed: the allocator's caller sits on the root, its callers above it; in the
    // live bytes of this run, keep_blocks (5000 bytes) is the whole width.
    let frames = svg_frames(&svg);
    let kb = frames
        .iter()
        .find(|f| f.0 == "libprofile.so!keep_blocks")
        .expect("keep_blocks");
    assert!(
        kb.1.contains("5,000 bytes, 100%") || kb.1.contains("5,000 bytes, 100.00%"),
        "{}",
        kb.1
    );
}

/// `tansa flamegraph BEFORE --diff AFTER --weight live`: the keep_blocks frame's title and
/// fill.
fn diff_frame(before: &Path, after: &Path) -> (String, (u8, u8, u8)) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("diff.svg");
    let (code, _, err) = tansa_in(
        dir.path(),
        &[
            "flamegraph",
            before.to_str().unwrap(),
            "--diff",
            after.to_str().unwrap(),
            "--weight",
            "live",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&out).unwrap();
    let (_, title, fill) = svg_frames(&svg)
        .into_iter()
        .find(|f| f.0 == "libprofile.so!keep_blocks")
        .expect("keep_blocks");
    (title, rgb(&fill))
}

#[test]
fn differential_flame_graph_marks_growth_red() {
    let five = heap_recording(5);
    let fifty = heap_recording(50);
    // 50 blocks, then 5: shrinking, blue.
    let (_, (r, g, b)) = diff_frame(&fifty, &five);
    assert!(b > r && b > g, "shrinking frame not blue: {:?}", (r, g, b));
    // 5 blocks, then 50: growing, red, with the widths of the run after.
    let (title, (r, g, b)) = diff_frame(&five, &fifty);
    assert!(r > g && r > b, "growing frame not red: {:?}", (r, g, b));
    assert!(
        title.contains("50,000 bytes"),
        "widths are the after run's: {title}"
    );
}

#[test]
fn bad_input_gets_clear_errors_and_damaged_input_a_partial_export() {
    let file = heap_recording(5);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A weight that does not exist.
    let (code, _, err) = tansa_in(
        d,
        &[
            "export",
            file.to_str().unwrap(),
            "--format",
            "collapsed",
            "--weight",
            "samples",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("peak, allocated, live, count"), "{err}");
    // --weight with a format that carries every weight.
    let (code, _, err) = tansa_in(
        d,
        &[
            "export",
            file.to_str().unwrap(),
            "--format",
            "pprof",
            "--weight",
            "live",
        ],
    );
    assert_eq!(code, 2, "{err}");
    // A missing file.
    let (code, _, err) = tansa_in(d, &["flamegraph", "/nonexistent/x.tansa"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("/nonexistent/x.tansa") && err.contains("cannot open"),
        "{err}"
    );
    // A file that is not a recording.
    let junk = d.join("junk.tansa");
    std::fs::write(&junk, b"not a recording at all").unwrap();
    let (code, _, err) = tansa_in(d, &["export", junk.to_str().unwrap(), "--format", "pprof"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        !d.join("junk.pb.gz").exists(),
        "nothing is written for unreadable input"
    );
    // Comparing a heap recording with a CPU one.
    if let Some(cpu) = cpu_recording() {
        let (code, _, err) = tansa_in(
            d,
            &[
                "flamegraph",
                file.to_str().unwrap(),
                "--diff",
                cpu.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("cannot compare"), "{err}");
    }
    // A truncated recording: exit 3, with what was recorded before the damage.
    let bytes = std::fs::read(&file).unwrap();
    let cut = d.join("cut.tansa");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 4]).unwrap();
    let (code, out, err) = tansa_in(
        d,
        &[
            "export",
            cut.to_str().unwrap(),
            "--format",
            "collapsed",
            "-o",
            "-",
        ],
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("warning"), "{err}");
    let _ = out;
    // A name tansa chose never replaces a file.
    std::fs::write(d.join("profile-5.folded"), "mine").unwrap();
    let (code, _, err) = tansa_in(
        d,
        &["export", file.to_str().unwrap(), "--format", "collapsed"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(d.join("profile-5.folded")).unwrap(),
        "mine"
    );
    assert!(err.contains("wrote profile-5.1.folded"), "{err}");
    let meta = std::fs::metadata(d.join("profile-5.1.folded")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o077, 0, "private by default");
}

/// A recording with nothing of the weight asked (a program that frees all it allocates,
/// drawn by live bytes) gives a flame graph that says so, not an error; so does its HTML
/// page, whose flame graph is drawn the same way.
#[test]
fn a_flame_graph_with_nothing_to_draw_says_so() {
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let file = build_dir().join("export-nothing-live.tansa");
    let out = record(&file, &[], &[exe.to_str().unwrap(), "0", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    let f = file.to_str().unwrap();
    let (code, _, err) = tansa_in(
        dir.path(),
        &["flamegraph", f, "--weight", "live", "-o", "live.svg"],
    );
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(dir.path().join("live.svg")).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(
        svg.contains("nothing to draw: no stack has a value of this weight"),
        "{svg}"
    );
    assert!(
        svg.contains("export-nothing-live.tansa"),
        "the title: {svg}"
    );
    // By allocations there is something: an ordinary graph.
    let (code, _, err) = tansa_in(dir.path(), &["flamegraph", f, "-o", "all.svg"]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(dir.path().join("all.svg")).unwrap();
    assert!(!svg.contains("nothing to draw"), "{svg}");
    assert!(svg.contains("allocer!main"), "{svg}");
    let (code, _, err) = tansa_in(dir.path(), &["html", f, "-o", "page.html"]);
    assert_eq!(code, 0, "{err}");
    assert!(dir.path().join("page.html").exists());
}
