//! The path grammar of an allocation site (spec §12.5–12.6): Sequitur over all its traces.
//!
//! Each trace becomes a top-level rule `S_k` whose right-hand side receives the trace's
//! symbols and then its end (`F` or `E`). One grammar is shared by all the `S_k` of a site,
//! so the two Sequitur invariants hold across traces: no digram (pair of adjacent symbols)
//! occurs twice without overlapping (a repeated one becomes a rule `N_j`), and every rule
//! `N_j` is used at least twice (a rule used once is put back in place). A trace equal to
//! an earlier one adds nothing but a count (spec step 907; duplicates are found by the full
//! expansion, which also covers a trace equal to the suffix of another).
//!
//! The invariants are restored by rescanning after each appended symbol: quadratic in the
//! grammar's size, which is the size of a few dozen distinct paths here; the grammar is
//! for reading and for merging, identification works on the expanded paths.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;

/// How a traced path ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum End {
    /// `F`: the block was freed.
    Freed,
    /// `E`: the range end returned first.
    NotFreed,
}

/// A symbol of the grammar.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Sym<T> {
    T(T),
    End(End),
    /// A rule: index into `Grammar::rules`.
    N(usize),
}

#[derive(Debug, Clone)]
struct Rule<T> {
    body: Vec<Sym<T>>,
    /// Top-level (`S_k`) or not (`N_j`); its number as shown.
    top: bool,
    number: usize,
    alive: bool,
}

/// The distinct paths of a site and their grammar.
#[derive(Debug, Clone)]
pub struct PathSet<T> {
    rules: Vec<Rule<T>>,
    /// Top-level rules in the order they were added, with their counts.
    paths: Vec<(usize, u32)>,
    index: HashMap<(Vec<T>, End), usize>,
    next_s: usize,
    next_n: usize,
}

impl<T: Clone + Eq + Hash> Default for PathSet<T> {
    fn default() -> Self {
        PathSet {
            rules: Vec::new(),
            paths: Vec::new(),
            index: HashMap::new(),
            next_s: 1,
            next_n: 1,
        }
    }
}

impl<T: Clone + Eq + Hash> PathSet<T> {
    /// Adds one trace; returns whether it is a new distinct path.
    pub fn add(&mut self, trace: &[T], end: End) -> bool {
        let key = (trace.to_vec(), end);
        if let Some(&i) = self.index.get(&key) {
            self.paths[i].1 += 1;
            return false;
        }
        let s = self.rules.len();
        self.rules.push(Rule {
            body: Vec::new(),
            top: true,
            number: self.next_s,
            alive: true,
        });
        self.next_s += 1;
        for t in trace {
            self.rules[s].body.push(Sym::T(t.clone()));
            self.normalize();
        }
        self.rules[s].body.push(Sym::End(end));
        self.normalize();
        self.index.insert(key, self.paths.len());
        self.paths.push((s, 1));
        true
    }

    /// The distinct paths, in the order first seen: symbols, end, and how many traces
    /// followed each.
    pub fn paths(&self) -> Vec<(Vec<T>, End, u32)> {
        self.paths
            .iter()
            .map(|&(s, count)| {
                let mut out = Vec::new();
                let mut end = End::Freed;
                self.expand(s, &mut out, &mut end);
                (out, end, count)
            })
            .collect()
    }

    /// Number of traces added.
    pub fn traces(&self) -> u32 {
        self.paths.iter().map(|p| p.1).sum()
    }

    fn expand(&self, r: usize, out: &mut Vec<T>, end: &mut End) {
        for s in &self.rules[r].body {
            match s {
                Sym::T(t) => out.push(t.clone()),
                Sym::End(e) => *end = *e,
                Sym::N(n) => self.expand(*n, out, end),
            }
        }
    }

    /// Restores digram uniqueness and rule utility.
    fn normalize(&mut self) {
        loop {
            if self.enforce_digrams() {
                continue;
            }
            if self.enforce_utility() {
                continue;
            }
            break;
        }
    }

    /// Replaces one repeated digram; whether one was found.
    fn enforce_digrams(&mut self) -> bool {
        let mut seen: HashMap<(Sym<T>, Sym<T>), (usize, usize)> = HashMap::new();
        for r in 0..self.rules.len() {
            if !self.rules[r].alive {
                continue;
            }
            let body = &self.rules[r].body;
            for i in 0..body.len().saturating_sub(1) {
                let d = (body[i].clone(), body[i + 1].clone());
                match seen.get(&d) {
                    // Overlapping occurrences (`a a a`) do not count.
                    Some(&(r0, i0)) if r0 == r && i0 + 1 == i => {}
                    Some(&(r0, i0)) => {
                        self.replace(d, (r0, i0), (r, i));
                        return true;
                    }
                    None => {
                        seen.insert(d, (r, i));
                    }
                }
            }
        }
        false
    }

    /// Two occurrences of digram `d`: reuse the rule that is exactly `d`, or make one.
    fn replace(&mut self, d: (Sym<T>, Sym<T>), a: (usize, usize), b: (usize, usize)) {
        let whole = |p: &PathSet<T>, (r, i): (usize, usize)| {
            !p.rules[r].top && i == 0 && p.rules[r].body.len() == 2
        };
        let (rule, others) = if whole(self, a) {
            (a.0, vec![b])
        } else if whole(self, b) {
            (b.0, vec![a])
        } else {
            let n = self.rules.len();
            self.rules.push(Rule {
                body: vec![d.0, d.1],
                top: false,
                number: self.next_n,
                alive: true,
            });
            self.next_n += 1;
            (n, vec![a, b])
        };
        // Replace from the later position first so the earlier index stays valid.
        let mut others = others;
        others.sort();
        for (r, i) in others.into_iter().rev() {
            self.rules[r].body.splice(i..i + 2, [Sym::N(rule)]);
        }
    }

