//! The real [`Target`]: watched processes on this machine, test items run as commands,
//! `/proc` for measurements, log files and the journal for errors.

mod cleanup;
mod command;
mod logs;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

pub use cleanup::Cleanup;
pub use logs::{journal_record, log_id};

use crate::flow::{RunContext, Target};
use crate::measure::{ProcId, Reading};
use crate::plan::{Item, ParamValues, Plan};
use crate::report::{LogRecord, Restart, RunOutcome};
use watch::Watched;

/// Errors setting up a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A watched process could not be found or started.
    #[error("process `{process}`: {message}")]
    Process {
        /// Its name in the plan.
        process: String,
        /// What went wrong.
        message: String,
    },
    /// The work directory could not be made.
    #[error("cannot create a work directory: {0}")]
    WorkDir(std::io::Error),
}

/// The system under test on this machine.
#[derive(Debug)]
pub struct LocalTarget {
    base: PathBuf,
    work: tempfile::TempDir,
    t0: Instant,
    epoch: SystemTime,
    watched: Vec<Watched>,
    logs: logs::Logs,
    /// Every pid a watched process had, with its name (for the journal).
    seen: BTreeMap<u32, String>,
    cleanup: Cleanup,
}

impl LocalTarget {
    /// Finds or starts the processes of `plan`. Commands run in `base` (the plan's
    /// directory), where relative paths of the plan are resolved too. `cleanup` learns
    /// the processes started, so they can be stopped if tansa is interrupted.
    pub fn start(plan: &Plan, base: &Path, cleanup: Cleanup) -> Result<LocalTarget, RunError> {
        let work = tempfile::Builder::new()
            .prefix("tansa-leaktest-")
            .tempdir()
            .map_err(RunError::WorkDir)?;
        let t0 = Instant::now();
        let epoch = SystemTime::now();
        let mut watched: Vec<Watched> = Vec::new();
        for spec in &plan.processes {
            match Watched::start(spec, base, work.path(), &cleanup) {
                Ok(w) => watched.push(w),
                Err(message) => {
                    for w in &mut watched {
                        w.stop(&cleanup);
                    }
                    return Err(RunError::Process {
                        process: spec.name.clone(),
                        message,
                    });
                }
            }
        }
        let outputs: BTreeMap<String, PathBuf> = watched
            .iter()
            .filter_map(|w| w.output().map(|o| (w.spec.name.clone(), o.to_path_buf())))
            .collect();
        let logs = logs::Logs::new(&plan.logs, base, &outputs, epoch);
        Ok(LocalTarget {
            base: base.to_path_buf(),
            work,
            t0,
            epoch,
            watched,
            logs,
            seen: BTreeMap::new(),
            cleanup,
        })
    }

    /// The wall-clock time of session time 0.
    pub fn epoch(&self) -> SystemTime {
        self.epoch
    }

    /// Things about the setup worth putting in the report.
    pub fn notes(&self) -> Vec<String> {
        let mut n = Vec::new();
        if self.logs.journal_missing {
            n.push("the plan reads the journal, but systemd-journald does not run here: no journal records were searched".into());
        }
        n
    }

    /// Stops the processes tansa started.
    pub fn stop(&mut self) {
        for w in &mut self.watched {
            w.stop(&self.cleanup);
        }
    }

    fn restart_where(&mut self, why: &str, only_dead: bool) -> Vec<Restart> {
        let mut out = Vec::new();
        let t_ms = self.now_ms();
        for w in &mut self.watched {
            if !w.restartable() || (only_dead && !w.current(&self.cleanup).is_empty()) {
                continue;
            }
            let result = w.restart(&self.base, self.work.path(), &self.cleanup);
            let (started, error) = match result {
                Ok(k) => (
                    Some(ProcId {
                        process: w.spec.name.clone(),
                        pid: k.pid,
                        start_ticks: k.start_ticks,
                    }),
                    None,
                ),
                Err(e) => (None, Some(e)),
            };
            out.push(Restart {
                process: w.spec.name.clone(),
                t_ms,
                why: why.to_string(),
                started,
                error,
            });
        }
        out
    }
}

impl Drop for LocalTarget {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Target for LocalTarget {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }

    fn read(&mut self) -> Vec<(ProcId, Reading)> {
        let mut out = Vec::new();
        for w in &mut self.watched {
            for (name, key) in w.current(&self.cleanup) {
                let Ok(u) = tansa_proc::read_usage(key.pid) else {
                    continue;
                };
                // The pid could have been reused between finding and reading it.
                if !key.is_alive() {
                    continue;
                }
                self.seen.insert(key.pid, name.clone());
                out.push((
                    ProcId {
                        process: name,
                        pid: key.pid,
                        start_ticks: key.start_ticks,
                    },
                    Reading {
                        rss_bytes: u.rss_bytes,
                        pss_bytes: u.pss_bytes,
                        fds: u.fds,
                    },
                ));
            }
        }
        out
    }

    fn run_item(&mut self, item: &Item, params: &ParamValues, ctx: &RunContext<'_>) -> RunOutcome {
        self.logs.poll(self.now_ms());
        let spec = item.command.render(params);
        let mut cmd = command::command(&spec, &self.base);
        for (k, v) in params {
            let var: String = k
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            cmd.env(format!("TANSA_PARAM_{var}"), v.to_string());
        }
        cmd.env("TANSA_ITEM", ctx.item)
            .env("TANSA_PHASE", ctx.phase.name())
            .env("TANSA_RUN", ctx.seq.to_string());
        let err = self.work.path().join("item.err");
        let outcome = command::run(cmd, ctx.timeout, &err, &self.cleanup);
        self.logs.poll(self.now_ms());
        outcome
    }

    fn how_ended(&mut self, id: &ProcId) -> Option<String> {
        let key = tansa_proc::ProcKey {
            pid: id.pid,
            start_ticks: id.start_ticks,
        };
        self.watched.iter().find_map(|w| w.how_ended(key))
    }

    fn revive(&mut self, why: &str) -> Vec<Restart> {
        self.restart_where(why, true)
    }

    fn restart_all(&mut self, why: &str) -> Vec<Restart> {
        self.restart_where(why, false)
    }

    fn error_logs(&mut self, from_ms: u64, to_ms: u64) -> Vec<LogRecord> {
        self.logs.poll(self.now_ms());
        self.logs.between(from_ms, to_ms, &self.seen)
    }
}
