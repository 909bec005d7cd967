//! Per item: initial run, re-test, upper-limit check and log check (seed Figs. 7–11).

use std::collections::BTreeSet;

use super::{Engine, Observer, Suspect, Target, total_growth};
use crate::judge;
use crate::plan::Item;
use crate::report::{Cause, Finding, LogOnIncrease, NonRecurring, Phase, Verdict};

impl<T: Target, O: Observer> Engine<'_, T, O> {
    /// The seed's Fig. 7 body for one item.
    pub(super) fn item(&mut self, item: &Item) {
        let defaults = item.defaults();

        // S2–S5: measure, run, measure; anything grown?
        let r1 = self.exec(item, Phase::Initial, defaults.clone(), true);
        if self.early_abnormal(r1) {
            return;
        }
        let g1 = self.run_growth(r1);
        if !g1.iter().any(|g| g.grew) {
            return;
        }
        self.left += 1;

        // S6–S8: fresh baseline, run again, measure.
        let r2 = self.exec(item, Phase::Retest, defaults, true);
        if self.early_abnormal(r2) {
            return;
        }
        let g2 = self.run_growth(r2);
        let (seq1, seq2) = (self.s.runs[r1].seq, self.s.runs[r2].seq);

        // S48 with claim 1: what grew in both runs is a possible leak and goes to the
        // upper-limit check. (The flowchart would also take what grew in the re-test only;
        // the claims need growth after the run *and* after the re-run, so growth in just one
        // of the two is a one-off, checked against the logs below.)
        let again = |a: &judge::Growth| {
            g2.iter()
                .any(|b| b.grew && b.id == a.id && b.resource == a.resource)
        };
        let mut suspects = Vec::new();
        for g in g1.iter().filter(|g| g.grew && again(g)) {
            let series: Vec<_> = [r1, r2]
                .iter()
                .filter_map(|&i| self.point(i, &g.id, g.resource, None))
                .collect();
            suspects.push(Suspect {
                id: g.id.clone(),
                resource: g.resource,
                runs: vec![seq1, seq2],
                series,
            });
        }

        // S52–S57: grew in one run of the two: look for error logs of that process from
        // the start of the initial run to the end of the re-test.
        let first_only = g1.iter().filter(|a| a.grew && !again(a));
        let second_only = g2.iter().filter(|b| {
            b.grew
                && !g1
                    .iter()
                    .any(|a| a.grew && a.id == b.id && a.resource == b.resource)
        });
        let oneoff: Vec<&judge::Growth> = first_only.chain(second_only).collect();
        if !oneoff.is_empty() {
            let window = (self.s.runs[r1].start_ms, self.s.runs[r2].end_ms);
            let logs = self.target.error_logs(window.0, window.1);
            for g in oneoff {
                let mut ids: Vec<String> = Vec::new();
                for rec in logs.iter().filter(|r| r.process == g.id.process) {
                    if !ids.contains(&rec.id) {
                        ids.push(rec.id.clone());
                    }
                }
                let series: Vec<_> = [r1, r2]
                    .iter()
                    .filter_map(|&i| self.point(i, &g.id, g.resource, None))
                    .collect();
                if ids.is_empty() {
                    self.s.non_recurring.push(NonRecurring {
                        process: g.id.process.clone(),
                        resource: g.resource,
                        item: item.name.clone(),
                        runs: vec![seq1, seq2],
                        series,
                    });
                } else {
                    self.s.log_on_increase.push(LogOnIncrease {
                        process: g.id.process.clone(),
                        resource: g.resource,
                        item: item.name.clone(),
                        log_ids: ids,
                        window_ms: window,
                        runs: vec![seq1, seq2],
                        series,
                    });
                }
            }
        }

        if !suspects.is_empty() {
            let prev = self.s.runs[r2].after.clone();
            self.upper_limit(item, suspects, prev);
        }
    }

    /// The change of every judged resource over run `idx` (from its own `before`).
    fn run_growth(&self, idx: usize) -> Vec<judge::Growth> {
        let r = &self.s.runs[idx];
        let st = &self.plan.settings;
        match &r.before {
            Some(before) => judge::growth(before, &r.after, &st.judge, &st.thresholds),
            None => Vec::new(),
        }
    }

    /// An abnormal end in the initial run or the re-test. A process that ended is judged
    /// as the seed judges an abnormal end (1-a); a failed or hung item without that is a
    /// run whose growth cannot be judged. Returns whether the item stops here.
    fn early_abnormal(&mut self, idx: usize) -> bool {
        if !self.abnormal(idx) {
            return false;
        }
        self.ended_findings(idx, &[]);
        let r = &self.s.runs[idx];
        if r.ended.is_empty() {
            let cause = match r.outcome {
                crate::report::RunOutcome::Hung { .. } => Cause::ItemHung,
                _ => Cause::ItemFailed,
            };
            let reason = format!(
                "the test item {} in run {} ({} run of `{}`), so its growth could not be judged",
                r.outcome.describe(),
                r.seq,
                r.phase.name(),
                r.item
            );
            let names: BTreeSet<String> = r
                .before
                .iter()
                .flat_map(|s| s.processes.iter().map(|p| p.id.process.clone()))
                .collect();
            let (item, seq) = (r.item.clone(), r.seq);
            for process in names {
                self.s.findings.push(Finding {
                    process,
                    item: item.clone(),
                    resource: None,
                    verdict: Verdict::Undeterminable,
                    fault: false,
                    cause,
                    reason: reason.clone(),
                    runs: vec![seq],
                    series: Vec::new(),
                    log_ids: Vec::new(),
                });
            }
        }
        self.revive(idx);
        true
    }

    /// The upper-limit check (Fig. 11): runs 3..=N, each compared with the run before, one
    /// verdict per suspect; stops when every suspect has one.
    fn upper_limit(
        &mut self,
        item: &Item,
        mut pending: Vec<Suspect>,
        mut prev: crate::measure::Snapshot,
    ) {
        let n = self.plan.settings.retest_limit;
        self.left += n.saturating_sub(2);
        for k in 3..=n {
            let idx = self.exec(item, Phase::UpperLimit, item.defaults(), false);
            let seq = self.s.runs[idx].seq;
            if self.abnormal(idx) {
                // S64: the run did not complete normally: fault 1-a for every suspect.
                let (cause, reason) = self.abnormal_cause(idx);
                let names: Vec<String> = pending.iter().map(|s| s.id.process.clone()).collect();
                for mut s in pending {
                    s.runs.push(seq);
                    self.find(&item.name, s, Verdict::SteadyLeak, cause, reason.clone());
                }
                self.ended_findings(idx, &names);
                self.revive(idx);
                return;
            }
            let mut still = Vec::new();
            for mut s in pending {
                let Some(p) = self.point(idx, &s.id, s.resource, Some(&prev)) else {
                    let reason =
                        format!("could not be measured in run {seq} of the upper-limit check");
                    self.find(
                        &item.name,
                        s,
                        Verdict::Undeterminable,
                        Cause::NotMeasured,
                        reason,
                    );
                    continue;
                };
                let grew = p.grew;
                let growth = p.growth;
                s.series.push(p);
                s.runs.push(seq);
                if grew {
                    still.push(s);
                } else {
                    // S67 NO → S73: growth stopped: bounded by design.
                    let total = total_growth(s.resource, &s.series);
                    let reason = format!(
                        "{} grew by {total} over runs {}..{}, then by only {} in run {seq}: it stops at a cap (upper-limit check, N = {n})",
                        s.resource.name(),
                        s.runs.first().copied().unwrap_or(seq),
                        s.runs
                            .get(s.runs.len().saturating_sub(2))
                            .copied()
                            .unwrap_or(seq),
                        s.resource.format(growth),
                    );
                    self.find(
                        &item.name,
                        s,
                        Verdict::Bounded,
                        Cause::GrowthStopped,
                        reason,
                    );
                }
            }
            pending = still;
            prev = self.s.runs[idx].after.clone();
            if pending.is_empty() {
                self.left = self.left.saturating_sub(n - k);
                return;
            }
        }
        // S72: still growing after N runs: a leak.
        for s in pending {
            let per_run =
                s.series.iter().map(|p| p.growth).sum::<i64>() / s.series.len().max(1) as i64;
            let reason = format!(
                "{} grew in every one of {} runs, by {} per run on average ({} in all)",
                s.resource.name(),
                s.series.len(),
                s.resource.format(per_run),
                total_growth(s.resource, &s.series),
            );
            self.find(
                &item.name,
                s,
                Verdict::SteadyLeak,
                Cause::ContinuedGrowth,
                reason,
            );
        }
    }
}