    /// Inlines one rule used only once; whether one was found.
    fn enforce_utility(&mut self) -> bool {
        let mut uses = vec![0usize; self.rules.len()];
        for r in self.rules.iter().filter(|r| r.alive) {
            for s in &r.body {
                if let Sym::N(n) = s {
                    uses[*n] += 1;
                }
            }
        }
        let Some(once) = (0..self.rules.len())
            .find(|&n| self.rules[n].alive && !self.rules[n].top && uses[n] == 1)
        else {
            return false;
        };
        let body = std::mem::take(&mut self.rules[once].body);
        self.rules[once].alive = false;
        for r in 0..self.rules.len() {
            if let Some(i) = self.rules[r].body.iter().position(|s| *s == Sym::N(once)) {
                self.rules[r].body.splice(i..=i, body);
                break;
            }
        }
        true
    }
}

impl<T: Clone + Eq + Hash + Display> PathSet<T> {
    /// The grammar as text, one rule per line: the `S_k` in order, then the `N_j` by
    /// number (`S1 -> N2 F`).
    pub fn grammar(&self) -> String {
        let name = |r: &Rule<T>| format!("{}{}", if r.top { "S" } else { "N" }, r.number);
        let mut lines = Vec::new();
        let mut order: Vec<&Rule<T>> = self.rules.iter().filter(|r| r.alive).collect();
        order.sort_by_key(|r| (!r.top, r.number));
        for r in order {
            let body: Vec<String> = r
                .body
                .iter()
                .map(|s| match s {
                    Sym::T(t) => t.to_string(),
                    Sym::End(End::Freed) => "F".into(),
                    Sym::End(End::NotFreed) => "E".into(),
                    Sym::N(n) => name(&self.rules[*n]),
                })
                .collect();
            lines.push(format!("{} -> {}", name(r), body.join(" ")));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(p: &mut PathSet<&'static str>, s: &str) {
        let mut t: Vec<&'static str> = s.split(' ').map(|w| &*w.to_string().leak()).collect();
        let end = match t.pop() {
            Some("F") => End::Freed,
            _ => End::NotFreed,
        };
        p.add(&t, end);
    }

    #[test]
    fn the_grammar_of_spec_19() {
        let mut p = PathSet::default();
        add(&mut p, "funcB-S sub2-S sub2-E F");
        add(&mut p, "funcB-S sub1-S F");
        add(&mut p, "funcB-S sub2-S sub2-E funcB-E E");
        assert_eq!(
            p.grammar(),
            "S1 -> N2 F\n\
             S2 -> funcB-S sub1-S F\n\
             S3 -> N2 funcB-E E\n\
             N2 -> funcB-S sub2-S sub2-E"
        );
        // A repeated trace only counts.
        add(&mut p, "funcB-S sub1-S F");
        assert_eq!(p.paths().len(), 3);
        assert_eq!(p.paths()[1].2, 2);
        assert_eq!(p.traces(), 4);
    }

    #[test]
    fn classic_sequences() {
        let mut p = PathSet::default();
        add(&mut p, "a b c a b c a b c F");
        assert_eq!(p.grammar(), "S1 -> N2 N2 N2 F\nN2 -> a b c");
        let mut p = PathSet::default();
        add(&mut p, "a a a a F");
        assert_eq!(p.grammar(), "S1 -> N1 N1 F\nN1 -> a a");
    }

    #[test]
    fn random_traces_expand_back_and_keep_the_invariants() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..200 {
            let mut p: PathSet<u8> = PathSet::default();
            let mut added = Vec::new();
            for _ in 0..rng.usize(1..6) {
                let t: Vec<u8> = (0..rng.usize(0..30)).map(|_| rng.u8(0..3)).collect();
                let end = if rng.bool() {
                    End::Freed
                } else {
                    End::NotFreed
                };
                p.add(&t, end);
                if !added.contains(&(t.clone(), end)) {
                    added.push((t, end));
                }
                // Digram uniqueness (non-overlapping) and rule utility.
                let mut digrams = HashMap::new();
                let mut uses = HashMap::new();
                for (r, rule) in p.rules.iter().enumerate().filter(|(_, r)| r.alive) {
                    for i in 0..rule.body.len().saturating_sub(1) {
                        let d = (rule.body[i].clone(), rule.body[i + 1].clone());
                        if let Some(&(r0, i0)) = digrams.get(&d) {
                            assert!(r0 == r && i0 + 1 == i, "digram repeated: {}", p.grammar());
                        } else {
                            digrams.insert(d, (r, i));
                        }
                    }
                    for s in &rule.body {
                        if let Sym::N(n) = s {
                            *uses.entry(*n).or_insert(0) += 1;
                        }
                    }
                }
                for (n, r) in p.rules.iter().enumerate() {
                    if r.alive && !r.top {
                        assert!(uses.get(&n).copied().unwrap_or(0) >= 2, "{}", p.grammar());
                    }
                }
            }
            let got: Vec<(Vec<u8>, End)> = p.paths().into_iter().map(|(t, e, _)| (t, e)).collect();
            assert_eq!(got, added);
        }
    }
}
