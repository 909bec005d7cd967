//! A traced child process: spawn it stopped at `execve`, set software breakpoints, run to
//! them, single-step.

use std::os::unix::process::CommandExt;
use std::process::Command;

use tansa_format::meta::ExitStatus;

use crate::TraceError;
use crate::sys::{self, Regs, Wait};

const INT3: u64 = 0xcc;

/// What stopped the tracee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A breakpoint trap; `rip` is already moved back onto the breakpoint.
    Breakpoint(Regs),
    /// Another signal, to be delivered when resuming.
    Signal(i32),
    /// The process is gone.
    Gone(ExitStatus),
}

/// A child process under ptrace.
#[derive(Debug)]
pub(crate) struct Tracee {
    pub(crate) pid: i32,
    /// Breakpoints set: `(address, original word)`.
    breakpoints: Vec<(u64, u64)>,
    gone: Option<ExitStatus>,
}

fn exit_status(w: Wait) -> Option<ExitStatus> {
    match w {
        Wait::Exited(code) => Some(ExitStatus::Exited { code }),
        Wait::Signaled(signal, core_dumped) => Some(ExitStatus::Signaled {
            signal,
            core_dumped,
        }),
        Wait::Stopped(_) => None,
    }
}

fn ptrace_err(op: &'static str) -> impl FnOnce(std::io::Error) -> TraceError {
    move |error| TraceError::Ptrace { op, error }
}

impl Tracee {
    /// Starts `command` traced, with `LD_BIND_NOW=1` (so the dynamic linker resolves
    /// symbols at load time and the first execution of the region runs the same code as
    /// the others), and waits for it to stop after `execve`.
    pub(crate) fn spawn(program: &str, args: &[String]) -> Result<Tracee, TraceError> {
        let mut cmd = Command::new(program);
        cmd.args(args).env("LD_BIND_NOW", "1");
        // SAFETY: the closure runs in the forked child before exec and only makes the
        // async-signal-safe PTRACE_TRACEME system call.
        unsafe {
            cmd.pre_exec(sys::trace_me);
        }
        let child = cmd.spawn().map_err(|error| TraceError::Spawn {
            program: program.to_string(),
            error,
        })?;
        let pid = child.id() as i32;
        // The child is reaped with waitpid below, not through `child`.
        drop(child);
        let mut t = Tracee {
            pid,
            breakpoints: Vec::new(),
            gone: None,
        };
        match sys::wait(pid).map_err(ptrace_err("waitpid"))? {
            Wait::Stopped(_) => {}
            other => {
                return Err(TraceError::ExitedAtStart(
                    exit_status(other).unwrap_or(ExitStatus::Running),
                ));
            }
        }
        sys::set_exit_kill(pid).map_err(ptrace_err("PTRACE_SETOPTIONS"))?;
        t.gone = None;
        Ok(t)
    }

    /// Inserts a breakpoint at `addr` (no-op if one is there).
    pub(crate) fn insert(&mut self, addr: u64) -> Result<(), TraceError> {
        if self.breakpoints.iter().any(|&(a, _)| a == addr) {
            return Ok(());
        }
        let word = sys::peek(self.pid, addr).map_err(ptrace_err("PTRACE_PEEKDATA"))?;
        sys::poke(self.pid, addr, (word & !0xff) | INT3).map_err(ptrace_err("PTRACE_POKEDATA"))?;
        self.breakpoints.push((addr, word));
        Ok(())
    }

    /// Removes the breakpoint at `addr`, restoring the original byte.
    pub(crate) fn remove(&mut self, addr: u64) -> Result<(), TraceError> {
        let Some(i) = self.breakpoints.iter().position(|&(a, _)| a == addr) else {
            return Ok(());
        };
        let (_, orig) = self.breakpoints.swap_remove(i);
        let word = sys::peek(self.pid, addr).map_err(ptrace_err("PTRACE_PEEKDATA"))?;
        sys::poke(self.pid, addr, (word & !0xff) | (orig & 0xff))
            .map_err(ptrace_err("PTRACE_POKEDATA"))
    }

