//! Every system call and C library call the agent makes, in one place.
//!
//! Rules for this module: nothing here allocates through `malloc`, and nothing here is a
//! pthread cancellation point (plain `read`, `write`, `open`, `close`, `nanosleep` and
//! `sendmsg` are; we go through `syscall(2)`, which is not), so a thread can never be
//! cancelled inside a hook.

use core::ffi::{CStr, c_char, c_int, c_long, c_void};

/// Thread id of the calling thread.
#[inline]
pub fn gettid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Process id of the calling process.
#[inline]
pub fn getpid() -> u32 {
    // SAFETY: getpid cannot fail and touches no memory.
    unsafe { libc::getpid() as u32 }
}

/// A pidfd of this process (close-on-exec), or -1 (a kernel before 5.3).
pub fn pidfd_of_self() -> c_int {
    // SAFETY: pidfd_open takes a pid and flags, touches no memory, and returns a new
    // descriptor or -1.
    unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as c_int }
}

/// Parent process id.
#[inline]
pub fn getppid() -> u32 {
    // SAFETY: getppid cannot fail and touches no memory.
    unsafe { libc::getppid() as u32 }
}

/// The thread pointer (`%fs:0`, the TCB's self pointer on x86-64 glibc): a per-thread
/// constant that needs no TLS lookup to read.
#[inline]
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86-64 Linux, %fs points at the thread control block whose first word is
    // its own address; the load has no side effects.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    tp
}

