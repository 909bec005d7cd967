//! The recorder's event loop over every thread of the target.
//!
//! Every thread the target creates is traced from its first instruction
//! (`PTRACE_O_TRACECLONE`) and watches the region's entry with a hardware breakpoint of
//! its own (debug register 0). A thread that reaches it starts an execution, which it
//! runs in one of two ways, independently of the other threads:
//!
//! * **stepping**: its breakpoints are cleared and it is single-stepped until `rsp` rises
//!   above its value at entry (the `ptrace` sampler, and the ground truth);
//! * **returning**: it runs at full speed, stopping at the execution's return address
//!   (debug register 1, also its own), with its perf event enabled (perf sources) or not
//!   (warm-up executions).
//!
//! Then it watches the entry again. No breakpoint is ever written into the shared code, so
//! no thread can run past the region unseen while another one is being stepped, and a
//! thread that is not traced (none should be) would not be killed by a stray `int3`.
//!
//! Executions end in whichever order the threads finish them, and are numbered in that
//! order. The `ptrace` sampler keeps every `P`-th instruction of an execution from its
//! phase (`crate::phase`): drawn at random and recorded (the default), or, the seed's
//! rule, instruction `n` when `(N + n) % P == 0`, `N` being the instructions of the
//! executions that ended before it. Either way the position of every sample is known
//! (`tansa_retrace::align`): the sample positions are chosen when an execution ends, from
//! its whole trace.

use std::collections::{BTreeSet, HashMap};

use tansa_format::meta::ExitStatus;
use tansa_format::retrace::{Execution, PhaseRule, Source};
use tansa_perf::{RecordKind, Sample};
use tansa_proc::os::SharedCpu;

use crate::TraceError;
use crate::phase::Phases;
use crate::record::{Normalizer, PERF_FORMAT, PerfSampler, Truth, open_perf};
use crate::tracee::{self, Event, Tracee};

/// Where one thread of the target is.
#[derive(Debug)]
enum Phase {
    /// Outside the region, stopping at its entry.
    Outside,
    /// Single-stepped through an execution: the addresses executed so far, and the next.
    Stepping {
        entry_rsp: u64,
        next: u64,
        trace: Vec<u64>,
        sampled: bool,
    },
    /// Running an execution at full speed, stopping at its return address.
    Returning {
        entry_rsp: u64,
        ret: u64,
        sampled: bool,
    },
}

#[derive(Debug)]
struct Thread {
    phase: Phase,
    /// The signal to deliver when the thread is resumed.
    signal: i32,
    /// Whether its first stop (after its creation) was seen and its breakpoint set.
    attached: bool,
}

impl Thread {
    fn new() -> Thread {
        Thread {
            phase: Phase::Outside,
            signal: 0,
            attached: false,
        }
    }

    fn in_execution(&self) -> bool {
        !matches!(self.phase, Phase::Outside)
    }
}

/// What to record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// The region's entry, in the process.
    pub(crate) entry: u64,
    pub(crate) source: Source,
    pub(crate) period: u64,
    /// How the ptrace sampler picks each execution's phase.
    pub(crate) phase: PhaseRule,
    /// Executions run unsampled first.
    pub(crate) warmup: u64,
    /// Executions to sample.
    pub(crate) target: u64,
    /// Executions to single-step for the ground truth.
    pub(crate) truth_target: u64,
}

/// What the loop needs to know and what it collects.
pub(crate) struct Session<'a> {
    tracee: Tracee,
    entry: u64,
    source: Source,
    period: u64,
    warmup: u64,
    target: u64,
    truth_target: u64,
    pub(crate) norm: Normalizer,
    pub(crate) truth: Option<Truth>,
    /// Perf events by thread (perf sources), opened at a thread's first sampled execution.
    pub(crate) perf: HashMap<i32, PerfSampler>,
    progress: &'a mut dyn FnMut(u64, u64),
    threads: HashMap<i32, Thread>,
    /// The program was replaced by `execve`: the region is gone.
    replaced: bool,
    /// The tracer and the only thread being stepped share a CPU.
    cpu: Option<(i32, SharedCpu)>,
    pub(crate) entries: u64,
    pub(crate) executions: Vec<Execution>,
    pub(crate) samples: u64,
    pub(crate) incomplete: u64,
    pub(crate) stepped_truth: u64,
    /// Threads that ran a sampled execution.
    pub(crate) sampled_threads: BTreeSet<i32>,
    /// What the user should know (executions that could not be sampled).
    pub(crate) warnings: Vec<String>,
    /// The phases of the sampled executions (ptrace).
    pub(crate) phases: Phases,
}

