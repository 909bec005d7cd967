//! The flow against a simulated system: processes whose memory follows a model per request.
//! These check the orchestration (which runs happen, in what order, how many) and that
//! every model gets its verdict; the real processes are in the CLI's end-to-end tests.

use super::sim::{KIB, Model, Sim};
use super::*;
use crate::plan::Plan;

/// A plan watching `srv` with `items` (name, default clients) and N = `n`.
fn plan(items: &[(&str, i64)], n: u32, limit: Option<&str>) -> Plan {
    let mut text = format!(
        "[settings]\nretest_limit = {n}\nreading_interval = \"1ms\"\nsettle = \"0ms\"\n\n[[process]]\nname = \"srv\"\npid = 1\n"
    );
    if let Some(l) = limit {
        text.push_str(&format!("limit = \"{l}\"\n"));
    }
    for (name, clients) in items {
        text.push_str(&format!(
            "\n[[item]]\nname = \"{name}\"\ncommand = \"client {{clients}}\"\n[[item.param]]\nname = \"clients\"\ndefault = {clients}\nmin = 1\nmax = 64\n"
        ));
    }
    Plan::parse(&text).unwrap()
}

fn session(model: Model, items: &[(&str, i64)], n: u32, limit: Option<&str>) -> TestSession {
    let plan = plan(items, n, limit);
    let mut sim = Sim::new(&[("srv", model)]);
    run(&plan, &mut sim, &mut ())
}

/// The (item, verdict, cause) of every finding, and the number of runs.
fn verdicts(s: &TestSession) -> (Vec<(String, Verdict, Cause)>, usize) {
    (
        s.findings
            .iter()
            .map(|f| (f.item.clone(), f.verdict, f.cause))
            .collect(),
        s.runs.len(),
    )
}

fn one(item: &str, v: Verdict, c: Cause) -> Vec<(String, Verdict, Cause)> {
    vec![(item.to_string(), v, c)]
}

#[test]
fn no_growth_takes_one_run_and_finds_nothing() {
    let s = session(Model::Flat, &[("get", 1)], 5, None);
    assert_eq!(verdicts(&s), (vec![], 1));
}

#[test]
fn a_steady_leak_is_1a_after_n_runs() {
    let s = session(Model::Leak(512 * KIB), &[("get", 1)], 5, None);
    assert_eq!(
        verdicts(&s),
        (one("get", Verdict::SteadyLeak, Cause::ContinuedGrowth), 5)
    );
    let f = &s.findings[0];
    assert_eq!(f.runs, vec![1, 2, 3, 4, 5]);
    assert_eq!(f.series.len(), 5);
    assert!(
        f.series
            .iter()
            .all(|p| p.grew && p.growth >= 512 * 1024 - 8 * 1024)
    );
    // The upper-limit check compares with the previous run's measurement, not a new one.
    assert!(s.runs[2].before.is_none());
}

#[test]
fn a_capped_cache_is_1b_as_soon_as_it_stops() {
    let s = session(
        Model::Cache {
            cap: 3,
            each: 256 * KIB,
        },
        &[("put", 1)],
        8,
        None,
    );
    assert_eq!(
        verdicts(&s),
        (one("put", Verdict::Bounded, Cause::GrowthStopped), 4)
    );
}

#[test]
fn the_same_error_with_growth_in_two_items_is_type_2() {
    let model = Model::ErrorEvery {
        every: 2,
        leak: 512 * KIB,
        id: "2498-7766-0011",
    };
    let s = session(model, &[("a", 1), ("b", 1)], 5, None);
    let (v, runs) = verdicts(&s);
    assert_eq!(runs, 4);
    assert_eq!(
        v,
        vec![
            ("a".into(), Verdict::OneOffFault, Cause::LogIdRepeated),
            ("b".into(), Verdict::OneOffFault, Cause::LogIdRepeated)
        ]
    );
    assert_eq!(s.findings[0].log_ids, vec!["2498-7766-0011".to_string()]);
    assert_eq!(s.log_on_increase.len(), 2);
}

#[test]
fn an_error_with_growth_in_one_item_only_is_undeterminable() {
    let model = Model::ErrorEvery {
        every: 2,
        leak: 512 * KIB,
        id: "E1",
    };
    let s = session(model, &[("a", 1)], 5, None);
    assert_eq!(
        verdicts(&s),
        (one("a", Verdict::Undeterminable, Cause::LogIdOnce), 2)
    );
}

