//! A traced child process and its threads: spawn it stopped at `execve`, trace every
//! thread it creates, hear of each thread's stops, and set each thread's hardware
//! breakpoints.
//!
//! The recorder's breakpoints are the CPU's debug registers, which belong to one thread:
//! nothing is written into the program's code. So a thread that is not watching for the
//! region cannot trip over a breakpoint meant for another one (an `int3` in the shared
//! code killed such threads with SIGTRAP), a breakpoint never has to be lifted for one
//! thread while others run past it, and a child the program forks does not inherit it.

use std::os::unix::process::CommandExt;
use std::process::Command;

use tansa_format::meta::ExitStatus;

use crate::TraceError;
use crate::sys::{self, Wait};

/// DR7 bit enabling debug register 0 (execute, one byte): the region's entry.
const DR7_ENTRY: u64 = 1;
/// DR7 bit enabling debug register 1: the return address of the execution under way.
const DR7_RETURN: u64 = 1 << 2;

/// What a thread reported to [`Tracee::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Stopped by a SIGTRAP: a breakpoint, or the end of a single step.
    Trap,
    /// Stopped by another signal, to be delivered when it is resumed.
    Signal(i32),
    /// A ptrace event stop (`PTRACE_EVENT_*`); resume it without a signal.
    Ptrace(i32),
    /// The thread is gone (the process, if it is the leader), with this status.
    Gone(ExitStatus),
}

/// A child process under ptrace.
#[derive(Debug)]
pub(crate) struct Tracee {
    pub(crate) pid: i32,
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

pub(crate) fn ptrace_err(op: &'static str) -> impl FnOnce(std::io::Error) -> TraceError {
    move |error| TraceError::Ptrace { op, error }
}

impl Tracee {
    /// Starts `command` traced, with `LD_BIND_NOW=1` (so the dynamic linker resolves
    /// symbols at load time and the first execution of the region runs the same code as
    /// the others), waits for it to stop after `execve`, and asks to trace every thread it
    /// creates.
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
        let w = sys::wait(pid).map_err(ptrace_err("waitpid"))?;
        if let Some(status) = exit_status(w) {
            return Err(TraceError::ExitedAtStart(status));
        }
        let t = Tracee { pid, gone: None };
        sys::set_recorder_options(pid).map_err(ptrace_err("PTRACE_SETOPTIONS"))?;
        Ok(t)
    }

    /// Waits for the next stop or end of any thread of the process (or of the program it
    /// exec'd). The process has ended when the leader (`pid`) is gone.
    pub(crate) fn wait(&mut self) -> Result<(i32, Event), TraceError> {
        let (tid, status) = sys::wait_any().map_err(ptrace_err("waitpid"))?;
        let event = if libc::WIFEXITED(status) {
            Event::Gone(ExitStatus::Exited {
                code: libc::WEXITSTATUS(status),
            })
        } else if libc::WIFSIGNALED(status) {
            Event::Gone(ExitStatus::Signaled {
                signal: libc::WTERMSIG(status),
                core_dumped: libc::WCOREDUMP(status),
            })
        } else if status >> 16 != 0 {
            Event::Ptrace(status >> 16)
        } else if libc::WSTOPSIG(status) == libc::SIGTRAP {
            Event::Trap
        } else {
            Event::Signal(libc::WSTOPSIG(status))
        };
        if tid == self.pid
            && let Event::Gone(s) = event
        {
            self.gone = Some(s);
        }
        Ok((tid, event))
    }

    /// Kills the process and reaps it and its threads.
    pub(crate) fn kill(&mut self) -> ExitStatus {
        if let Some(s) = self.gone {
            return s;
        }
        let _ = tansa_proc::os::kill(self.pid as u32, libc::SIGKILL);
        // Traced threads are reaped by their tracer, and the leader's status comes last.
        let status = loop {
            match sys::wait_any() {
                Ok((tid, status)) if tid == self.pid => {
                    if libc::WIFEXITED(status) {
                        break ExitStatus::Exited {
                            code: libc::WEXITSTATUS(status),
                        };
                    }
                    if libc::WIFSIGNALED(status) {
                        break ExitStatus::Signaled {
                            signal: libc::WTERMSIG(status),
                            core_dumped: libc::WCOREDUMP(status),
                        };
                    }
                }
                Ok(_) => {}
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

/// Resumes stopped thread `tid`: one instruction if `step`, else until its next stop,
/// delivering `signal` (0 for none).
pub(crate) fn resume(tid: i32, step: bool, signal: i32) -> Result<(), TraceError> {
    if step {
        sys::single_step(tid, signal).map_err(ptrace_err("PTRACE_SINGLESTEP"))
    } else {
        sys::cont(tid, signal).map_err(ptrace_err("PTRACE_CONT"))
    }
}

/// Sets stopped thread `tid` to stop when it reaches `entry` (debug register 0).
pub(crate) fn watch_entry(tid: i32, entry: u64) -> Result<(), TraceError> {
    sys::set_debug_register(tid, 7, 0).map_err(ptrace_err("PTRACE_POKEUSER"))?;
    sys::set_debug_register(tid, 0, entry).map_err(ptrace_err("PTRACE_POKEUSER"))?;
    sys::set_debug_register(tid, 7, DR7_ENTRY).map_err(ptrace_err("PTRACE_POKEUSER"))
}

/// Sets stopped thread `tid` to stop at `ret` (debug register 1) and no longer at the
/// entry (recursion inside the execution is part of it).
pub(crate) fn watch_return(tid: i32, ret: u64) -> Result<(), TraceError> {
    sys::set_debug_register(tid, 7, 0).map_err(ptrace_err("PTRACE_POKEUSER"))?;
    sys::set_debug_register(tid, 1, ret).map_err(ptrace_err("PTRACE_POKEUSER"))?;
    sys::set_debug_register(tid, 7, DR7_RETURN).map_err(ptrace_err("PTRACE_POKEUSER"))
}

/// Sets stopped thread `tid` to stop at the entry again, after an execution.
pub(crate) fn rewatch_entry(tid: i32) -> Result<(), TraceError> {
    sys::set_debug_register(tid, 7, DR7_ENTRY).map_err(ptrace_err("PTRACE_POKEUSER"))
}

/// Clears stopped thread `tid`'s breakpoints (while it is single-stepped).
pub(crate) fn unwatch(tid: i32) -> Result<(), TraceError> {
    sys::set_debug_register(tid, 7, 0).map_err(ptrace_err("PTRACE_POKEUSER"))
}

/// The 8 bytes at `addr` in thread `tid`'s memory (the return address at `rsp`).
pub(crate) fn peek(tid: i32, addr: u64) -> Result<u64, TraceError> {
    sys::peek(tid, addr).map_err(ptrace_err("PTRACE_PEEKDATA"))
}

/// Thread `tid`'s `rip` and `rsp`.
pub(crate) fn regs(tid: i32) -> Result<sys::Regs, TraceError> {
    sys::regs(tid).map_err(ptrace_err("PTRACE_GETREGS"))
}