/// The time-stamp counter, read after all earlier instructions completed (`lfence; rdtsc`),
/// so that a timestamp taken after a call is never earlier than the call's work.
#[inline]
pub fn rdtsc_ordered() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: lfence and rdtsc are unprivileged and only write eax/edx. Without `nomem` the
    // compiler keeps the asm after the call whose completion it timestamps.
    unsafe {
        core::arch::asm!("lfence", "rdtsc", out("eax") lo, out("edx") hi, options(nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The time-stamp counter, read once every earlier instruction executed and every earlier
/// load is globally visible (`rdtscp`; later instructions may start before it). Only on a
/// CPU that has it ([`has_rdtscp`]).
#[inline]
pub fn rdtscp() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: rdtscp is unprivileged where the CPU has it (the caller checked) and only
    // writes eax/edx/ecx. Without `nomem` the compiler keeps the asm after the call whose
    // completion it timestamps.
    unsafe {
        core::arch::asm!("rdtscp", out("eax") lo, out("edx") hi, out("ecx") _, options(nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Whether the CPU has `rdtscp` (CPUID leaf 0x8000_0001, EDX bit 27).
pub fn has_rdtscp() -> bool {
    // Leaf 0x8000_0000 gives the highest extended leaf, checked before 0x8000_0001 is read.
    let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    max >= 0x8000_0001 && core::arch::x86_64::__cpuid(0x8000_0001).edx & (1 << 27) != 0
}

/// The time-stamp counter, unfenced (see [`crate::clock::now_before_release`]).
#[inline]
pub fn rdtsc() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: rdtsc is unprivileged and only writes eax/edx. Without `nomem` the compiler
    // treats the asm as a memory barrier and keeps it before the release that follows.
    unsafe {
        core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The calling thread's CPU time (user and system), in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU time of thread `tid` of this process in nanoseconds, or `None` if it is gone.
pub fn thread_cpu_ns_of(tid: u32) -> Option<u64> {
    // The kernel's clock id of a thread's CPU clock (what `pthread_getcpuclockid` makes):
    // the complemented thread id, shifted, with the per-thread and scheduler-time bits.
    let id = ((!(tid as libc::clockid_t)) << 3) | 4 | 2;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime is async-signal-safe.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Clock `id`'s time in nanoseconds (async-signal-safe).
#[inline]
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in nanoseconds (through the vDSO; async-signal-safe).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Maps `len` bytes of zeroed private anonymous memory.
pub fn map_anonymous(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    own::note(p as usize, len);
    Some(p as *mut u8)
}

/// Unmaps memory obtained from this module.
///
/// # Safety
///
/// `p` and `len` must describe a mapping made here that nothing references any more.
pub unsafe fn unmap(p: *mut u8, len: usize) {
    own::forget(p as usize);
    // SAFETY: guaranteed by the caller.
    unsafe { libc::munmap(p as *mut c_void, len) };
}

/// The agent's own anonymous mappings ([`map_anonymous`]), which the leak check at exit
/// must not take for the program's memory: they hold copies of the program's pointers (the
/// live-block table, cached stack words). Lock-free, so that a signal handler that maps
/// memory never waits; a fixed number of entries, and a flag when more were needed.
pub mod own {
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const SLOTS: usize = 8192;
    static START: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    static LEN: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    static OVERFLOW: AtomicBool = AtomicBool::new(false);

    /// Notes a mapping made.
    pub(super) fn note(start: usize, len: usize) {
        for i in 0..SLOTS {
            if START[i].load(Ordering::Relaxed) == 0
                && START[i]
                    .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                LEN[i].store(len, Ordering::Release);
                return;
            }
        }
        OVERFLOW.store(true, Ordering::Release);
    }

    /// Forgets a mapping about to be unmapped.
    pub(super) fn forget(start: usize) {
        for i in 0..SLOTS {
            if START[i].load(Ordering::Acquire) == start {
                LEN[i].store(0, Ordering::Release);
                START[i].store(0, Ordering::Release);
                return;
            }
        }
    }

    /// Calls `f(start, end)` for each mapping noted; false if some could not be noted.
    pub fn each(mut f: impl FnMut(u64, u64)) -> bool {
        for i in 0..SLOTS {
            let start = START[i].load(Ordering::Acquire);
            let len = LEN[i].load(Ordering::Acquire);
            if start != 0 && len != 0 {
                f(start as u64, (start + len) as u64);
            }
        }
        !OVERFLOW.load(Ordering::Acquire)
    }
}

/// Whether two addresses lie in the same loaded object (`dladdr`). The addresses are only
/// looked up in the loader's tables, never read.
pub fn same_object(a: usize, b: usize) -> bool {
    // SAFETY: `Dl_info` is plain data that `dladdr` fills in; it reads no memory at the
    // addresses, only the loader's tables.
    unsafe {
        let mut x: libc::Dl_info = core::mem::zeroed();
        let mut y: libc::Dl_info = core::mem::zeroed();
        libc::dladdr(a as *const c_void, &mut x) != 0
            && libc::dladdr(b as *const c_void, &mut y) != 0
            && !x.dli_fbase.is_null()
            && x.dli_fbase == y.dli_fbase
    }
}

/// Reads `buf.len()` bytes of this process's memory at `addr` without faulting on memory
/// that is not mapped. Returns the bytes read: fewer when the range runs into unmapped or
/// unreadable memory.
pub fn read_own_memory(addr: u64, buf: &mut [u8]) -> usize {
    let n = buf.len();
    gather_own_memory(&[(addr, n)], buf)
}

/// Reads the ranges `(address, length)` of this process's memory one after the other into
/// `buf` (at most 1024 of them and `buf.len()` bytes in all) without faulting on memory
/// that is not mapped (`process_vm_readv` on itself). Returns the bytes read: fewer when a
/// range could not be read.
pub fn gather_own_memory(ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
    const MOST: usize = 1024;
    let mut remote = [libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 0,
    }; MOST];
    let mut total = 0usize;
    let mut count = 0;
    for (slot, &(addr, len)) in remote.iter_mut().zip(ranges) {
        if total + len > buf.len() {
            break;
        }
        *slot = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: len,
        };
        total += len;
        count += 1;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: total,
    };
    // SAFETY: `local` describes the first `total` bytes of `buf`, writable; the kernel
    // checks the remote ranges and reports unmapped memory as a short read or an error
    // instead of faulting.
    let n = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            libc::getpid() as c_long,
            &local as *const libc::iovec,
            1 as c_long,
            remote.as_ptr(),
            count as c_long,
            0 as c_long,
        )
    };
    usize::try_from(n).unwrap_or(0)
}

/// Creates a close-on-exec memfd of `len` bytes and maps it shared. Returns the fd and the
/// mapping.
pub fn create_shared(name: &CStr, len: usize) -> Option<(c_int, *mut u8)> {
    // SAFETY: `name` is a valid C string; MFD_CLOEXEC is a valid flag.
    let fd =
        unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), libc::MFD_CLOEXEC) } as c_int;
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the memfd just created.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        close(fd);
        return None;
    }
    map_shared_or_close(fd, len)
}

