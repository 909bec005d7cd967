//! The real thing: a C program built at test time, its region recorded with the ptrace
//! sampler at P = 7 with single-stepped ground truth, rebuilt, and checked.

mod common;

use tansa_format::retrace::Source;
use tansa_retrace::recording::{code_addr, partials, program};
use tansa_retrace::{MergeConfig, Scores, Variant, accuracy, rebuild};
use tansa_tracer::{Options, SourceChoice, record};

fn options(exe: &std::path::Path, runs: &str) -> Options {
    Options {
        command: vec![exe.display().to_string(), runs.to_string()],
        region: "work".to_string(),
        source: SourceChoice::Exactly(Source::Ptrace),
        period: 7,
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
