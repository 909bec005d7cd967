//! Building the report from the aggregator's state.

use rustc_hash::FxHashMap;
use tansa_format::memory::Losses;
use tansa_format::meta::ExitStatus;
use tansa_wire::event::ImproperOp;

use super::{Aggregator, BaseKey};
use crate::memory::atexit::AtExit;
use crate::memory::classify::By;
use crate::memory::ids::{SessionId, StackId};
use crate::memory::model::Registry;
use crate::memory::report::{
    FrameReport, ImproperReport, JobReport, LauncherReport, MemoryReport, ProcessReport,
    RankReport, SCHEMA, SortKey, ThreadReport, UnitReport, UnrecordedReport, sort_units,
};

impl Aggregator {
    /// The report: consumes the aggregator once every event was given.
    pub fn finish(mut self, reg: &Registry) -> MemoryReport {
        self.report(reg)
    }

    /// The report of the events given so far, leaving the aggregator as it is (events can
    /// keep coming: `record --online`'s live view takes one a few times a second). The
    /// same as [`Aggregator::finish`] at the same point.
    pub fn report(&mut self, reg: &Registry) -> MemoryReport {
        let last_ns = if self.last_ticks == 0 {
            0
        } else {
            self.clock.ns(self.last_ticks)
        };
        let t0 = if self.t0_ns == u64::MAX {
            0
        } else {
            self.t0_ns
        };
        let interval = self.interval_ns;
        let per_interval = self.config.per_interval();
        let thread_name = |pid: u32, tid: u32| {
            self.thread_names
                .get(&(pid, tid))
                .cloned()
                .unwrap_or_default()
        };
        let (at_exit, unit_at_exit) = self.at_exit();
        // Split by interval, a unit's blocks at exit go on its last row (the check is made
        // at the end): the HTML page shows them for a range that reaches the end.
        let mut last_rows: FxHashMap<u32, (u64, usize)> = FxHashMap::default();
        if per_interval && self.leak_check.is_some() {
            for (i, row) in self.rows.iter().enumerate() {
                let last = last_rows.entry(row.base).or_insert((row.interval, i));
                if row.interval >= last.0 {
                    *last = (row.interval, i);
                }
            }
        }
        let programs = crate::program::ProgramNames::new(self.program_images.keys().map(|p| &**p));
        let mut units: Vec<(UnitReport, u64)> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let base = &self.bases[row.base as usize];
                let mut u = UnitReport {
                    unit: String::new(),
                    stats: row.stats,
                    thread: None,
                    call_index: None,
                    start_ns: None,
                    end_ns: None,
                    cumulative_net_bytes: None,
                    rank: None,
                    host: None,
                    exe: None,
                    processes: None,
                    at_exit: None,
                };
                match &base.key {
                    BaseKey::Named(n) => u.unit = n.to_string(),
                    BaseKey::Thread(pid, tid) => {
                        let name = thread_name(*pid, *tid);
                        u.unit = format!("{name} [{tid}]");
                        u.thread = Some(ThreadReport {
                            pid: *pid,
                            tid: *tid,
                            name,
                        });
                    }
                    BaseKey::Rank(rank) => {
                        u.unit =
                            rank.map_or_else(|| "(no rank)".to_string(), |r| format!("rank {r}"));
                        u.rank = *rank;
                        u.host = Some(self.hosts_of(*rank));
                    }
                    BaseKey::Program(path) => {
                        u.unit = programs.name(path);
                        // `?` when not known, as the JSON schema has it.
                        u.exe = Some(if crate::program::is_unknown_executable(path) {
                            "?".to_string()
                        } else {
                            path.to_string()
                        });
                        u.processes = self.program_images.get(path).copied();
                    }
                    BaseKey::Call(n, i) => {
                        u.unit = n.to_string();
                        u.call_index = Some(*i);
                        u.start_ns = Some(base.start_ns.saturating_sub(t0));
                        u.end_ns = Some(base.end_ns.saturating_sub(t0));
                    }
                }
                let last_row = !per_interval || last_rows.get(&row.base).is_some_and(|l| l.1 == i);
                if self.leak_check.is_some() && last_row {
                    u.at_exit = Some(unit_at_exit.get(&row.base).copied().unwrap_or_default());
                }
                if per_interval {
                    u.start_ns = Some(row.interval.saturating_mul(interval));
                    u.end_ns = Some(row.interval.saturating_add(1).saturating_mul(interval));
                    u.cumulative_net_bytes = Some(row.cumulative);
                }
                (u, row.interval)
            })
            .collect();
        match self.config.by {
            _ if per_interval => units.sort_by(|a, b| (a.1, &a.0.unit).cmp(&(b.1, &b.0.unit))),
            // Ranks in order, the processes without one last.
            By::Rank => units.sort_by_key(|u| (u.0.rank.is_none(), u.0.rank)),
            By::Call => units.sort_by(|a, b| {
                (a.0.start_ns, &a.0.unit, a.0.call_index).cmp(&(
                    b.0.start_ns,
                    &b.0.unit,
                    b.0.call_index,
                ))
            }),
            _ => {}
        }
        let mut units: Vec<UnitReport> = units.into_iter().map(|(u, _)| u).collect();
        if !per_interval && !matches!(self.config.by, By::Rank | By::Call) {
            sort_units(&mut units, SortKey::default());
        }
        let job_view = self.job.is_some();
        let end_ticks: Vec<Option<u64>> = self
            .order
            .iter()
            .map(|id| self.session(*id).origin.end_ticks.filter(|_| job_view))
            .collect();
        let ends: Vec<Option<u64>> = end_ticks
            .into_iter()
            .map(|t| t.map(|t| self.clock.ns(t).saturating_sub(t0)))
            .collect();
        let ends_by_session: rustc_hash::FxHashMap<SessionId, Option<u64>> = self
            .order
            .iter()
            .copied()
            .zip(ends.iter().copied())
            .collect();
        let process_report = |id: &SessionId| {
            let s = self.session(*id);
            ProcessReport {
                pid: s.meta.pid,
                ppid: s.meta.ppid,
                exe: s.meta.exe.clone(),
                command: s.meta.cmdline.clone(),
                exit: s.exit.into(),
                events: s.events,
                lost_events: s.lost,
                losses: s.losses,
                host: job_view.then(|| s.origin.host.to_string()),
                rank: s.origin.rank.filter(|_| job_view),
                recording: job_view.then_some(s.origin.recording),
                peak_bytes: job_view.then_some(s.heap.max_bytes),
                end_ns: ends_by_session.get(id).copied().flatten(),
                at_exit: at_exit.as_ref().and_then(|x| x.get(id).copied()),
                session: id.0,
            }
        };
        let processes: Vec<ProcessReport> = self.order.iter().map(process_report).collect();
        let process = self
            .order
            .iter()
            .find(|id| self.session(**id).included)
            .map(process_report)
            .unwrap_or_else(|| {
                ProcessReport::new(
                    self.config.pid.unwrap_or(0),
                    0,
                    String::new(),
                    Vec::new(),
                    ExitStatus::Running.into(),
                )
            });
        let job = self.job.as_ref().map(|setup| {
            let ranks = self.rank_reports(&processes);
            let by_time = ranks
                .iter()
                .filter_map(|r| r.end_ns.map(|e| (e, r.rank)))
                .min()
                .map(|(_, r)| r);
            // A failure seen (a code, a signal) before an end not seen: under MPICH's
            // Hydra, ranks its proxy killed and reaped end unseen, beside the one that
            // aborted.
            let by_status = [Seen::Yes, Seen::No].into_iter().find_map(|seen| {
                ranks
                    .iter()
                    .find(|r| failed_by_itself(&r.exit) == Some(seen))
                    .map(|r| r.rank)
            });
            let (first_ended, first_ended_by) = match (by_time, by_status) {
                (Some(r), _) => (Some(r), Some("end-time")),
                (None, Some(r)) => (Some(r), Some("exit-status")),
                (None, None) => (None, None),
            };
            let launcher = processes
                .iter()
                .find(|p| {
                    p.rank.is_none()
                        && p.exit.kind != "exec"
                        && processes.iter().any(|r| {
                            r.rank.is_some() && r.ppid == p.pid && r.recording == p.recording
                        })
                })
                .map(|p| LauncherReport {
                    pid: p.pid,
                    command: p.command.clone(),
                    exit: p.exit.clone(),
                });
            JobReport {
                id: setup.id.clone(),
                size: setup.size,
                recordings: setup.recordings.len() as u32,
                clock: setup.clock,
                ranks,
                first_ended,
                first_ended_by,
                launcher,
            }
        });
        let mut improper: Vec<ImproperReport> = self
            .improper
            .iter()
            .map(|(&(session, stack, _, _), imp)| ImproperReport {
                op: match imp.op {
                    ImproperOp::Free => "free",
                    ImproperOp::Realloc => "realloc",
                },
                count: imp.count,
                ptr: format!("{:#x}", imp.ptr),
                pid: imp.pid,
                refused: imp.refused,
                // A call that went through, in a process whose agent lost events: the
                // block's allocation may have been one of them.
                lost_events: if imp.refused {
                    0
                } else {
                    self.session(session).lost
                },
                stack: stack_report(reg, session, stack),
            })
            .collect();
        improper.sort_by(|a, b| b.count.cmp(&a.count).then(a.ptr.cmp(&b.ptr)));
        let mut warnings = Vec::new();
        let included = || self.sessions.iter().filter(|s| s.included);
        let lost: u64 = included().fold(0u64, |sum, s| sum.saturating_add(s.lost));
        let mut losses = Losses::default();
        for s in included() {
            losses.add(&s.losses);
        }
        if lost > 0 {
            warnings.push(format!(
                "the agent could not record {lost} event(s): the figures are incomplete"
            ));
        }
        warnings.extend(losses.describe());
        if !self.unrecorded.is_empty() {
            let list: Vec<String> = self
                .unrecorded
                .iter()
                .take(10)
                .map(|u| {
                    let exe = u.exe.rsplit('/').next().unwrap_or(&u.exe);
                    format!(
                        "{} ({}): {}",
                        u.pid,
                        if exe.is_empty() { "?" } else { exe },
                        u.reason
                    )
                })
                .collect();
            warnings.push(format!(
                "{} process(es) ran without being recorded: {}{}",
                self.unrecorded.len(),
                list.join("; "),
                if self.unrecorded.len() > 10 {
                    "; ..."
                } else {
                    ""
                }
            ));
        }
        let requested = self.config.interval_ns.max(1);
        if per_interval && interval != requested {
            warnings.push(format!(
                "intervals of {} would make more than {} intervals of this recording; the \
                 report uses intervals of {} instead (give a longer --interval)",
                super::interval::duration_text(requested),
                super::MAX_INTERVALS,
                super::interval::duration_text(interval),
            ));
        }
        let leak_check = self.leak_check.as_deref().map(|findings| {
            let mut total = AtExit::default();
            let images: Vec<(SessionId, u32)> = self
                .order
                .iter()
                .filter(|id| self.session(**id).included)
                .map(|id| (*id, self.session(*id).meta.pid))
                .collect();
            for (id, _) in &images {
                if let Some(x) = at_exit.as_ref().and_then(|x| x.get(id)) {
                    total.sum(x);
                }
            }
            findings.summary(images, total, &mut warnings)
        });
        if self.anomalies > 0 {
            warnings.push(format!(
                "{} address(es) were handed out again without a recorded release",
                self.anomalies
            ));
        }
        MemoryReport {
            schema: SCHEMA,
            by: self.config.by.name(),
            charge: self.config.charge.name(),
            free_to: self.config.free_to.name(),
            interval_ns: per_interval.then_some(interval),
            process,
            processes,
            totals: self.totals,
            units,
            unrecorded: self
                .unrecorded
                .iter()
                .map(|u| UnrecordedReport {
                    pid: u.pid,
                    ppid: u.ppid,
                    exe: u.exe.clone(),
                    reason: u.reason.clone(),
                })
                .collect(),
            improper,
            inherited_frees: self.inherited_frees,
            sample_rate_bytes: (self.sample_rate != 0).then_some(self.sample_rate),
            events: self.events,
            duration_ns: last_ns.saturating_sub(t0),
            recordings: self
                .job
                .as_ref()
                .filter(|j| j.recordings.len() > 1)
                .map(|j| j.recordings.clone())
                .unwrap_or_default(),
            job,
            leak_check,
            warnings,
        }
    }

    /// For a recording made with the leak check at exit, the blocks still allocated at the
    /// end of each image it classified, as it found them: per image and per unit (base) they
    /// are charged to.
    fn at_exit(&self) -> (Option<PerImage>, FxHashMap<u32, AtExit>) {
        let mut units: FxHashMap<u32, AtExit> = FxHashMap::default();
        let Some(findings) = self.leak_check.as_deref() else {
            return (None, units);
        };
        let mut images = PerImage::default();
        for id in &self.order {
            if findings.classified(*id) {
                images.insert(*id, AtExit::default());
            }
        }
        if images.is_empty() {
            return (Some(images), units);
        }
        for (session, _, block, class) in self.checked_blocks() {
            let Some(x) = images.get_mut(&session) else {
                continue;
            };
            x.add(class, block.size);
            let (start, len) = self.set_spans[block.set.0 as usize];
            for &base in &self.set_members[start as usize..(start + len) as usize] {
                units.entry(base).or_default().add(class, block.size);
            }
        }
        (Some(images), units)
    }

    /// The host(s) of the processes of `rank`, comma-separated.
    fn hosts_of(&self, rank: Option<u32>) -> String {
        let mut hosts: Vec<&str> = Vec::new();
        for id in &self.order {
            let s = self.session(*id);
            if s.origin.rank == rank && !hosts.contains(&&*s.origin.host) {
                hosts.push(&s.origin.host);
            }
        }
        hosts.join(",")
    }

    /// Every rank, by rank: its host, its process, its heap and how it ended. A rank's
    /// process is its first image that did not replace itself (`exec`): the one that ran
    /// the rank, not a child it forked.
    fn rank_reports(&self, processes: &[ProcessReport]) -> Vec<RankReport> {
        let mut ranks: Vec<RankReport> = Vec::new();
        for heap in &self.ranks {
            let Some(rank) = heap.rank else {
                continue;
            };
            // Only the ranks of the processes reported on (`--pid`, `--rank`).
            let images: Vec<&ProcessReport> = processes
                .iter()
                .filter(|p| {
                    p.rank == Some(rank) && self.sessions.get(p.session).is_some_and(|s| s.included)
                })
                .collect();
            let main = images
                .iter()
                .find(|p| p.exit.kind != "exec")
                .or(images.last());
            let Some(main) = main else {
                continue;
            };
            ranks.push(RankReport {
                rank,
                host: self.hosts_of(Some(rank)),
                pid: main.pid,
                peak_bytes: heap.stats.max_bytes,
                net_bytes: heap.stats.net_bytes,
                allocated_bytes: heap.stats.allocated_bytes,
                exit: main.exit.clone(),
                end_ns: main.end_ns,
            });
        }
        ranks.sort_by_key(|r| r.rank);
        ranks
    }
}

