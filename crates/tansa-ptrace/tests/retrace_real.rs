//! The real thing: a C program built at test time, its region recorded with the ptrace
//! sampler at P = 7 with single-stepped ground truth, rebuilt, and checked.

mod common;

use tansa_format::retrace::{PhaseRule, Source};
use tansa_ptrace::{Options, SourceChoice, record};
use tansa_retrace::recording::{code_addr, partials, program};
use tansa_retrace::{MergeConfig, Scores, Variant, accuracy, rebuild};

fn options(exe: &std::path::Path, runs: &str) -> Options {
    Options {
        command: vec![exe.display().to_string(), runs.to_string()],
        region: "work".to_string(),
        source: SourceChoice::Exactly(Source::Ptrace),
        period: Some(7),
        // The seed's sampling, which its merge assumes.
        phase: PhaseRule::Counted,
        executions: 2000,
        warmup: 1,
        ground_truth: true,
        ground_truth_executions: 0,
    }
}

#[test]
fn rebuilds_the_region_from_every_7th_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build(dir.path(), "region");
    let t0 = std::time::Instant::now();
    let rec = record(&options(&exe, "5000"), &mut |_, _| {}).unwrap();
    eprintln!("recorded in {:?}", t0.elapsed());
    assert_eq!(rec.info.source, Source::Ptrace);
    assert_eq!(rec.executions.len(), 2000);
    // Exact sampling: every execution ran the same number of instructions, and each has
    // ⌊T/7⌋ or ⌈T/7⌉ samples.
    let t = rec.executions[0].instructions;
    assert!(
        t >= 200,
        "the region runs a few hundred instructions, got {t}"
    );
    assert!(rec.executions.iter().all(|e| e.instructions == t));
    assert!(rec.executions.iter().all(|e| {
        let n = e.samples.len() as u64;
        n == t / 7 || n == t.div_ceil(7)
    }));
    let gt = rec.ground_truth.as_ref().unwrap();
    let (truth, support) = gt.modal().unwrap();
    assert_eq!(support, 2000, "the region is reproducible");
    assert_eq!(truth.len() as u64, t);

    let prog = program(&rec.code);
    let names: Vec<&str> = prog.functions().iter().map(|f| f.name.as_str()).collect();
    for f in ["work", "mix", "odd_step", "even_step"] {
        assert!(names.contains(&f), "{f} in {names:?}");
    }
    let truth: Vec<_> = truth.iter().copied().map(code_addr).collect();
    for variant in [Variant::Function, Variant::Block] {
        let t1 = std::time::Instant::now();
        let rebuilt = rebuild(
            &prog,
            &partials(&rec.executions),
            &MergeConfig::new(Scores::defaults(variant, false)),
        )
        .unwrap();
        let got: Vec<_> = rebuilt.entries.iter().map(|e| e.at).collect();
        let acc = accuracy(&got, &truth);
        eprintln!(
            "{variant:?}: {acc:?} distinct {} in {:?}",
            rebuilt.distinct_partials,
            t1.elapsed()
        );
        assert!(acc.lcs_ratio >= 0.95, "{variant:?}: {acc:?}");
    }
}

fn quick(exe: &std::path::Path, runs: &str, source: SourceChoice, executions: u64) -> Options {
    Options {
        source,
        executions,
        ground_truth: false,
        period: None,
        phase: PhaseRule::Shuffled,
        ..options(exe, runs)
    }
}

#[test]
fn time_based_samples_fall_inside_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build(dir.path(), "region");
    let mut o = quick(
        &exe,
        "100000",
        SourceChoice::Exactly(Source::CpuClock),
        5000,
    );
    o.period = Some(10_000);
    let rec = record(&o, &mut |_, _| {}).unwrap();
    assert_eq!(rec.info.source, Source::CpuClock);
    assert_eq!(rec.executions.len(), 5000);
    let prog = program(&rec.code);
    let samples: Vec<_> = rec
        .executions
        .iter()
        .flat_map(|e| e.samples.iter().copied())
        .collect();
    assert!(
        !samples.is_empty(),
        "5000 executions give cpu-clock samples"
    );
    let region_fns = ["work", "mix", "odd_step", "even_step"];
    for s in samples {
        let id = prog
            .lookup(code_addr(s))
            .unwrap_or_else(|| panic!("{s:?} is region code"));
        let f = prog.function(prog.insn(id).loc.function).unwrap();
        assert!(
            region_fns.contains(&f.name.as_str()),
            "sample in {}",
            f.name
        );
    }
}

#[test]
fn auto_source_follows_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build(dir.path(), "region");
    let has_pmu = tansa_perf::Event::open(
        &tansa_perf::EventAttr::new(tansa_perf::EventKind::Hardware(
            tansa_perf::HardwareEvent::Instructions,
        ))
        .disabled(true),
        0,
    )
    .is_ok();
    let rec = record(&quick(&exe, "100", SourceChoice::Auto, 5), &mut |_, _| {}).unwrap();
    if has_pmu {
        assert_eq!(rec.info.source, Source::Instructions);
        assert_eq!(rec.info.period, 10_007);
    } else {
        assert_eq!(rec.info.source, Source::Ptrace);
        assert_eq!(rec.info.period, 7);
        assert!(
            rec.info
                .source_note
                .contains("no hardware instruction counter")
        );
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    use tansa_format::meta::ExitStatus;
    use tansa_ptrace::TraceError;
    let dir = tempfile::tempdir().unwrap();
    let exe = common::build(dir.path(), "region");
    let src = SourceChoice::Exactly(Source::Ptrace);

    let mut o = quick(&exe, "10", src, 5);
    o.region = "wrok".into();
    match record(&o, &mut |_, _| {}) {
        Err(e @ TraceError::UnknownRegion { .. }) => {
            let TraceError::UnknownRegion { suggestions, .. } = &e else {
                unreachable!()
            };
            assert_eq!(suggestions.first().map(String::as_str), Some("work"));
            assert!(e.to_string().contains("close matches: work"), "{e}");
        }
        other => panic!("{other:?}"),
    }

    match record(&quick(&exe, "0", src, 5), &mut |_, _| {}) {
        Err(e @ TraceError::RegionNeverRan { .. }) => {
            let TraceError::RegionNeverRan { exit, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*exit, ExitStatus::Exited { code: 0 });
            assert_eq!(
                e.to_string(),
                "the target exited with code 0 before `work` ran"
            );
        }
        other => panic!("{other:?}"),
    }

    // One execution, and it is the warm-up.
    match record(&quick(&exe, "1", src, 5), &mut |_, _| {}) {
        Err(TraceError::NoCompleteExecution {
            entries: 1,
            warmup: 1,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }

    let mut o = quick(&exe, "10", src, 5);
    o.command = vec!["/no/such/program".into()];
    assert!(matches!(
        record(&o, &mut |_, _| {}),
        Err(TraceError::CommandNotFound(_))
    ));

    // Fewer executions than asked for: what ran is kept.
    let rec = record(&quick(&exe, "4", src, 10), &mut |_, _| {}).unwrap();
    assert_eq!(rec.executions.len(), 3);
    assert_eq!(rec.summary.exit, ExitStatus::Exited { code: 0 });
}
