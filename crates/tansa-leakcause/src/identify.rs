//! Where the leaking paths part from the freeing ones: cause functions (spec §13, Fig. 11)
//! and cause branches (spec §18), with the split of branch traces into single executions of
//! each cause function (spec §16, steps 1401–1402).
//!
//! Steps of an E path are matched with steps of the F paths **in their call context**
//! (the functions open around them on the path, and how far the path had returned above
//! the function it started in): a call of `memset` inside a helper that only the leaking
//! path runs is not the `memset` both paths ran before they parted. Matching by symbol
//! alone named that helper as the cause. Conditional branches take part in the match too
//! (a branch is one symbol whether it jumped or not): a leaking path that parts from the
//! freeing ones at a branch of a function it called, before any further call (an error
//! check that throws), is traced to that function, not to its caller.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::sequitur::End;

/// One event of a function trace (spec §7.3: function and kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event<F> {
    /// `F-S`: the function was entered.
    Enter(F),
    /// `F-E`: the function returned.
    Exit(F),
}

/// One step of a full trace: a function event, or a conditional branch (its instruction,
/// and whether it jumped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step<F, B> {
    /// A function entry or exit.
    Call(Event<F>),
    /// A conditional branch.
    Branch(B, bool),
}

/// The function in which step `i` of `path` happened (spec §13, step 1106): for an exit,
/// the function that called the one returning; for an entry, its caller; for a branch, the
/// function holding it. Walking back, a balanced `Y-S … Y-E` is skipped; the first
/// unmatched entry is the answer. A walk that reaches the start of the trace lands in the
/// allocating function, or as many callers above it (in `alloc`, root first, the
/// allocating function last) as the trace has exits of functions it never entered.
pub fn enclosing<F: Clone + PartialEq, B>(path: &[Step<F, B>], i: usize, alloc: &[F]) -> Option<F> {
    let mut depth: i64 = match path.get(i) {
        Some(Step::Call(Event::Exit(_))) => 1,
        _ => 0,
    };
    for s in path[..i].iter().rev() {
        match s {
            Step::Call(Event::Exit(_)) => depth += 1,
            Step::Call(Event::Enter(f)) if depth == 0 => return Some(f.clone()),
            Step::Call(Event::Enter(_)) => depth -= 1,
            Step::Branch(..) => {}
        }
    }
    // Back at the start: in the allocating function, or `depth` callers above it (each
    // exit left unmatched returned from a function the trace started in).
    let up = depth.max(0) as usize;
    alloc.len().checked_sub(1 + up).map(|k| alloc[k].clone())
}

/// A call context: the path returned `n` functions above the one it started in
/// (`Returned(0)`: still in it), or it called `F` from the context `u32`.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Context<F> {
    Returned(usize),
    Called(u32, F),
}

/// A step as the alignment compares it: a branch without its direction.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Symbol<F, B> {
    Enter(F),
    Exit(F),
    Branch(B),
}

/// Call contexts numbered as they are met, the same over every path of a site.
#[derive(Debug)]
struct Contexts<F> {
    ids: HashMap<Context<F>, u32>,
}

impl<F: Clone + Eq + Hash> Contexts<F> {
    fn new() -> Self {
        Contexts {
            ids: HashMap::new(),
        }
    }

    fn id(&mut self, c: Context<F>) -> u32 {
        let next = u32::try_from(self.ids.len()).unwrap_or(u32::MAX);
        *self.ids.entry(c).or_insert(next)
    }

    /// Each step of `path` with the context it ran in: for an entry, the caller's; for an
    /// exit, the context returned to; for a branch, its function's.
    fn place<B: Clone>(&mut self, path: &[Step<F, B>]) -> Vec<(u32, Symbol<F, B>)> {
        let mut unwound = 0;
        let mut base = self.id(Context::Returned(0));
        // The contexts of the functions entered on the path and not exited yet.
        let mut open: Vec<u32> = Vec::new();
        let mut out = Vec::with_capacity(path.len());
        for s in path {
            let here = open.last().copied().unwrap_or(base);
            out.push(match s {
                Step::Call(Event::Enter(f)) => {
                    open.push(self.id(Context::Called(here, f.clone())));
                    (here, Symbol::Enter(f.clone()))
                }
                Step::Call(Event::Exit(f)) => {
                    if open.pop().is_none() {
                        unwound += 1;
                        base = self.id(Context::Returned(unwound));
                    }
                    (
                        open.last().copied().unwrap_or(base),
                        Symbol::Exit(f.clone()),
                    )
                }
                Step::Branch(b, _) => (here, Symbol::Branch(b.clone())),
            });
        }
        out
    }
}

