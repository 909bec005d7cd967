//! The builder API on its own, as another sampler (the agent's SIGPROF timer) uses it: a
//! real binary compiled at test time, samples at known addresses of its functions, and
//! the report read back must count exactly those samples.

use std::path::PathBuf;

use tansa_analysis::cpu::{self, By, CpuRecording};
use tansa_format::cpu::{CpuInfo, SampleSource};
use tansa_format::meta::RecordingMeta;
use tansa_sample::{CpuRecordingBuilder, MappingInfo, ProcessInfo, SampleInput};
use tansa_symbols::ElfFile;

const BIAS: u64 = 0x5555_0000_0000;

fn build(dir: &std::path::Path) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/twofuncs.c");
    tansa_testkit::build(&src, dir, &["-g", "-O1"])
}

#[test]
fn a_recording_built_without_perf_reports_exactly_its_samples() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let elf = ElfFile::open(&exe).unwrap();
    let alpha = elf.function_by_name("alpha").unwrap();
    let beta = elf.function_by_name("beta").unwrap();
    let main = elf.function_by_name("main").unwrap();
    let end = elf
        .segments()
        .iter()
        .map(|s| s.address + s.size)
        .max()
        .unwrap();

    let mut b = CpuRecordingBuilder::new(
        RecordingMeta {
            tool: "test".into(),
            started_unix_ms: 0,
            hostname: String::new(),
            command: vec![exe.display().to_string()],
            options: Vec::new(),
        },
        CpuInfo {
            source: SampleSource::Agent,
            event: "ITIMER_PROF".into(),
            period_ns: 1_000_000,
            frequency_hz: 1000,
            target: "command".into(),
            unwinding: "fp".into(),
            kernel: false,
            cpus: 1,
            timeline: true,
            notes: Vec::new(),
            recorder_pid: 0,
        },
    );
    let p = b.add_process(ProcessInfo {
        pid: 4242,
        ppid: 1,
        comm: "twofuncs".into(),
        exe: exe.display().to_string(),
        cmdline: vec!["twofuncs".into()],
        ..ProcessInfo::default()
    });
    b.add_thread(p, 4242, "twofuncs");
    b.add_mapping(
        p,
        MappingInfo {
            start: BIAS,
            end: BIAS + end,
            file_offset: 0,
            path: exe.display().to_string(),
            build_id: None,
            load_bias: Some(BIAS),
        },
    );
    // The call sites in main: any address inside main stands for a return address.
    let ret = BIAS + main.address + 5;
    for i in 0..7 {
        assert!(b.add_sample(&SampleInput {
            process: p,
            tid: 4242,
            time_ns: i,
            user: &[BIAS + alpha.address, ret],
            ..SampleInput::default()
        }));
    }
    for i in 0..3 {
        assert!(b.add_sample(&SampleInput {
            process: p,
            tid: 4242,
            time_ns: 100 + i,
            user: &[BIAS + beta.address, ret],
            ..SampleInput::default()
        }));
    }
    let file = dir.path().join("agent.tansa");
    let finished = b
        .finish(std::io::BufWriter::new(
            std::fs::File::create(&file).unwrap(),
        ))
        .unwrap();
    assert_eq!(finished.summary.samples, 10);
    assert_eq!(finished.unresolved, Vec::<String>::new());
    // The binary is gone; the recording is enough.
    std::fs::remove_file(&exe).unwrap();

    let rec = CpuRecording::open(std::fs::File::open(&file).unwrap()).unwrap();
    assert!(!rec.damaged);
    assert_eq!(rec.timeline.len(), 10);
    assert_eq!(rec.stacks.len(), 2, "two distinct chains");
    let r = cpu::report(
        &rec,
        cpu::Options {
            by: By::Function,
            pid: None,
        },
    );
    assert_eq!(r.source, "agent");
    assert_eq!(r.total_samples, 10);
    let get = |name: &str| r.units.iter().find(|u| u.unit == name).unwrap();
    assert_eq!(get("twofuncs!alpha").self_samples, 7);
    assert_eq!(get("twofuncs!beta").self_samples, 3);
    assert_eq!(get("twofuncs!main").total_samples, 10);
    assert_eq!(get("twofuncs!main").self_samples, 0);
    let callers = get("twofuncs!alpha").callers.clone().unwrap();
    assert_eq!(callers[0].unit, "twofuncs!main");
    assert_eq!(get("twofuncs!alpha").self_ns, 7_000_000);

    let p = cpu::report(
        &rec,
        cpu::Options {
            by: By::Process,
            pid: None,
        },
    );
    let u = &p.units[0];
    assert_eq!(u.unit, "twofuncs [4242]");
    assert_eq!(u.spaces.unwrap().user_samples, 10);

    let a = cpu::annotate::annotate(&rec, "alpha", None).unwrap();
    assert_eq!(a.samples, 7);
    assert_eq!(a.instructions[0].samples, 7);
    assert!(a.instructions.len() > 3);
    assert!(
        a.instructions
            .iter()
            .any(|i| i.file.as_deref().is_some_and(|f| f.ends_with("twofuncs.c")))
    );
    assert!(
        a.sources[0].available,
        "the source text is in the recording"
    );
}
