//! The idle test (seed Figs. 20–22): leave the system alone, measure at fixed intervals, and
//! judge any growth between two consecutive measurements a leak of periodic work (1-a).

use std::time::Duration;

use super::{Engine, Observer, Target};
use crate::judge;
use crate::measure::ProcId;
use crate::plan::IdleSpec;
use crate::report::{Cause, Finding, Phase, Point, Verdict};

/// The item name of idle-test findings.
pub const IDLE_ITEM: &str = "(idle)";

impl<T: Target, O: Observer> Engine<'_, T, O> {
    pub(super) fn idle(&mut self, spec: &IdleSpec) {
        let num = spec.measurements();
        let t0 = self.target.now_ms();
        let interval_ms = u64::try_from(spec.interval.as_millis()).unwrap_or(u64::MAX);
        let mut snaps = Vec::new();
        for i in 0..num {
            if i > 0 {
                let due = t0.saturating_add(interval_ms.saturating_mul(u64::from(i)));
                let now = self.target.now_ms();
                if due > now {
                    self.target.sleep(Duration::from_millis(due - now));
                }
            }
            self.note_progress(i, num);
            snaps.push(self.measure_with(spec.readings, spec.reading_interval));
        }
        let th = self.plan.settings.thresholds;
        let judged = self.plan.settings.judge.clone();
        let Some(first) = snaps.first() else { return };
        let mut findings = Vec::new();
        let mut notes = Vec::new();
        for sample in &first.processes {
            let id = &sample.id;
            let present = snaps.iter().all(|s| s.get(id).is_some());
            if !present {
                findings.push(ended_while_idle(id, &snaps));
                continue;
            }
            for &resource in &judged {
                let values: Vec<u64> = snaps
                    .iter()
                    .filter_map(|s| s.get(id).map(|x| x.get(resource)))
                    .collect();
                let Some(at) = judge::first_increase(&values, th.of(resource)) else {
                    continue;
                };
                let series: Vec<Point> = values
                    .windows(2)
                    .map(|w| {
                        let growth = judge::diff(w[0], w[1]);
                        Point {
                            run: None,
                            phase: Phase::Idle,
                            params: Default::default(),
                            before: w[0],
                            after: w[1],
                            growth,
                            grew: judge::grew(growth, th.of(resource)),
                        }
                    })
                    .collect();
                let reason = format!(
                    "{} grew by {} between idle measurements {at} and {} (of {num}, {} apart) with no test running: periodic work leaks",
                    resource.name(),
                    resource.format(series[at - 1].growth),
                    at + 1,
                    humantime::format_duration(spec.interval),
                );
                findings.push(Finding {
                    process: id.process.clone(),
                    item: IDLE_ITEM.into(),
                    resource: Some(resource),
                    verdict: Verdict::SteadyLeak,
                    fault: true,
                    cause: Cause::IdleGrowth,
                    reason,
                    runs: Vec::new(),
                    series,
                    log_ids: Vec::new(),
                });
            }
        }
        for s in &snaps[1..] {
            for p in &s.processes {
                if first.get(&p.id).is_none()
                    && !notes.iter().any(|n: &String| n.contains(&p.id.process))
                {
                    notes.push(format!(
                        "{} (pid {}) appeared during the idle test and was not judged there",
                        p.id.process, p.id.pid
                    ));
                }
            }
        }
        self.s.findings.extend(findings);
        for n in notes {
            self.note(n);
        }
        self.s.idle = snaps;
        let restarts = self.target.revive("ended during the idle test");
        self.record_restarts(restarts);
    }

    fn note_progress(&mut self, i: u32, num: u32) {
        let text = format!("idle measurement {} of {num}", i + 1);
        self.observer.event(&super::Event::Note(&text));
    }
}

/// A process that was there at the first idle measurement and not at a later one.
fn ended_while_idle(id: &ProcId, snaps: &[crate::measure::Snapshot]) -> Finding {
    let gone_at = snaps.iter().position(|s| s.get(id).is_none()).unwrap_or(0);
    Finding {
        process: id.process.clone(),
        item: IDLE_ITEM.into(),
        resource: None,
        verdict: Verdict::SteadyLeak,
        fault: true,
        cause: Cause::ProcessEnded,
        reason: format!(
            "abnormal end: process {} was gone at idle measurement {} of {}",
            id.pid,
            gone_at + 1,
            snaps.len()
        ),
        runs: Vec::new(),
        series: Vec::new(),
        log_ids: Vec::new(),
    }
}
