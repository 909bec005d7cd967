//! Which instructions of an execution the `ptrace` sampler keeps: every `P`-th, from the
//! execution's phase, under the rule the user chose ([`PhaseRule`]).

use tansa_format::retrace::PhaseRule;

/// Largest period for which phases are drawn as shuffles of `0..P` (a table of `P`
/// entries); above it each phase is drawn uniformly.
const MAX_SHUFFLED: u64 = 1 << 16;

/// Chooses each execution's phase.
pub(crate) struct Phases {
    rule: PhaseRule,
    period: u64,
    /// Instructions of the executions that ended so far ([`PhaseRule::Counted`]).
    counted: u64,
    /// The current shuffle of `0..P`, drawn from its end ([`PhaseRule::Shuffled`]).
    deck: Vec<u64>,
    rng: fastrand::Rng,
    /// The phase of every execution so far ([`PhaseRule::Shuffled`]).
    pub(crate) drawn: Vec<u64>,
}

impl Phases {
    /// Phases for `rule` at `period` (at least 1), random ones from `rng`.
    pub(crate) fn new(rule: PhaseRule, period: u64, rng: fastrand::Rng) -> Phases {
        Phases {
            rule,
            period: period.max(1),
            counted: 0,
            deck: Vec::new(),
            rng,
            drawn: Vec::new(),
        }
    }

    /// The phase of the next execution, which ran `instructions` instructions: the
    /// position of its first sample if it has one (then `phase + P`, ...).
    pub(crate) fn next(&mut self, instructions: u64) -> u64 {
        let p = self.period;
        match self.rule {
            PhaseRule::Counted => {
                let phase = (p - self.counted % p) % p;
                self.counted = self.counted.wrapping_add(instructions);
                phase
            }
            PhaseRule::Shuffled => {
                let phase = if p > MAX_SHUFFLED {
                    self.rng.u64(0..p)
                } else {
                    if self.deck.is_empty() {
                        self.deck = (0..p).collect();
                        self.rng.shuffle(&mut self.deck);
                    }
                    self.deck.pop().unwrap_or(0)
                };
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

    /// Each run of `P` executions takes every phase once, whatever their lengths; the
    /// phases are recorded.
    #[test]
    fn shuffled_phases_cover_every_residue_in_each_run_of_p() {
        let mut p = Phases::new(PhaseRule::Shuffled, 7, fastrand::Rng::with_seed(42));
        for _ in 0..5 {
            let mut run: Vec<u64> = (0..7).map(|_| p.next(70)).collect();
            run.sort_unstable();
            assert_eq!(run, (0..7).collect::<Vec<_>>());
        }
        assert_eq!(p.drawn.len(), 35);
        // Not one fixed order: the runs differ.
        assert_ne!(p.drawn[..7], p.drawn[7..14]);
        // Above the shuffle table's size, uniform phases below the period.
        let mut big = Phases::new(PhaseRule::Shuffled, 1 << 40, fastrand::Rng::with_seed(3));
        assert!((0..100).all(|_| big.next(5) < 1 << 40));
        assert!(big.kept(u64::MAX - 1, 5).next().is_none());
    }
}