/// Figures per process image.
type PerImage = FxHashMap<SessionId, AtExit>;

/// Whether a failure was seen or is only possible (an end the agent did not see).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Yes,
    No,
}

/// Whether a rank ended by itself in failure: seen, with an exit code other than 0 or a
/// signal other than those launchers end the other ranks with; or possibly, with an end the
/// agent could not see that was not a normal exit.
fn failed_by_itself(exit: &crate::memory::report::ExitReport) -> Option<Seen> {
    const LAUNCHER_SIGNALS: [&str; 4] = ["SIGTERM", "SIGKILL", "SIGINT", "SIGHUP"];
    let failed = match exit.kind {
        "exited" => exit.code != Some(0),
        "signaled" => !exit
            .signal_name
            .as_deref()
            .is_some_and(|n| LAUNCHER_SIGNALS.contains(&n)),
        "unknown" => return (exit.normal_exit == Some(false)).then_some(Seen::No),
        _ => false,
    };
    failed.then_some(Seen::Yes)
}

/// A stack for printing.
pub fn stack_report(reg: &Registry, session: SessionId, stack: StackId) -> Vec<FrameReport> {
    let Some(st) = reg.stack(session, stack) else {
        return Vec::new();
    };
    st.frames()
        .map(|f| FrameReport {
            module: f
                .module
                .map_or_else(|| "[unknown]".to_string(), |m| reg.module(m).name.clone()),
            function: f.function.as_deref().map(str::to_string),
            file: f.file.as_deref().map(str::to_string),
            line: (f.line != 0).then_some(f.line),
            offset: format!("{:#x}", f.offset),
        })
        .collect()
}
