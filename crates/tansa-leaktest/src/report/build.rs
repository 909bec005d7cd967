//! The report: a [`TestSession`] summed up per process and per item.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    Finding, LogOnIncrease, LogRecord, NonRecurring, Phase, Restart, RunRecord, Type3Entry, Verdict,
};
use crate::flow::TestSession;
use crate::measure::{Resource, Snapshot};
use crate::plan::Plan;

/// Schema name of the JSON report; changes only with incompatible changes.
pub const SCHEMA: &str = "tansa.leaktest-report.v1";

/// Everything `tansa leaktest` found, with every measurement that led to it.
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Version of tansa that wrote it.
    pub tansa_version: &'static str,
    /// The plan file, as given.
    pub plan: Option<String>,
    /// Start of the session, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Length of the session, ms.
    pub duration_ms: u64,
    /// Settings in force.
    pub settings: SettingsReport,
    /// The answer in a few numbers.
    pub summary: Summary,
    /// One entry per watched process, with its overall verdict.
    pub processes: Vec<ProcessReport>,
    /// One entry per test item.
    pub items: Vec<ItemReport>,
    /// Every finding; `processes[].findings` and `items[].results[].findings` index here.
    pub findings: Vec<Finding>,
    /// The seed's lists.
    pub lists: Lists,
    /// Every run with its measurements.
    pub runs: Vec<RunRecord>,
    /// Measurements of the idle test.
    pub idle: Vec<Snapshot>,
    /// Error logs of watched processes over the whole test period (when they were needed).
    pub logs: Vec<LogRecord>,
    /// Restarts of watched processes.
    pub restarts: Vec<Restart>,
    /// Things worth saying.
    pub notes: Vec<String>,
}

/// Settings in force.
#[derive(Debug, Serialize)]
pub struct SettingsReport {
    /// N of the upper-limit check.
    pub retest_limit: u32,
    /// Readings per measurement.
    pub readings: u32,
    /// Time between readings, ms.
    pub reading_interval_ms: u64,
    /// Wait after a run before measuring, ms.
    pub settle_ms: u64,
    /// Default time limit of a run, ms.
    pub timeout_ms: u64,
    /// Judged resources.
    pub judge: Vec<Resource>,
    /// Growth threshold for RSS and PSS, bytes.
    pub threshold_memory_bytes: u64,
    /// Growth threshold for file descriptors.
    pub threshold_fds: u64,
    /// One-off growths (in different items) that make a type-3 suspect.
    pub type3_min_records: u32,
    /// Whether processes are restarted before each accelerated sweep.
    pub restart_before_sweep: bool,
}

/// The answer in a few numbers.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Whether any finding is a fault (1-a, 2, 3-a): the exit status is then 1.
    pub fault: bool,
    /// Runs of test items.
    pub runs: u32,
    /// Restarts of watched processes.
    pub restarts: u32,
    /// Fault findings.
    pub fault_findings: u32,
    /// Number of processes per overall verdict code.
    pub verdicts: BTreeMap<&'static str, u32>,
}

/// A watched process.
#[derive(Debug, Serialize)]
pub struct ProcessReport {
    /// Name.
    pub name: String,
    /// Overall verdict: the most severe of its findings, or `no-growth`.
    pub verdict: Verdict,
    /// Whether that is a fault.
    pub fault: bool,
    /// Why, in words.
    pub reason: String,
    /// Its findings (indices into `findings`).
    pub findings: Vec<usize>,
    /// Identities it had (a restart gives a new one).
    pub instances: Vec<Instance>,
    /// How noisy its measurements were.
    pub noise: Vec<Noise>,
}

/// One identity of a process.
#[derive(Debug, Serialize)]
pub struct Instance {
    /// Process id.
    pub pid: u32,
    /// Start time, clock ticks after boot.
    pub start_ticks: u64,
    /// First measurement that saw it (or its start by a restart), ms after the session
    /// started.
    pub first_seen_ms: u64,
    /// Last measurement that saw it (or its start by a restart).
    pub last_seen_ms: u64,
}

/// Noise of one resource of a process: the spread (largest minus smallest reading) within
/// one measurement, over all its measurements.
#[derive(Debug, Serialize)]
pub struct Noise {
    /// Resource.
    pub resource: Resource,
    /// Number of measurements.
    pub measurements: u32,
    /// Median spread.
    pub median_spread: u64,
    /// Largest spread.
    pub max_spread: u64,
    /// The growth threshold of the resource, for comparison.
    pub threshold: u64,
    /// Set when the largest spread reaches half the threshold.
    pub warning: Option<String>,
}

/// A test item.
#[derive(Debug, Serialize)]
pub struct ItemReport {
    /// Name.
    pub name: String,
    /// Runs of it.
    pub runs: u32,
    /// Runs per phase, in the flow's order.
    pub runs_by_phase: BTreeMap<Phase, u32>,
    /// Verdict per watched process.
    pub results: Vec<ItemResult>,
}

