//! The building blocks of the merge: materialising an order of partial sequences,
//! similarity (seed unit 113a), likelihood (unit 113d) and the combination patterns (unit
//! 113c).

use crate::model::Loc;
use crate::score::Table;

/// Materialises an order `(z₁ … z_k)` of original partial sequences by alternating their
/// elements round by round (the seed's 交互に組み合わせる): round `i` emits `z₁[i], z₂[i],
/// …, z_k[i]`, skipping sequences shorter than `i + 1`.
pub fn round_robin<T: Copy>(order: &[usize], originals: &[Vec<T>]) -> Vec<T> {
    let rounds = order.iter().map(|&o| originals[o].len()).max().unwrap_or(0);
    let total = order.iter().map(|&o| originals[o].len()).sum();
    let mut out = Vec::with_capacity(total);
    for i in 0..rounds {
        for &o in order {
            if let Some(&x) = originals[o].get(i) {
                out.push(x);
            }
        }
    }
    out
}

/// Similarity of two sequences (seed Figs. 12/20): the sum of `table.pair(x[i], y[i])`
/// position by position from the heads, up to the end of the shorter one.
pub fn similarity(table: &Table, x: &[Loc], y: &[Loc]) -> i64 {
    x.iter().zip(y).map(|(a, b)| table.pair(a, b)).sum()
}

/// Likelihood of an order of instructions (seed Figs. 13/21): the sum of
/// `table.pair(c[j − 1], c[j])` over consecutive instructions. 0 for fewer than two.
pub fn likelihood(table: &Table, c: &[Loc]) -> i64 {
    c.windows(2).map(|w| table.pair(&w[0], &w[1])).sum()
}

/// `C(a + b, a)`, the number of order-preserving combination patterns of groups of `a` and
/// `b` originals, saturating at `u128::MAX`.
pub fn pattern_count(a: usize, b: usize) -> u128 {
    let (n, k) = ((a + b) as u128, a.min(b) as u128);
    let mut c: u128 = 1;
    for i in 0..k {
        // c · (n − i) / (i + 1) stays integral at every step.
        match c.checked_mul(n - i) {
            Some(v) => c = v / (i + 1),
            None => return u128::MAX,
        }
    }
    c
}

/// Calls `f` with every order-preserving interleaving of `a` and `b` (the combination
/// patterns of seed ¶0034–0035), in lexicographic order of the choices "next from `a`"
/// before "next from `b`". Stops early when `f` returns `false`.
pub fn for_each_shuffle(a: &[usize], b: &[usize], mut f: impl FnMut(&[usize]) -> bool) {
    let mut buf = Vec::with_capacity(a.len() + b.len());
    shuffle_rec(a, b, &mut buf, &mut f);
}

fn shuffle_rec(
    a: &[usize],
    b: &[usize],
    buf: &mut Vec<usize>,
    f: &mut impl FnMut(&[usize]) -> bool,
) -> bool {
    if a.is_empty() || b.is_empty() {
        let mark = buf.len();
        buf.extend_from_slice(a);
        buf.extend_from_slice(b);
        let go_on = f(buf);
        buf.truncate(mark);
        return go_on;
    }
    buf.push(a[0]);
    let go_on = shuffle_rec(&a[1..], b, buf, f);
    buf.pop();
    if !go_on {
        return false;
    }
    buf.push(b[0]);
    let go_on = shuffle_rec(a, &b[1..], buf, f);
    buf.pop();
    go_on
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shuffles(a: &[usize], b: &[usize]) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for_each_shuffle(a, b, |z| {
            out.push(z.to_vec());
            true
        });
        out
    }

    #[test]
    fn tv5_and_tv6_combination_patterns() {
        // TV5: Shuffle((7), (5, 4)).
        let mut got = shuffles(&[7], &[5, 4]);
        got.sort();
        let mut want = vec![vec![7, 5, 4], vec![5, 7, 4], vec![5, 4, 7]];
        want.sort();
        assert_eq!(got, want);
        // TV6: Shuffle((1, 7), (5, 4)), in the spec's order.
        assert_eq!(
            shuffles(&[1, 7], &[5, 4]),
            vec![
                vec![1, 7, 5, 4],
                vec![1, 5, 7, 4],
                vec![1, 5, 4, 7],
                vec![5, 1, 7, 4],
                vec![5, 1, 4, 7],
                vec![5, 4, 1, 7]
            ]
        );
        // P-4 never precedes P-5 (Fig. 7).
        assert!(
            shuffles(&[7], &[5, 4])
                .iter()
                .all(|z| { z.iter().position(|&x| x == 5) < z.iter().position(|&x| x == 4) })
        );
    }

    #[test]
    fn counts() {
        assert_eq!(pattern_count(1, 1), 2);
        assert_eq!(pattern_count(1, 2), 3);
        assert_eq!(pattern_count(2, 2), 6);
        assert_eq!(pattern_count(10, 10), 184_756);
        assert_eq!(
            pattern_count(50, 50),
            100_891_344_545_564_193_334_812_497_256
        );
        assert_eq!(pattern_count(200, 200), u128::MAX);
        for (a, b) in [(1, 3), (3, 4), (5, 2)] {
            let ids: Vec<usize> = (0..a + b).collect();
            assert_eq!(
                shuffles(&ids[..a], &ids[a..]).len() as u128,
                pattern_count(a, b)
            );
        }
    }

    #[test]
    fn round_robin_skips_exhausted() {
        let o = vec![vec![1, 2, 3], vec![10], vec![20, 21]];
        assert_eq!(round_robin(&[1, 0, 2], &o), vec![10, 1, 20, 2, 21, 3]);
        assert_eq!(round_robin(&[0, 2, 1], &o), vec![1, 20, 10, 2, 21, 3]);
    }
}
