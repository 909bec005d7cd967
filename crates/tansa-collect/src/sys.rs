//! System calls of the collector.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Creates a `SOCK_SEQPACKET` pair: the first end is close-on-exec (ours), the second is
/// inherited by the target.
pub fn control_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The target's end must survive exec.
    // SAFETY: F_SETFD on a valid descriptor.
    if unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((ours, theirs))
}

/// Result of receiving one message.
#[derive(Debug)]
pub enum Received {
    /// A message with its attached descriptors.
    Message(Vec<u8>, Vec<OwnedFd>),
    /// Nothing to read right now.
    WouldBlock,
    /// The peer closed its end.
    Eof,
}

/// Receives one message without blocking.
pub fn recv_with_fds(fd: RawFd) -> io::Result<Received> {
    let mut buf = [0u8; 256];
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; zero is a valid initial value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` describes valid buffers.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(Received::WouldBlock),
            Some(libc::ECONNRESET) => Ok(Received::Eof),
            _ => Err(e),
        };
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(Received::Eof);
    }
    Ok(Received::Message(buf[..n as usize].to_vec(), fds))
}

/// A shared mapping of a received memfd.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed through atomics and the ring protocol.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` read-write and shared.
    pub fn map(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // Refuse a file smaller than announced (a confused or hostile sender).
        // SAFETY: fstat on a valid descriptor into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as u64) < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "segment smaller than announced",
            ));
        }
        // SAFETY: mapping `len` bytes of a file at least that large.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len,
        })
    }

    /// Start of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// The time-stamp counter (the agent reads the same counter).
pub fn rdtsc() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: rdtsc is unprivileged and only writes eax/edx.
    unsafe {
        std::arch::asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi, options(nostack, nomem, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether the kernel uses the TSC as its clock source and the CPU's TSC is invariant, so
/// raw TSC readings are comparable across CPUs.
pub fn tsc_is_reliable() -> bool {
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    source.trim() == "tsc" && has("constant_tsc") && has("nonstop_tsc")
}

/// Waits for descriptors to become readable (or hang up) for at most `timeout_ms`.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> Vec<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of pollfd.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if n <= 0 {
        return vec![false; fds.len()];
    }
    pfds.iter().map(|p| p.revents != 0).collect()
}

/// Makes this process the reaper of its orphaned descendants.
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Collects one exited child without blocking: `(pid, raw status)`.
pub fn reap_any() -> Option<(u32, i32)> {
    let mut status = 0;
    // SAFETY: valid out-pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some((pid as u32, status))
}

/// Sends `signal` to `pid`.
pub fn kill(pid: u32, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}
