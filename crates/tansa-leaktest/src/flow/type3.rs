//! After all items: log correlation and the type-3 list (P2-3), the maximum-value test
//! (P2-4) and the accelerated test (P2-5) (seed Figs. 12–19).

use super::{Engine, Observer, Suspect, Target, total_growth};
use crate::judge;
use crate::measure::ProcId;
use crate::plan::{Item, Param, Plan};
use crate::report::{Cause, Finding, Phase, Type3Entry, Verdict};

impl<'a, T: Target, O: Observer> Engine<'a, T, O> {
    /// P2-3, P2-4 and P2-5 in the seed's order (S13–S15).
    pub(super) fn post_items(&mut self) {
        let (Some(first), Some(last)) = (self.s.runs.first(), self.s.runs.last()) else {
            return;
        };
        let window = (first.start_ms, last.end_ms);
        let type3 = self.correlate(window);
        if type3.is_empty() {
            return;
        }
        self.stage("maximum-value test");
        let survivors = self.max_value(&type3);
        self.s.type3 = type3;
        if survivors.is_empty() {
            return;
        }
        self.stage("accelerated test");
        self.s.survivors = survivors.clone();
        self.accelerated(survivors);
    }

    /// P2-3: type 2 from the first list, the type-3 list from the second.
    fn correlate(&mut self, window: (u64, u64)) -> Vec<Type3Entry> {
        if self.s.log_on_increase.is_empty() && self.s.non_recurring.is_empty() {
            return Vec::new();
        }
        self.stage("log correlation");
        // S83: the error logs of the whole test period.
        self.s.logs = self.target.error_logs(window.0, window.1);
        for d in judge::type2(&self.s.log_on_increase, &self.s.logs) {
            let e = &self.s.log_on_increase[d.entry];
            self.s.findings.push(Finding {
                process: e.process.clone(),
                item: e.item.clone(),
                resource: Some(e.resource),
                verdict: d.verdict,
                fault: d.verdict.is_fault(),
                cause: d.cause,
                reason: d.reason,
                runs: e.runs.clone(),
                series: e.series.clone(),
                log_ids: d.log_ids,
            });
        }
        let min = self.plan.settings.type3_min_records;
        let candidates = judge::type3_candidates(&self.s.non_recurring, min);
        let mut type3 = Vec::new();
        for (i, e) in self.s.non_recurring.iter().enumerate() {
            if candidates.contains(&i) {
                type3.push(Type3Entry {
                    process: e.process.clone(),
                    resource: e.resource,
                    item: e.item.clone(),
                    runs: e.runs.clone(),
                    series: e.series.clone(),
                });
                continue;
            }
            let reason = format!(
                "{} grew once ({}) and not in the re-test, with no error logged; one-off growth in fewer than {min} items is not a fault (warm-up)",
                e.resource.name(),
                total_growth(e.resource, &e.series[..1.min(e.series.len())]),
            );
            self.s.findings.push(Finding {
                process: e.process.clone(),
                item: e.item.clone(),
                resource: Some(e.resource),
                verdict: Verdict::NotFault,
                fault: false,
                cause: Cause::OneOffNoLog,
                reason,
                runs: e.runs.clone(),
                series: e.series.clone(),
                log_ids: Vec::new(),
            });
        }
        type3
    }

