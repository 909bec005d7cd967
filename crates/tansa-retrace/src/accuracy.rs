//! How close a rebuilt trace is to the true one.
//!
//! * LCS ratio: `LCS(rebuilt, truth) / max(|rebuilt|, |truth|)`, 1 for identical traces, 0
//!   when nothing matches; extra and missing instructions both lower it.
//! * Normalised edit distance: `Levenshtein(rebuilt, truth) / max(|rebuilt|, |truth|)`, 0
//!   for identical traces, at most 1.
//!
//! Both are computed after folding runs of the same instruction into one (a time-weighted
//! trace repeats an instruction in proportion to its time; a single-stepped `rep`
//! instruction repeats once per iteration), so they measure the *path*.

use serde::{Deserialize, Serialize};

/// Accuracy of a rebuilt trace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// `LCS / max(len)`, in `[0, 1]`, higher is better.
    pub lcs_ratio: f64,
    /// `Levenshtein / max(len)`, in `[0, 1]`, lower is better.
    pub edit_distance: f64,
    /// Length of the rebuilt path (after folding repeats).
    pub rebuilt_len: usize,
    /// Length of the true path (after folding repeats).
    pub truth_len: usize,
}

/// Removes consecutive repeats: `a a b b b a` becomes `a b a`.
pub fn fold_repeats<T: PartialEq + Copy>(seq: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(seq.len());
    for &x in seq {
        if out.last() != Some(&x) {
            out.push(x);
        }
    }
    out
}

/// Length of the longest common subsequence (`O(|a| · |b|)` time, `O(|b|)` memory).
pub fn lcs_len<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row = vec![0u32; b.len() + 1];
    for x in a {
        let mut diag = 0u32;
        for (j, y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
            diag = up;
        }
    }
    row[b.len()] as usize
}

/// Levenshtein distance (insertions, deletions, substitutions of cost 1).
pub fn edit_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row: Vec<u32> = (0..=b.len() as u32).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i as u32 + 1;
        for (j, y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y {
                diag
            } else {
                1 + diag.min(up).min(row[j])
            };
            diag = up;
        }
    }
    row[b.len()] as usize
}

/// The accuracy of `rebuilt` against `truth`.
pub fn accuracy<T: PartialEq + Copy>(rebuilt: &[T], truth: &[T]) -> Accuracy {
    let (r, t) = (fold_repeats(rebuilt), fold_repeats(truth));
    let longest = r.len().max(t.len());
    if longest == 0 {
        return Accuracy {
            lcs_ratio: 1.0,
            edit_distance: 0.0,
            rebuilt_len: 0,
            truth_len: 0,
        };
    }
    Accuracy {
        lcs_ratio: lcs_len(&r, &t) as f64 / longest as f64,
        edit_distance: edit_distance(&r, &t) as f64 / longest as f64,
        rebuilt_len: r.len(),
        truth_len: t.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_values() {
        assert_eq!(lcs_len(b"ABCBDAB", b"BDCABA"), 4);
        assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
        assert_eq!(edit_distance(b"", b"abc"), 3);
        assert_eq!(fold_repeats(&[1, 1, 2, 2, 2, 1]), vec![1, 2, 1]);
        let a = accuracy(&[1, 2, 3, 4], &[1, 2, 3, 4]);
        assert_eq!((a.lcs_ratio, a.edit_distance), (1.0, 0.0));
        let a = accuracy(&[1, 2, 3, 4], &[1, 3, 2, 4]);
        assert_eq!((a.lcs_ratio, a.edit_distance), (0.75, 0.5));
        let a = accuracy(&[1, 1, 2, 2, 3], &[1, 2, 3, 4]);
        assert_eq!(
            (a.lcs_ratio, a.edit_distance, a.rebuilt_len),
            (0.75, 0.25, 3)
        );
    }
}
