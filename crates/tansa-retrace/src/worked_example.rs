//! The seed's worked example (spec §5.11, §6, §7.7 and test vectors TV1–TV10): the
//! 50-instruction `func_M()` — `func_A` once, `func_B` three times, `func_C` once, ten
//! instructions each — sampled every 7th instruction.

use crate::divide::{divide_by_count, periodic_samples};
use crate::merge::{MergeConfig, Method, merge};
use crate::model::Loc;
use crate::pattern::{likelihood, round_robin, similarity};
use crate::score::Scores;

const A: u32 = 0;
const B: u32 = 1;
const C: u32 = 2;

/// Sequence 11: function + in-function offset (embodiment 1).
fn sequence_11() -> Vec<Loc> {
    let mut s = Vec::new();
    for f in [A, B, B, B, C] {
        s.extend((0..10).map(|i| Loc::in_function(f, i)));
    }
    s
}

/// Sequence 13: with basic blocks A = 4+3+3, B = 3+7, C = 10 (¶0073).
fn sequence_13() -> Vec<Loc> {
    let layout: [(u32, &[u32]); 5] = [
        (A, &[4, 3, 3]),
        (B, &[3, 7]),
        (B, &[3, 7]),
        (B, &[3, 7]),
        (C, &[10]),
    ];
    let mut s = Vec::new();
    for (f, blocks) in layout {
        let mut index = 0;
        for (b, &n) in blocks.iter().enumerate() {
            for off in 0..n {
                s.push(Loc::in_block(f, index, b as u32 + 1, off));
                index += 1;
            }
        }
    }
    s
}

fn partials(trace: &[Loc], first: u64) -> Vec<Vec<Loc>> {
    let samples = periodic_samples(trace, 8, 7, first);
    let mut parts = divide_by_count(&samples[..trace.len()], trace.len() as u64, 7, first);
    parts.retain(|p| !p.is_empty());
    parts
}

fn short(l: &Loc) -> String {
    format!("{}:{}", ["A", "B", "C"][l.function as usize], l.index)
}

/// `(first, second, similarity, likelihood)` of each merge step.
fn step_summary(m: &crate::merge::Merged) -> Vec<(usize, usize, i64, i64)> {
    m.steps
        .iter()
        .map(|s| (s.first, s.second, s.similarity, s.likelihood))
        .collect()
}

fn configs(scores: Scores) -> [MergeConfig; 2] {
    let mut enumerate = MergeConfig::new(scores.clone());
    enumerate.method = Method::Enumerate;
    let mut dp = MergeConfig::new(scores);
    dp.method = Method::Dp;
    [enumerate, dp]
}

#[test]
fn tv1_partials_and_similarity_matrix() {
    let p = partials(&sequence_11(), 0);
    assert_eq!(p.len(), 7);
    let shown: Vec<String> = p
        .iter()
        .map(|x| x.iter().map(short).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        shown,
        [
            "A:0 A:7 B:4 B:1 B:8 B:5 C:2 C:9",
            "A:6 B:3 B:0 B:7 B:4 C:1 C:8",
            "A:5 B:2 B:9 B:6 B:3 C:0 C:7",
            "A:4 B:1 B:8 B:5 B:2 B:9 C:6",
            "A:3 B:0 B:7 B:4 B:1 B:8 C:5",
            "A:2 A:9 B:6 B:3 B:0 B:7 C:4",
            "A:1 A:8 B:5 B:2 B:9 B:6 C:3",
        ]
    );
    let s = Scores::function();
    let matrix: Vec<Vec<i64>> = (0..7)
        .map(|i| {
            (i + 1..7)
                .map(|j| similarity(&s.similarity, &p[i], &p[j]))
                .collect()
        })
        .collect();
    assert_eq!(
        matrix,
        vec![
            vec![54, 50, 70, 80, 106, 140],
            vec![130, 90, 80, 58, 50],
            vec![120, 96, 70, 58],
            vec![140, 96, 80],
            vec![120, 90],
            vec![130],
            vec![],
        ]
    );
}

#[test]
fn tv2_p54_is_more_likely_than_p45() {
    let p = partials(&sequence_11(), 0);
    let lik = |order: &[usize]| likelihood(&Scores::function().likelihood, &round_robin(order, &p));
    assert_eq!(lik(&[4, 3]), 190, "P-5-4");
    assert_eq!(lik(&[3, 4]), 116, "P-4-5");
}

#[test]
fn tv3_function_variant_recovers_sequence_11() {
    let truth = sequence_11();
    let p = partials(&truth, 0);
    for cfg in configs(Scores::function()) {
        let m = merge(&p, &cfg).unwrap();
        let steps = step_summary(&m);
        assert_eq!(
            steps,
            vec![
                (0, 6, 140, 205),
                (3, 4, 140, 190),
                (0, 3, 160, 485),
                (1, 2, 130, 185),
                (0, 1, 80, 775),
                (0, 5, 26, 920),
            ],
            "{:?}",
            cfg.method
        );
        assert_eq!(m.order, vec![0, 6, 5, 4, 3, 2, 1]);
        assert_eq!(round_robin(&m.order, &p), truth);
    }
}