#[test]
fn warm_up_is_not_a_fault() {
    let s = session(Model::WarmUp(1024 * KIB), &[("a", 1), ("b", 1)], 5, None);
    // Item a: grew, not again, no log: one record; item b: no growth at all.
    assert_eq!(
        verdicts(&s),
        (one("a", Verdict::NotFault, Cause::OneOffNoLog), 3)
    );
}

#[test]
fn a_pool_without_cap_is_3a_from_the_sweep_tail() {
    let model = Model::Pool {
        each: 256 * KIB,
        cap: None,
    };
    let s = session(model, &[("open", 2), ("more", 4)], 5, None);
    let (v, runs) = verdicts(&s);
    // 2 + 2 (items) + 2 (max value: one parameter per item) + 2 × 7 (sweep 1..64).
    assert_eq!(runs, 4 + 2 + 14);
    assert_eq!(
        v,
        vec![
            (
                "open".into(),
                Verdict::ConditionUnbounded,
                Cause::TailGrowth
            ),
            (
                "more".into(),
                Verdict::ConditionUnbounded,
                Cause::TailGrowth
            )
        ]
    );
    assert_eq!(s.type3.len(), 2);
    assert_eq!(s.survivors.len(), 2);
    // Each sweep starts from a restarted process.
    assert_eq!(s.restarts.len(), 2);
}

#[test]
fn a_pool_with_cap_is_3b() {
    let model = Model::Pool {
        each: 256 * KIB,
        cap: Some(6),
    };
    let s = session(model, &[("open", 2), ("more", 4)], 5, None);
    let (v, runs) = verdicts(&s);
    assert_eq!(runs, 4 + 2 + 14);
    assert_eq!(
        v,
        vec![
            ("open".into(), Verdict::ConditionBounded, Cause::TailFlat),
            ("more".into(), Verdict::ConditionBounded, Cause::TailFlat)
        ]
    );
}

#[test]
fn a_known_limit_decides_3a_in_the_max_value_test() {
    let model = Model::Pool {
        each: 256 * KIB,
        cap: None,
    };
    let s = session(model, &[("open", 2), ("more", 4)], 5, Some("2MiB"));
    let (v, runs) = verdicts(&s);
    // "open" at max grows 4 → 64 buffers (15 MiB) > 2 MiB: 3-a in one run. "more" at max
    // grows nothing (the pool is already at 64), survives, and its sweep passes the limit
    // at clients = 16 (cumulative 4 MiB): 5 runs, then stops.
    assert_eq!(
        v,
        vec![
            (
                "open".into(),
                Verdict::ConditionUnbounded,
                Cause::LimitExceeded
            ),
            (
                "more".into(),
                Verdict::ConditionUnbounded,
                Cause::LimitExceeded
            )
        ]
    );
    assert_eq!(runs, 4 + 2 + 5);
}

#[test]
fn a_process_that_dies_in_the_upper_limit_check_is_1a_and_is_revived() {
    let s = session(
        Model::LeakThenDie {
            each: 512 * KIB,
            at: 3,
        },
        &[("get", 1), ("next", 1)],
        6,
        None,
    );
    let (v, runs) = verdicts(&s);
    assert_eq!(
        v[0],
        ("get".into(), Verdict::SteadyLeak, Cause::ProcessEnded)
    );
    assert!(
        s.findings[0].reason.contains("signal 6"),
        "{}",
        s.findings[0].reason
    );
    // Revived with a new identity, it dies again at its third request, in the next item.
    assert_eq!(s.restarts.len(), 2);
    let first = s.restarts[0].started.as_ref().unwrap();
    assert_ne!(first.pid, s.runs[0].after.processes[0].id.pid);
    assert_eq!(
        v[1],
        ("next".into(), Verdict::SteadyLeak, Cause::ProcessEnded)
    );
    assert_eq!(runs, 3 + 3);
}

