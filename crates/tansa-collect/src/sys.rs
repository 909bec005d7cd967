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
    /// A message with its attached descriptors, and whether some of those were dropped
    /// (`MSG_CTRUNC`: this process had no descriptor left for them).
    Message(Vec<u8>, Vec<OwnedFd>, bool),
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
    let truncated = msg.msg_flags & libc::MSG_CTRUNC != 0;
    Ok(Received::Message(
        buf[..n as usize].to_vec(),
        fds,
        truncated,
    ))
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

/// Makes this process the reaper of its orphaned descendants.
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Collects one exited child without blocking: `(pid, raw status, command name)`. The
/// name is read while the child is still a zombie (its `/proc` entry goes with it).
pub fn reap_any() -> Option<(u32, i32, String)> {
    // SAFETY: siginfo_t is plain data; zero is valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: peeking (WNOWAIT) at an exited child into a valid siginfo_t.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled `info` (si_pid is 0 when no child has exited).
    let peeked = if r == 0 { unsafe { info.si_pid() } } else { 0 };
    // A child stopped under ptrace by another thread of the recorder (leak-cause mode) is
    // reported here too, whatever the flags (the kernel treats the tracer's thread group as
    // the tracer when it is also the parent's): leave that stop to its tracer.
    if peeked <= 0
        || !matches!(
            info.si_code,
            libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
        )
    {
        return None;
    }
    let comm = std::fs::read_to_string(format!("/proc/{peeked}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default();
    let mut status = 0;
    // SAFETY: valid out-pointer. The child has exited, so this reaps it (no stop of it can
    // be reported any more).
    let pid = unsafe { libc::waitpid(peeked, &mut status, libc::WNOHANG) };
    (pid == peeked).then_some((pid as u32, status, comm))
}

/// The identity of a socket descriptor: its device and inode numbers (socket inodes are
/// unique among the sockets alive), which the agent compares with what it inherited.
pub fn socket_identity(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// A listening `SOCK_SEQPACKET` socket in the abstract Unix namespace with an unguessable
/// name (`tansa-PID-` and 128 random bits), and that name. Agents that lost their
/// inherited descriptor connect to it.
pub fn listen_endpoint() -> io::Result<(OwnedFd, String)> {
    let mut random = [0u8; 16];
    // SAFETY: `random` is a valid buffer of its length.
    if unsafe { libc::getrandom(random.as_mut_ptr() as *mut libc::c_void, random.len(), 0) }
        != random.len() as isize
    {
        return Err(io::Error::last_os_error());
    }
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("tansa-{}-{hex}", std::process::id());
    // SAFETY: creating a socket has no memory-safety preconditions.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just created and own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data; zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract namespace: a leading NUL, then the name (no terminator).
    for (dst, &src) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes.
    if unsafe {
        libc::bind(
            sock.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len as libc::socklen_t,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: listen on a bound socket.
    if unsafe { libc::listen(sock.as_raw_fd(), 128) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((sock, name))
}

/// Accepts one pending connection without blocking.
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: accept4 with null address pointers.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => Ok(None),
            // No descriptor left: the connection waits in the backlog until one is freed
            // (a process ends), rather than the recording failing.
            Some(libc::EMFILE) | Some(libc::ENFILE) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The process id and user id of the peer of a connected Unix socket.
pub fn peer_credentials(fd: RawFd) -> io::Result<(u32, u32)> {
    // SAFETY: ucred is plain data; zero is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers of the right size.
    if unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}
