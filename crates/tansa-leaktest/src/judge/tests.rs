use super::*;
use crate::measure::{Reading, Sample};

fn id(p: &str, pid: u32) -> ProcId {
    ProcId {
        process: p.into(),
        pid,
        start_ticks: 100,
    }
}

fn snap(values: &[(ProcId, u64, u64)]) -> Snapshot {
    Snapshot {
        t_ms: 0,
        processes: values
            .iter()
            .map(|(i, pss, fds)| Sample {
                id: i.clone(),
                value: Reading {
                    rss_bytes: *pss,
                    pss_bytes: *pss,
                    fds: *fds,
                },
                spread: Reading::default(),
                readings: vec![],
            })
            .collect(),
    }
}

const TH: Thresholds = Thresholds {
    memory_bytes: 64 * 1024,
    fds: 1,
};

#[test]
fn growth_counts_at_the_threshold_and_not_below() {
    assert!(grew(64 * 1024, 64 * 1024));
    assert!(!grew(64 * 1024 - 1, 64 * 1024));
    assert!(!grew(-1_000_000, 64 * 1024));
    assert!(!grew(0, 0), "a zero threshold still means > 0");
    assert!(grew(1, 0));
}

#[test]
fn growth_compares_only_the_same_identity() {
    let a = id("a", 1);
    let a_restarted = ProcId {
        start_ticks: 200,
        ..a.clone()
    };
    let before = snap(&[(a.clone(), 1000, 4), (id("b", 2), 5000, 4)]);
    let after = snap(&[(a_restarted.clone(), 900_000, 4), (id("b", 2), 600_000, 6)]);
    let g = growth(&before, &after, &[Resource::Pss, Resource::Fds], &TH);
    assert_eq!(g.len(), 2, "only b is compared: {g:?}");
    assert!(g.iter().all(|x| x.id.process == "b" && x.grew));
    assert_eq!(ended(&before, &after), vec![a]);
}

#[test]
fn tail_is_the_last_tenth_rounded_up() {
    assert_eq!(tail_len(1), 1);
    assert_eq!(tail_len(7), 1);
    assert_eq!(tail_len(10), 1);
    assert_eq!(tail_len(11), 2);
    assert_eq!(tail_len(14), 2);
    assert_eq!(tail_len(30), 3);
    // Grows early then stops: capped.
    assert!(!tail_grows(&[true, true, true, false, false, false]));
    // Still growing at the end: no cap.
    assert!(tail_grows(&[true, true, true, true, true, true]));
    assert!(tail_grows(&[false, false, false, false, false, true]));
    // 11 values: the last two count.
    let mut v = vec![true; 9];
    v.extend([true, false]);
    assert!(tail_grows(&v));
}

#[test]
fn idle_increase_is_found_between_consecutive_measurements() {
    assert_eq!(first_increase(&[100, 100, 100], 1), None);
    assert_eq!(first_increase(&[100, 90, 200, 150], 50), Some(2));
    assert_eq!(
        first_increase(&[100, 120, 140], 50),
        None,
        "small steps stay below"
    );
    assert_eq!(first_increase(&[7], 1), None);
}

fn l1(process: &str, item: &str, ids: &[&str], window: (u64, u64)) -> LogOnIncrease {
    LogOnIncrease {
        process: process.into(),
        resource: Resource::Pss,
        item: item.into(),
        log_ids: ids.iter().map(|s| s.to_string()).collect(),
        window_ms: window,
        runs: vec![],
        series: vec![],
    }
}

fn rec(process: &str, id: &str, t: u64) -> LogRecord {
    LogRecord {
        t_ms: t,
        process: process.into(),
        pid: None,
        source: "f".into(),
        id: id.into(),
        message: String::new(),
    }
}

#[test]
fn the_same_log_id_with_growth_in_two_items_is_type_2() {
    // The seed's Fig. 28: ps3 with 2498-7766-0011 twice.
    let log_on_increase = vec![
        l1("ps3", "item-1", &["2498-7766-0011"], (0, 10)),
        l1("ps3", "item-2", &["2498-7766-0011"], (20, 30)),
        l1("ps2", "item-2", &["1111-2222-3333"], (20, 30)),
    ];
    let logs = vec![
        rec("ps3", "2498-7766-0011", 5),
        rec("ps3", "2498-7766-0011", 25),
    ];
    let d = type2(&log_on_increase, &logs);
    assert_eq!(d.len(), 3);
    assert_eq!(d[0].verdict, Verdict::OneOffFault);
    assert_eq!(d[1].verdict, Verdict::OneOffFault);
    // ps2's ID came once and was logged nowhere else.
    assert_eq!(d[2].verdict, Verdict::Undeterminable);
    assert_eq!(d[2].cause, Cause::LogIdOnce);
}

#[test]
fn a_single_log_id_logged_elsewhere_is_not_a_fault() {
    let log_on_increase = vec![l1("ps3", "item-1", &["E7"], (100, 200))];
    let inside = vec![rec("ps3", "E7", 150)];
    assert_eq!(
        type2(&log_on_increase, &inside)[0].verdict,
        Verdict::Undeterminable
    );
    let elsewhere = vec![rec("ps3", "E7", 150), rec("ps3", "E7", 900)];
    assert_eq!(
        type2(&log_on_increase, &elsewhere)[0].verdict,
        Verdict::NotFault
    );
    // Another process logging the same ID does not count.
    let other = vec![rec("ps3", "E7", 150), rec("ps9", "E7", 900)];
    assert_eq!(
        type2(&log_on_increase, &other)[0].verdict,
        Verdict::Undeterminable
    );
}

#[test]
fn an_entry_with_several_ids_takes_the_most_severe() {
    let log_on_increase = vec![
        l1("p", "a", &["X", "Y"], (0, 10)),
        l1("p", "b", &["Y"], (20, 30)),
    ];
    let d = type2(&log_on_increase, &[rec("p", "X", 500)]);
    assert_eq!(d[0].verdict, Verdict::OneOffFault, "Y repeats");
}

fn l2(process: &str, item: &str) -> NonRecurring {
    NonRecurring {
        process: process.into(),
        resource: Resource::Pss,
        item: item.into(),
        runs: vec![],
        series: vec![],
    }
}

#[test]
fn type_3_candidates_need_records_in_several_items() {
    // The seed's Fig. 30: ps3 twice (L41, L42).
    let non_recurring = vec![l2("ps3", "a"), l2("ps1", "a"), l2("ps3", "b")];
    assert_eq!(type3_candidates(&non_recurring, 2), vec![0, 2]);
    assert_eq!(type3_candidates(&non_recurring, 1), vec![0, 1, 2]);
    assert_eq!(type3_candidates(&non_recurring, 3), Vec::<usize>::new());
}

#[test]
fn limit_is_exceeded_only_above_it() {
    // The seed's Fig. 31 with limit 300: 300 is within, 301 is over.
    assert!(!exceeds(300, 300));
    assert!(exceeds(301, 300));
    assert!(!exceeds(-500, 300));
}