#[test]
fn a_failing_item_in_the_initial_run_is_undeterminable() {
    let plan = plan(&[("get", 1)], 5, None);
    let mut sim = Sim::new(&[("srv", Model::Leak(512 * KIB))]);
    sim.fail_item = Some("get");
    let s = run(&plan, &mut sim, &mut ());
    assert_eq!(
        verdicts(&s),
        (one("get", Verdict::Undeterminable, Cause::ItemFailed), 1)
    );
    assert!(s.findings[0].reason.contains("connection refused"));
}

#[test]
fn only_the_process_that_grew_is_suspected() {
    let plan = {
        let text = "[settings]\nretest_limit = 4\nreading_interval = \"1ms\"\n[[process]]\nname = \"leaky\"\npid = 1\n[[process]]\nname = \"quiet\"\npid = 2\n[[item]]\nname = \"get\"\ncommand = \"x\"\n";
        Plan::parse(text).unwrap()
    };
    let mut sim = Sim::new(&[("leaky", Model::Leak(300 * KIB)), ("quiet", Model::Flat)]);
    let s = run(&plan, &mut sim, &mut ());
    assert_eq!(s.findings.len(), 1);
    assert_eq!(s.findings[0].process, "leaky");
    assert_eq!(s.runs.len(), 4);
}

#[test]
fn the_idle_test_finds_periodic_growth() {
    let text = "[settings]\nreading_interval = \"1ms\"\n[[process]]\nname = \"ticker\"\npid = 1\n[[process]]\nname = \"calm\"\npid = 2\n[idle]\nduration = \"4s\"\ninterval = \"1s\"\nreading_interval = \"10ms\"\n";
    let plan = Plan::parse(text).unwrap();
    let mut sim = Sim::new(&[("ticker", Model::Tick(256 * KIB)), ("calm", Model::Flat)]);
    let s = run(&plan, &mut sim, &mut ());
    assert_eq!(s.idle.len(), 5);
    assert_eq!(s.runs.len(), 0);
    let v: Vec<_> = s
        .findings
        .iter()
        .map(|f| (f.process.as_str(), f.verdict, f.cause))
        .collect();
    assert_eq!(v, vec![("ticker", Verdict::SteadyLeak, Cause::IdleGrowth)]);
    assert_eq!(s.findings[0].series.len(), 4);
}

#[test]
fn growth_in_the_retest_only_is_a_one_off_not_a_suspect() {
    // `leaky` makes the re-test happen; `late` grows in it only. Claim 1 needs growth after
    // the run and after the re-run for a possible leak: `late` goes to the log check.
    let text = "[settings]\nretest_limit = 4\nreading_interval = \"1ms\"\n[[process]]\nname = \"leaky\"\npid = 1\n[[process]]\nname = \"late\"\npid = 2\n[[item]]\nname = \"get\"\ncommand = \"x\"\n";
    let plan = Plan::parse(text).unwrap();
    let mut sim = Sim::new(&[
        ("leaky", Model::Leak(300 * KIB)),
        ("late", Model::OnRequest(2, 300 * KIB)),
    ]);
    let s = run(&plan, &mut sim, &mut ());
    let v: Vec<_> = s
        .findings
        .iter()
        .map(|f| (f.process.as_str(), f.verdict, f.cause))
        .collect();
    assert_eq!(
        v,
        vec![
            ("leaky", Verdict::SteadyLeak, Cause::ContinuedGrowth),
            ("late", Verdict::NotFault, Cause::OneOffNoLog)
        ]
    );
    assert_eq!(s.non_recurring.len(), 1);
    assert_eq!(s.runs.len(), 4);
}

#[test]
fn a_suspect_that_cannot_be_restarted_for_the_sweep_is_undeterminable() {
    let plan = plan(&[("open", 2), ("more", 4)], 5, None);
    let mut sim = Sim::new(&[(
        "srv",
        Model::Pool {
            each: 256 * KIB,
            cap: None,
        },
    )]);
    sim.restart_fails = true;
    let s = run(&plan, &mut sim, &mut ());
    let v: Vec<_> = s.findings.iter().map(|f| (f.verdict, f.cause)).collect();
    assert_eq!(
        v,
        vec![
            (Verdict::Undeterminable, Cause::NotMeasured),
            (Verdict::Undeterminable, Cause::NotMeasured)
        ]
    );
    assert!(s.restarts.iter().all(|r| r.error.is_some()));
}
