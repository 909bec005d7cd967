//! The synthesis control (seed unit 113, steps S103–S113): repeatedly pick the most similar
//! pair of partial sequences, generate its combination patterns, keep the most likely one
//! in place of the pair, until one sequence is left.
//!
//! Literal to the seed: similarity is computed on the stored (materialised) sequences of
//! the current groups, lock-step from their heads (¶0042, spec §13.15); patterns keep the
//! order already fixed inside each group (¶0034); the merged group takes the slot of the
//! lower-indexed member. Ties go to the first pair in `(i < j)` order and to the first
//! pattern in [`for_each_shuffle`] order, so runs are deterministic.
//!
//! Two ways to find the best pattern give the same answer: enumeration (the seed's, `C(a +
//! b, a)` patterns) and the dynamic program of [`crate::dp`] (`O(a · b · len)` for exact
//! periodic samples). [`Method::Auto`] enumerates while the pattern count is at most
//! [`MergeConfig::enumeration_limit`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::dp::{DpError, best_shuffle};
use crate::model::Loc;
use crate::pattern::{for_each_shuffle, likelihood, pattern_count, round_robin, similarity};
use crate::score::Scores;

/// How the best combination pattern of a pair is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Score every pattern (the seed's procedure).
    Enumerate,
    /// The equivalent dynamic program.
    Dp,
    /// Enumerate up to [`MergeConfig::enumeration_limit`] patterns, else the dynamic program.
    Auto,
}

/// How the similarity of two groups (merged partial sequences) is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupSimilarity {
    /// The seed's literal procedure: the similarity of the groups' materialised sequences,
    /// compared lock-step from their heads (¶0042). Merged sequences are denser than
    /// single partials, so lock-step positions drift apart (spec §13.15).
    Literal,
    /// The highest similarity of any original of one group with any original of the other
    /// (single linkage, spec §13.15 variant b): groups are joined where they have
    /// neighbouring partials, which keeps each merge decidable by the likelihood when
    /// partials are sparse (large periods).
    Linkage,
}

/// How the top-K variant compares patterns of different pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ranking {
    /// Raw likelihood (literal to the seed, ¶0030; favours longer patterns).
    Raw,
    /// Likelihood gained by the merge: `Lik(pattern) − Lik(first) − Lik(second)`.
    Gain,
}

/// Merge settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeConfig {
    /// Similarity and likelihood tables.
    pub scores: Scores,
    /// How patterns are searched.
    pub method: Method,
    /// [`Method::Auto`] enumerates when a pair has at most this many patterns.
    pub enumeration_limit: u128,
    /// How groups are compared.
    pub group_similarity: GroupSimilarity,
    /// Number of most similar pairs tried per step (1: the seed's claim 2; more: ¶0030).
    pub top_k: usize,
    /// How the top-K variant compares patterns.
    pub ranking: Ranking,
    /// Bound on the dynamic program's states per merge.
    pub max_dp_states: usize,
}

impl MergeConfig {
    /// The seed's procedure with `scores`: top-1, automatic method, raw ranking.
    pub fn new(scores: Scores) -> Self {
        MergeConfig {
            scores,
            method: Method::Auto,
            group_similarity: GroupSimilarity::Literal,
            enumeration_limit: 10_000,
            top_k: 1,
            ranking: Ranking::Raw,
            max_dp_states: 20_000_000,
        }
    }
}

/// Most patterns [`Method::Enumerate`] will score for one pair.
pub const ENUMERATION_CAP: u128 = 50_000_000;

/// Why a merge failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Enumeration was requested for a pair with too many patterns.
    #[error(
        "merging groups of {a} and {b} partial sequences needs {patterns} patterns; \
         enumeration stops at {ENUMERATION_CAP} (use the dynamic-programming merge)"
    )]
    TooManyPatterns {
        /// Originals in the first group.
        a: usize,
        /// Originals in the second group.
        b: usize,
        /// `C(a + b, a)`, saturated.
        patterns: u128,
    },
    /// The dynamic program gave up.
    #[error("dynamic-programming merge: {0}")]
    Dp(#[from] DpError),
}