/// The verdict on one process for one item.
#[derive(Debug, Serialize)]
pub struct ItemResult {
    /// Process name.
    pub process: String,
    /// Most severe verdict of its findings for this item, or `no-growth`.
    pub verdict: Verdict,
    /// Findings (indices into `findings`).
    pub findings: Vec<usize>,
}

/// The seed's lists.
#[derive(Debug, Serialize)]
pub struct Lists {
    /// First process list: one-off growth with error logs.
    pub log_on_increase: Vec<LogOnIncrease>,
    /// Second process list: one-off growth without error logs.
    pub non_recurring: Vec<NonRecurring>,
    /// Type-1 list: (process, item) judged 1-b.
    pub type1: Vec<Pair>,
    /// Type-3 list: suspects of condition-driven growth.
    pub type3: Vec<Type3Entry>,
    /// Those the maximum-value test left to the accelerated test.
    pub max_value_survivors: Vec<Type3Entry>,
    /// Processes that grew in the idle test (the seed's INC_PROC).
    pub idle_increase: Vec<String>,
}

/// A (process, item) pair.
#[derive(Debug, Serialize)]
pub struct Pair {
    /// Process name.
    pub process: String,
    /// Item.
    pub item: String,
}

impl Report {
    /// Sums up `session` of `plan`.
    pub fn build(
        plan: &Plan,
        session: TestSession,
        plan_path: Option<String>,
        started_unix_ms: u64,
    ) -> Report {
        let st = &plan.settings;
        let names = process_names(plan, &session);
        let snapshots: Vec<&Snapshot> = session
            .runs
            .iter()
            .flat_map(|r| r.before.iter().chain(std::iter::once(&r.after)))
            .chain(session.idle.iter())
            .collect();

        let mut processes = Vec::new();
        for name in &names {
            let idx: Vec<usize> = (0..session.findings.len())
                .filter(|&i| &session.findings[i].process == name)
                .collect();
            let worst = worst(&session.findings, &idx);
            let (verdict, reason) = match worst {
                Some(i) => (
                    session.findings[i].verdict,
                    session.findings[i].reason.clone(),
                ),
                None => (Verdict::NoGrowth, "did not grow in any run".to_string()),
            };
            processes.push(ProcessReport {
                name: name.clone(),
                verdict,
                fault: verdict.is_fault(),
                reason,
                findings: idx,
                instances: instances(name, &snapshots, &session.restarts),
                noise: noise(name, &snapshots, plan),
            });
        }

        let mut items = Vec::new();
        for item in &plan.items {
            let runs: Vec<&RunRecord> = session
                .runs
                .iter()
                .filter(|r| r.item == item.name)
                .collect();
            let mut runs_by_phase = BTreeMap::new();
            for r in &runs {
                *runs_by_phase.entry(r.phase).or_default() += 1;
            }
            let results = names
                .iter()
                .map(|name| {
                    let idx: Vec<usize> = (0..session.findings.len())
                        .filter(|&i| {
                            let f = &session.findings[i];
                            &f.process == name && f.item == item.name
                        })
                        .collect();
                    let verdict = worst(&session.findings, &idx)
                        .map_or(Verdict::NoGrowth, |i| session.findings[i].verdict);
                    ItemResult {
                        process: name.clone(),
                        verdict,
                        findings: idx,
                    }
                })
                .collect();
            items.push(ItemReport {
                name: item.name.clone(),
                runs: runs.len() as u32,
                runs_by_phase,
                results,
            });
        }

        let mut verdicts = BTreeMap::new();
        for p in &processes {
            *verdicts.entry(p.verdict.code()).or_default() += 1;
        }
        let fault_findings = session.findings.iter().filter(|f| f.fault).count() as u32;
        let lists = Lists {
            log_on_increase: session.log_on_increase,
            non_recurring: session.non_recurring,
            type1: session
                .findings
                .iter()
                .filter(|f| f.verdict == Verdict::Bounded)
                .map(|f| Pair {
                    process: f.process.clone(),
                    item: f.item.clone(),
                })
                .collect(),
            type3: session.type3,
            max_value_survivors: session.survivors,
            idle_increase: {
                let mut v: Vec<String> = session
                    .findings
                    .iter()
                    .filter(|f| f.item == crate::flow::IDLE_ITEM && f.fault)
                    .map(|f| f.process.clone())
                    .collect();
                v.dedup();
                v
            },
        };
        Report {
            schema: SCHEMA,
            tansa_version: env!("CARGO_PKG_VERSION"),
            plan: plan_path,
            started_unix_ms,
            duration_ms: session.duration_ms,
            settings: SettingsReport {
                retest_limit: st.retest_limit,
                readings: st.readings,
                reading_interval_ms: ms(st.reading_interval),
                settle_ms: ms(st.settle),
                timeout_ms: ms(st.timeout),
                judge: st.judge.clone(),
                threshold_memory_bytes: st.thresholds.memory_bytes,
                threshold_fds: st.thresholds.fds,
                type3_min_records: st.type3_min_records,
                restart_before_sweep: st.restart_before_sweep,
            },
            summary: Summary {
                fault: fault_findings > 0,
                runs: session.runs.len() as u32,
                restarts: session.restarts.len() as u32,
                fault_findings,
                verdicts,
            },
            processes,
            items,
            findings: session.findings,
            lists,
            runs: session.runs,
            idle: session.idle,
            logs: session.logs,
            restarts: session.restarts,
            notes: session.notes,
        }
    }

