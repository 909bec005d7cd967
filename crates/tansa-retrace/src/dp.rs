//! The dynamic-programming merge: the combination pattern of highest likelihood, found
//! without enumerating the `C(a + b, a)` patterns.
//!
//! The likelihood of a materialised order `Z` decomposes by *bands* of rounds. Let the
//! distinct lengths of the originals be `ℓ₁ < … < ℓ_r`. Band `j` covers rounds
//! `[ℓ_{j−1}, ℓ_j)` (with `ℓ₀ = 0`), in which exactly the originals of length `≥ ℓ_j` (the
//! set `F_j`) emit an element. Within a round, an element's predecessor is the element of
//! the most recent earlier original in `F_j`; the first element of a round follows the last
//! element of the previous round. So
//!
//! ```text
//! Lik(RR(Z)) = Σ_j Σ_{(u,v) consecutive in Z|F_j} Σ_{i ∈ band j} λ(u[i], v[i])      (within rounds)
//!            + Σ_{i ≥ 1} λ(last(F(i−1))[i − 1], first(F(i))[i])                     (round wraps)
//! ```
//!
//! Building `Z` left to right, the first sum only needs, per band, *which side* (group A or
//! B) placed the most recent member of `F_j`: the member itself is then the last `F_j`
//! member of that side's prefix. The wrap terms need the first and last member of each
//! `F_j`, known at the end from one more bit per band. The state is therefore
//! `(p, q, mask)` with two bits per band; only reachable states are built, anti-diagonal by
//! anti-diagonal, and values are computed backwards. Reconstruction prefers "next from A"
//! on ties, which yields the same pattern as [`crate::pattern::for_each_shuffle`]'s
//! enumeration with first-maximum-wins: the merge is *equivalent*, not approximate.
//!
//! With originals of two lengths (exact periodic sampling of a reproducible region) the
//! mask has at most 16 values and the cost is `O(a · b · len)`.

use std::collections::HashMap;

use crate::model::Loc;
use crate::score::Table;

/// Why the dynamic program gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DpError {
    /// The originals have more distinct lengths than the state mask can track.
    #[error("the partial sequences have {0} distinct lengths; the merge tracks at most 64")]
    TooManyLengths(usize),
    /// The reachable state space exceeded the limit.
    #[error("the merge needs more than {0} states")]
    TooManyStates(usize),
}

struct State {
    p: u32,
    mask: u128,
    /// `(index in next layer, gain)` of placing the next A / B element.
    next: [Option<(usize, i64)>; 2],
}

struct Ctx<'a> {
    table: &'a Table,
    originals: &'a [Vec<Loc>],
    sides: [&'a [usize]; 2],
    /// Band bounds: rounds `lo[j] .. hi[j]`.
    lo: Vec<usize>,
    hi: Vec<usize>,
    /// `level[s][k]`: highest band of side `s`'s `k`-th original (None if empty).
    level: [Vec<Option<usize>>; 2],
    /// `last[s][j][p]`: index in side `s` of the last member of `F_j` among its first `p`.
    last: [Vec<Vec<Option<u32>>>; 2],
    /// `first[s][j]`: index in side `s` of its first member of `F_j`.
    first: [Vec<Option<u32>>; 2],
}

impl Ctx<'_> {
    fn member(&self, side: usize, k: u32) -> &[Loc] {
        &self.originals[self.sides[side][k as usize]]
    }

    /// Σ over the rounds of band `j` of λ(u[i], x[i]).
    fn band_score(&self, j: usize, u: &[Loc], x: &[Loc]) -> i64 {
        (self.lo[j]..self.hi[j])
            .map(|i| self.table.pair(&u[i], &x[i]))
            .sum()
    }

    fn bit(mask: u128, k: usize) -> usize {
        ((mask >> k) & 1) as usize
    }

    /// Gain and new mask of placing side `s`'s next element from `(p, q, mask)`.
    fn step(&self, pq: [usize; 2], mask: u128, s: usize) -> (i64, u128) {
        let k = pq[s];
        let Some(top) = self.level[s][k] else {
            return (0, mask);
        };
        let x = self.member(s, k as u32);
        let mut gain = 0;
        let mut mask = mask;
        for j in 0..=top {
            let prev_side = Self::bit(mask, 2 * j);
            let prev = self.last[prev_side][j][pq[prev_side]];
            let placed = self.last[0][j][pq[0]].is_some() || self.last[1][j][pq[1]].is_some();
            if placed {
                if let Some(u) = prev {
                    gain += self.band_score(j, self.member(prev_side, u), x);
                }
            } else if s == 1 {
                mask |= 1 << (2 * j + 1);
            }
            if s == 1 {
                mask |= 1 << (2 * j);
            } else {
                mask &= !(1 << (2 * j));
            }
        }
        (gain, mask)
    }

    /// The round-wrap terms, once everything is placed.
    fn terminal(&self, mask: u128) -> i64 {
        let ends = [self.sides[0].len(), self.sides[1].len()];
        let bands = self.lo.len();
        let mut total = 0;
        let member_of = |j: usize, first: bool| -> &[Loc] {
            let side = Self::bit(mask, 2 * j + usize::from(first));
            let k = if first {
                self.first[side][j]
            } else {
                self.last[side][j][ends[side]]
            };
            k.map_or(&[][..], |k| self.member(side, k))
        };
        for j in 0..bands {
            let (last, first) = (member_of(j, false), member_of(j, true));
            for i in self.lo[j] + 1..self.hi[j] {
                total += self.table.pair(&last[i - 1], &first[i]);
            }
            if j + 1 < bands {
                let next_first = member_of(j + 1, true);
                let i = self.hi[j];
                total += self.table.pair(&last[i - 1], &next_first[i]);
            }
        }
        total
    }
}

