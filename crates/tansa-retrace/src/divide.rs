//! Division (seed unit 112, S102): cutting the stream of samples into one partial sequence
//! per execution of the region.
//!
//! Recorders usually know where each execution starts (a breakpoint on the region's entry,
//! seed ¶0040 "head function" / "marker"), and store samples already divided. When only the
//! region's instruction count `T` is known, [`divide_by_count`] applies the seed's `T/P`
//! rule exactly: sample `k` was taken at instruction `g = c₀ + k·P` of the concatenated
//! executions, so it belongs to execution `⌊g / T⌋`.

/// Divides `samples` taken every `period` instructions, the first at instruction `first`
/// (c₀), of executions `len` instructions long. Returns one partial per execution, empty
/// ones included (an execution shorter than the period may get no sample).
pub fn divide_by_count<T: Copy>(samples: &[T], len: u64, period: u64, first: u64) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    if len == 0 || period == 0 {
        return out;
    }
    for (k, &s) in samples.iter().enumerate() {
        let g = first + k as u64 * period;
        let r = (g / len) as usize;
        if out.len() <= r {
            out.resize_with(r + 1, Vec::new);
        }
        out[r].push(s);
    }
    out
}

/// Divides `samples` at every sample for which `is_entry` holds (a marker: the region's
/// entry instruction or a dedicated marker function). Samples before the first marker are
/// dropped: they belong to no complete execution.
pub fn divide_at_markers<T: Copy>(samples: &[T], is_entry: impl Fn(&T) -> bool) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    for &s in samples {
        if is_entry(&s) {
            out.push(Vec::new());
        }
        if let Some(cur) = out.last_mut() {
            cur.push(s);
        }
    }
    out
}

/// The samples an exact every-`period`-th-instruction sampler takes from `executions`
/// repetitions of `trace`, the first at instruction `first` (c₀). This is the seed's
/// sampling model (¶0021); tests and benchmarks use it to make sampling data.
pub fn periodic_samples<T: Copy>(trace: &[T], executions: u64, period: u64, first: u64) -> Vec<T> {
    let total = trace.len() as u64 * executions;
    if trace.is_empty() || period == 0 {
        return Vec::new();
    }
    (first..total)
        .step_by(period as usize)
        .map(|g| trace[(g % trace.len() as u64) as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_rule_matches_the_phase_model() {
        let trace: Vec<u32> = (0..50).collect();
        let samples = periodic_samples(&trace, 7, 7, 0);
        assert_eq!(samples.len(), 50);
        let parts = divide_by_count(&samples, 50, 7, 0);
        assert_eq!(parts.len(), 7);
        assert_eq!(parts[0], vec![0, 7, 14, 21, 28, 35, 42, 49]);
        assert_eq!(parts[1], vec![6, 13, 20, 27, 34, 41, 48]);
        assert_eq!(parts[6], vec![1, 8, 15, 22, 29, 36, 43]);
    }

    #[test]
    fn markers() {
        let s = [9, 0, 1, 2, 0, 3, 0];
        assert_eq!(
            divide_at_markers(&s, |&x| x == 0),
            vec![vec![0, 1, 2], vec![0, 3], vec![0]]
        );
    }
}
