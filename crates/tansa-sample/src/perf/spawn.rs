//! Starting the command stopped before `exec`, so its events exist before its first
//! instruction.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::SampleError;

/// A child blocked before `exec` until [`GatedChild::release`].
#[derive(Debug)]
pub struct GatedChild {
    /// Its process id.
    pub pid: u32,
    gate: libc::c_int,
    errors: libc::c_int,
    command: String,
}

fn pipe() -> Result<[libc::c_int; 2], SampleError> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is valid for two ints; O_CLOEXEC keeps the pipe out of the command.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(SampleError::Io {
            what: "pipe".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(fds)
}

fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor this module created and owns.
    unsafe { libc::close(fd) };
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
        let gate = pipe()?;
        let errors = pipe()?;
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
        close(gate[0]);
        close(errors[1]);
        Ok(GatedChild {
            pid: pid as u32,
            gate: gate[1],
            errors: errors[0],
            command: text,
        })
    }

    /// Lets the child execute the command; fails if `exec` failed (the child is reaped).
    pub fn release(&mut self) -> Result<(), SampleError> {
        let b = 1u8;
        // SAFETY: writing one byte from a valid buffer to our pipe.
        unsafe { libc::write(self.gate, (&raw const b).cast(), 1) };
        close(self.gate);
        self.gate = -1;
        let mut errno = [0u8; 4];
        // SAFETY: reading at most 4 bytes into a 4-byte buffer; EOF means exec succeeded.
        let n = unsafe { libc::read(self.errors, errno.as_mut_ptr().cast(), 4) };
        close(self.errors);
        self.errors = -1;
        if n == 4 {
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            return Err(SampleError::Spawn {
                command: self.command.clone(),
                source: std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno)),
            });
        }
        Ok(())
    }

    /// The exit status if the child has ended (reaping it), without blocking.
    pub fn try_wait(&self) -> Option<tansa_format::meta::ExitStatus> {
        let mut status = 0;
        // SAFETY: polling our own child.
        let rc = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
        (rc == self.pid as i32).then(|| tansa_format::meta::ExitStatus::from_wait_status(status))
    }

    /// Sends `signal` to the child.
    pub fn kill(&self, signal: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid as i32, signal) };
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        let released = self.gate < 0;
        for fd in [self.gate, self.errors] {
            if fd >= 0 {
                close(fd);
            }
        }
        if !released {
            // Never released: the child exits on the closed gate; reap it.
            let mut status = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
        }
    }
}
