//! The trace range end (spec §11): the innermost function common to the allocation stack
//! and every free stack of a site.

/// The index, in the root-first allocation stack `alloc` (functions, the allocating
/// function last), of the innermost common caller: the deepest frame of the longest
/// root-first prefix shared by `alloc` and every stack of `frees`. `None` when even the
/// outermost frames differ (or a stack is empty).
pub fn range_end<F: PartialEq>(alloc: &[F], frees: &[&[F]]) -> Option<usize> {
    let mut n = alloc.len();
    for f in frees {
        n = n.min(
            alloc
                .iter()
                .zip(f.iter())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    n.checked_sub(1)
}

/// The range end one caller up (spec §12.2), as a depth above the allocating function:
/// `None` when the range already ends at the outermost frame.
pub fn move_up(depth: u32, alloc_len: usize) -> Option<u32> {
    ((depth as usize) + 1 < alloc_len).then_some(depth + 1)
}

/// The depth above the allocating function (0: the allocating function itself) of the
/// frame at `index` of a root-first stack of `len` frames.
pub fn depth_of(index: usize, len: usize) -> u32 {
    (len - 1 - index) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_of_spec_11_1_ends_at_func_a() {
        let alloc = ["main", "funcA"];
        let free_in_sub1 = ["main", "funcA", "funcB", "sub1"];
        let free_in_func_b = ["main", "funcA", "funcB"];
        let end = range_end(&alloc, &[&free_in_sub1[..], &free_in_func_b[..]]).unwrap();
        assert_eq!(alloc[end], "funcA");
        assert_eq!(depth_of(end, alloc.len()), 0);
        assert_eq!(move_up(0, alloc.len()), Some(1));
        assert_eq!(move_up(1, alloc.len()), None);
    }

    #[test]
    fn edge_cases() {
        let alloc = ["main", "a", "b"];
        // A free in a sibling branch of the call tree.
        assert_eq!(range_end(&alloc, &[&["main", "c"][..]]), Some(0));
        // Nothing in common.
        assert_eq!(range_end(&alloc, &[&["other"][..]]), None);
        // Freed by the allocating function itself.
        assert_eq!(range_end(&alloc, &[&alloc[..]]), Some(2));
        // No free stack yet: the allocating function.
        assert_eq!(range_end(&alloc, &[]), Some(2));
        // Recursion: the common prefix stops at the first difference.
        assert_eq!(
            range_end(&["m", "r", "r", "x"], &[&["m", "r", "y"][..]]),
            Some(1)
        );
    }
}
