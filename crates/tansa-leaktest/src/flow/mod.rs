//! The seed's flow, driven against a [`Target`].
//!
//! [`run`] goes through the plan in the seed's order and stops each line of inquiry as soon
//! as its verdict is known:
//!
//! 1. every item: initial run, re-test when something grew, upper-limit check for what grew
//!    again, log check for what did not (module `items`; seed Figs. 7–11);
//! 2. after all items: log correlation and the type-3 list (P2-3), the maximum-value test
//!    (P2-4) and the accelerated test (P2-5) (module `type3`; Figs. 12–19);
//! 3. the idle test, if the plan has one (module `idle`; Figs. 20–22).
//!
//! The flow does no I/O of its own: it asks the [`Target`] to read, run, restart and search
//! logs, and takes every decision with the pure functions of [`crate::judge`].

mod idle;
mod items;
mod type3;

pub use idle::IDLE_ITEM;

use std::collections::HashMap;
use std::time::Duration;

use crate::judge;
use crate::measure::{ProcId, Reading, Resource, Snapshot};
use crate::plan::{Item, ParamValues, Plan};
use crate::report::{
    Cause, Ended, Finding, LogOnIncrease, LogRecord, NonRecurring, Phase, Point, Restart,
    RunOutcome, RunRecord, Type3Entry, Verdict,
};

/// What the flow needs from the world: the system under test and its logs.
pub trait Target {
    /// Milliseconds since the session started.
    fn now_ms(&self) -> u64;
    /// Waits.
    fn sleep(&mut self, d: Duration);
    /// One reading of every watched process that is alive now.
    fn read(&mut self) -> Vec<(ProcId, Reading)>;
    /// Runs a test item once.
    fn run_item(&mut self, item: &Item, params: &ParamValues, ctx: &RunContext<'_>) -> RunOutcome;
    /// How a watched process that is gone ended, when known.
    fn how_ended(&mut self, id: &ProcId) -> Option<String>;
    /// Starts again the watched processes that ended and can be restarted.
    fn revive(&mut self, why: &str) -> Vec<Restart>;
    /// Restarts every watched process that can be restarted (the seed's reboot).
    fn restart_all(&mut self, why: &str) -> Vec<Restart>;
    /// Error log records of watched processes logged from `from_ms` to `to_ms`.
    fn error_logs(&mut self, from_ms: u64, to_ms: u64) -> Vec<LogRecord>;
}

/// What a run is, for the target (environment of the item's command) and the observer.
#[derive(Debug, Clone)]
pub struct RunContext<'a> {
    /// Test item.
    pub item: &'a str,
    /// Phase.
    pub phase: Phase,
    /// Number among all runs.
    pub seq: u32,
    /// Number among the runs of this item.
    pub run_in_item: u32,
    /// Time limit.
    pub timeout: Duration,
}