/// Fig. 11 over full paths: for each E path (its index in `paths`), walking back from the
/// step before its end, the last step that also runs, in the same call context, on some F
/// path (`None`: no step does).
fn parting_points<F: Clone + Eq + Hash, B: Clone + Eq + Hash>(
    paths: &[(Vec<Step<F, B>>, End)],
) -> Vec<(usize, Option<usize>)> {
    let mut contexts = Contexts::new();
    let mut freed = HashSet::new();
    for (p, _) in paths.iter().filter(|(_, e)| *e == End::Freed) {
        freed.extend(contexts.place(p));
    }
    paths
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| *e == End::NotFreed)
        .map(|(k, (p, _))| {
            let placed = contexts.place(p);
            (k, placed.iter().rposition(|s| freed.contains(s)))
        })
        .collect()
}

/// The cause functions of a site (spec §13) from its paths; `alloc` is the allocation
/// stack's functions, root first. For each E path, the function holding its last step
/// shared with an F path (see [`parting_points`]); an E path none of whose steps runs on
/// an F path points at the allocating function. Results are listed once each, in the
/// order found.
pub fn cause_functions<F: Clone + Eq + Hash, B: Clone + Eq + Hash>(
    paths: &[(Vec<Step<F, B>>, End)],
    alloc: &[F],
) -> Vec<F> {
    let points = parting_points(paths);
    let mut out = Vec::new();
    for &(k, at) in &points {
        if let Some(i) = at
            && let Some(f) = enclosing(&paths[k].0, i, alloc)
            && !out.contains(&f)
        {
            out.push(f);
        }
    }
    if points.iter().any(|(_, at)| at.is_none())
        && let Some(f) = alloc.last()
        && !out.contains(f)
    {
        out.push(f.clone());
    }
    out
}

/// A cause branch: the branch, and whether it jumped on the leaking path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CauseBranch<B> {
    /// The branch instruction.
    pub branch: B,
    /// Whether it was taken on the leaking (E) path.
    pub taken_on_leak: bool,
}

/// The cause branches (spec §18) from branch paths: each step is a branch and whether it
/// jumped; the symbol compared is the branch alone, so a branch matches on both paths
/// whether taken or not.
pub fn cause_branches<B: Clone + PartialEq>(
    paths: &[(Vec<(B, bool)>, End)],
) -> Vec<CauseBranch<B>> {
    let freed: Vec<&Vec<(B, bool)>> = paths
        .iter()
        .filter(|(_, e)| *e == End::Freed)
        .map(|(p, _)| p)
        .collect();
    let mut out: Vec<CauseBranch<B>> = Vec::new();
    for (p, _) in paths.iter().filter(|(_, e)| *e == End::NotFreed) {
        let Some((b, taken)) = p
            .iter()
            .rev()
            .find(|(b, _)| freed.iter().any(|q| q.iter().rev().any(|s| s.0 == *b)))
        else {
            continue;
        };
        if !out.iter().any(|o| o.branch == *b) {
            out.push(CauseBranch {
                branch: b.clone(),
                taken_on_leak: *taken,
            });
        }
    }
    out
}

