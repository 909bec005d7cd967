//! Rebuilding by position: when the sampler counted every instruction (the `ptrace`
//! source), the position of each sample in its execution is known, so samples are placed
//! instead of merged by similarity.
//!
//! The seed merges partial sequences by how *similar* they look because it assumes the
//! phase of each execution is unknown. At sparse periods that guess fails: a partial holds
//! `T / P` samples, a handful, and in a loop whose body is shorter than `P` the same few
//! addresses recur in every iteration, so partials of distant phases look alike and the
//! likelihood cannot tell which iteration a sample came from (see
//! `docs/architecture/retrace.md`). The recorder, however, stores each execution's length
//! and samples every `P`-th instruction of it from its *phase*, which it either records
//! (drawn at random: `PhaseRule::Shuffled`, the default) or derives from a count running
//! on across executions (instruction `n` when `(N + n) % P == 0`, `N` being the
//! instructions of the earlier sampled executions: the seed's `PhaseRule::Counted`). The
//! position of every sample is thus exact, and:
//!
//! * executions are grouped into **paths**: first by length, then, within a length, by
//!   agreement (two executions that put different instructions at one position took
//!   different paths); each path is rebuilt on its own and reported with its share of the
//!   executions (executions without a sample count for their length's main path);
//! * each position of a path takes the instruction sampled there;
//! * positions no sample hit are filled from the **control-flow graph** when exactly one
//!   path of the right length joins the instructions on either side (direct branches,
//!   jumps, calls and returns followed; indirect ones not), else left out.
//!
//! [`sample_offsets`] checks the counts against the samples (each execution must hold
//! exactly the samples its length and phase imply), so a recording from another source
//! (hardware counter with skid, time-based) is refused and merged by similarity instead.

use std::collections::{BTreeMap, HashMap};

use crate::annotate::{Flow, InsnId, Program};
use crate::model::CodeAddr;
use crate::rebuild::Entry;

/// One sampled execution: how many instructions it ran and what was sampled.
#[derive(Debug, Clone, Copy)]
pub struct Counted<'a> {
    /// Instructions the execution ran (0 when the sampler does not know).
    pub instructions: u64,
    /// Its samples, in time order.
    pub samples: &'a [CodeAddr],
}

/// The position in its execution of the first sample of each execution, if every
/// execution's samples are exactly those an exact count with `period` implies (`None`
/// otherwise: the phases are then unknown). `phases` are the recorded phases of the
/// executions (`PhaseRule::Shuffled`); without them the count runs on across executions.
pub fn sample_offsets(
    executions: &[Counted<'_>],
    period: u64,
    phases: Option<&[u64]>,
) -> Option<Vec<u64>> {
    if period == 0 || executions.iter().all(|e| e.instructions == 0) {
        return None;
    }
    if phases.is_some_and(|p| p.len() < executions.len()) {
        return None;
    }
    let mut global = 0u64;
    let mut offsets = Vec::with_capacity(executions.len());
    for (k, e) in executions.iter().enumerate() {
        let first = match phases {
            Some(p) if p[k] < period => p[k],
            Some(_) => return None,
            None => (period - global % period) % period,
        };
        let expected = if first < e.instructions {
            (e.instructions - 1 - first) / period + 1
        } else {
            0
        };
        if expected != e.samples.len() as u64 {
            return None;
        }
        offsets.push(first);
        global = global.wrapping_add(e.instructions);
    }
    Some(offsets)
}

/// One rebuilt path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    /// Instructions each of its executions ran.
    pub length: u64,
    /// Executions that took it.
    pub executions: usize,
    /// The trace: sampled positions (support ≥ 1) and positions filled from the
    /// control-flow graph (support 0), in order; unfilled positions are left out.
    pub entries: Vec<Entry>,
    /// Positions some sample hit.
    pub observed: u64,
    /// Positions filled from the control-flow graph.
    pub filled: u64,
    /// Positions neither sampled nor filled (not in `entries`).
    pub missing: u64,
}