/// One merge step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeStep {
    /// Slot (index of its first original) of the group that was kept.
    pub first: usize,
    /// Slot of the group merged into it.
    pub second: usize,
    /// Originals in each group.
    pub sizes: (usize, usize),
    /// Their similarity.
    pub similarity: i64,
    /// Number of combination patterns, `C(a + b, a)` (saturated).
    pub patterns: u128,
    /// Whether the patterns were enumerated (else the dynamic program ran).
    pub enumerated: bool,
    /// Likelihood of the pattern kept.
    pub likelihood: i64,
}

/// The result: the order of the originals, and how it was reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merged {
    /// Indexes of the non-empty originals, in merged order; `round_robin(&order, …)` is the
    /// rebuilt sequence.
    pub order: Vec<usize>,
    /// The steps, in order.
    pub steps: Vec<MergeStep>,
}

struct Group {
    members: Vec<usize>,
    seq: Vec<Loc>,
}

/// The best pattern of `a` and `b`: `(order, likelihood, enumerated)`.
fn best_pattern(
    cfg: &MergeConfig,
    originals: &[Vec<Loc>],
    a: &[usize],
    b: &[usize],
) -> Result<(Vec<usize>, i64, bool), MergeError> {
    let patterns = pattern_count(a.len(), b.len());
    let enumerate = match cfg.method {
        Method::Enumerate => true,
        Method::Dp => false,
        Method::Auto => patterns <= cfg.enumeration_limit,
    };
    if !enumerate {
        let (order, lik) =
            best_shuffle(&cfg.scores.likelihood, originals, a, b, cfg.max_dp_states)?;
        return Ok((order, lik, false));
    }
    if patterns > ENUMERATION_CAP {
        return Err(MergeError::TooManyPatterns {
            a: a.len(),
            b: b.len(),
            patterns,
        });
    }
    let mut best: Option<(Vec<usize>, i64)> = None;
    for_each_shuffle(a, b, |z| {
        let lik = likelihood(&cfg.scores.likelihood, &round_robin(z, originals));
        if best.as_ref().is_none_or(|(_, l)| lik > *l) {
            best = Some((z.to_vec(), lik));
        }
        true
    });
    let (order, lik) = best.unwrap_or_default();
    Ok((order, lik, true))
}

/// A candidate pair: `(similarity, i, j)`.
type Candidate = (i64, usize, usize);

/// A tried pair: `(pattern, likelihood, enumerated, rank)`.
type Tried = (Vec<usize>, i64, bool, i64);

/// Best partner of each row: `(similarity, slot)` over alive slots after the row's.
type RowBest = Option<(i64, usize)>;

struct State<'a> {
    cfg: &'a MergeConfig,
    originals: &'a [Vec<Loc>],
    groups: Vec<Option<Group>>,
    alive: Vec<usize>,
    /// [`GroupSimilarity::Linkage`]: the group-by-group similarity matrix, by slot.
    linkage: Vec<i64>,
}

impl State<'_> {
    fn sim(&self, i: usize, j: usize) -> i64 {
        let (Some(a), Some(b)) = (&self.groups[i], &self.groups[j]) else {
            return i64::MIN;
        };
        match self.cfg.group_similarity {
            GroupSimilarity::Literal => similarity(&self.cfg.scores.similarity, &a.seq, &b.seq),
            GroupSimilarity::Linkage => self.linkage[i * self.originals.len() + j],
        }
    }

    fn row_best(&self, i: usize) -> RowBest {
        let mut best: RowBest = None;
        for &j in self.alive.iter().filter(|&&j| j > i) {
            let s = self.sim(i, j);
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, j));
            }
        }
        best
    }

    fn members(&self, slot: usize) -> &[usize] {
        self.groups[slot].as_ref().map_or(&[], |g| &g.members)
    }

    /// Tries pair `(i, j)`.
    fn try_pair(&self, i: usize, j: usize) -> Result<Tried, MergeError> {
        let (order, lik, enumerated) =
            best_pattern(self.cfg, self.originals, self.members(i), self.members(j))?;
        let rank = match self.cfg.ranking {
            Ranking::Raw => lik,
            Ranking::Gain => {
                let own = |s: usize| {
                    self.groups[s]
                        .as_ref()
                        .map_or(0, |g| likelihood(&self.cfg.scores.likelihood, &g.seq))
                };
                lik - own(i) - own(j)
            }
        };
        Ok((order, lik, enumerated, rank))
    }

    /// Replaces the pair by its best pattern and describes the step.
    fn commit(&mut self, (similarity, i, j): Candidate, tried: Tried) -> MergeStep {
        let (order, likelihood, enumerated, _) = tried;
        let sizes = (self.members(i).len(), self.members(j).len());
        self.apply(i, j, order);
        MergeStep {
            first: i,
            second: j,
            sizes,
            similarity,
            patterns: pattern_count(sizes.0, sizes.1),
            enumerated,
            likelihood,
        }
    }

    fn apply(&mut self, i: usize, j: usize, order: Vec<usize>) {
        let seq = round_robin(&order, self.originals);
        self.groups[i] = Some(Group {
            members: order,
            seq,
        });
        self.groups[j] = None;
        self.alive.retain(|&s| s != j);
        if self.cfg.group_similarity == GroupSimilarity::Linkage {
            let n = self.originals.len();
            for &x in &self.alive {
                let v = self.linkage[i * n + x].max(self.linkage[j * n + x]);
                self.linkage[i * n + x] = v;
                self.linkage[x * n + i] = v;
            }
        }
    }
}

