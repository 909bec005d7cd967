//! The score tables (the seed's similarity score data 124/224 and likelihood score data
//! 125/225), explicit and configurable.
//!
//! A [`Table`] scores one ordered pair of annotated instructions `(x, y)`:
//!
//! * function variant ([`Table::Function`], seed Figs. 9/10, S201–S211 and S301–S310):
//!   `name_mismatch` if the functions differ, otherwise
//!   `name_match + offset(index(y) − index(x))`;
//! * basic-block variant ([`Table::Block`], seed Figs. 17/18, S501–S516 and S601–S615):
//!   `name_mismatch` if the functions differ; `name_match + block_diff(block(y) − block(x))`
//!   if the blocks differ; otherwise
//!   `name_match + block_match + block_offset(offset(y) − offset(x))`.
//!
//! Differences are always *later minus earlier* (`y − x`); a [`DiffTable`] with `absolute`
//! set looks up `|d|`. The seed gives only the name scores and the shape of each table; the
//! remaining entries are the spec's recommended defaults ([`Scores::function`],
//! [`Scores::block`], [`Scores::function_time_weighted`], [`Scores::block_time_weighted`]).
//! Tables serialize with serde, so a user can supply their own as JSON.

use serde::{Deserialize, Serialize};

use crate::model::Loc;

/// Points by difference: `points` lists `(difference, score)`; any other difference scores
/// `default`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffTable {
    /// Look up `|d|` instead of `d`.
    pub absolute: bool,
    /// `(difference, score)` pairs.
    pub points: Vec<(i64, i64)>,
    /// Score of a difference not listed.
    pub default: i64,
}

impl DiffTable {
    /// A table over `|d|` with the given points and default 0.
    pub fn absolute(points: &[(i64, i64)]) -> Self {
        DiffTable {
            absolute: true,
            points: points.to_vec(),
            default: 0,
        }
    }

    /// A signed table with the given points and default 0.
    pub fn signed(points: &[(i64, i64)]) -> Self {
        DiffTable {
            absolute: false,
            points: points.to_vec(),
            default: 0,
        }
    }

    /// The score of difference `d`.
    #[inline]
    pub fn get(&self, d: i64) -> i64 {
        let k = if self.absolute { d.abs() } else { d };
        self.points
            .iter()
            .find(|&&(p, _)| p == k)
            .map_or(self.default, |&(_, s)| s)
    }
}

/// One score table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "variant", rename_all = "kebab-case")]
pub enum Table {
    /// Function name and instruction index within the function (seed embodiment 1).
    Function {
        /// Score when the function names match.
        name_match: i64,
        /// Score when they differ (also for unknown code).
        name_mismatch: i64,
        /// Added on a name match, by instruction-index difference.
        offset: DiffTable,
    },
    /// Function name, basic-block number and offset within the block (seed embodiment 2).
    Block {
        /// Score when the function names match.
        name_match: i64,
        /// Score when they differ (also for unknown code).
        name_mismatch: i64,
        /// Added on a name match when the blocks differ, by block-number difference.
        block_diff: DiffTable,
        /// Added when the blocks are the same.
        block_match: i64,
        /// Added when the blocks are the same, by in-block offset difference.
        block_offset: DiffTable,
    },
}

impl Table {
    /// The score of the ordered pair `(x, y)` (`y` is the later one).
    #[inline]
    pub fn pair(&self, x: &Loc, y: &Loc) -> i64 {
        match self {
            Table::Function {
                name_match,
                name_mismatch,
                offset,
            } => {
                if !x.same_function(y) {
                    *name_mismatch
                } else {
                    name_match + offset.get(i64::from(y.index) - i64::from(x.index))
                }
            }
            Table::Block {
                name_match,
                name_mismatch,
                block_diff,
                block_match,
                block_offset,
            } => {
                if !x.same_function(y) {
                    *name_mismatch
                } else if x.block != y.block {
                    name_match + block_diff.get(i64::from(y.block) - i64::from(x.block))
                } else {
                    name_match
                        + block_match
                        + block_offset.get(i64::from(y.block_offset) - i64::from(x.block_offset))
                }
            }
        }
    }

    /// Which annotation this table reads.
    pub fn variant(&self) -> Variant {
        match self {
            Table::Function { .. } => Variant::Function,
            Table::Block { .. } => Variant::Block,
        }
    }
}

/// Which instruction annotation the scores use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Function + instruction index (seed embodiment 1).
    Function,
    /// Function + basic-block number + offset in block (seed embodiment 2).
    Block,
}

/// The two tables the merge uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scores {
    /// Scores a pair of partial sequences position by position (which pair to merge).
    pub similarity: Table,
    /// Scores consecutive instructions of a candidate order (which interleaving to keep).
    pub likelihood: Table,
}

/// Signed likelihood table `G(d) = max(0, top + 1 − d)` for `d ≥ 1`, 0 otherwise.
fn descending_from_one(top: i64) -> DiffTable {
    DiffTable::signed(&(1..=top).map(|d| (d, top + 1 - d)).collect::<Vec<_>>())
}

impl Scores {
    /// Function variant, the spec's defaults: names 10/0; similarity `F(|d|)` =
    /// {0: 4, 1: 10, 2: 6, 3: 4, 4: 2, else 0}; likelihood `G(d)` = `max(0, 11 − d)` for
    /// `d ≥ 1`, else 0.
    pub fn function() -> Self {
        Scores {
            similarity: Table::Function {
                name_match: 10,
                name_mismatch: 0,
                offset: DiffTable::absolute(&[(0, 4), (1, 10), (2, 6), (3, 4), (4, 2)]),
            },
            likelihood: Table::Function {
                name_match: 10,
                name_mismatch: 0,
                offset: descending_from_one(10),
            },
        }
    }

