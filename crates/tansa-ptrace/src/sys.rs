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

/// Sets `PTRACE_O_EXITKILL`: the tracee dies if the tracer does.
pub(crate) fn set_exit_kill(pid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_SETOPTIONS takes the options in `data`, no pointers.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            0usize,
            libc::PTRACE_O_EXITKILL as usize,
        )
    };
    check(rc).map(drop)
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

/// Sets the stopped tracee's `rip`.
pub(crate) fn set_rip(pid: i32, rip: u64) -> io::Result<()> {
    let mut r = std::mem::MaybeUninit::<libc::user_regs_struct>::uninit();
    // SAFETY: as in `regs`.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0usize, r.as_mut_ptr()) };
    check(rc)?;
    // SAFETY: the call succeeded, so the kernel filled the whole struct.
    let mut r = unsafe { r.assume_init() };
    r.rip = rip;
    // SAFETY: PTRACE_SETREGS reads one `user_regs_struct` from `data`, which points at an
    // initialised one.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SETREGS, pid, 0usize, &r as *const _) };
    check(rc).map(drop)
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

/// Writes the word at `addr` in the tracee (code pages included: ptrace bypasses the page
/// protection).
pub(crate) fn poke(pid: i32, addr: u64, word: u64) -> io::Result<()> {
    // SAFETY: PTRACE_POKEDATA takes the address in the tracee and the word by value; it
    // does not touch our memory.
    let rc = unsafe { libc::ptrace(libc::PTRACE_POKEDATA, pid, addr as usize, word as usize) };
    check(rc).map(drop)
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