/// Creates the file `name` in the directory `dir` (durable recordings: the collector's
/// private directory next to the recording), `len` bytes with every block allocated (so
/// that writing to the mapping never faults for want of space), and maps it shared.
/// The directory is opened without following a link and the file created with
/// `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC`, mode 0600, relative to it; nothing is
/// left behind on failure. Returns the fd and the mapping.
pub fn create_shared_in(dir: &CStr, name: &CStr, len: usize) -> Option<(c_int, *mut u8)> {
    // SAFETY: `dir` is a valid C string; the flags are valid for openat.
    let dirfd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD as c_long,
            dir.as_ptr(),
            (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as c_long,
            0 as c_long,
        )
    } as c_int;
    if dirfd < 0 {
        return None;
    }
    // SAFETY: `dirfd` is the directory just opened; `name` is a valid C string.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd as c_long,
            name.as_ptr(),
            (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                as c_long,
            0o600 as c_long,
        )
    } as c_int;
    if fd < 0 {
        close(dirfd);
        return None;
    }
    // SAFETY: `fd` is the file just created; mode 0 allocates the range.
    let allocated = unsafe {
        libc::syscall(
            libc::SYS_fallocate,
            fd as c_long,
            0 as c_long,
            0 as c_long,
            len as c_long,
        )
    } == 0;
    // Removes the file again when it cannot serve.
    let unlink = || {
        // SAFETY: `name` is a valid C string relative to the open directory `dirfd`.
        unsafe {
            libc::syscall(
                libc::SYS_unlinkat,
                dirfd as c_long,
                name.as_ptr(),
                0 as c_long,
            )
        };
    };
    if !allocated {
        close(fd);
        unlink();
        close(dirfd);
        return None;
    }
    let mapped = map_shared_or_close(fd, len);
    if mapped.is_none() {
        unlink();
    }
    close(dirfd);
    mapped
}

/// Maps `len` bytes of `fd` shared; closes `fd` if that fails.
fn map_shared_or_close(fd: c_int, len: usize) -> Option<(c_int, *mut u8)> {
    // SAFETY: mapping `len` bytes of a file of at least that size.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        close(fd);
        return None;
    }
    // Rings are touched a page at a time, far apart: without this, every fault on a segment
    // file reads ahead (megabytes on a disk, zero pages for its unwritten extents) and the
    // whole segment ends up in memory and written back.
    // SAFETY: advice on the mapping just made; it changes no memory contents.
    unsafe { libc::madvise(p, len, libc::MADV_RANDOM) };
    Some((fd, p as *mut u8))
}

/// Closes a descriptor (not a cancellation point).
pub fn close(fd: c_int) {
    // SAFETY: closing a descriptor has no memory-safety preconditions.
    unsafe { libc::syscall(libc::SYS_close, fd as c_long) };
}

/// Creates a close-on-exec `SOCK_SEQPACKET` socket pair.
pub fn seqpacket_pair() -> Option<(c_int, c_int)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    let r = unsafe {
        libc::syscall(
            libc::SYS_socketpair,
            libc::AF_UNIX as c_long,
            (libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC) as c_long,
            0 as c_long,
            fds.as_mut_ptr(),
        )
    };
    (r == 0).then_some((fds[0], fds[1]))
}

/// The device and inode numbers of socket `fd`, or `None` if `fd` is not an open socket.
pub fn socket_identity(fd: c_int) -> Option<(u64, u64)> {
    if fd < 0 {
        return None;
    }
    // SAFETY: stat is plain data; zero is valid.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat into a valid stat buffer.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd as c_long, &mut st as *mut libc::stat) };
    (r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some((st.st_dev, st.st_ino))
}

/// The process id of the peer of Unix socket `fd` (for a socket pair: the process that
/// created it; for a connection: the process that listens).
pub fn peer_pid(fd: c_int) -> Option<u32> {
    // SAFETY: ucred is plain data; zero is valid.
    let mut cred: libc::ucred = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the right sizes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd as c_long,
            libc::SOL_SOCKET as c_long,
            libc::SO_PEERCRED as c_long,
            &mut cred as *mut libc::ucred,
            &mut len as *mut libc::socklen_t,
        )
    };
    (r == 0).then_some(cred.pid as u32)
}