impl<'a> Session<'a> {
    /// A session over `tracee`, stopped after `execve`, following `plan`.
    pub(crate) fn new(
        tracee: Tracee,
        plan: Plan,
        norm: Normalizer,
        truth: Option<Truth>,
        progress: &'a mut dyn FnMut(u64, u64),
    ) -> Session<'a> {
        Session {
            tracee,
            entry: plan.entry,
            source: plan.source,
            period: plan.period.max(1),
            warmup: plan.warmup,
            target: plan.target,
            truth_target: plan.truth_target,
            norm,
            truth,
            perf: HashMap::new(),
            progress,
            threads: HashMap::new(),
            replaced: false,
            cpu: None,
            entries: 0,
            executions: Vec::new(),
            samples: 0,
            incomplete: 0,
            stepped_truth: 0,
            sampled_threads: BTreeSet::new(),
            warnings: Vec::new(),
            phases: Phases::new(plan.phase, plan.period, fastrand::Rng::new()),
        }
    }

    fn done(&self) -> bool {
        self.executions.len() as u64 >= self.target && self.stepped_truth >= self.truth_target
    }

    /// Runs the target until enough executions are recorded or it ends.
    pub(crate) fn run(&mut self) -> Result<(), TraceError> {
        let pid = self.tracee.pid;
        tracee::watch_entry(pid, self.entry)?;
        let mut leader = Thread::new();
        leader.attached = true;
        self.threads.insert(pid, leader);
        tracee::resume(pid, false, 0)?;
        while !self.done() {
            let (tid, event) = self.tracee.wait()?;
            if let Event::Gone(_) = event {
                if self.threads.remove(&tid).is_some_and(|t| t.in_execution()) {
                    self.incomplete += 1;
                    self.release_cpu(tid);
                }
                if tid == pid {
                    break;
                }
                continue;
            }
            match self.on_stop(tid, event) {
                // The thread was killed while stopped (another thread ended the process):
                // its end is the next thing `wait` reports of it.
                Err(TraceError::Ptrace { error, .. })
                    if error.raw_os_error() == Some(libc::ESRCH) => {}
                other => other?,
            }
        }
        Ok(())
    }

    fn release_cpu(&mut self, tid: i32) {
        if self.cpu.as_ref().is_some_and(|(t, _)| *t == tid) {
            self.cpu = None;
        }
    }

    fn resume(&mut self, tid: i32) -> Result<(), TraceError> {
        let Some(t) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        let step = matches!(t.phase, Phase::Stepping { .. });
        tracee::resume(tid, step, std::mem::take(&mut t.signal))
    }

    fn on_stop(&mut self, tid: i32, event: Event) -> Result<(), TraceError> {
        let replaced = self.replaced;
        let thread = self.threads.entry(tid).or_insert_with(Thread::new);
        if !thread.attached {
            // A new thread's first stop: the SIGSTOP it starts with under
            // PTRACE_O_TRACECLONE, which is the tracer's, not the program's.
            thread.attached = true;
            if !replaced {
                tracee::watch_entry(tid, self.entry)?;
            }
            if let Event::Signal(s) = event
                && s != libc::SIGSTOP
            {
                thread.signal = s;
            }
            return self.resume(tid);
        }
        match event {
            Event::Ptrace(e) if e == libc::PTRACE_EVENT_CLONE => {
                if let Ok(new) = crate::sys::event_message(tid) {
                    self.threads.entry(new as i32).or_insert_with(Thread::new);
                }
            }
            Event::Ptrace(e) if e == libc::PTRACE_EVENT_EXEC => {
                // The program replaced itself: its other threads are gone (their ends
                // may still be reported), and so is the region.
                self.replaced = true;
                self.cpu = None;
                let cut = self.threads.values().filter(|t| t.in_execution()).count();
                self.incomplete += cut as u64;
                self.threads.clear();
                let mut t = Thread::new();
                t.attached = true;
                self.threads.insert(tid, t);
            }
            Event::Ptrace(_) | Event::Gone(_) => {}
            Event::Signal(s) => thread.signal = s,
            Event::Trap => return self.on_trap(tid),
        }
        self.resume(tid)
    }

    fn on_trap(&mut self, tid: i32) -> Result<(), TraceError> {
        let r = tracee::regs(tid)?;
        let (replaced, entry) = (self.replaced, self.entry);
        let Some(thread) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        let ended = match &mut thread.phase {
            Phase::Outside if !replaced && r.rip == entry => return self.enter(tid, r),
            Phase::Stepping {
                entry_rsp,
                next,
                trace,
                ..
            } => {
                trace.push(*next);
                *next = r.rip;
                r.rsp > *entry_rsp
            }
            Phase::Returning { entry_rsp, ret, .. } if r.rip == *ret => r.rsp > *entry_rsp,
            // A SIGTRAP that is not ours (the program's own `int3` or `raise`): deliver it.
            _ => {
                thread.signal = libc::SIGTRAP;
                false
            }
        };
        if ended {
            self.end(tid)?;
        }
        self.resume(tid)
    }

    /// Thread `tid` stopped at the region's entry with registers `r`.
    fn enter(&mut self, tid: i32, r: crate::sys::Regs) -> Result<(), TraceError> {
        self.entries += 1;
        let in_flight = |threads: &HashMap<i32, Thread>, stepped_unsampled: bool| {
            threads
                .values()
                .filter(|t| match t.phase {
                    Phase::Stepping { sampled, .. } if stepped_unsampled => !sampled,
                    Phase::Stepping { sampled, .. } | Phase::Returning { sampled, .. } => {
                        !stepped_unsampled && sampled
                    }
                    Phase::Outside => false,
                })
                .count() as u64
        };
        let sampling = self.executions.len() as u64 + in_flight(&self.threads, false) < self.target;
        let truth = self.stepped_truth + in_flight(&self.threads, true) < self.truth_target;
        let phase = if self.entries <= self.warmup {
            self.returning(tid, r, false)?
        } else if sampling && self.source == Source::Ptrace {
            self.stepping(tid, r, true)?
        } else if sampling {
            let sampled = self.enable_perf(tid)?;
            self.returning(tid, r, sampled)?
        } else if truth && self.truth.is_some() {
            self.stepping(tid, r, false)?
        } else {
            Phase::Outside
        };
        if let Some(t) = self.threads.get_mut(&tid) {
            t.phase = phase;
        }
        self.resume(tid)
    }

    fn stepping(
        &mut self,
        tid: i32,
        r: crate::sys::Regs,
        sampled: bool,
    ) -> Result<Phase, TraceError> {
        tracee::unwatch(tid)?;
        let others = self
            .threads
            .iter()
            .any(|(&t, th)| t != tid && matches!(th.phase, Phase::Stepping { .. }));
        // Stepping wakes the tracer and the thread in turn: on one CPU it costs less. With
        // several threads stepped at once, each goes where the scheduler puts it.
        self.cpu = None;
        if !others {
            self.cpu = u32::try_from(tid)
                .ok()
                .and_then(SharedCpu::new)
                .map(|c| (tid, c));
        }
        Ok(Phase::Stepping {
            entry_rsp: r.rsp,
            next: r.rip,
            trace: Vec::new(),
            sampled,
        })
    }

    fn returning(
        &mut self,
        tid: i32,
        r: crate::sys::Regs,
        sampled: bool,
    ) -> Result<Phase, TraceError> {
        let ret = tracee::peek(tid, r.rsp)?;
        tracee::watch_return(tid, ret)?;
        Ok(Phase::Returning {
            entry_rsp: r.rsp,
            ret,
            sampled,
        })
    }

    /// Enables thread `tid`'s perf event, opening it at its first execution. `false` (with
    /// a warning) if it cannot be opened: the execution then runs unsampled.
    fn enable_perf(&mut self, tid: i32) -> Result<bool, TraceError> {
        if !self.perf.contains_key(&tid) {
            match open_perf(self.source, self.period, tid) {
                Ok(p) => {
                    self.perf.insert(tid, p);
                }
                Err(e) => {
                    self.warnings.push(format!(
                        "an execution in thread {tid} was not sampled: its {} event could not \
                         be opened: {e}",
                        self.source.name()
                    ));
                    return Ok(false);
                }
            }
        }
        if let Some(p) = self.perf.get_mut(&tid) {
            p.event.enable()?;
        }
        Ok(true)
    }

    /// Thread `tid` finished its execution.
    fn end(&mut self, tid: i32) -> Result<(), TraceError> {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        let phase = std::mem::replace(&mut thread.phase, Phase::Outside);
        tracee::rewatch_entry(tid)?;
        match phase {
            Phase::Outside => {}
            Phase::Stepping { trace, sampled, .. } => {
                self.release_cpu(tid);
                if sampled {
                    let length = trace.len() as u64;
                    let phase = self.phases.next(length);
                    let samples: Vec<u64> = self
                        .phases
                        .kept(phase, length)
                        .filter_map(|n| trace.get(n as usize).copied())
                        .collect();
                    self.samples += samples.len() as u64;
                    self.executions.push(Execution {
                        instructions: trace.len() as u64,
                        samples: self.norm.all(&samples),
                    });
                    self.sampled_threads.insert(tid);
                }
                if let Some(tr) = self.truth.as_mut() {
                    tr.add(self.norm.all(&trace));
                    self.stepped_truth += 1;
                }
            }
            Phase::Returning { ret, sampled, .. } => {
                if sampled && let Some(p) = self.perf.get_mut(&tid) {
                    p.event.disable()?;
                    p.records.clear();
                    p.ring.drain_into(&mut p.records);
                    let mut ips = Vec::new();
                    for r in &p.records {
                        match r.kind {
                            RecordKind::Sample => {
                                if let Ok(s) = Sample::parse(&r.body, PERF_FORMAT)
                                    && let Some(ip) = s.ip
                                    && ip != ret
                                {
                                    ips.push(ip);
                                }
                            }
                            RecordKind::Lost => p.lost += r.lost_count().unwrap_or(0),
                            _ => {}
                        }
                    }
                    self.samples += ips.len() as u64;
                    self.executions.push(Execution {
                        instructions: 0,
                        samples: self.norm.all(&ips),
                    });
                    self.sampled_threads.insert(tid);
                }
            }
        }
        (self.progress)(self.executions.len() as u64, self.stepped_truth);
        Ok(())
    }

    /// Ends the target (if it still runs) and returns how it ended.
    pub(crate) fn finish(&mut self) -> ExitStatus {
        self.cpu = None;
        self.tracee.kill()
    }
}
