//! Which instructions of an execution the `ptrace` sampler keeps: every `P`-th, from the
//! execution's phase, under the rule the user chose ([`PhaseRule`]).

use std::collections::HashMap;

use tansa_format::retrace::PhaseRule;

/// Chooses each execution's phase.
pub(crate) struct Phases {
    rule: PhaseRule,
    period: u64,
    /// Instructions of the executions that ended so far ([`PhaseRule::Counted`]).
    counted: u64,
    /// The step between the phases of successive executions of one length: the integer
    /// nearest `P / φ` (φ the golden ratio) that is coprime with `P`, so that `P`
    /// successive steps visit every phase once and any run of them is spread evenly.
    step: u64,
    /// For each execution length (a path, as `tansa_retrace::align` groups them), the
    /// random start of its current run of `P` phases and how many of them it has used
    /// ([`PhaseRule::Shuffled`]).
    runs: HashMap<u64, (u64, u64)>,
    rng: fastrand::Rng,
    /// The phase of every execution so far ([`PhaseRule::Shuffled`]).
    pub(crate) drawn: Vec<u64>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The step of [`Phases::step`].
fn golden_step(p: u64) -> u64 {
    let mut a = ((p as f64) * 0.618_033_988_749_895).round() as u64;
    a = a.clamp(1, p.max(1));
    while a < p && gcd(a, p) != 1 {
        a += 1;
    }
    a % p.max(1)
}

impl Phases {
    /// Phases for `rule` at `period` (at least 1), random ones from `rng`.
    pub(crate) fn new(rule: PhaseRule, period: u64, rng: fastrand::Rng) -> Phases {
        let period = period.max(1);
        Phases {
            rule,
            period,
            counted: 0,
            step: golden_step(period),
            runs: HashMap::new(),
            rng,
            drawn: Vec::new(),
        }
    }

    /// The phase of the next execution, which ran `instructions` instructions: the
    /// position of its first sample if it has one (then `phase + P`, ...).
    ///
    /// [`PhaseRule::Shuffled`]: the executions of one length take the phases `b`, `b + a`,
    /// `b + 2a`, ... (mod `P`), `a` the golden step and `b` drawn at random for each run of
    /// `P` of them. Whatever other paths run between, a path therefore never sees a phase
    /// twice in `P` of its executions, and fewer executions still spread over all phases
    /// (no long stretch of positions left unsampled, which the control-flow graph could
    /// not fill), which independent random phases would not give.
    pub(crate) fn next(&mut self, instructions: u64) -> u64 {
        let p = self.period;
        match self.rule {
            PhaseRule::Counted => {
                let phase = (p - self.counted % p) % p;
                self.counted = self.counted.wrapping_add(instructions);
                phase
            }
            PhaseRule::Shuffled => {
                let (start, used) = self.runs.entry(instructions).or_insert((0, p));
                if *used >= p {
                    *start = self.rng.u64(0..p);
                    *used = 0;
                }
                let phase = ((u128::from(*start) + u128::from(*used) * u128::from(self.step))
                    % u128::from(p)) as u64;
                *used += 1;
                self.drawn.push(phase);
                phase
            }
        }
    }

    /// The positions of `0..instructions` kept at `phase`.
    pub(crate) fn kept(&self, phase: u64, instructions: u64) -> impl Iterator<Item = u64> {
        (phase..instructions).step_by(usize::try_from(self.period).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's rule: the count runs on across executions.
    #[test]
    fn counted_phases_follow_the_count() {
        let mut p = Phases::new(PhaseRule::Counted, 7, fastrand::Rng::with_seed(1));
        let phases: Vec<u64> = [4, 13, 22, 31, 4].iter().map(|&n| p.next(n)).collect();
        // 0, then 7 - 4 = 3, 7 - 17 % 7 = 4, 7 - 39 % 7 = 3, 70 % 7 = 0: the cycle repeats.
        assert_eq!(phases, [0, 3, 4, 3, 0]);
        assert_eq!(p.kept(3, 13).collect::<Vec<_>>(), [3, 10]);
        assert_eq!(p.kept(5, 4).count(), 0);
        assert!(p.drawn.is_empty());
    }

    /// Each run of `P` executions of one length takes every phase once, whatever runs
    /// between them; the phases are recorded.
    #[test]
    fn shuffled_phases_cover_every_residue_in_each_run_of_p() {
        let mut p = Phases::new(PhaseRule::Shuffled, 7, fastrand::Rng::with_seed(42));
        let lengths = [4, 13, 22, 31];
        let mut by_length: HashMap<u64, Vec<u64>> = HashMap::new();
        for k in 0..4 * 7 * 5 {
            let n = lengths[k % 4];
            let phase = p.next(n);
            by_length.entry(n).or_default().push(phase);
        }
        for (n, phases) in &by_length {
            for run in phases.chunks(7) {
                let mut run = run.to_vec();
                run.sort_unstable();
                assert_eq!(run, (0..7).collect::<Vec<_>>(), "length {n}");
            }
        }
        // Not one fixed order: the runs start at random phases.
        let starts: std::collections::BTreeSet<u64> = by_length
            .values()
            .flat_map(|p| p.iter().step_by(7))
            .copied()
            .collect();
        assert!(starts.len() > 1, "{starts:?}");
        assert_eq!(p.drawn.len(), 140);
        // The step visits every phase; huge periods too.
        assert_eq!(golden_step(7), 4);
        assert_eq!(golden_step(1009), 624);
        assert_eq!(golden_step(1), 0);
        assert_eq!(golden_step(2), 1);
        assert_eq!(gcd(golden_step(1 << 40), 1 << 40), 1);
        let mut big = Phases::new(PhaseRule::Shuffled, 1 << 40, fastrand::Rng::with_seed(3));
        assert!((0..100).all(|_| big.next(5) < 1 << 40));
        assert!(big.kept(u64::MAX - 1, 5).next().is_none());
        let mut one = Phases::new(PhaseRule::Shuffled, 1, fastrand::Rng::with_seed(3));
        assert!((0..5).all(|_| one.next(5) == 0));
    }
}