/// The order-preserving interleaving of groups `a` and `b` (lists of indexes into
/// `originals`) whose materialisation has the highest likelihood under `table`, and that
/// likelihood. Among equal maxima, the first in [`crate::pattern::for_each_shuffle`] order
/// wins. `max_states` bounds the work.
pub fn best_shuffle(
    table: &Table,
    originals: &[Vec<Loc>],
    a: &[usize],
    b: &[usize],
    max_states: usize,
) -> Result<(Vec<usize>, i64), DpError> {
    let sides = [a, b];
    let mut lengths: Vec<usize> = a
        .iter()
        .chain(b)
        .map(|&u| originals[u].len())
        .filter(|&l| l > 0)
        .collect();
    lengths.sort_unstable();
    lengths.dedup();
    let bands = lengths.len();
    if bands > 64 {
        return Err(DpError::TooManyLengths(bands));
    }
    let lo: Vec<usize> = (0..bands)
        .map(|j| if j == 0 { 0 } else { lengths[j - 1] })
        .collect();
    let level = sides.map(|side| {
        side.iter()
            .map(|&u| lengths.binary_search(&originals[u].len()).ok())
            .collect::<Vec<_>>()
    });
    let last = [0, 1].map(|s| {
        (0..bands)
            .map(|j| {
                let mut v = Vec::with_capacity(sides[s].len() + 1);
                let mut cur = None;
                v.push(cur);
                for (k, lv) in level[s].iter().enumerate() {
                    if lv.is_some_and(|l| l >= j) {
                        cur = Some(k as u32);
                    }
                    v.push(cur);
                }
                v
            })
            .collect::<Vec<_>>()
    });
    let first = [0, 1].map(|s| {
        (0..bands)
            .map(|j| {
                level[s]
                    .iter()
                    .position(|lv| lv.is_some_and(|l| l >= j))
                    .map(|k| k as u32)
            })
            .collect::<Vec<_>>()
    });
    let ctx = Ctx {
        table,
        originals,
        sides,
        lo,
        hi: lengths,
        level,
        last,
        first,
    };

    // Forward: build the reachable states layer by layer (layer t has p + q = t).
    let (m, n) = (a.len(), b.len());
    let mut layers: Vec<Vec<State>> = vec![vec![State {
        p: 0,
        mask: 0,
        next: [None, None],
    }]];
    let mut total_states = 1usize;
    for t in 0..m + n {
        let mut next_layer: Vec<State> = Vec::new();
        let mut index: HashMap<(u32, u128), usize> = HashMap::new();
        let cur = layers.last_mut().expect("at least the first layer");
        for st in cur.iter_mut() {
            let p = st.p as usize;
            let q = t - p;
            for s in 0..2 {
                if (s == 0 && p == m) || (s == 1 && q == n) {
                    continue;
                }
                let (gain, mask) = ctx.step([p, q], st.mask, s);
                let np = (p + usize::from(s == 0)) as u32;
                let idx = *index.entry((np, mask)).or_insert_with(|| {
                    next_layer.push(State {
                        p: np,
                        mask,
                        next: [None, None],
                    });
                    next_layer.len() - 1
                });
                st.next[s] = Some((idx, gain));
            }
        }
        total_states += next_layer.len();
        if total_states > max_states {
            return Err(DpError::TooManyStates(max_states));
        }
        layers.push(next_layer);
    }

    // Backward: best achievable future from each state.
    let mut best: Vec<Vec<i64>> = layers.iter().map(|l| vec![0; l.len()]).collect();
    for (i, st) in layers[m + n].iter().enumerate() {
        best[m + n][i] = ctx.terminal(st.mask);
    }
    for t in (0..m + n).rev() {
        for (i, st) in layers[t].iter().enumerate() {
            best[t][i] = st
                .next
                .iter()
                .flatten()
                .map(|&(j, g)| g + best[t + 1][j])
                .max()
                .unwrap_or(i64::MIN);
        }
    }

    // Reconstruct, preferring A on ties.
    let mut order = Vec::with_capacity(m + n);
    let (mut i, mut pq) = (0usize, [0usize, 0usize]);
    for t in 0..m + n {
        let st = &layers[t][i];
        let choice = (0..2)
            .find_map(|s| {
                st.next[s]
                    .filter(|&(j, g)| g + best[t + 1][j] == best[t][i])
                    .map(|(j, _)| (s, j))
            })
            .expect("some successor attains the best value");
        order.push(sides[choice.0][pq[choice.0]]);
        pq[choice.0] += 1;
        i = choice.1;
    }
    Ok((order, best[0][0]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::{GroupSimilarity, MergeConfig, Method, merge};
    use crate::pattern::{for_each_shuffle, likelihood, round_robin};
    use crate::score::Scores;

    /// SplitMix64: a small deterministic generator for the property test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn random_originals(rng: &mut Rng, count: usize) -> Vec<Vec<Loc>> {
        let base = 1 + rng.below(6) as usize;
        (0..count)
            .map(|_| {
                // Mostly two lengths, as periodic samples give, sometimes anything.
                let len = if rng.below(4) == 0 {
                    rng.below(8) as usize
                } else {
                    base + rng.below(2) as usize
                };
                (0..len)
                    .map(|_| {
                        let f = rng.below(3) as u32;
                        let index = rng.below(12) as u32;
                        Loc::in_block(f, index, 1 + index / 4, index % 4)
                    })
                    .collect()
            })
            .collect()
    }

    fn enumerate(table: &Table, o: &[Vec<Loc>], a: &[usize], b: &[usize]) -> (Vec<usize>, i64) {
        let mut best: Option<(Vec<usize>, i64)> = None;
        for_each_shuffle(a, b, |z| {
            let l = likelihood(table, &round_robin(z, o));
            if best.as_ref().is_none_or(|(_, b)| l > *b) {
                best = Some((z.to_vec(), l));
            }
            true
        });
        best.unwrap()
    }

    #[test]
    fn dp_agrees_with_enumeration_on_random_inputs() {
        let mut rng = Rng(0x7a5a_2024);
        let tables = [
            Scores::function(),
            Scores::block(),
            Scores::function_time_weighted(),
            Scores::block_time_weighted(),
        ];
        for case in 0..4000 {
            let n = 2 + rng.below(8) as usize;
            let o = random_originals(&mut rng, n);
            let mut ids: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let split = 1 + rng.below(n as u64 - 1) as usize;
            let (a, b) = ids.split_at(split);
            let table = &tables[case % tables.len()].likelihood;
            let want = enumerate(table, &o, a, b);
            let got = best_shuffle(table, &o, a, b, 1_000_000).unwrap();
            assert_eq!(
                got, want,
                "case {case}: a = {a:?}, b = {b:?}, originals = {o:?}"
            );
        }
    }

    #[test]
    fn whole_merges_agree() {
        let mut rng = Rng(42);
        for case in 0..300 {
            let n = 2 + rng.below(7) as usize;
            let o = random_originals(&mut rng, n);
            let linkage = [GroupSimilarity::Literal, GroupSimilarity::Linkage];
            for (scores, group_similarity) in [Scores::function(), Scores::block()]
                .into_iter()
                .zip(linkage)
            {
                let mut e = MergeConfig::new(scores.clone());
                e.method = Method::Enumerate;
                e.group_similarity = group_similarity;
                let mut d = e.clone();
                d.method = Method::Dp;
                for top_k in [1, 3] {
                    e.top_k = top_k;
                    d.top_k = top_k;
                    let (me, md) = (merge(&o, &e).unwrap(), merge(&o, &d).unwrap());
                    assert_eq!(me.order, md.order, "case {case}");
                    let lik = |m: &crate::merge::Merged| {
                        m.steps.iter().map(|s| s.likelihood).collect::<Vec<_>>()
                    };
                    assert_eq!(lik(&me), lik(&md), "case {case}");
                }
            }
        }
    }

    #[test]
    fn state_limit_is_reported() {
        let o: Vec<Vec<Loc>> = (0..12)
            .map(|i| vec![Loc::in_function(0, i); 1 + i as usize])
            .collect();
        let a: Vec<usize> = (0..6).collect();
        let b: Vec<usize> = (6..12).collect();
        assert_eq!(
            best_shuffle(&Scores::function().likelihood, &o, &a, &b, 10),
            Err(DpError::TooManyStates(10))
        );
    }
}
