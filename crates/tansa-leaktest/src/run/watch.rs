//! The watched processes: found by pid or name, or started by tansa.

use std::fs::OpenOptions;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tansa_proc::{ProcKey, find_by_name, read_stat};

use super::cleanup::Cleanup;
use super::command::{self, POLL};
use crate::plan::{CommandSpec, Launch, ProcessSource, ProcessSpec};

/// Time a process gets to stop after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Time limit of a `restart` command.
const RESTART_TIMEOUT: Duration = Duration::from_secs(60);

/// A watched process.
#[derive(Debug)]
pub(super) struct Watched {
    pub spec: ProcessSpec,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Child {
        launch: Launch,
        child: Option<Child>,
        key: Option<ProcKey>,
        output: PathBuf,
        /// How the last instance ended, once it has.
        ended: Option<(ProcKey, String)>,
    },
    Pid {
        key: Option<ProcKey>,
        comm: String,
        restart: Option<CommandSpec>,
    },
    Match {
        name: String,
        restart: Option<CommandSpec>,
    },
}

impl Watched {
    /// Finds or starts the process of `spec`. Output of started processes goes to a file
    /// in `work`; commands run in `base`.
    pub fn start(
        spec: &ProcessSpec,
        base: &Path,
        work: &Path,
        cleanup: &Cleanup,
    ) -> Result<Watched, String> {
        let kind = match &spec.source {
            ProcessSource::Pid { pid, restart } => {
                let stat =
                    read_stat(*pid).map_err(|_| format!("no process with pid {pid} runs"))?;
                let key = ProcKey::of(*pid).map_err(|_| format!("process {pid} is a zombie"))?;
                Kind::Pid {
                    key: Some(key),
                    comm: stat.comm,
                    restart: restart.clone(),
                }
            }
            ProcessSource::Match { name, restart } => {
                let found = find_by_name(name).map_err(|e| e.to_string())?;
                if found.is_empty() {
                    return Err(format!("no process named `{name}` runs"));
                }
                Kind::Match {
                    name: name.clone(),
                    restart: restart.clone(),
                }
            }
            ProcessSource::Command(launch) => Kind::Child {
                launch: launch.clone(),
                child: None,
                key: None,
                output: work.join(format!("{}.out", spec.name)),
                ended: None,
            },
        };
        let mut w = Watched {
            spec: spec.clone(),
            kind,
        };
        if matches!(w.kind, Kind::Child { .. }) {
            w.launch(base, cleanup)?;
        }
        Ok(w)
    }

