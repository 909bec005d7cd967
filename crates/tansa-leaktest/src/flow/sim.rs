//! A simulated system under test for the flow's and the renderers' tests: processes whose
//! memory follows a model per request, on a clock that only moves when asked. Built for
//! this crate's tests and, with the `sim` feature, for other crates' (the renderers' golden
//! files in `tansa-render`).

use std::time::Duration;

use super::{RunContext, Target};
use crate::measure::{ProcId, Reading};
use crate::plan::{Item, ParamValues};
use crate::report::{LogRecord, Restart, RunOutcome};

pub const KIB: u64 = 1024;

/// How a simulated process reacts to a request.
#[derive(Debug, Clone)]
pub enum Model {
    Flat,
    Leak(u64),
    Cache {
        cap: u32,
        each: u64,
    },
    /// Every `every`-th request (1st, 1+every, ...) logs `id` and leaks.
    ErrorEvery {
        every: u32,
        leak: u64,
        id: &'static str,
    },
    /// Grows on its first request only.
    WarmUp(u64),
    /// Grows on request number `.0` only.
    OnRequest(u32, u64),
    /// Keeps `clients` buffers of `each`, never shrinking, up to `cap`.
    Pool {
        each: u64,
        cap: Option<u64>,
    },
    /// Leaks `each` and dies at request `at`.
    LeakThenDie {
        each: u64,
        at: u32,
    },
    /// Grows by `each` per second, with or without requests.
    Tick(u64),
}

#[derive(Debug)]
struct SimProc {
    name: &'static str,
    pid: u32,
    start: u64,
    base: u64,
    mem: u64,
    requests: u32,
    pool: u64,
    alive: bool,
    model: Model,
}

impl SimProc {
    fn id(&self) -> ProcId {
        ProcId {
            process: self.name.into(),
            pid: self.pid,
            start_ticks: self.start,
        }
    }
}

/// The simulated system.
#[derive(Debug)]
pub struct Sim {
    t: u64,
    procs: Vec<SimProc>,
    logs: Vec<LogRecord>,
    pub fail_item: Option<&'static str>,
    /// Restarts stop the processes and fail to start them again.
    pub restart_fails: bool,
    next_pid: u32,
}

impl Sim {
    pub fn new(models: &[(&'static str, Model)]) -> Sim {
        let mut s = Sim {
            t: 0,
            procs: Vec::new(),
            logs: Vec::new(),
            fail_item: None,
            restart_fails: false,
            next_pid: 100,
        };
        for (name, model) in models {
            s.next_pid += 1;
            s.procs.push(SimProc {
                name,
                pid: s.next_pid,
                start: 1,
                base: 4096 * KIB,
                mem: 4096 * KIB,
                requests: 0,
                pool: 0,
                alive: true,
                model: model.clone(),
            });
        }
        s
    }

    fn restart(&mut self, i: usize, why: &str) -> Restart {
        self.next_pid += 1;
        let t = self.t;
        let p = &mut self.procs[i];
        p.pid = self.next_pid;
        p.start = t;
        p.mem = p.base;
        p.requests = 0;
        p.pool = 0;
        p.alive = true;
        Restart {
            process: p.name.into(),
            t_ms: t,
            why: why.into(),
            started: Some(p.id()),
            error: None,
        }
    }
}

impl Target for Sim {
    fn now_ms(&self) -> u64 {
        self.t
    }

    fn sleep(&mut self, d: Duration) {
        let ms = d.as_millis() as u64;
        for p in &mut self.procs {
            if let Model::Tick(each) = p.model {
                p.mem += each * ms / 1000;
            }
        }
        self.t += ms;
    }

    fn read(&mut self) -> Vec<(ProcId, Reading)> {
        self.t += 1;
        // A little noise, well below the threshold.
        let noise = (self.t % 3) * 4 * KIB;
        self.procs
            .iter()
            .filter(|p| p.alive)
            .map(|p| {
                let m = p.mem + noise;
                (
                    p.id(),
                    Reading {
                        rss_bytes: m,
                        pss_bytes: m,
                        fds: 5,
                    },
                )
            })
            .collect()
    }

    fn run_item(&mut self, item: &Item, params: &ParamValues, _: &RunContext<'_>) -> RunOutcome {
        self.t += 10;
        if self.fail_item == Some(item.name.as_str()) {
            return RunOutcome::Failed {
                exit_code: Some(1),
                signal: None,
                stderr_tail: "connection refused".into(),
            };
        }
        let clients = params.get("clients").copied().unwrap_or(1) as u64;
        let t = self.t;
        let mut logs = Vec::new();
        for p in self.procs.iter_mut().filter(|p| p.alive) {
            p.requests += 1;
            match p.model {
                Model::Flat | Model::Tick(_) => {}
                Model::Leak(n) => p.mem += n,
                Model::Cache { cap, each } => {
                    if p.requests <= cap {
                        p.mem += each;
                    }
                }
                Model::ErrorEvery { every, leak, id } => {
                    if (p.requests - 1) % every == 0 {
                        p.mem += leak;
                        logs.push(LogRecord {
                            t_ms: t,
                            process: p.name.into(),
                            pid: Some(p.pid),
                            source: "sim".into(),
                            id: id.into(),
                            message: format!("ERROR {id} upstream reset"),
                        });
                    }
                }
                Model::WarmUp(n) => {
                    if p.requests == 1 {
                        p.mem += n;
                    }
                }
                Model::OnRequest(at, n) => {
                    if p.requests == at {
                        p.mem += n;
                    }
                }
                Model::Pool { each, cap } => {
                    let want = cap.map_or(clients, |c| clients.min(c));
                    if want > p.pool {
                        p.mem += (want - p.pool) * each;
                        p.pool = want;
                    }
                }
                Model::LeakThenDie { each, at } => {
                    p.mem += each;
                    if p.requests == at {
                        p.alive = false;
                    }
                }
            }
        }
        self.logs.extend(logs);
        RunOutcome::Completed
    }

    fn how_ended(&mut self, _: &ProcId) -> Option<String> {
        Some("was killed by signal 6".into())
    }

    fn revive(&mut self, why: &str) -> Vec<Restart> {
        let dead: Vec<usize> = (0..self.procs.len())
            .filter(|&i| !self.procs[i].alive)
            .collect();
        dead.into_iter().map(|i| self.restart(i, why)).collect()
    }

    fn restart_all(&mut self, why: &str) -> Vec<Restart> {
        if self.restart_fails {
            let t = self.t;
            return self
                .procs
                .iter_mut()
                .map(|p| {
                    p.alive = false;
                    Restart {
                        process: p.name.into(),
                        t_ms: t,
                        why: why.into(),
                        started: None,
                        error: Some("cannot start".into()),
                    }
                })
                .collect();
        }
        (0..self.procs.len())
            .map(|i| self.restart(i, why))
            .collect()
    }

    fn error_logs(&mut self, from_ms: u64, to_ms: u64) -> Vec<LogRecord> {
        self.logs
            .iter()
            .filter(|r| (from_ms..=to_ms).contains(&r.t_ms))
            .cloned()
            .collect()
    }
}
