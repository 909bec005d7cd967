//! Starting the command stopped before `exec`, so its events exist before its first
//! instruction.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use crate::SampleError;

/// A child blocked before `exec` until [`GatedChild::release`].
#[derive(Debug)]
pub struct GatedChild {
    /// Its process id.
    pub pid: u32,
    /// Our end of the pipe the child waits on (`None` once released).
    gate: Option<OwnedFd>,
    /// Our end of the pipe the child reports a failed `exec` on.
    errors: Option<OwnedFd>,
    command: String,
}

/// A close-on-exec pipe (the command never inherits it): (read end, write end).
fn pipe() -> Result<(OwnedFd, OwnedFd), SampleError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| SampleError::Io {
        what: "pipe".into(),
        source: e.into(),
    })
}

impl GatedChild {
    /// Forks a child that waits for [`GatedChild::release`], then executes `command`
    /// (looked up in `PATH`).
    pub fn spawn(command: &[OsString]) -> Result<GatedChild, SampleError> {
        let text = command
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let spawn_err = |source| SampleError::Spawn {
            command: text.clone(),
            source,
        };
        let args: Vec<CString> = command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                spawn_err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "an argument contains a NUL byte",
                ))
            })?;
        if args.is_empty() {
            return Err(spawn_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no command given",
            )));
        }
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let (gate_read, gate_write) = pipe()?;
        let (errors_read, errors_write) = pipe()?;
        let gate = [gate_read.as_raw_fd(), gate_write.as_raw_fd()];
        let errors = [errors_read.as_raw_fd(), errors_write.as_raw_fd()];
        // SAFETY: the child only calls async-signal-safe functions (read, close, execvp,
        // write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(spawn_err(std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: see above; `argv` is a NULL-terminated array of valid C strings.
            unsafe {
                libc::close(gate[1]);
                libc::close(errors[0]);
                let mut b = 0u8;
                let mut n = libc::read(gate[0], (&raw mut b).cast(), 1);
                while n < 0 && *libc::__errno_location() == libc::EINTR {
                    n = libc::read(gate[0], (&raw mut b).cast(), 1);
                }
                if n != 1 {
                    // The recorder gave up before releasing us: do not run the command.
                    libc::_exit(126);
                }
                libc::execvp(argv[0], argv.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(errors[1], (&raw const errno).cast(), 4);
                libc::_exit(127);
            }
        }
        // The child's ends, closed here (the child has its own copies).
        drop((gate_read, errors_write));
        Ok(GatedChild {
            pid: pid as u32,
            gate: Some(gate_write),
            errors: Some(errors_read),
            command: text,
        })
    }

    /// Lets the child execute the command; fails if `exec` failed (the child is reaped).
    pub fn release(&mut self) -> Result<(), SampleError> {
        if let Some(gate) = self.gate.take() {
            // A failed write means the child is gone: its end shows below.
            let _ = rustix::io::write(&gate, &[1]);
        }
        let mut errno = [0u8; 4];
        // EOF (0 bytes) means the exec succeeded and closed the child's end.
        let n = self
            .errors
            .take()
            .map_or(Ok(0), |errors| rustix::io::read(&errors, &mut errno));
        if n == Ok(4) {
            tansa_proc::os::wait(self.pid);
            return Err(SampleError::Spawn {
                command: self.command.clone(),
                source: std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno)),
            });
        }
        Ok(())
    }

    /// The exit status if the child has ended (reaping it), without blocking.
    pub fn try_wait(&self) -> Option<tansa_format::meta::ExitStatus> {
        tansa_proc::os::try_wait(self.pid).map(tansa_format::meta::ExitStatus::from_wait_status)
    }

    /// Sends `signal` to the child.
    pub fn kill(&self, signal: i32) {
        // Gone already: nothing to stop.
        let _ = tansa_proc::os::kill(self.pid, signal);
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        let released = self.gate.is_none();
        self.gate = None;
        self.errors = None;
        if !released {
            // Never released: the child exits on the closed gate; reap it.
            tansa_proc::os::wait(self.pid);
        }
    }
}
