//! The ptrace calls of this crate, and `waitpid` with `__WALL` (which tracers need to hear
//! of every thread, and which rustix does not offer). Everything else goes through
//! `tansa_proc::os`.

use std::io;

/// What `waitpid` reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Stopped with this signal.
    Stopped(i32),
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32, bool),
}

/// The registers the tracer needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Regs {
    pub(crate) rip: u64,
    pub(crate) rsp: u64,
}

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc == -1 {
        let err = io::Error::last_os_error();
        // PEEKDATA can legitimately return -1; callers that peek clear errno first.
        if err.raw_os_error() != Some(0) {
            return Err(err);
        }
    }
    Ok(rc)
}

/// `ptrace(PTRACE_TRACEME)`, for the child between fork and exec.
pub(crate) fn trace_me() -> io::Result<()> {
    // SAFETY: PTRACE_TRACEME takes no pointers; it is async-signal-safe (a plain syscall),
    // as required between fork and exec.
    let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `waitpid(pid, __WALL)`, retrying on EINTR, decoded.
pub(crate) fn wait(pid: i32) -> io::Result<Wait> {
    let status = wait_raw(pid)?;
    Ok(if libc::WIFEXITED(status) {
        Wait::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Wait::Signaled(libc::WTERMSIG(status), libc::WCOREDUMP(status))
    } else {
        Wait::Stopped(libc::WSTOPSIG(status))
    })
}

/// Sets the recorder's options on the tracee: `PTRACE_O_EXITKILL` (the tracee dies if the
/// tracer does), `PTRACE_O_TRACECLONE` (every thread it creates is traced from its first
/// instruction, so none runs the region unseen) and `PTRACE_O_TRACEEXEC` (an `execve` is
/// an event stop, not a SIGTRAP that would kill the new program if passed on).
pub(crate) fn set_recorder_options(pid: i32) -> io::Result<()> {
    let options = libc::PTRACE_O_EXITKILL | libc::PTRACE_O_TRACECLONE | libc::PTRACE_O_TRACEEXEC;
    // SAFETY: PTRACE_SETOPTIONS takes the options in `data`, no pointers.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, pid, 0usize, options as usize) };
    check(rc).map(drop)
}

/// `ptrace(PTRACE_GETEVENTMSG)`: the new thread's id at a `PTRACE_EVENT_CLONE` stop.
pub(crate) fn event_message(tid: i32) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: PTRACE_GETEVENTMSG writes one `unsigned long` to `data`, which points at one.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0usize, &mut msg as *mut _) };
    check(rc)?;
    Ok(msg)
}

/// `waitpid(-1, __WALL | __WNOTHREAD)`, retrying on EINTR: the next event of any child or
/// tracee of the calling thread (not of other threads of this process, which may trace
/// programs of their own), as `(thread id, raw status)`.
pub(crate) fn wait_any() -> io::Result<(i32, i32)> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let rc = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::__WNOTHREAD) };
        if rc == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok((rc, status));
    }
}

/// Resumes the stopped tracee, delivering `signal` (0 for none).
pub(crate) fn cont(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_CONT takes the signal number in `data`, no pointers.
    let rc = unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0usize, signal as usize) };
    check(rc).map(drop)
}

/// Executes one instruction of the stopped tracee, delivering `signal` (0 for none).
pub(crate) fn single_step(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_SINGLESTEP takes the signal number in `data`, no pointers.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SINGLESTEP, pid, 0usize, signal as usize) };
    check(rc).map(drop)
}

/// Reads the stopped tracee's `rip` and `rsp`.
pub(crate) fn regs(pid: i32) -> io::Result<Regs> {
    let mut r = std::mem::MaybeUninit::<libc::user_regs_struct>::uninit();
    // SAFETY: PTRACE_GETREGS writes one `user_regs_struct` to `data`, which points at
    // enough writable space for it.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0usize, r.as_mut_ptr()) };
    check(rc)?;
    // SAFETY: the call succeeded, so the kernel filled the whole struct.
    let r = unsafe { r.assume_init() };
    Ok(Regs {
        rip: r.rip,
        rsp: r.rsp,
    })
}

/// Reads the word at `addr` in the tracee.
pub(crate) fn peek(pid: i32, addr: u64) -> io::Result<u64> {
    // SAFETY: clearing errno has no preconditions; PEEKDATA returns the word, so -1 is
    // only an error when errno is set.
    let rc = unsafe {
        *libc::__errno_location() = 0;
        libc::ptrace(libc::PTRACE_PEEKDATA, pid, addr as usize, 0usize)
    };
    check(rc).map(|w| w as u64)
}

/// `ptrace(PTRACE_SEIZE)`: attaches to thread `tid` without stopping it.
pub(crate) fn seize(tid: i32) -> io::Result<()> {
    // PTRACE_O_TRACEEXIT: a thread that exits while followed stops before it is gone, so
    // that the follower lets go of it without collecting its exit status (which belongs to
    // its parent, possibly another thread of this process).
    // SAFETY: PTRACE_SEIZE takes the options in `data`, no pointers.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            tid,
            0usize,
            libc::PTRACE_O_TRACEEXIT as usize,
        )
    };
    check(rc).map(drop)
}

/// `ptrace(PTRACE_INTERRUPT)`: stops a seized thread.
pub(crate) fn interrupt(tid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_INTERRUPT takes no arguments.
    let rc = unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) };
    check(rc).map(drop)
}

/// `ptrace(PTRACE_DETACH)`, delivering `signal` (0 for none).
pub(crate) fn detach(tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes the signal in `data`, no pointers.
    let rc = unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, signal as usize) };
    check(rc).map(drop)
}

/// `waitpid(tid, __WALL)` returning the raw status, retrying on EINTR.
pub(crate) fn wait_raw(tid: i32) -> io::Result<i32> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let rc = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        if rc == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(status);
    }
}

/// The registers the path follower reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FullRegs {
    pub(crate) rip: u64,
    pub(crate) rsp: u64,
}

/// Reads the stopped tracee's `rip` and `rsp` (the same as [`regs`], for any thread).
pub(crate) fn full_regs(tid: i32) -> io::Result<FullRegs> {
    let r = regs(tid)?;
    Ok(FullRegs {
        rip: r.rip,
        rsp: r.rsp,
    })
}

/// Sets debug register `index` (0-3: addresses, 7: control) of the stopped tracee.
pub(crate) fn set_debug_register(tid: i32, index: usize, value: u64) -> io::Result<()> {
    let offset = std::mem::offset_of!(libc::user, u_debugreg) + index * 8;
    // SAFETY: PTRACE_POKEUSER writes `value` at `offset` in the tracee's `struct user`; no
    // pointer of ours is involved.
    let rc = unsafe { libc::ptrace(libc::PTRACE_POKEUSER, tid, offset, value as usize) };
    check(rc).map(drop)
}