    /// The file the output of a started process goes to.
    pub fn output(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Child { output, .. } => Some(output),
            _ => None,
        }
    }

    /// Starts the command of a `Child` and waits until it is ready.
    fn launch(&mut self, base: &Path, cleanup: &Cleanup) -> Result<ProcKey, String> {
        let Kind::Child {
            launch,
            child,
            key,
            output,
            ..
        } = &mut self.kind
        else {
            return Err("not started by tansa".into());
        };
        if let Some(f) = &launch.ready_file {
            let _ = std::fs::remove_file(base.join(f));
        }
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&*output)
            .map_err(|e| format!("cannot open {}: {e}", output.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", output.display()))?;
        let mut cmd = command::command(&launch.command, base);
        cmd.stdout(Stdio::from(out)).stderr(Stdio::from(err));
        let mut c = cleanup
            .spawn(&mut cmd)
            .map_err(|e| format!("cannot start `{}`: {e}", command::display(&launch.command)))?;
        if let Err(e) = wait_ready(launch, &mut c, base, output) {
            command::stop(&mut c, Duration::ZERO);
            cleanup.forget(c.id());
            return Err(e);
        }
        let k = ProcKey::of(c.id()).map_err(|_| {
            format!(
                "`{}` ended as soon as it was ready",
                command::display(&launch.command)
            )
        })?;
        *child = Some(c);
        *key = Some(k);
        Ok(k)
    }

    /// The live instances now, with the name each is reported under.
    pub fn current(&mut self, cleanup: &Cleanup) -> Vec<(String, ProcKey)> {
        let name = self.spec.name.clone();
        match &mut self.kind {
            Kind::Child {
                child, key, ended, ..
            } => {
                let Some(c) = child else { return Vec::new() };
                if let Ok(Some(status)) = c.try_wait() {
                    if let Some(k) = key.take() {
                        *ended = Some((k, command::describe_status(status)));
                    }
                    // Whatever it left in its group goes too.
                    command::signal_group(c, rustix::process::Signal::KILL);
                    cleanup.forget(c.id());
                    *child = None;
                    return Vec::new();
                }
                key.filter(ProcKey::is_alive)
                    .map(|k| (name, k))
                    .into_iter()
                    .collect()
            }
            Kind::Pid { key, .. } => key
                .filter(ProcKey::is_alive)
                .map(|k| (name, k))
                .into_iter()
                .collect(),
            Kind::Match { name: pattern, .. } => {
                let found = find_by_name(pattern).unwrap_or_default();
                if found.len() == 1 {
                    vec![(name, found[0])]
                } else {
                    found
                        .into_iter()
                        .map(|k| (format!("{name}[{}]", k.pid), k))
                        .collect()
                }
            }
        }
    }

    /// How instance `key` ended, when tansa saw it end.
    pub fn how_ended(&self, key: ProcKey) -> Option<String> {
        match &self.kind {
            Kind::Child {
                ended: Some((k, how)),
                ..
            } if *k == key => Some(how.clone()),
            _ => None,
        }
    }

    /// Whether it can be restarted.
    pub fn restartable(&self) -> bool {
        self.spec.source.restartable()
    }

    /// Restarts it: stops and starts a command; runs the `restart` command of others and
    /// finds them again. Returns the new identity.
    pub fn restart(
        &mut self,
        base: &Path,
        work: &Path,
        cleanup: &Cleanup,
    ) -> Result<ProcKey, String> {
        match &mut self.kind {
            Kind::Child { child, key, .. } => {
                if let Some(mut c) = child.take() {
                    command::stop(&mut c, STOP_GRACE);
                    cleanup.forget(c.id());
                }
                *key = None;
                self.launch(base, cleanup)
            }
            Kind::Pid { key, comm, restart } => {
                let cmd = restart.clone().ok_or("no `restart` command")?;
                run_restart(&cmd, base, work, cleanup)?;
                let found = find_by_name(comm).map_err(|e| e.to_string())?;
                match found.as_slice() {
                    [k] => {
                        *key = Some(*k);
                        Ok(*k)
                    }
                    [] => Err(format!(
                        "after the restart command, no process named `{comm}` runs"
                    )),
                    _ => Err(format!(
                        "after the restart command, several processes are named `{comm}`; use `match` to watch them all"
                    )),
                }
            }
            Kind::Match { name, restart } => {
                let cmd = restart.clone().ok_or("no `restart` command")?;
                run_restart(&cmd, base, work, cleanup)?;
                find_by_name(name)
                    .map_err(|e| e.to_string())?
                    .first()
                    .copied()
                    .ok_or_else(|| {
                        format!("after the restart command, no process named `{name}` runs")
                    })
            }
        }
    }

    /// Stops a process tansa started.
    pub fn stop(&mut self, cleanup: &Cleanup) {
        if let Kind::Child { child, key, .. } = &mut self.kind {
            if let Some(mut c) = child.take() {
                command::stop(&mut c, STOP_GRACE);
                cleanup.forget(c.id());
            }
            *key = None;
        }
    }
}

fn run_restart(
    cmd: &CommandSpec,
    base: &Path,
    work: &Path,
    cleanup: &Cleanup,
) -> Result<(), String> {
    let err = work.join("restart.err");
    match command::run(command::command(cmd, base), RESTART_TIMEOUT, &err, cleanup) {
        crate::report::RunOutcome::Completed => Ok(()),
        other => Err(format!(
            "restart command `{}` {}",
            command::display(cmd),
            other.describe()
        )),
    }
}

/// Waits until a started process is ready: its `ready_file` exists and is not empty, its
/// `ready_tcp` address accepts a connection; then waits `settle`.
fn wait_ready(
    launch: &Launch,
    child: &mut Child,
    base: &Path,
    output: &Path,
) -> Result<(), String> {
    let deadline = command::deadline(launch.start_timeout);
    let addrs: Vec<_> = match &launch.ready_tcp {
        Some(a) => a
            .to_socket_addrs()
            .map_err(|e| format!("ready_tcp `{a}` is not an address: {e}"))?
            .collect(),
        None => Vec::new(),
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let out = command::tail(output, 1000);
            return Err(format!(
                "`{}` {} while starting{}",
                command::display(&launch.command),
                command::describe_status(status),
                if out.trim().is_empty() {
                    String::new()
                } else {
                    format!("; its output ends with: {}", out.trim())
                }
            ));
        }
        let file_ok = launch
            .ready_file
            .as_ref()
            .is_none_or(|f| std::fs::metadata(base.join(f)).is_ok_and(|m| m.len() > 0));
        let tcp_ok = addrs.is_empty()
            || addrs
                .iter()
                .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(100)).is_ok());
        if file_ok && tcp_ok {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(format!(
                "`{}` was not ready within {} (waiting for {})",
                command::display(&launch.command),
                humantime::format_duration(launch.start_timeout),
                [
                    launch
                        .ready_file
                        .as_ref()
                        .map(|f| format!("file {}", f.display())),
                    launch
                        .ready_tcp
                        .as_ref()
                        .map(|a| format!("a connection to {a}")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" and ")
            ));
        }
        std::thread::sleep(POLL);
    }
    std::thread::sleep(launch.settle);
    Ok(())
}