#[test]
fn tv4_every_starting_phase_recovers_sequence_11() {
    let truth = sequence_11();
    let want: [[usize; 7]; 6] = [
        [2, 1, 7, 6, 5, 4, 3],
        [3, 2, 1, 7, 6, 5, 4],
        [4, 3, 2, 1, 7, 6, 5],
        [5, 4, 3, 2, 1, 7, 6],
        [6, 5, 4, 3, 2, 1, 7],
        [7, 6, 5, 4, 3, 2, 1],
    ];
    for (c0, want) in (1..=6).zip(want) {
        let p = partials(&truth, c0);
        for cfg in configs(Scores::function()) {
            let m = merge(&p, &cfg).unwrap();
            let one_based: Vec<usize> = m.order.iter().map(|&i| i + 1).collect();
            assert_eq!(one_based, want, "c0 = {c0}");
            assert_eq!(round_robin(&m.order, &p), truth, "c0 = {c0}");
        }
    }
}

#[test]
fn tv7_to_tv9_block_variant_recovers_sequence_13() {
    let truth = sequence_13();
    let p = partials(&truth, 0);
    let s = Scores::block();
    assert_eq!(
        p[0].iter()
            .map(|l| (l.block, l.block_offset))
            .collect::<Vec<_>>(),
        vec![
            (1, 0),
            (3, 0),
            (2, 1),
            (1, 1),
            (2, 5),
            (2, 2),
            (1, 2),
            (1, 9)
        ]
    );
    assert_eq!(similarity(&s.similarity, &p[0], &p[6]), 105);
    assert_eq!(similarity(&s.similarity, &p[3], &p[4]), 98);
    let lik = |order: &[usize]| likelihood(&s.likelihood, &round_robin(order, &p));
    assert!(lik(&[4, 3]) > lik(&[3, 4]), "P-5-4 beats P-4-5");
    assert_eq!(lik(&[4, 3]), 132);
    for cfg in configs(s.clone()) {
        let m = merge(&p, &cfg).unwrap();
        let steps = step_summary(&m);
        assert_eq!(
            steps,
            vec![
                (0, 6, 105, 147),
                (3, 4, 98, 132),
                (0, 3, 124, 333),
                (1, 2, 91, 129),
                (0, 1, 62, 547),
                (0, 5, 19, 656),
            ]
        );
        assert_eq!(round_robin(&m.order, &p), truth);
    }
    for c0 in 1..=6 {
        let p = partials(&truth, c0);
        let m = merge(&p, &MergeConfig::new(s.clone())).unwrap();
        assert_eq!(round_robin(&m.order, &p), truth, "c0 = {c0}");
    }
}

#[test]
fn tv10_time_weighted_variant_recovers_the_time_expanded_sequence() {
    // Latencies (spec §6): 3 time units at positions 2, 5, 13, 27, 41, 44; 2 at 7, 20, 33.
    let mut expanded = Vec::new();
    for (pos, l) in sequence_11().into_iter().enumerate() {
        let units = match pos {
            2 | 5 | 13 | 27 | 41 | 44 => 3,
            7 | 20 | 33 => 2,
            _ => 1,
        };
        expanded.extend(std::iter::repeat_n(l, units));
    }
    assert_eq!(expanded.len(), 65);
    let start: Vec<String> = expanded[..16].iter().map(short).collect();
    assert_eq!(
        start.join(" "),
        "A:0 A:1 A:2 A:2 A:2 A:3 A:4 A:5 A:5 A:5 A:6 A:7 A:7 A:8 A:9 B:0"
    );
    for c0 in 0..7 {
        let p = partials(&expanded, c0);
        for cfg in configs(Scores::function_time_weighted()) {
            let m = merge(&p, &cfg).unwrap();
            assert_eq!(
                round_robin(&m.order, &p),
                expanded,
                "c0 = {c0} ({:?})",
                cfg.method
            );
        }
    }
}

#[test]
fn linkage_similarity_also_recovers_every_phase() {
    use crate::merge::GroupSimilarity;
    for (truth, scores) in [
        (sequence_11(), Scores::function()),
        (sequence_13(), Scores::block()),
    ] {
        for c0 in 0..7 {
            let p = partials(&truth, c0);
            for mut cfg in configs(scores.clone()) {
                cfg.group_similarity = GroupSimilarity::Linkage;
                let m = merge(&p, &cfg).unwrap();
                assert_eq!(round_robin(&m.order, &p), truth, "c0 = {c0}");
            }
        }
    }
}