/// Connects a close-on-exec `SOCK_SEQPACKET` socket to `name` in the abstract Unix
/// namespace.
pub fn connect_abstract(name: &[u8]) -> Option<c_int> {
    // SAFETY: sockaddr_un is plain data; zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    if name.is_empty() || name.len() + 1 > addr.sun_path.len() {
        return None;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path[1..].iter_mut().zip(name) {
        *dst = src as libc::c_char;
    }
    let len = core::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    // SAFETY: creating a socket has no memory-safety preconditions.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_UNIX as c_long,
            (libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC) as c_long,
            0 as c_long,
        )
    } as c_int;
    if fd < 0 {
        return None;
    }
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_connect,
                fd as c_long,
                &addr as *const libc::sockaddr_un,
                len as c_long,
            )
        };
        if r == 0 {
            return Some(fd);
        }
        if errno() != libc::EINTR {
            close(fd);
            return None;
        }
    }
}

/// Sends `bytes` with up to three descriptors attached (`SCM_RIGHTS`).
pub fn send_with_fds(sock: c_int, bytes: &[u8], fds: &[c_int]) -> bool {
    debug_assert!(fds.len() <= 3);
    // Room for a cmsghdr plus three ints, 8-byte aligned.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is a plain C struct; zero is a valid initial value.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let fd_bytes = core::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
        debug_assert!(space <= core::mem::size_of_val(&control));
        msg.msg_control = control.as_mut_ptr() as *mut c_void;
        msg.msg_controllen = space;
        // SAFETY: msg_control points to `space` writable, aligned bytes, enough for one
        // cmsghdr carrying `fds`.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
            core::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                fd_bytes as usize,
            );
        }
    }
    loop {
        // SAFETY: `msg` describes valid buffers for the duration of the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sendmsg,
                sock as c_long,
                &msg as *const libc::msghdr,
                libc::MSG_NOSIGNAL as c_long,
            )
        };
        if r >= 0 {
            return true;
        }
        if errno() != libc::EINTR {
            return false;
        }
    }
}

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns the thread's errno slot; reading it is always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(value: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// Reads up to `buf.len()` bytes of a file; returns the number read (0 on any error).
pub fn read_file(path: &CStr, buf: &mut [u8]) -> usize {
    // SAFETY: `path` is a valid C string.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD as c_long,
            path.as_ptr(),
            (libc::O_RDONLY | libc::O_CLOEXEC) as c_long,
        )
    } as c_int;
    if fd < 0 {
        return 0;
    }
    let mut total = 0;
    while total < buf.len() {
        // SAFETY: the destination range lies inside `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_read,
                fd as c_long,
                buf.as_mut_ptr().add(total),
                (buf.len() - total) as c_long,
            )
        };
        if n <= 0 {
            break;
        }
        total += n as usize;
    }
    close(fd);
    total
}

/// Reads a symbolic link; returns the number of bytes stored (0 on error).
pub fn readlink(path: &CStr, buf: &mut [u8]) -> usize {
    // SAFETY: `path` is a valid C string and `buf` a writable buffer of the given length.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD as c_long,
            path.as_ptr(),
            buf.as_mut_ptr(),
            buf.len() as c_long,
        )
    };
    if n < 0 { 0 } else { n as usize }
}

/// `/proc/PID/NAME` as a C string in `out`.
fn proc_path<'a>(pid: u32, name: &[u8], out: &'a mut [u8; 48]) -> &'a CStr {
    let mut digits = [0u8; 20];
    let pid = fmt_u64(u64::from(pid), &mut digits);
    *out = [0; 48];
    let mut at = 0;
    for part in [b"/proc/".as_slice(), pid, b"/", name] {
        for &b in part.iter().take(47 - at) {
            out[at] = b;
            at += 1;
        }
    }
    CStr::from_bytes_until_nul(&out[..]).unwrap_or(c"")
}

/// The program process `pid` runs, read into `buf`: the path of its executable, or, when
/// that cannot be read (a process that already ended, or not ours to read), its command
/// name; empty when neither can.
pub fn proc_program(pid: u32, buf: &mut [u8]) -> &CStr {
    let Some(room) = buf.len().checked_sub(1) else {
        return c"";
    };
    let mut path = [0u8; 48];
    let mut len = readlink(proc_path(pid, b"exe", &mut path), &mut buf[..room]);
    if len == 0 {
        len = read_file(proc_path(pid, b"comm", &mut path), &mut buf[..room]);
        while len > 0 && buf[len - 1] == b'\n' {
            len -= 1;
        }
    }
    buf[len] = 0;
    CStr::from_bytes_until_nul(&buf[..=len]).unwrap_or(c"")
}