/// The branch paths of function `f` in one full trace (spec §16): one path per execution
/// of `f` (from its entry to its exit, or the part of the activation the trace starts in),
/// holding the branches run directly in it (not in the functions it calls), each ending as
/// the trace ended.
///
/// `start_depth` is where the trace starts relative to an activation of `f`: `Some(0)` in
/// `f` itself (the allocating function), `Some(d)` `d` calls below it (`f` is the
/// allocating function's caller's caller for 2: an allocation made through a wrapper, as
/// C++'s `operator new` is, starts its trace in the wrapper, and the cause is often in
/// the caller), `None` outside any activation of `f`. The trace returns from each of those
/// `d` calls with an exit (see [`enclosing`]).
pub fn branch_paths_of<F: PartialEq, B: Clone>(
    trace: &[Step<F, B>],
    f: &F,
    start_depth: Option<usize>,
) -> Vec<Vec<(B, bool)>> {
    let mut out = Vec::new();
    // Depth relative to the current execution of `f` (0: directly in it), if inside one.
    let mut current: Option<(Vec<(B, bool)>, i64)> =
        start_depth.map(|d| (Vec::new(), i64::try_from(d).unwrap_or(i64::MAX)));
    for s in trace {
        match s {
            Step::Call(Event::Enter(g)) => match &mut current {
                Some((_, d)) => *d += 1,
                None if g == f => current = Some((Vec::new(), 0)),
                None => {}
            },
            Step::Call(Event::Exit(_)) => {
                if let Some((branches, d)) = &mut current {
                    if *d == 0 {
                        out.push(std::mem::take(branches));
                        current = None;
                    } else {
                        *d -= 1;
                    }
                }
            }
            Step::Branch(b, taken) => {
                if let Some((branches, 0)) = &mut current {
                    branches.push((b.clone(), *taken));
                }
            }
        }
    }
    if let Some((branches, _)) = current {
        out.push(branches);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::{Enter, Exit};

    /// A path from its text: `f-S`, `f-E`, a branch `@b` (taken) or `@b~` (not taken),
    /// then `F` or `E`.
    fn p(s: &str) -> (Vec<Step<&str, &str>>, End) {
        let mut v = Vec::new();
        let mut end = End::Freed;
        for w in s.split(' ') {
            match w {
                "F" => end = End::Freed,
                "E" => end = End::NotFreed,
                _ if w.starts_with('@') => {
                    let b = &w[1..];
                    v.push(match b.strip_suffix('~') {
                        Some(b) => Step::Branch(b, false),
                        None => Step::Branch(b, true),
                    });
                }
                _ => {
                    let (f, k) = w.rsplit_once('-').unwrap();
                    v.push(Step::Call(if k == "S" { Enter(f) } else { Exit(f) }));
                }
            }
        }
        (v, end)
    }

    #[test]
    fn the_cause_function_of_spec_19_is_func_b() {
        let paths = [
            p("funcB-S sub2-S sub2-E F"),
            p("funcB-S sub1-S F"),
            p("funcB-S sub2-S sub2-E funcB-E E"),
        ];
        assert_eq!(cause_functions(&paths, &["main", "funcA"]), vec!["funcB"]);
        // With the range-end trap after funcA's exit record (spec §19): the same answer.
        let paths = [
            p("funcB-S sub2-S sub2-E F"),
            p("funcB-S sub1-S F"),
            p("funcB-S sub2-S sub2-E funcB-E funcA-E E"),
        ];
        assert_eq!(cause_functions(&paths, &["main", "funcA"]), vec!["funcB"]);
    }

    #[test]
    fn enclosing_functions() {
        let (t, _) = p("funcB-S sub2-S sub2-E funcB-E funcA-E E");
        let alloc = ["main", "funcA"];
        assert_eq!(enclosing(&t, 2, &alloc), Some("funcB"), "sub2-E in funcB");
        assert_eq!(enclosing(&t, 1, &alloc), Some("funcB"), "sub2-S in funcB");
        assert_eq!(
            enclosing(&t, 0, &alloc),
            Some("funcA"),
            "funcB-S in the allocating function"
        );
        assert_eq!(enclosing(&t, 3, &alloc), Some("funcA"), "funcB-E in funcA");
        assert_eq!(
            enclosing(&t, 4, &alloc),
            Some("main"),
            "funcA-E in its caller"
        );
        // No event in common: the allocating function.
        let paths = [p("x-S x-E F"), p("y-S y-E E")];
        assert_eq!(cause_functions(&paths, &alloc), vec!["funcA"]);
        // A branch is in the function that holds it.
        let (t, _) = p("check-S @c1 throw-S E");
        assert_eq!(enclosing(&t, 1, &alloc), Some("check"));
    }

    /// The leaking branch calls a helper that calls what the freeing path called before
    /// the branch (`work` mallocs and memsets; on error it calls `report_error`, which
    /// memsets too, and returns; else it frees). The paths part in `work`; matching
    /// `memset-E` by its symbol alone named `report_error`.
    #[test]
    fn a_helper_on_the_leaking_path_is_not_where_the_paths_part() {
        let paths = [
            p("memset-S memset-E @w9~ free-S free-E F"),
            p("memset-S memset-E @w9 report-S memset-S memset-E report-E E"),
        ];
        assert_eq!(cause_functions(&paths, &["main", "work"]), vec!["work"]);
        // Without the branches, the same: the helper's memset is not the one work ran.
        let paths = paths.map(|(s, e)| {
            let calls = s.into_iter().filter(|s| matches!(s, Step::Call(_)));
            (calls.collect::<Vec<_>>(), e)
        });
        assert_eq!(cause_functions(&paths, &["main", "work"]), vec!["work"]);
    }

    /// A function that both paths call (`parse`, which memsets) after they parted is not a
    /// cause: its steps run in another context than the freeing path's `memset`.
    #[test]
    fn a_function_both_paths_call_later_is_not_a_cause() {
        let paths = [
            p("memset-S memset-E @h17~ free-S free-E F"),
            p("memset-S memset-E @h17 parse-S memset-S memset-E parse-E @h21 E"),
        ];
        assert_eq!(cause_functions(&paths, &["main", "handle"]), vec!["handle"]);
    }

    /// An error check that throws before any call (`check`'s branch, then the throw):
    /// the paths part at that branch, in `check`, not in its caller.
    #[test]
    fn a_throwing_branch_is_in_the_function_that_holds_it() {
        let paths = [
            p("new-E memset-S memset-E check-S @c5 check-E @p9~ delete-S delete-E F"),
            p("new-E memset-S memset-E check-S @c5~ alloc_exc-S alloc_exc-E throw-S E"),
        ];
        assert_eq!(
            cause_functions(&paths, &["main", "process", "new"]),
            vec!["check"]
        );
    }

    #[test]
    fn the_cause_branch_of_spec_19_is_location2() {
        let paths = vec![
            (
                vec![("location1", false), ("location2", true)],
                End::NotFreed,
            ),
            (vec![("location1", true)], End::Freed),
            (vec![("location1", false), ("location2", false)], End::Freed),
        ];
        assert_eq!(
            cause_branches(&paths),
            vec![CauseBranch {
                branch: "location2",
                taken_on_leak: true
            }]
        );
    }

    #[test]
    fn branch_traces_split_into_executions() {
        use Step::{Branch, Call};
        let trace = [
            Call(Enter("funcB")),
            Branch("b1", true),
            Call(Enter("chance")),
            Branch("c1", false),
            Call(Exit("chance")),
            Branch("b2", false),
            Call(Exit("funcB")),
            Branch("a1", true),
            Call(Enter("funcB")),
            Branch("b1", false),
            Call(Exit("funcB")),
        ];
        assert_eq!(
            branch_paths_of(&trace, &"funcB", None),
            vec![vec![("b1", true), ("b2", false)], vec![("b1", false)]]
        );
        // The allocating function: its part of the trace, outside its callees.
        assert_eq!(
            branch_paths_of(&trace, &"funcA", Some(0)),
            vec![vec![("a1", true)]]
        );
    }

    /// An allocation through a wrapper (`handle` calls `make`, which allocates): the trace
    /// starts in `make` and returns into `handle`, where the branches that decide the
    /// block's fate are. Before, `handle`'s branches were never collected: its activation
    /// started before the trace, so no entry of it was seen.
    #[test]
    fn branches_of_a_caller_of_the_allocating_function_are_collected() {
        use Step::{Branch, Call};
        let trace = [
            Branch("m1", false),
            Call(Exit("make")),
            Branch("h1", true),
            Call(Enter("chance")),
            Branch("c1", true),
            Call(Exit("chance")),
            Branch("h2", false),
            Call(Exit("handle")),
            Branch("x1", true),
        ];
        assert_eq!(
            branch_paths_of(&trace, &"handle", Some(1)),
            vec![vec![("h1", true), ("h2", false)]]
        );
        assert_eq!(
            branch_paths_of(&trace, &"make", Some(0)),
            vec![vec![("m1", false)]]
        );
        // Two levels up: the trace ran on past `handle`'s return into its caller.
        assert_eq!(
            branch_paths_of(&trace, &"main", Some(2)),
            vec![vec![("x1", true)]]
        );
        assert!(branch_paths_of(&trace, &"handle", None).is_empty());
    }
}