/// The paths of a recording, most executions first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aligned {
    /// The paths.
    pub paths: Vec<Path>,
    /// Executions in all.
    pub executions: usize,
}

#[derive(Default)]
struct Cluster {
    slots: BTreeMap<u64, (CodeAddr, u32)>,
    executions: usize,
}

impl Cluster {
    fn agrees(&self, offset: u64, period: u64, samples: &[CodeAddr]) -> bool {
        samples.iter().enumerate().all(|(j, a)| {
            self.slots
                .get(&(offset + j as u64 * period))
                .is_none_or(|(b, _)| a == b)
        })
    }
}

/// Largest gap (in instructions) the control-flow search tries to fill.
pub const MAX_FILL: u64 = 2048;
/// States the control-flow search may visit for one gap.
const FILL_BUDGET: usize = 400_000;
/// Deepest call nesting the control-flow search follows.
const MAX_CALL_DEPTH: usize = 64;

/// Rebuilds the paths of `executions` by position, or `None` when the counts do not
/// account for the samples (see [`sample_offsets`], which also says what `phases` are).
/// `entry` is the region's first instruction (position 0 of every path).
pub fn align(
    program: &Program,
    executions: &[Counted<'_>],
    period: u64,
    phases: Option<&[u64]>,
    entry: Option<CodeAddr>,
) -> Option<Aligned> {
    let offsets = sample_offsets(executions, period, phases)?;
    let mut by_length: BTreeMap<u64, Vec<Cluster>> = BTreeMap::new();
    let mut unsampled: BTreeMap<u64, usize> = BTreeMap::new();
    for (e, &offset) in executions.iter().zip(&offsets) {
        if e.samples.is_empty() {
            *unsampled.entry(e.instructions).or_default() += 1;
            continue;
        }
        let clusters = by_length.entry(e.instructions).or_default();
        let i = match clusters
            .iter()
            .position(|c| c.agrees(offset, period, e.samples))
        {
            Some(i) => i,
            None => {
                clusters.push(Cluster::default());
                clusters.len() - 1
            }
        };
        let c = &mut clusters[i];
        c.executions += 1;
        for (j, &a) in e.samples.iter().enumerate() {
            c.slots
                .entry(offset + j as u64 * period)
                .or_insert((a, 0))
                .1 += 1;
        }
    }
    for (length, n) in unsampled {
        let clusters = by_length.entry(length).or_default();
        if clusters.is_empty() {
            clusters.push(Cluster::default());
        }
        if let Some(c) = clusters.iter_mut().max_by_key(|c| c.executions) {
            c.executions += n;
        }
    }
    let mut paths: Vec<Path> = by_length
        .into_iter()
        .flat_map(|(length, clusters)| {
            clusters
                .into_iter()
                .map(move |c| rebuild_path(program, length, c, entry))
        })
        .collect();
    // The same order as the true paths' (`GroundTruth::modal`), which a report compares
    // the first with.
    paths.sort_by(|a, b| {
        tansa_format::retrace::representative_order(
            (a.executions, a.length),
            (b.executions, b.length),
        )
    });
    Some(Aligned {
        paths,
        executions: executions.len(),
    })
}

fn rebuild_path(program: &Program, length: u64, c: Cluster, entry: Option<CodeAddr>) -> Path {
    let mut known: Vec<(u64, CodeAddr, u32)> =
        c.slots.iter().map(|(&p, &(a, n))| (p, a, n)).collect();
    if let Some(entry) = entry
        && length > 0
        && known.first().is_none_or(|k| k.0 != 0)
    {
        known.insert(0, (0, entry, 0));
    }
    let observed = c.slots.len() as u64;
    let entry_of = |at: CodeAddr, support: u32| Entry {
        at,
        insn: program.lookup(at),
        support,
    };
    let mut entries = Vec::new();
    let mut filled = 0u64;
    for (k, &(p, a, n)) in known.iter().enumerate() {
        if n > 0 || p == 0 {
            entries.push(entry_of(a, n));
            if n == 0 {
                filled += 1;
            }
        }
        let (gap, end) = match known.get(k + 1) {
            Some(&(q, b, _)) => (q - p, End::At(b)),
            None => (length.saturating_sub(1) - p, End::Return),
        };
        if gap == 0 || (gap == 1 && matches!(end, End::At(_))) {
            continue;
        }
        let mut between = fill(program, a, gap, end).unwrap_or_default();
        if let End::At(_) = end {
            between.pop();
        }
        filled += between.len() as u64;
        entries.extend(between.into_iter().map(|at| entry_of(at, 0)));
    }
    Path {
        length,
        executions: c.executions,
        missing: length.saturating_sub(entries.len() as u64),
        observed,
        filled,
        entries,
    }
}

/// Where a filled stretch must end.
#[derive(Debug, Clone, Copy)]
enum End {
    /// At this instruction.
    At(CodeAddr),
    /// At a return from the function the stretch started in (the region's last
    /// instruction).
    Return,
}

/// The unique control-flow path of exactly `steps` transitions from `from` that ends as
/// `end` says (the instructions after `from`, the last one included), or `None` when
/// there is none, more than one, or the search is too large.
fn fill(program: &Program, from: CodeAddr, steps: u64, end: End) -> Option<Vec<CodeAddr>> {
    if steps > MAX_FILL {
        return None;
    }
    let start = program.lookup(from)?;
    let mut search = Search {
        program,
        end,
        memo: HashMap::new(),
        budget: FILL_BUDGET,
    };
    let mut stack = Vec::new();
    if search.count(start, steps as u32, &stack)? != 1 {
        return None;
    }
    // Follow the successors that lead to the one path.
    let (mut at, mut left) = (start, steps as u32);
    let mut out = Vec::with_capacity(steps as usize);
    while left > 0 {
        let next = search
            .successors(at, &stack)
            .into_iter()
            .find(|(s, st)| search.count(*s, left - 1, st) == Some(1))?;
        at = next.0;
        stack = next.1;
        left -= 1;
        out.push(program.insn(at).at);
    }
    Some(out)
}

struct Search<'a> {
    program: &'a Program,
    end: End,
    memo: HashMap<(InsnId, u32, Vec<u64>), u8>,
    budget: usize,
}