/// Progress of a session, for people watching.
#[derive(Debug)]
pub enum Event<'a> {
    /// A new stage of the flow begins.
    Stage(&'a str),
    /// A run begins.
    Run {
        /// The run.
        ctx: &'a RunContext<'a>,
        /// Runs done so far.
        done: u32,
        /// Estimated runs still to come after this one.
        remaining: u32,
    },
    /// A process was restarted.
    Restart(&'a Restart),
    /// Something worth saying.
    Note(&'a str),
}

/// Receives [`Event`]s.
pub trait Observer {
    /// Called at each event.
    fn event(&mut self, event: &Event<'_>);
}

impl Observer for () {
    fn event(&mut self, _: &Event<'_>) {}
}

/// Everything a leak-test session produced, for [`crate::report::Report::build`].
#[derive(Debug, Default)]
pub struct TestSession {
    /// Every run, in order.
    pub runs: Vec<RunRecord>,
    /// Every verdict on a process that grew or ended.
    pub findings: Vec<Finding>,
    /// One-off growth that came with error logs (the seed's first list: the logs are
    /// checked for the same error on re-test).
    pub log_on_increase: Vec<LogOnIncrease>,
    /// One-off growth without error logs (the seed's second list: candidates of type 3).
    pub non_recurring: Vec<NonRecurring>,
    /// Type-3 list.
    pub type3: Vec<Type3Entry>,
    /// Survivors of the maximum-value test.
    pub survivors: Vec<Type3Entry>,
    /// Restarts.
    pub restarts: Vec<Restart>,
    /// Measurements of the idle test.
    pub idle: Vec<Snapshot>,
    /// Error logs of the whole test period.
    pub logs: Vec<LogRecord>,
    /// Things worth saying.
    pub notes: Vec<String>,
    /// Length of the session, ms.
    pub duration_ms: u64,
}

/// Runs the whole flow of `plan` against `target`.
pub fn run(plan: &Plan, target: &mut impl Target, observer: &mut impl Observer) -> TestSession {
    let mut e = Engine {
        plan,
        target,
        observer,
        s: TestSession::default(),
        last: None,
        item_runs: HashMap::new(),
        left: 0,
        avg_runs: 2,
    };
    if !plan.items.is_empty() {
        e.stage("test items");
        for (i, item) in plan.items.iter().enumerate() {
            e.left = (plan.items.len() - i) as u32 * e.avg_runs;
            e.item(item);
            let done: u32 = e.item_runs.values().sum();
            e.avg_runs = done.div_ceil(i as u32 + 1).max(1);
        }
        e.post_items();
    }
    if let Some(spec) = &plan.idle {
        e.stage("idle test");
        e.idle(spec);
    }
    e.s.duration_ms = e.target.now_ms();
    e.s
}

/// A resource of a process under suspicion, with its measurements so far.
#[derive(Debug, Clone)]
struct Suspect {
    id: ProcId,
    resource: Resource,
    runs: Vec<u32>,
    series: Vec<Point>,
}

struct Engine<'a, T: Target, O: Observer> {
    plan: &'a Plan,
    target: &'a mut T,
    observer: &'a mut O,
    s: TestSession,
    /// The latest measurement, to see which processes ended during a run.
    last: Option<Snapshot>,
    item_runs: HashMap<String, u32>,
    /// Estimated runs left in the session, for progress.
    left: u32,
    /// Runs per item so far, for the estimate.
    avg_runs: u32,
}

impl<T: Target, O: Observer> Engine<'_, T, O> {
    fn stage(&mut self, name: &str) {
        self.observer.event(&Event::Stage(name));
    }

    fn note(&mut self, text: String) {
        self.observer.event(&Event::Note(&text));
        self.s.notes.push(text);
    }

    /// One measurement of every watched process (several readings, outlier dropped).
    fn measure_with(&mut self, readings: u32, interval: Duration) -> Snapshot {
        let mut rounds = Vec::new();
        for k in 0..readings.max(1) {
            if k > 0 {
                self.target.sleep(interval);
            }
            rounds.push(self.target.read());
        }
        Snapshot::combine(self.target.now_ms(), &rounds)
    }

    fn measure(&mut self) -> Snapshot {
        let st = &self.plan.settings;
        self.measure_with(st.readings, st.reading_interval)
    }

    /// Runs `item` once and measures around it; returns the index of its record.
    fn exec(&mut self, item: &Item, phase: Phase, params: ParamValues, before: bool) -> usize {
        let run_in_item = {
            let n = self.item_runs.entry(item.name.clone()).or_default();
            *n += 1;
            *n
        };
        let seq = self.s.runs.len() as u32 + 1;
        let ctx = RunContext {
            item: &item.name,
            phase,
            seq,
            run_in_item,
            timeout: item.timeout.unwrap_or(self.plan.settings.timeout),
        };
        self.left = self.left.saturating_sub(1);
        self.observer.event(&Event::Run {
            ctx: &ctx,
            done: seq - 1,
            remaining: self.left,
        });
        let before = before.then(|| self.measure());
        let reference = before.clone().or_else(|| self.last.clone());
        let start_ms = self.target.now_ms();
        let outcome = self.target.run_item(item, &params, &ctx);
        let end_ms = self.target.now_ms();
        self.target.sleep(self.plan.settings.settle);
        let after = self.measure();
        let mut ended = Vec::new();
        if let Some(r) = &reference {
            for id in judge::ended(r, &after) {
                let how = self.target.how_ended(&id).unwrap_or_else(|| "ended".into());
                ended.push(Ended { id, how });
            }
        }
        self.last = Some(after.clone());
        self.s.runs.push(RunRecord {
            seq,
            item: item.name.clone(),
            phase,
            run_in_item,
            params,
            start_ms,
            end_ms,
            outcome,
            before,
            after,
            ended,
        });
        self.s.runs.len() - 1
    }

    /// Whether run `idx` ended abnormally: the item did not complete, or a watched process
    /// ended.
    fn abnormal(&self, idx: usize) -> bool {
        let r = &self.s.runs[idx];
        !r.outcome.is_completed() || !r.ended.is_empty()
    }

    /// Starts again what ended during run `idx`.
    fn revive(&mut self, idx: usize) {
        if self.s.runs[idx].ended.is_empty() {
            return;
        }
        let why = format!("ended during run {}", self.s.runs[idx].seq);
        let restarts = self.target.revive(&why);
        self.record_restarts(restarts);
    }

    fn record_restarts(&mut self, restarts: Vec<Restart>) {
        for r in restarts {
            self.observer.event(&Event::Restart(&r));
            self.s.restarts.push(r);
        }
        self.last = None;
    }

    /// Findings for the watched processes that ended during run `idx`, skipping `except`.
    fn ended_findings(&mut self, idx: usize, except: &[String]) {
        let r = &self.s.runs[idx];
        let verdict = r.phase.abnormal_verdict();
        let mut found = Vec::new();
        for e in &r.ended {
            if except.contains(&e.id.process) {
                continue;
            }
            found.push(Finding {
                process: e.id.process.clone(),
                item: r.item.clone(),
                resource: None,
                verdict,
                fault: verdict.is_fault(),
                cause: Cause::ProcessEnded,
                reason: format!(
                    "abnormal end: process {} {} during run {} ({} run of `{}`)",
                    e.id.pid,
                    e.how,
                    r.seq,
                    r.phase.name(),
                    r.item
                ),
                runs: vec![r.seq],
                series: Vec::new(),
                log_ids: Vec::new(),
            });
        }
        self.s.findings.extend(found);
    }

    /// The cause and words of an abnormal end of run `idx`, judged for a suspect: a watched
    /// process that ended explains it best; else the item's failure or time-out.
    fn abnormal_cause(&self, idx: usize) -> (Cause, String) {
        let r = &self.s.runs[idx];
        let what = format!("run {} ({} run of `{}`)", r.seq, r.phase.name(), r.item);
        if !r.ended.is_empty() {
            let who: Vec<String> = r
                .ended
                .iter()
                .map(|e| format!("{} (pid {}) {}", e.id.process, e.id.pid, e.how))
                .collect();
            let item = if r.outcome.is_completed() {
                String::new()
            } else {
                format!("; the test item {}", r.outcome.describe())
            };
            return (
                Cause::ProcessEnded,
                format!("abnormal end: {} during {what}{item}", who.join(", ")),
            );
        }
        let cause = match r.outcome {
            RunOutcome::Hung { .. } => Cause::ItemHung,
            _ => Cause::ItemFailed,
        };
        (
            cause,
            format!(
                "abnormal end: the test item {} in {what}",
                r.outcome.describe()
            ),
        )
    }

    /// A point of the series of `resource` of `id` in run `idx`, compared with
    /// `reference` (the run's own `before` when `None`).
    fn point(
        &self,
        idx: usize,
        id: &ProcId,
        resource: Resource,
        reference: Option<&Snapshot>,
    ) -> Option<Point> {
        let r = &self.s.runs[idx];
        let before = reference.or(r.before.as_ref())?.get(id)?.get(resource);
        let after = r.after.get(id)?.get(resource);
        let growth = judge::diff(before, after);
        Some(Point {
            run: Some(r.seq),
            phase: r.phase,
            params: r.params.clone(),
            before,
            after,
            growth,
            grew: judge::grew(growth, self.plan.settings.thresholds.of(resource)),
        })
    }

    /// Records a finding about a suspect.
    fn find(&mut self, item: &str, s: Suspect, verdict: Verdict, cause: Cause, reason: String) {
        self.s.findings.push(Finding {
            process: s.id.process,
            item: item.to_string(),
            resource: Some(s.resource),
            verdict,
            fault: verdict.is_fault(),
            cause,
            reason,
            runs: s.runs,
            series: s.series,
            log_ids: Vec::new(),
        });
    }
}

/// Sum of the growth of a series, formatted.
fn total_growth(resource: Resource, series: &[Point]) -> String {
    resource.format(series.iter().map(|p| p.growth).sum())
}

#[cfg(any(test, feature = "sim"))]
pub mod sim;
#[cfg(test)]
mod tests;