/// Writes a message to standard error (best effort).
pub fn write_stderr(msg: &[u8]) {
    // SAFETY: `msg` is a valid buffer; a failed write is ignored.
    unsafe {
        libc::syscall(
            libc::SYS_write,
            2 as c_long,
            msg.as_ptr(),
            msg.len() as c_long,
        )
    };
}

/// Gives up the CPU.
pub fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::syscall(libc::SYS_sched_yield) };
}

/// Wakes every waiter on `word`, a word of memory shared with other processes (the
/// collector's tracer waits on the trace slot this way).
pub fn futex_wake_shared(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE only keys the wait queue by the word's address (a valid, aligned
    // u32 that `word` borrows); the timeout and second address are unused for it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            core::ptr::null::<libc::timespec>(),
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Sleeps for `us` microseconds (not a cancellation point).
pub fn sleep_us(us: u64) {
    let ts = libc::timespec {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_nsec: ((us % 1_000_000) * 1000) as c_long,
    };
    // SAFETY: `ts` is a valid timespec; the remaining-time pointer may be null.
    unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &ts as *const libc::timespec,
            core::ptr::null_mut::<libc::timespec>(),
        )
    };
}

/// Whether process `pid` exists.
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::syscall(libc::SYS_kill, pid as c_long, 0 as c_long) };
    r == 0 || errno() != libc::ESRCH
}

/// Whether the other end of socket `fd` is closed (a hang-up, without waiting).
pub fn peer_closed(fd: c_int) -> bool {
    if fd < 0 {
        return false;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

/// Whether thread `tid` of process `pid` still exists. `tgkill` with signal 0 fails with
/// `ESRCH` only once the thread has finished for good (a reused id belongs to a new thread
/// and reads as alive, which only delays reclaiming).
pub fn thread_alive(pid: u32, tid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid as c_long, tid as c_long, 0 as c_long) };
    r == 0 || errno() != libc::ESRCH
}

/// Ends the process with `code`, as glibc's `_exit` does.
pub fn exit_group(code: c_int) -> ! {
    loop {
        // SAFETY: exit_group ends every thread of the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, code as c_long) };
    }
}

unsafe extern "C" {
    #[link_name = "on_exit"]
    fn libc_on_exit(function: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// Registers `handler` to run at `exit` with the exit code (glibc's `on_exit`). The caller
/// marks the call internal: registration may allocate.
pub fn on_exit(handler: extern "C" fn(c_int, *mut c_void)) -> bool {
    // SAFETY: a valid function pointer and a null argument it ignores.
    unsafe { libc_on_exit(handler, core::ptr::null_mut()) == 0 }
}

/// The value of an environment variable, without copying.
pub fn getenv(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv reads the environment without allocating; the returned string lives
    // until the variable is changed, and we only read it during initialization.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv returned a valid NUL-terminated string.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Parses a decimal number.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        c.is_ascii_digit()
            .then(|| acc.checked_mul(10)?.checked_add(u64::from(c - b'0')))
            .flatten()
    })
}

/// Looks up the next definition of `name` after this library (`dlsym(RTLD_NEXT, name)`).
pub fn dlsym_next(name: &CStr) -> *mut c_void {
    // SAFETY: RTLD_NEXT and a valid symbol name; dlsym may call calloc, which our hooks
    // serve from the bootstrap arena during initialization.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// The `[low, high)` bounds of the mapping containing `addr`, read from
/// `/proc/self/maps` with raw system calls and a fixed buffer (no allocation).
///
/// Asks the kernel for that one mapping (`PROCMAP_QUERY`, Linux 6.11 and later), which
/// costs the same whatever the number of mappings; older kernels get the file read line by
/// line. (A process with 10,000 threads has over 20,000 mappings: reading them all for each
/// new thread would make thread creation quadratic.)
pub fn mapping_containing(addr: u64) -> Option<(u64, u64)> {
    // SAFETY: a valid path; O_RDONLY.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD as c_long,
            c"/proc/self/maps".as_ptr(),
            (libc::O_RDONLY | libc::O_CLOEXEC) as c_long,
        )
    } as c_int;
    if fd < 0 {
        return None;
    }
    if let Some(found) = procmap_query(fd, addr) {
        close(fd);
        return found;
    }
    let mut buf = [0u8; 4096];
    let mut filled = 0usize;
    let mut found = None;
    'read: loop {
        // SAFETY: the destination range lies inside `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_read,
                fd as c_long,
                buf.as_mut_ptr().add(filled),
                (buf.len() - filled) as c_long,
            )
        };
        if n <= 0 {
            break;
        }
        filled += n as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..filled].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            if let Some((lo, hi)) = parse_range(line)
                && addr >= lo
                && addr < hi
            {
                found = Some((lo, hi));
                break 'read;
            }
            start += nl + 1;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled == buf.len() {
            // A line longer than the buffer (a very long path): skip its start.
            filled = 0;
        }
    }
    close(fd);
    found
}