    fn has_breakpoint(&self, addr: u64) -> bool {
        self.breakpoints.iter().any(|&(a, _)| a == addr)
    }

    fn classify(&mut self, w: Wait) -> Result<Stop, TraceError> {
        if let Some(status) = exit_status(w) {
            self.gone = Some(status);
            return Ok(Stop::Gone(status));
        }
        let Wait::Stopped(sig) = w else {
            return Ok(Stop::Signal(0));
        };
        if sig != libc::SIGTRAP {
            return Ok(Stop::Signal(sig));
        }
        let regs = sys::regs(self.pid).map_err(ptrace_err("PTRACE_GETREGS"))?;
        let at = regs.rip.wrapping_sub(1);
        if self.has_breakpoint(at) {
            sys::set_rip(self.pid, at).map_err(ptrace_err("PTRACE_SETREGS"))?;
            return Ok(Stop::Breakpoint(Regs {
                rip: at,
                rsp: regs.rsp,
            }));
        }
        // A SIGTRAP that is not ours (the program's own int3, an exec): deliver it.
        Ok(Stop::Signal(sig))
    }

    /// Resumes until a breakpoint is hit or the process ends, passing other signals on.
    pub(crate) fn run(&mut self, mut signal: i32) -> Result<Stop, TraceError> {
        loop {
            sys::cont(self.pid, signal).map_err(ptrace_err("PTRACE_CONT"))?;
            let w = sys::wait(self.pid).map_err(ptrace_err("waitpid"))?;
            match self.classify(w)? {
                Stop::Signal(s) => signal = s,
                other => return Ok(other),
            }
        }
    }

    /// Executes one instruction. Returns the registers after it, or the signal that
    /// interrupted it (the instruction did not run; deliver the signal on the next step),
    /// or the end of the process.
    pub(crate) fn step(&mut self, signal: i32) -> Result<Result<Regs, Stop>, TraceError> {
        sys::single_step(self.pid, signal).map_err(ptrace_err("PTRACE_SINGLESTEP"))?;
        let w = sys::wait(self.pid).map_err(ptrace_err("waitpid"))?;
        match w {
            Wait::Stopped(libc::SIGTRAP) => Ok(Ok(
                sys::regs(self.pid).map_err(ptrace_err("PTRACE_GETREGS"))?
            )),
            other => Ok(Err(self.classify(other)?)),
        }
    }

    /// Executes the instruction under the breakpoint at the current `rip` (which must be
    /// `addr`) and puts the breakpoint back. Returns the stop if the process ended or a
    /// signal interrupted.
    pub(crate) fn step_over(&mut self, addr: u64) -> Result<Option<Stop>, TraceError> {
        self.remove(addr)?;
        let mut signal = 0;
        loop {
            match self.step(signal)? {
                Ok(_) => break,
                Err(Stop::Signal(s)) => signal = s,
                Err(stop) => return Ok(Some(stop)),
            }
        }
        self.insert(addr)?;
        Ok(None)
    }

    /// The return address of a function just entered (the word at `rsp`).
    pub(crate) fn return_address(&self, rsp: u64) -> Result<u64, TraceError> {
        sys::peek(self.pid, rsp).map_err(ptrace_err("PTRACE_PEEKDATA"))
    }

    /// Kills the process and reaps it.
    pub(crate) fn kill(&mut self) -> ExitStatus {
        if let Some(s) = self.gone {
            return s;
        }
        let _ = tansa_proc::os::kill(self.pid as u32, libc::SIGKILL);
        let status = loop {
            match sys::wait(self.pid) {
                Ok(w) => {
                    if let Some(s) = exit_status(w) {
                        break s;
                    }
                }
                Err(_) => {
                    break ExitStatus::Signaled {
                        signal: libc::SIGKILL,
                        core_dumped: false,
                    };
                }
            }
        };
        self.gone = Some(status);
        status
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        self.kill();
    }
}