impl Search<'_> {
    /// Successors of `at` with the call stack `stack`, each with its stack.
    fn successors(&self, at: InsnId, stack: &[u64]) -> Vec<(InsnId, Vec<u64>)> {
        let insn = self.program.insn(at);
        let next_addr = insn.at.addr + u64::from(insn.len);
        let to = |addr: u64| {
            self.program.lookup(CodeAddr {
                module: insn.at.module,
                addr,
            })
        };
        let same = |id: Option<InsnId>| id.map(|i| (i, stack.to_vec()));
        match insn.flow {
            Flow::Next => same(to(next_addr)).into_iter().collect(),
            Flow::Jump => same(insn.target.and_then(to)).into_iter().collect(),
            Flow::Branch => [insn.target.and_then(to), to(next_addr)]
                .into_iter()
                .flat_map(same)
                .collect(),
            Flow::Call if stack.len() >= MAX_CALL_DEPTH => Vec::new(),
            Flow::Call => insn
                .target
                .and_then(to)
                .map(|t| {
                    let mut s = stack.to_vec();
                    s.push(next_addr);
                    (t, s)
                })
                .into_iter()
                .collect(),
            Flow::Return => match stack.split_last() {
                Some((&ret, rest)) => to(ret).map(|r| (r, rest.to_vec())).into_iter().collect(),
                None => Vec::new(),
            },
            Flow::Unknown => Vec::new(),
        }
    }

    /// Paths (0, 1 or 2 = "more than one") of exactly `left` transitions from `at` that
    /// end as wanted; `None` when the budget is spent.
    fn count(&mut self, at: InsnId, left: u32, stack: &[u64]) -> Option<u8> {
        if left == 0 {
            let ok = match self.end {
                End::At(b) => self.program.insn(at).at == b,
                End::Return => self.program.insn(at).flow == Flow::Return && stack.is_empty(),
            };
            return Some(u8::from(ok));
        }
        let key = (at, left, stack.to_vec());
        if let Some(&n) = self.memo.get(&key) {
            return Some(n);
        }
        self.budget = self.budget.checked_sub(1)?;
        let mut n = 0u8;
        for (s, st) in self.successors(at, stack) {
            n = n.saturating_add(self.count(s, left - 1, &st)?).min(2);
            if n >= 2 {
                break;
            }
        }
        self.memo.insert(key, n);
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FunctionCode;

    fn at(addr: u64) -> CodeAddr {
        CodeAddr { module: 0, addr }
    }

    #[test]
    fn offsets_follow_the_global_count() {
        let s = [at(0); 3];
        // T = 10, P = 4: samples at global 0, 4, 8 | 12, 16 (positions 2, 6) | 20, 24, 28.
        let e = [
            Counted {
                instructions: 10,
                samples: &s[..3],
            },
            Counted {
                instructions: 10,
                samples: &s[..2],
            },
            Counted {
                instructions: 10,
                samples: &s[..3],
            },
        ];
        assert_eq!(sample_offsets(&e, 4, None), Some(vec![0, 2, 0]));
        let wrong = [Counted {
            instructions: 10,
            samples: &s[..2],
        }];
        assert_eq!(sample_offsets(&wrong, 4, None), None);
        let unknown = [Counted {
            instructions: 0,
            samples: &s[..2],
        }];
        assert_eq!(sample_offsets(&unknown, 4, None), None);
    }

    /// Recorded phases replace the running count, and must account for the samples too.
    #[test]
    fn offsets_follow_recorded_phases() {
        let s = [at(0); 3];
        // T = 10, P = 4: phase 1 samples 1, 5, 9; phase 3 samples 3, 7; phase 2: 2, 6.
        let e = [
            Counted {
                instructions: 10,
                samples: &s[..3],
            },
            Counted {
                instructions: 10,
                samples: &s[..2],
            },
            Counted {
                instructions: 10,
                samples: &s[..2],
            },
        ];
        assert_eq!(sample_offsets(&e, 4, Some(&[1, 3, 2])), Some(vec![1, 3, 2]));
        // The running count would expect 3, 2, 3 samples.
        assert_eq!(sample_offsets(&e, 4, None), None);
        // Samples the phase does not account for, a phase not below the period, or
        // phases missing: no positions.
        assert_eq!(sample_offsets(&e, 4, Some(&[1, 0, 2])), None);
        assert_eq!(sample_offsets(&e, 4, Some(&[1, 7, 2])), None);
        assert_eq!(sample_offsets(&e, 4, Some(&[1, 3])), None);
    }

    /// `f`: 0: xor eax,eax ; 2: inc eax ; 4: cmp eax,3 ; 7: jne 2 ; 9: ret — a loop of
    /// three instructions run three times (12 instructions in all).
    const LOOP: [u8; 10] = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x03, 0x75, 0xf9, 0xc3];

    fn looped() -> (Program, Vec<CodeAddr>) {
        let p = Program::new(&[FunctionCode {
            module: 0,
            name: "f".into(),
            start: 0,
            bytes: LOOP.to_vec(),
        }]);
        let mut truth = vec![at(0)];
        for _ in 0..3 {
            truth.extend([at(2), at(4), at(7)]);
        }
        truth.push(at(9));
        (p, truth)
    }

    #[test]
    fn places_samples_and_fills_from_the_cfg() {
        let (p, truth) = looped();
        assert_eq!(truth.len(), 11);
        // P = 5, one execution: positions 0, 5, 10. The loop's middle iteration and the
        // exit are fixed by the length alone.
        let samples: Vec<CodeAddr> = [0, 5, 10].iter().map(|&i| truth[i]).collect();
        let e = [Counted {
            instructions: 11,
            samples: &samples,
        }];
        let a = align(&p, &e, 5, None, Some(at(0))).unwrap();
        assert_eq!(a.paths.len(), 1);
        let path = &a.paths[0];
        let got: Vec<CodeAddr> = path.entries.iter().map(|e| e.at).collect();
        assert_eq!(got, truth);
        assert_eq!((path.observed, path.filled, path.missing), (3, 8, 0));
        assert_eq!(path.entries[5].support, 1);
        assert_eq!(path.entries[4].support, 0);
    }

    #[test]
    fn disagreeing_executions_are_separate_paths() {
        let (p, truth) = looped();
        let mut other = truth.clone();
        other[5] = at(9);
        // T = 11, P = 11: one sample at position 0 each, which agree.
        let s0 = [truth[0]];
        let e = [
            Counted {
                instructions: 11,
                samples: &s0,
            },
            Counted {
                instructions: 11,
                samples: &s0,
            },
        ];
        let a = align(&p, &e, 11, None, Some(at(0))).unwrap();
        assert_eq!(a.paths.len(), 1);
        assert_eq!(a.paths[0].executions, 2);
        // P = 5 over executions of 10 (phases 0, 0) with a disagreement at position 5.
        let a_s: Vec<CodeAddr> = [0, 5].iter().map(|&i| truth[i]).collect();
        let b_s: Vec<CodeAddr> = [0, 5].iter().map(|&i| other[i]).collect();
        let e = [
            Counted {
                instructions: 10,
                samples: &a_s,
            },
            Counted {
                instructions: 10,
                samples: &b_s,
            },
            Counted {
                instructions: 10,
                samples: &a_s,
            },
        ];
        let a = align(&p, &e, 5, None, None).unwrap();
        let shares: Vec<usize> = a.paths.iter().map(|p| p.executions).collect();
        assert_eq!(shares, vec![2, 1]);
        let sampled = |p: &Path| -> Vec<CodeAddr> {
            p.entries
                .iter()
                .filter(|e| e.support > 0)
                .map(|e| e.at)
                .collect()
        };
        assert_eq!(sampled(&a.paths[0]), vec![truth[0], truth[5]]);
        assert_eq!(sampled(&a.paths[1]), vec![other[0], other[5]]);
        // The first path's loop is filled up to its sample (a unique 5-step path).
        assert_eq!(a.paths[0].entries.len(), 6);
    }

    #[test]
    fn fills_through_calls_and_returns() {
        // f at 0x100: call g ; ret — g at 0x200: nop ; ret.
        let p = Program::new(&[
            FunctionCode {
                module: 0,
                name: "f".into(),
                start: 0x100,
                bytes: vec![0xe8, 0xfb, 0x00, 0x00, 0x00, 0xc3],
            },
            FunctionCode {
                module: 0,
                name: "g".into(),
                start: 0x200,
                bytes: vec![0x90, 0xc3],
            },
        ]);
        let truth = vec![at(0x100), at(0x200), at(0x201), at(0x105)];
        let s = [at(0x100)];
        let e = [Counted {
            instructions: 4,
            samples: &s,
        }];
        let a = align(&p, &e, 4, None, Some(at(0x100))).unwrap();
        let got: Vec<CodeAddr> = a.paths[0].entries.iter().map(|e| e.at).collect();
        assert_eq!(got, truth);
        // A length no path has: nothing is invented.
        let e = [Counted {
            instructions: 5,
            samples: &s,
        }];
        let a = align(&p, &e, 5, None, Some(at(0x100))).unwrap();
        assert_eq!(a.paths[0].entries.len(), 1);
        assert_eq!(a.paths[0].missing, 4);
    }
}