    /// Whether the report holds a fault verdict.
    pub fn has_fault(&self) -> bool {
        self.summary.fault
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Index of the most severe finding among `idx` (the first of equals).
fn worst(findings: &[Finding], idx: &[usize]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for &i in idx {
        if best.is_none_or(|b| findings[i].verdict.severity() > findings[b].verdict.severity()) {
            best = Some(i);
        }
    }
    best
}

/// Names of the watched processes: the plan's, in order, then names seen in measurements
/// or findings (a `match` that found several processes names each `name[pid]`).
fn process_names(plan: &Plan, s: &TestSession) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let seen = s
        .runs
        .iter()
        .flat_map(|r| r.before.iter().chain(std::iter::once(&r.after)))
        .chain(s.idle.iter())
        .flat_map(|snap| snap.processes.iter().map(|p| p.id.process.clone()))
        .chain(s.findings.iter().map(|f| f.process.clone()));
    let mut extra: Vec<String> = Vec::new();
    for n in seen {
        if !extra.contains(&n) {
            extra.push(n);
        }
    }
    for spec in &plan.processes {
        let own: Vec<&String> = extra
            .iter()
            .filter(|n| *n == &spec.name || n.starts_with(&format!("{}[", spec.name)))
            .collect();
        if own.is_empty() {
            names.push(spec.name.clone());
        }
        for n in own {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    for n in extra {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// The identities of process `name`: seen in measurements, or started by a restart.
fn instances(name: &str, snapshots: &[&Snapshot], restarts: &[Restart]) -> Vec<Instance> {
    let mut out: Vec<Instance> = Vec::new();
    let restarted = restarts
        .iter()
        .filter_map(|r| r.started.as_ref().map(|id| (r.t_ms, id)))
        .filter(|(_, id)| id.process == name)
        .map(|(t, id)| (t, id.pid, id.start_ticks));
    let seen = snapshots.iter().flat_map(|snap| {
        snap.named(name)
            .map(|p| (snap.t_ms, p.id.pid, p.id.start_ticks))
    });
    for (t_ms, pid, start_ticks) in seen.chain(restarted) {
        {
            match out
                .iter_mut()
                .find(|i| i.pid == pid && i.start_ticks == start_ticks)
            {
                Some(i) => {
                    i.first_seen_ms = i.first_seen_ms.min(t_ms);
                    i.last_seen_ms = i.last_seen_ms.max(t_ms);
                }
                None => out.push(Instance {
                    pid,
                    start_ticks,
                    first_seen_ms: t_ms,
                    last_seen_ms: t_ms,
                }),
            }
        }
    }
    out.sort_by_key(|i| i.first_seen_ms);
    out
}

fn noise(name: &str, snapshots: &[&Snapshot], plan: &Plan) -> Vec<Noise> {
    let mut out = Vec::new();
    for resource in Resource::ALL {
        let mut spreads: Vec<u64> = snapshots
            .iter()
            .flat_map(|s| s.named(name))
            .map(|p| resource.of(&p.spread))
            .collect();
        if spreads.is_empty() {
            continue;
        }
        spreads.sort_unstable();
        let max = spreads[spreads.len() - 1];
        let threshold = plan.settings.thresholds.of(resource);
        let judged = plan.settings.judge.contains(&resource);
        let warning = (judged && max.saturating_mul(2) >= threshold).then(|| {
            format!(
                "readings of {} varied by up to {} within one measurement, half the threshold {} or more: unless the process was growing meanwhile, verdicts may follow noise; raise the threshold or the readings",
                resource.name(),
                resource.format(max.try_into().unwrap_or(i64::MAX)),
                resource.format(threshold.try_into().unwrap_or(i64::MAX)),
            )
        });
        out.push(Noise {
            resource,
            measurements: spreads.len() as u32,
            median_spread: spreads[spreads.len() / 2],
            max_spread: max,
            threshold,
            warning,
        });
    }
    out
}