/// Merges the original partial sequences into one order (seed S103–S113).
pub fn merge(originals: &[Vec<Loc>], cfg: &MergeConfig) -> Result<Merged, MergeError> {
    let mut st = State {
        cfg,
        originals,
        groups: originals
            .iter()
            .enumerate()
            .map(|(i, o)| {
                (!o.is_empty()).then(|| Group {
                    members: vec![i],
                    seq: o.clone(),
                })
            })
            .collect(),
        alive: (0..originals.len())
            .filter(|&i| !originals[i].is_empty())
            .collect(),
        linkage: Vec::new(),
    };
    if cfg.group_similarity == GroupSimilarity::Linkage {
        let n = originals.len();
        st.linkage = vec![i64::MIN; n * n];
        for (x, &i) in st.alive.iter().enumerate() {
            for &j in &st.alive[x + 1..] {
                let v = similarity(&cfg.scores.similarity, &originals[i], &originals[j]);
                st.linkage[i * n + j] = v;
                st.linkage[j * n + i] = v;
            }
        }
    }
    let mut steps = Vec::new();
    if cfg.top_k <= 1 {
        let mut rows: HashMap<usize, RowBest> =
            st.alive.iter().map(|&i| (i, st.row_best(i))).collect();
        while st.alive.len() > 1 {
            // The first maximum in (i < j) order.
            let mut pick: Option<(i64, usize, usize)> = None;
            for &i in &st.alive {
                if let Some(Some((s, j))) = rows.get(&i)
                    && pick.is_none_or(|(b, _, _)| *s > b)
                {
                    pick = Some((*s, i, *j));
                }
            }
            let Some((similarity, i, j)) = pick else {
                break;
            };
            let tried = st.try_pair(i, j)?;
            steps.push(st.commit((similarity, i, j), tried));
            rows.remove(&j);
            rows.insert(i, st.row_best(i));
            for &s in st.alive.clone().iter().filter(|&&s| s != i) {
                let cur = rows.get(&s).copied().flatten();
                let stale = cur.is_some_and(|(_, t)| t == i || t == j);
                let new = if stale {
                    st.row_best(s)
                } else if s < i {
                    let v = st.sim(s, i);
                    match cur {
                        Some((b, t)) if v < b || (v == b && t < i) => cur,
                        _ => Some((v, i)),
                    }
                } else {
                    cur
                };
                rows.insert(s, new);
            }
        }
    } else {
        while st.alive.len() > 1 {
            let mut pairs: Vec<(i64, usize, usize)> = Vec::new();
            for (x, &i) in st.alive.iter().enumerate() {
                for &j in &st.alive[x + 1..] {
                    pairs.push((st.sim(i, j), i, j));
                }
            }
            // Descending similarity, then (i, j) ascending; stable sort keeps that order.
            pairs.sort_by_key(|p| std::cmp::Reverse(p.0));
            let mut best: Option<(Candidate, Tried)> = None;
            for &pair in pairs.iter().take(cfg.top_k) {
                let tried = st.try_pair(pair.1, pair.2)?;
                if best.as_ref().is_none_or(|b| tried.3 > b.1.3) {
                    best = Some((pair, tried));
                }
            }
            let Some((pair, tried)) = best else {
                break;
            };
            steps.push(st.commit(pair, tried));
        }
    }
    let order = st
        .alive
        .first()
        .map(|&s| st.members(s).to_vec())
        .unwrap_or_default();
    Ok(Merged { order, steps })
}