    /// Basic-block variant, the spec's defaults: names 5/0; block difference
    /// `H(|Δb|)` = {1: 3, 2: 1, else 0}; block match 5; similarity in-block offset
    /// `F₂(|Δq|)` = {0: 2, 1: 5, 2: 3, 3: 2, 4: 1, else 0}; likelihood in-block offset
    /// `G₂(Δq)` = `max(0, 6 − Δq)` for `Δq ≥ 1`, else 0.
    pub fn block() -> Self {
        let block_diff = DiffTable::absolute(&[(1, 3), (2, 1)]);
        Scores {
            similarity: Table::Block {
                name_match: 5,
                name_mismatch: 0,
                block_diff: block_diff.clone(),
                block_match: 5,
                block_offset: DiffTable::absolute(&[(0, 2), (1, 5), (2, 3), (3, 2), (4, 1)]),
            },
            likelihood: Table::Block {
                name_match: 5,
                name_mismatch: 0,
                block_diff,
                block_match: 5,
                block_offset: descending_from_one(5),
            },
        }
    }

    /// Function variant for time-based samples (seed section 6, ¶0070: both tables peak at
    /// difference 0): similarity `F(|d|)` = {0: 10, 1: 8, 2: 4, else 0}; likelihood `G(d)`
    /// = {0: 10, 1: 8, 2: 5, 3: 3, else 0} (negative `d` scores 0).
    pub fn function_time_weighted() -> Self {
        Scores {
            similarity: Table::Function {
                name_match: 10,
                name_mismatch: 0,
                offset: DiffTable::absolute(&[(0, 10), (1, 8), (2, 4)]),
            },
            likelihood: Table::Function {
                name_match: 10,
                name_mismatch: 0,
                offset: DiffTable::signed(&[(0, 10), (1, 8), (2, 5), (3, 3)]),
            },
        }
    }

    /// Basic-block variant for time-based samples: the block defaults with the in-block
    /// offset tables peaking at 0 — similarity {0: 5, 1: 4, 2: 2, else 0}, likelihood
    /// {0: 5, 1: 4, 2: 3, 3: 2, else 0}.
    pub fn block_time_weighted() -> Self {
        let block_diff = DiffTable::absolute(&[(1, 3), (2, 1)]);
        Scores {
            similarity: Table::Block {
                name_match: 5,
                name_mismatch: 0,
                block_diff: block_diff.clone(),
                block_match: 5,
                block_offset: DiffTable::absolute(&[(0, 5), (1, 4), (2, 2)]),
            },
            likelihood: Table::Block {
                name_match: 5,
                name_mismatch: 0,
                block_diff,
                block_match: 5,
                block_offset: DiffTable::signed(&[(0, 5), (1, 4), (2, 3), (3, 2)]),
            },
        }
    }

    /// The defaults for a variant, for count-based (`time_weighted == false`) or time-based
    /// samples.
    pub fn defaults(variant: Variant, time_weighted: bool) -> Self {
        match (variant, time_weighted) {
            (Variant::Function, false) => Scores::function(),
            (Variant::Function, true) => Scores::function_time_weighted(),
            (Variant::Block, false) => Scores::block(),
            (Variant::Block, true) => Scores::block_time_weighted(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(function: u32, index: u32) -> Loc {
        Loc::in_function(function, index)
    }

    #[test]
    fn function_tables_follow_the_spec() {
        let s = Scores::function();
        // Similarity peaks at |d| = 1, identical instructions score less (¶0024–0026).
        assert_eq!(s.similarity.pair(&f(0, 0), &f(0, 1)), 20);
        assert_eq!(s.similarity.pair(&f(0, 1), &f(0, 0)), 20);
        assert_eq!(s.similarity.pair(&f(0, 0), &f(0, 0)), 14);
        assert_eq!(s.similarity.pair(&f(0, 0), &f(1, 0)), 0);
        // Likelihood: ascending by 1 is best, descending scores only the name match.
        assert_eq!(s.likelihood.pair(&f(0, 3), &f(0, 4)), 20);
        assert_eq!(s.likelihood.pair(&f(0, 3), &f(0, 5)), 19);
        assert_eq!(s.likelihood.pair(&f(0, 4), &f(0, 3)), 10);
        assert_eq!(s.likelihood.pair(&f(0, 0), &f(0, 11)), 10);
        let tw = Scores::function_time_weighted();
        assert!(tw.similarity.pair(&f(0, 2), &f(0, 2)) > tw.similarity.pair(&f(0, 2), &f(0, 3)));
        assert!(tw.likelihood.pair(&f(0, 2), &f(0, 2)) > tw.likelihood.pair(&f(0, 2), &f(0, 3)));
    }

    #[test]
    fn block_tables_follow_the_spec() {
        let s = Scores::block();
        let b = |function, block, off| Loc::in_block(function, 0, block, off);
        assert_eq!(s.similarity.pair(&b(0, 1, 0), &b(0, 1, 1)), 15);
        assert_eq!(s.similarity.pair(&b(0, 1, 3), &b(0, 2, 0)), 8);
        assert_eq!(s.likelihood.pair(&b(0, 2, 0), &b(0, 2, 1)), 15);
        assert_eq!(s.likelihood.pair(&b(0, 2, 1), &b(0, 2, 0)), 10);
        assert_eq!(s.likelihood.pair(&b(0, 2, 0), &b(0, 1, 0)), 8);
        assert_eq!(s.likelihood.pair(&b(0, 2, 0), &b(1, 2, 0)), 0);
    }

    #[test]
    fn tables_round_trip_through_json() {
        for s in [
            Scores::function(),
            Scores::block(),
            Scores::block_time_weighted(),
        ] {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Scores>(&json).unwrap(), s);
        }
    }
}