/// `struct procmap_query` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `PROCMAP_QUERY`: `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 =
    (3 << 30) | ((core::mem::size_of::<ProcmapQuery>() as u64) << 16) | ((b'f' as u64) << 8) | 17;

/// The mapping containing `addr`, asked of the kernel through the `/proc/self/maps`
/// descriptor `fd`: `Some(None)` if no mapping contains it, `None` if the kernel does not
/// know the request.
fn procmap_query(fd: c_int, addr: u64) -> Option<Option<(u64, u64)>> {
    let mut q = ProcmapQuery {
        size: core::mem::size_of::<ProcmapQuery>() as u64,
        query_addr: addr,
        ..ProcmapQuery::default()
    };
    // SAFETY: `q` is a valid, writable procmap_query whose size field is set; the name and
    // build-id buffers are not requested (sizes 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            fd as c_long,
            PROCMAP_QUERY as c_long,
            &mut q as *mut ProcmapQuery,
        )
    };
    if r == 0 {
        return Some(Some((q.vma_start, q.vma_end)));
    }
    match errno() {
        libc::ENOENT => Some(None),
        _ => None,
    }
}

/// The calling thread's name (as `prctl(PR_GET_NAME)` gives it); returns its length.
pub fn thread_name(buf: &mut [u8; 16]) -> usize {
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into `buf`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::PR_GET_NAME as c_long,
            buf.as_mut_ptr(),
        )
    };
    if r != 0 {
        return 0;
    }
    buf.iter().position(|&b| b == 0).unwrap_or(buf.len())
}

fn parse_range(line: &[u8]) -> Option<(u64, u64)> {
    let hex = |s: &[u8]| -> Option<u64> {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter().try_fold(0u64, |acc, &c| {
            let d = (c as char).to_digit(16)?;
            Some(acc << 4 | u64::from(d))
        })
    };
    let dash = line.iter().position(|&b| b == b'-')?;
    let space = line.iter().position(|&b| b == b' ')?;
    Some((hex(&line[..dash])?, hex(&line[dash + 1..space])?))
}

/// The `[low, high)` bounds of the alternate signal stack, if one is installed.
pub fn altstack_bounds() -> Option<(u64, u64)> {
    // SAFETY: querying the alternate stack with a null new-stack pointer.
    unsafe {
        let mut ss: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut ss) != 0 || ss.ss_flags & libc::SS_DISABLE != 0
        {
            return None;
        }
        Some((ss.ss_sp as u64, ss.ss_sp as u64 + ss.ss_size as u64))
    }
}