    /// The items of the plan that `list` names, in plan order.
    fn items_in(&self, list: &[Type3Entry]) -> Vec<&'a Item> {
        let plan: &'a Plan = self.plan;
        plan.items
            .iter()
            .filter(|i| list.iter().any(|e| e.item == i.name))
            .collect()
    }

    /// Entries of `list` for `item`, as suspects (the process is looked up by name, since
    /// restarts change its identity).
    fn entries_of(list: &[Type3Entry], item: &Item) -> Vec<Suspect> {
        list.iter()
            .filter(|e| e.item == item.name)
            .map(|e| Suspect {
                id: ProcId {
                    process: e.process.clone(),
                    pid: 0,
                    start_ticks: 0,
                },
                resource: e.resource,
                runs: e.runs.clone(),
                series: e.series.clone(),
            })
            .collect()
    }

    /// The point of a suspect (by process name) in run `idx`.
    fn named_point(&self, idx: usize, s: &Suspect) -> Option<crate::report::Point> {
        let r = &self.s.runs[idx];
        let before = r.before.as_ref()?;
        let id = r
            .after
            .named(&s.id.process)
            .find(|a| before.get(&a.id).is_some())?
            .id
            .clone();
        self.point(idx, &id, s.resource, None)
    }

    /// An abnormal end of run `idx` in P2-4 or P2-5: fault 3-a for every pending suspect
    /// (S130, S174).
    fn abnormal_3a(&mut self, item: &Item, idx: usize, pending: Vec<Suspect>) {
        let (cause, reason) = self.abnormal_cause(idx);
        let seq = self.s.runs[idx].seq;
        let names: Vec<String> = pending.iter().map(|s| s.id.process.clone()).collect();
        for mut s in pending {
            s.runs.push(seq);
            self.find(
                &item.name,
                s,
                Verdict::ConditionUnbounded,
                cause,
                reason.clone(),
            );
        }
        self.ended_findings(idx, &names);
        self.revive(idx);
    }

    /// P2-4: each ranged parameter at its maximum, the others at their defaults. Growth in
    /// one run beyond a known limit, or an abnormal end, is 3-a; the rest survive to P2-5.
    fn max_value(&mut self, type3: &[Type3Entry]) -> Vec<Type3Entry> {
        let mut survivors = Vec::new();
        let items = self.items_in(type3);
        self.left = items.iter().map(|i| i.ranged().count() as u32).sum();
        for item in items {
            let mut pending = Self::entries_of(type3, item);
            let ranged: Vec<&Param> = item.ranged().collect();
            if ranged.is_empty() {
                for s in pending {
                    let reason = format!(
                        "suspected of condition-driven growth, but item `{}` has no parameter with min and max to vary",
                        item.name
                    );
                    self.find(
                        &item.name,
                        s,
                        Verdict::Undeterminable,
                        Cause::NoParameterRange,
                        reason,
                    );
                }
                continue;
            }
            for p in ranged {
                let Some(range) = &p.range else { continue };
                let mut params = item.defaults();
                params.insert(p.name.clone(), range.max);
                let idx = self.exec(item, Phase::MaxValue, params, true);
                if self.abnormal(idx) {
                    self.abnormal_3a(item, idx, std::mem::take(&mut pending));
                    break;
                }
                let mut still = Vec::new();
                for mut s in pending {
                    let Some(point) = self.named_point(idx, &s) else {
                        still.push(s);
                        continue;
                    };
                    let growth = point.growth;
                    s.series.push(point);
                    s.runs.push(self.s.runs[idx].seq);
                    match self.plan.limit(&s.id.process, s.resource) {
                        Some(limit) if judge::exceeds(growth, limit) => {
                            let reason = format!(
                                "with {} = {} (its maximum), {} grew by {} in one run, more than the known limit {}",
                                p.name,
                                range.max,
                                s.resource.name(),
                                s.resource.format(growth),
                                s.resource.format(limit.try_into().unwrap_or(i64::MAX)),
                            );
                            self.find(
                                &item.name,
                                s,
                                Verdict::ConditionUnbounded,
                                Cause::LimitExceeded,
                                reason,
                            );
                        }
                        _ => still.push(s),
                    }
                }
                pending = still;
                if pending.is_empty() {
                    break;
                }
            }
            survivors.extend(pending.into_iter().map(|s| Type3Entry {
                process: s.id.process,
                resource: s.resource,
                item: item.name.clone(),
                runs: s.runs,
                series: s.series,
            }));
        }
        survivors
    }

    /// P2-5: restart, then sweep each ranged parameter from min to max, the others at their
    /// defaults. Cumulative growth beyond a known limit, or an abnormal end, is 3-a; growth
    /// still in the latter 10 % of a sweep is 3-a (decision on the seed's S175); no growth
    /// there in every sweep is 3-b.
    fn accelerated(&mut self, survivors: Vec<Type3Entry>) {
        let items = self.items_in(&survivors);
        self.left = items
            .iter()
            .flat_map(|i| i.ranged())
            .map(|p| p.range.as_ref().map_or(0, |r| r.sweep.len() as u32))
            .sum();
        for item in items {
            let mut pending = Self::entries_of(&survivors, item);
            let mut swept = Vec::new();
            for p in item.ranged() {
                if pending.is_empty() {
                    break;
                }
                let Some(range) = &p.range else { continue };
                if self.plan.settings.restart_before_sweep {
                    let why = format!("before sweeping `{}` of item `{}`", p.name, item.name);
                    let restarts = self.target.restart_all(&why);
                    if restarts.is_empty() {
                        self.note(format!(
                            "nothing could be restarted {why}: the sweep starts from the current state"
                        ));
                    }
                    self.record_restarts(restarts);
                }
                let mut base: Vec<Option<u64>> = vec![None; pending.len()];
                let mut grew: Vec<Vec<bool>> = vec![Vec::new(); pending.len()];
                let mut decided: Vec<bool> = vec![false; pending.len()];
                let mut aborted = None;
                for &v in &range.sweep {
                    let mut params = item.defaults();
                    params.insert(p.name.clone(), v);
                    let idx = self.exec(item, Phase::Accelerated, params, true);
                    if self.abnormal(idx) {
                        aborted = Some(idx);
                        break;
                    }
                    for (k, s) in pending.iter_mut().enumerate() {
                        if decided[k] {
                            continue;
                        }
                        let Some(point) = self.named_point(idx, s) else {
                            continue;
                        };
                        let start = *base[k].get_or_insert(point.before);
                        let total = judge::diff(start, point.after);
                        grew[k].push(point.grew);
                        s.series.push(point);
                        s.runs.push(self.s.runs[idx].seq);
                        if let Some(limit) = self.plan.limit(&s.id.process, s.resource)
                            && judge::exceeds(total, limit)
                        {
                            decided[k] = true;
                            let reason = format!(
                                "sweeping {} up to {v}, {} grew by {} in all, more than the known limit {}",
                                p.name,
                                s.resource.name(),
                                s.resource.format(total),
                                s.resource.format(limit.try_into().unwrap_or(i64::MAX)),
                            );
                            let found = s.clone();
                            self.find(
                                &item.name,
                                found,
                                Verdict::ConditionUnbounded,
                                Cause::LimitExceeded,
                                reason,
                            );
                        }
                    }
                    if decided.iter().all(|&d| d) {
                        let skipped = range.sweep.iter().skip_while(|&&x| x != v).count() as u32;
                        self.left = self.left.saturating_sub(skipped.saturating_sub(1));
                        break;
                    }
                }
                if let Some(idx) = aborted {
                    // S157 NO → S174: every suspect still open is 3-a.
                    let rest: Vec<Suspect> = pending
                        .into_iter()
                        .zip(decided)
                        .filter(|(_, d)| !d)
                        .map(|(s, _)| s)
                        .collect();
                    self.abnormal_3a(item, idx, rest);
                    pending = Vec::new();
                    break;
                }
                let mut still = Vec::new();
                for (k, s) in pending.into_iter().enumerate() {
                    if decided[k] {
                        continue;
                    }
                    if grew[k].is_empty() {
                        let reason = format!(
                            "was not running during the sweep of {} (see restarts), so it could not be tested",
                            p.name
                        );
                        self.find(
                            &item.name,
                            s,
                            Verdict::Undeterminable,
                            Cause::NotMeasured,
                            reason,
                        );
                        continue;
                    }
                    if judge::tail_grows(&grew[k]) {
                        let tail = judge::tail_len(grew[k].len());
                        let reason = format!(
                            "sweeping {} from {} to {}, {} still grew in the last {tail} of {} values: no cap",
                            p.name,
                            range.min,
                            range.max,
                            s.resource.name(),
                            grew[k].len(),
                        );
                        self.find(
                            &item.name,
                            s,
                            Verdict::ConditionUnbounded,
                            Cause::TailGrowth,
                            reason,
                        );
                    } else {
                        still.push(s);
                    }
                }
                pending = still;
                swept.push(p.name.clone());
            }
            for s in pending {
                let reason = format!(
                    "{} grew with {} but stopped before the last 10 % of each sweep: it stops at a cap",
                    s.resource.name(),
                    swept.join(", "),
                );
                self.find(
                    &item.name,
                    s,
                    Verdict::ConditionBounded,
                    Cause::TailFlat,
                    reason,
                );
            }
        }
    }
}