/// The signal-return trampoline that the C library gives the kernel with every handler it
/// installs (`sa_restorer`: glibc's and musl's `__restore_rt`), learnt without changing any
/// signal's disposition: `SIGSTKFLT`'s current disposition, if it is the default or
/// "ignore" (it always is, unless the program handles that unused signal), is installed
/// again through the C library's `sigaction`, which adds its trampoline; the kernel is
/// asked for it, and the signal's kernel state is then put back exactly as it was. Only a
/// `sigaction` of that same signal by another thread during these few system calls would
/// be undone; the agent calls this while it initializes, before the program's `main`.
/// `None` when the C library gives no trampoline or the signal has a handler.
pub fn libc_signal_trampoline() -> Option<u64> {
    /// The kernel's `struct sigaction` on x86-64 (`rt_sigaction`'s own layout, not the C
    /// library's): handler, flags, restorer, mask.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    /// `SA_RESTORER` (`<asm/signal.h>`; the `libc` crate does not export it on every
    /// target).
    const SA_RESTORER: u64 = 0x0400_0000;
    const SIGNAL: c_int = libc::SIGSTKFLT;
    let none = KernelSigaction {
        handler: 0,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    let query = |out: &mut KernelSigaction| -> bool {
        // SAFETY: rt_sigaction with no new action writes the current one to `out`, a
        // kernel sigaction of the size passed (8-byte mask).
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                SIGNAL as c_long,
                core::ptr::null::<KernelSigaction>(),
                out as *mut KernelSigaction,
                8 as c_long,
            ) == 0
        }
    };
    let mut old = none;
    if !query(&mut old) || (old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN) {
        return None;
    }
    // SAFETY: a zeroed sigaction with the disposition the signal already has is a valid
    // argument; it changes nothing about how the signal is handled.
    let installed = unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = old.handler;
        libc::sigaction(SIGNAL, &sa, core::ptr::null_mut()) == 0
    };
    if !installed {
        return None;
    }
    let mut now = none;
    let asked = query(&mut now);
    // SAFETY: puts back the kernel sigaction read above, unchanged.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            SIGNAL as c_long,
            &old as *const KernelSigaction,
            core::ptr::null_mut::<KernelSigaction>(),
            8 as c_long,
        );
    }
    (asked && now.flags & SA_RESTORER != 0 && now.restorer != 0).then_some(now.restorer as u64)
}

/// Formats `value` in decimal into `buf`, returning the digits.
pub fn fmt_u64(mut value: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buf[i..];
        }
    }
}

/// A line of text built in a fixed buffer (no allocation), for messages on stderr.
#[derive(Debug)]
pub struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Self::new()
    }
}

impl Line {
    /// An empty line.
    pub const fn new() -> Line {
        Line {
            buf: [0; 512],
            len: 0,
        }
    }

    /// Appends bytes (what does not fit is cut).
    pub fn text(&mut self, t: &[u8]) -> &mut Line {
        let n = t.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&t[..n]);
        self.len += n;
        self
    }

    /// Appends a number in decimal.
    pub fn num(&mut self, v: u64) -> &mut Line {
        let mut digits = [0u8; 20];
        let d = fmt_u64(v, &mut digits);
        let mut copy = [0u8; 20];
        copy[..d.len()].copy_from_slice(d);
        self.text(&copy[..d.len()])
    }

    /// Writes the line and a newline to stderr.
    pub fn write_stderr(&mut self) {
        self.text(b"\n");
        write_stderr(&self.buf[..self.len]);
    }
}

/// Signature of a `pthread_atfork` handler.
pub type ForkHandler = unsafe extern "C" fn();

/// Registers fork handlers.
pub fn atfork(prepare: ForkHandler, parent: ForkHandler, child: ForkHandler) -> bool {
    // SAFETY: the handlers are valid functions for the life of the process (this library
    // is never unloaded).
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}

/// Creates a pthread key with a destructor.
pub fn key_create(dtor: unsafe extern "C" fn(*mut c_void)) -> Option<libc::pthread_key_t> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer and `dtor` a valid function.
    (unsafe { libc::pthread_key_create(&mut key, Some(dtor)) } == 0).then_some(key)
}

/// Sets the calling thread's value of `key`. The value is stored, never dereferenced here.
pub fn key_set(key: libc::pthread_key_t, value: usize) {
    // SAFETY: `key` was created by `key_create`; pthread_setspecific only stores the value.
    unsafe { libc::pthread_setspecific(key, value as *const c_void) };
}

/// `dl_iterate_phdr` callback type.
pub type PhdrCallback = unsafe extern "C" fn(
    info: *mut libc::dl_phdr_info,
    size: libc::size_t,
    data: *mut c_void,
) -> c_int;

/// Walks the loaded modules.
///
/// # Safety
///
/// `data` must be what `callback` expects.
pub unsafe fn iterate_phdr(callback: PhdrCallback, data: *mut c_void) {
    // SAFETY: guaranteed by the caller; dl_iterate_phdr does not allocate.
    unsafe { libc::dl_iterate_phdr(Some(callback), data) };
}

/// A C string pointer as bytes (empty for null).
///
/// # Safety
///
/// `p` must be null or a valid NUL-terminated string that outlives the returned slice.
pub unsafe fn c_bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { CStr::from_ptr(p) }.to_bytes()
    }
}
