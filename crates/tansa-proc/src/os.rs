//! The process-control half of tansa's OS edge, over rustix: shared mappings of descriptors,
//! waiting for descriptors, signals, pidfds and wait statuses. The collector, the perf
//! layer, the CPU sampler's gated child and the tracer use these instead of their own
//! `libc` calls. (The in-process agent keeps its own raw system calls: it must not
//! allocate or take locks on its hook path. The tracer keeps its ptrace calls and
//! `waitpid(__WALL)`, which rustix does not offer; the collector keeps its `SCM_RIGHTS`
//! messages and its `waitid(WNOWAIT)` peek.)
//!
//! Wait statuses are returned raw; `tansa_format::meta::ExitStatus::from_wait_status` is
//! the one decoder.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::mm::{MapFlags, ProtFlags};
use rustix::process::{Pid, Signal, WaitOptions};

/// A shared read-write mapping of the first `len` bytes of a descriptor (a memfd segment,
/// a perf ring), unmapped on drop.
#[derive(Debug)]
pub struct SharedMapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; its users synchronise
// access to its contents themselves (atomics and ring protocols).
unsafe impl Send for SharedMapping {}
// SAFETY: as above: `&SharedMapping` only hands out the base address.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps `len` bytes of `fd` from offset 0, readable and writable, shared. With
    /// `check_size`, a regular file (a memfd) smaller than `len` is refused: its sender
    /// announced more than it gave (touching the missing pages would raise `SIGBUS`).
    pub fn map(fd: BorrowedFd<'_>, len: usize, check_size: bool) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        if check_size {
            let st = rustix::fs::fstat(fd)?;
            if u64::try_from(st.st_size).unwrap_or(0) < len as u64 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "segment smaller than announced",
                ));
            }
        }
        // SAFETY: a new mapping at an address the kernel chooses (null hint) aliases no Rust
        // object; `len` is non-zero and the descriptor is valid for the call.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        // What is mapped here (the agent's segments, perf's rings) is rings read a page at a
        // time, far apart: no read-ahead (on a segment file on disk it brought whole
        // segments into memory). Advice only: a refusal changes nothing.
        // SAFETY: the range is the mapping just made.
        let _ = unsafe { rustix::mm::madvise(base, len, rustix::mm::Advice::Random) };
        Ok(SharedMapping {
            base: base.cast(),
            len,
        })
    }

    /// Start of the mapping.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Gives the storage behind bytes `[offset, offset + len)` of the mapping back to the
    /// file system (`MADV_REMOVE`, a hole punched in the file): the whole pages of that range
    /// read as zeros afterwards, for every process that maps the file. The partial pages at
    /// either end are kept. An out-of-range request is refused.
    ///
    /// # Errors
    ///
    /// The kernel's refusal (a file system that cannot punch holes).
    pub fn discard(&self, offset: usize, len: usize) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "range out of the mapping")
            })?;
        let page = page_size();
        let start = offset.next_multiple_of(page);
        let end = end - end % page;
        if start >= end {
            return Ok(());
        }
        // SAFETY: `[start, end)` lies inside this mapping and is page-aligned; the pages are
        // replaced by zeros, which no Rust reference into the mapping can observe wrongly
        // (users read it through raw pointers and atomics; the caller no longer needs it).
        unsafe {
            rustix::mm::madvise(
                self.base.add(start).cast(),
                end - start,
                rustix::mm::Advice::LinuxRemove,
            )
        }?;
        Ok(())
    }

    /// Whether the mapping is empty (never: empty mappings are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe the mapping made in `map`, not yet unmapped; no
        // reference into it outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.len) };
    }
}

/// The system page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Waits until one of `fds` is readable or hung up, or `timeout` passes (`None`: no
/// limit). Returns which are; all `false` on timeout or on an interrupted wait.
///
/// # Errors
///
/// The kernel's refusal (not an interruption).
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = timeout.map(|t| Timespec {
        tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    match rustix::event::poll(&mut pfds, timeout.as_ref()) {
        Ok(_) => Ok(pfds.iter().map(|p| !p.revents().is_empty()).collect()),
        Err(rustix::io::Errno::INTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(e.into()),
    }
}

/// Most words [`futex_wait_any`] waits on at once (the kernel's limit).
pub const FUTEX_WAIT_MAX: usize = 128;

/// A word for [`futex_wait_any`]: it sleeps while `word` holds `expected`. `shared`: the
/// word lies in memory shared with other processes (a `MAP_SHARED` mapping), whose wakes
/// come from those processes; otherwise it is private to this process.
#[derive(Debug, Clone, Copy)]
pub struct FutexWait<'a> {
    /// The word.
    pub word: &'a std::sync::atomic::AtomicU32,
    /// The value it holds while there is nothing to do.
    pub expected: u32,
    /// Whether other processes wake it.
    pub shared: bool,
}

/// How [`futex_wait_any`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutexWoken {
    /// Word `n` was woken (or the wait ended for no reason, as futex waits may).
    Woken(usize),
    /// A word did not hold its expected value when the wait began.
    Changed,
    /// The timeout passed.
    TimedOut,
    /// A signal interrupted the wait.
    Interrupted,
}

/// Sleeps until one of `words` is woken ([`futex_wake`], or the agent's raw wake) or
/// `timeout` passes; returns at once if a word does not hold its expected value when the
/// wait begins, so a change made just before the wait is not slept through. At most
/// [`FUTEX_WAIT_MAX`] words. `futex_waitv`, Linux 5.16 or later.
///
/// # Errors
///
/// Too many words (`InvalidInput`), or the kernel's refusal: `Unsupported` where the
/// system call does not exist, for callers to fall back to polling.
pub fn futex_wait_any(words: &[FutexWait<'_>], timeout: Duration) -> io::Result<FutexWoken> {
    use rustix::thread::futex;
    if words.len() > FUTEX_WAIT_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "more futex words than one wait takes",
        ));
    }
    let waits: Vec<futex::Wait> = words
        .iter()
        .map(|w| {
            let mut wait = futex::Wait::new();
            wait.val = u64::from(w.expected);
            wait.uaddr = futex::WaitPtr::new(w.word.as_ptr().cast());
            wait.flags = if w.shared {
                futex::WaitFlags::SIZE_U32
            } else {
                futex::WaitFlags::SIZE_U32 | futex::WaitFlags::PRIVATE
            };
            wait
        })
        .collect();
    // The timeout is a point in time on the given clock.
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let nanos = i128::from(now.tv_sec) * 1_000_000_000
        + i128::from(now.tv_nsec)
        + i128::try_from(timeout.as_nanos()).unwrap_or(i128::MAX / 2);
    let until = futex::Timespec {
        tv_sec: i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX),
        tv_nsec: (nanos % 1_000_000_000) as i64,
    };
    match futex::waitv(
        &waits,
        futex::WaitvFlags::empty(),
        Some(&until),
        futex::ClockId::Monotonic,
    ) {
        Ok(n) => Ok(FutexWoken::Woken(n)),
        Err(rustix::io::Errno::AGAIN) => Ok(FutexWoken::Changed),
        Err(rustix::io::Errno::TIMEDOUT) => Ok(FutexWoken::TimedOut),
        Err(rustix::io::Errno::INTR) => Ok(FutexWoken::Interrupted),
        Err(rustix::io::Errno::NOSYS) => Err(io::ErrorKind::Unsupported.into()),
        Err(e) => Err(e.into()),
    }
}

/// Wakes every waiter on `word` (see [`FutexWait`] for `shared`). Returns how many woke.
///
/// # Errors
///
/// The kernel's refusal (a word that is not mapped).
pub fn futex_wake(word: &std::sync::atomic::AtomicU32, shared: bool) -> io::Result<usize> {
    use rustix::thread::futex;
    let flags = if shared {
        futex::Flags::empty()
    } else {
        futex::Flags::PRIVATE
    };
    // The count is a signed int to the kernel.
    Ok(futex::wake(word, flags, i32::MAX as u32)?)
}

/// Sends signal number `signal` to process `pid`.
///
/// # Errors
///
/// No such process, no permission, or a signal number that is not one.
pub fn kill(pid: u32, signal: i32) -> io::Result<()> {
    let pid = pid_of(pid)?;
    let signal = Signal::from_named_raw(signal)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a signal number"))?;
    rustix::process::kill_process(pid, signal)?;
    Ok(())
}

/// A pidfd of process `pid` (readable once it has exited), or `None` if it is gone or the
/// kernel has no pidfds.
pub fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    rustix::process::pidfd_open(pid_of(pid).ok()?, rustix::process::PidfdFlags::empty()).ok()
}

/// `struct pidfd_info` of `<linux/pidfd.h>` (its first version, 64 bytes), for
/// `PIDFD_GET_INFO`.
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    /// pid, tgid, ppid, then the real, effective, saved and file-system user and group ids.
    ids: [u32; 11],
    exit_code: i32,
    coredump_mask: u32,
    spare: u32,
}

/// `PIDFD_INFO_PID`: the ids (the first of them is the process id).
const PIDFD_INFO_PID: u64 = 1;
/// `PIDFD_INFO_EXIT`: ask for (and, back, holds) the exit status.
const PIDFD_INFO_EXIT: u64 = 1 << 3;
/// `PIDFD_GET_INFO`: `_IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::read_write::<PidfdInfo>(0xFF, 11);

/// `PIDFD_GET_INFO` with `mask`: what the kernel tells of the process `pidfd` refers to.
fn pidfd_info(pidfd: std::os::fd::BorrowedFd<'_>, mask: u64) -> io::Result<PidfdInfo> {
    let mut info = PidfdInfo {
        mask,
        ..PidfdInfo::default()
    };
    // SAFETY: PIDFD_GET_INFO reads and writes a `struct pidfd_info`; `PidfdInfo` has its
    // layout and size (64 bytes, the size the opcode carries).
    let ioctl = unsafe { rustix::ioctl::Updater::<PIDFD_GET_INFO, PidfdInfo>::new(&mut info) };
    // SAFETY: as above; `pidfd` is a descriptor the caller holds.
    unsafe { rustix::ioctl::ioctl(pidfd, ioctl) }?;
    Ok(info)
}

/// The process id `pidfd` refers to, while that process exists (Linux 6.13 and later).
///
/// # Errors
///
/// `ESRCH` once the process has been collected; the kernel has no `PIDFD_GET_INFO`; not a
/// pidfd.
pub fn pidfd_pid(pidfd: std::os::fd::BorrowedFd<'_>) -> io::Result<u32> {
    Ok(pidfd_info(pidfd, PIDFD_INFO_PID)?.ids[0])
}

/// The raw wait status of the process `pidfd` refers to, once it has ended and been
/// collected, by whichever process collected it (Linux 6.15 and later: `PIDFD_INFO_EXIT`);
/// `Ok(None)` while it runs or is a zombie.
///
/// While its parent collects it, the kernel takes the process out of its pid before it
/// publishes its status, and a query in between finds neither (`ESRCH`): about a third of
/// the queries made as the parent collects, on Linux 6.18. Such a query is made again; a
/// process whose status is still not there counts as not collected yet (`Ok(None)`).
///
/// # Errors
///
/// The kernel has no `PIDFD_GET_INFO` (before 6.13), or `pidfd` is not a pidfd.
pub fn pidfd_exit_status(pidfd: std::os::fd::BorrowedFd<'_>) -> io::Result<Option<i32>> {
    for _ in 0..4 {
        match pidfd_info(pidfd, PIDFD_INFO_EXIT) {
            Ok(info) => return Ok((info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code)),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Collects child `pid` if it has ended, without blocking: its raw wait status.
pub fn try_wait(pid: u32) -> Option<i32> {
    let (_, status) = rustix::process::waitpid(Some(pid_of(pid).ok()?), WaitOptions::NOHANG)
        .ok()
        .flatten()?;
    Some(status.as_raw())
}

/// Waits for child `pid` to end and collects it: its raw wait status (`None` if it is not a
/// child of ours any more).
pub fn wait(pid: u32) -> Option<i32> {
    let pid = pid_of(pid).ok()?;
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, status))) => return Some(status.as_raw()),
            Err(rustix::io::Errno::INTR) => {}
            _ => return None,
        }
    }
}

/// While alive, the calling thread and thread `tid` (a tracee, stopped) may run on one CPU
/// only: the caller's, where `tid` may run there, else the first both may use. A tracer
/// that single-steps a thread wakes it and is woken by it once per instruction; on one
/// CPU each wake-up is a local switch rather than a cross-CPU interrupt (a virtual
/// machine's exit), which made single-stepping about 25 % faster on a 2-CPU VM. Dropping
/// it gives both their masks back; the thread's only if it still has the one set here
/// (a program that set its own while stepped keeps it).
#[derive(Debug)]
pub struct SharedCpu {
    tid: Pid,
    cpu: usize,
    own: rustix::thread::CpuSet,
    theirs: rustix::thread::CpuSet,
}

impl SharedCpu {
    /// Moves the caller and `tid` to one CPU; `None` (nothing changed) where they have
    /// none in common or a mask cannot be read or set.
    pub fn new(tid: u32) -> Option<SharedCpu> {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        let pid = pid_of(tid).ok()?;
        let own = sched_getaffinity(None).ok()?;
        let theirs = sched_getaffinity(Some(pid)).ok()?;
        let here = sched_getcpu();
        let cpu = if here < CpuSet::MAX_CPU && theirs.is_set(here) {
            here
        } else {
            (0..CpuSet::MAX_CPU).find(|&c| own.is_set(c) && theirs.is_set(c))?
        };
        let mut one = CpuSet::new();
        one.set(cpu);
        sched_setaffinity(Some(pid), &one).ok()?;
        if sched_setaffinity(None, &one).is_err() {
            let _ = sched_setaffinity(Some(pid), &theirs);
            return None;
        }
        Some(SharedCpu {
            tid: pid,
            cpu,
            own,
            theirs,
        })
    }

    /// The CPU both run on.
    pub fn cpu(&self) -> usize {
        self.cpu
    }
}

impl Drop for SharedCpu {
    fn drop(&mut self) {
        use rustix::thread::{sched_getaffinity, sched_setaffinity};
        let _ = sched_setaffinity(None, &self.own);
        // A thread gone since has nothing to give back.
        if let Ok(now) = sched_getaffinity(Some(self.tid))
            && now.count() == 1
            && now.is_set(self.cpu)
        {
            let _ = sched_setaffinity(Some(self.tid), &self.theirs);
        }
    }
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn pid_of(pid: u32) -> io::Result<Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))
}

/// This machine's host name (`/proc/sys/kernel/hostname`, the UTS name), empty when it
/// cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Raises this process's soft limit of open files towards its hard limit so that at
/// least `need` files fit (a report over a thousand recordings holds them all open); leaves
/// it when it is high enough already or cannot be raised. Returns the soft limit in force
/// (`None`: unlimited).
pub fn ensure_open_files(need: u64) -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|c| c < need) {
        limit.current = match limit.maximum {
            Some(max) => Some(max.min(need.max(max.min(1 << 20)))),
            None => Some(need),
        };
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn a_shared_cpu_pins_both_threads_and_gives_their_masks_back() {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
        let mask = |pid: Option<u32>| {
            let set = sched_getaffinity(pid.map(|p| pid_of(p).unwrap())).unwrap();
            (0..CpuSet::MAX_CPU)
                .filter(|&c| set.is_set(c))
                .collect::<Vec<_>>()
        };
        // The test runs on a thread of its own, whose mask it may change.
        std::thread::spawn(move || {
            let mut child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap();
            let pid = child.id();
            let (own, theirs) = (mask(None), mask(Some(pid)));
            let shared = SharedCpu::new(pid).expect("a CPU both may use");
            assert_eq!(mask(None), [shared.cpu()]);
            assert_eq!(mask(Some(pid)), [shared.cpu()]);
            drop(shared);
            assert_eq!((mask(None), mask(Some(pid))), (own.clone(), theirs.clone()));
            // A mask the thread was given meanwhile is its own: kept.
            let shared = SharedCpu::new(pid).unwrap();
            if theirs.len() > 1 {
                let mut other = CpuSet::new();
                other.set(*theirs.iter().find(|&&c| c != shared.cpu()).unwrap());
                sched_setaffinity(Some(pid_of(pid).unwrap()), &other).unwrap();
                let kept = mask(Some(pid));
                drop(shared);
                assert_eq!(mask(Some(pid)), kept);
            }
            child.kill().unwrap();
            child.wait().unwrap();
            // Gone: nothing to give back, and nothing to pin.
            assert!(SharedCpu::new(pid).is_none());
            assert_eq!(mask(None), own);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_mapping_shares_the_file_and_refuses_a_short_one() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let m = SharedMapping::map(f.as_fd(), 8192, true).unwrap();
        // SAFETY: the mapping is 8192 bytes long and only this test touches it.
        unsafe {
            assert_eq!(*m.base().add(8191), 7);
            *m.base() = 9;
        }
        drop(m);
        let m = SharedMapping::map(f.as_fd(), 4096, true).unwrap();
        // SAFETY: as above, 4096 bytes.
        assert_eq!(unsafe { *m.base() }, 9);
        let err = SharedMapping::map(f.as_fd(), 16384, true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(SharedMapping::map(f.as_fd(), 0, false).is_err());
    }

    #[test]
    fn poll_sees_a_readable_pipe_and_times_out_on_an_empty_one() {
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, _w2) = rustix::pipe::pipe().unwrap();
        rustix::io::write(&w1, b"x").unwrap();
        let ready = poll_readable(&[r1.as_fd(), r2.as_fd()], Some(Duration::ZERO)).unwrap();
        assert_eq!(ready, vec![true, false]);
        let ready = poll_readable(&[r2.as_fd()], Some(Duration::from_millis(5))).unwrap();
        assert_eq!(ready, vec![false]);
    }

    #[test]
    fn a_futex_wait_returns_at_once_on_a_changed_word_and_times_out_on_an_unchanged_one() {
        use std::sync::atomic::AtomicU32;
        let (a, b) = (AtomicU32::new(1), AtomicU32::new(2));
        let wait = |expected_b| {
            futex_wait_any(
                &[
                    FutexWait {
                        word: &a,
                        expected: 1,
                        shared: false,
                    },
                    FutexWait {
                        word: &b,
                        expected: expected_b,
                        shared: false,
                    },
                ],
                Duration::from_millis(20),
            )
            .unwrap()
        };
        assert_eq!(wait(3), FutexWoken::Changed);
        assert_eq!(wait(2), FutexWoken::TimedOut);
        let too_many = vec![
            FutexWait {
                word: &a,
                expected: 1,
                shared: false,
            };
            FUTEX_WAIT_MAX + 1
        ];
        assert_eq!(
            futex_wait_any(&too_many, Duration::ZERO)
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }

    /// A word in shared memory is woken through another mapping of it (as the agent, in
    /// its process, wakes the tracer): the wait is keyed by the memory, not the address.
    #[test]
    fn a_shared_futex_word_is_woken_through_another_mapping() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let fd = rustix::fs::memfd_create("futex-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let mine = SharedMapping::map(fd.as_fd(), 4096, true).unwrap();
        let theirs = SharedMapping::map(fd.as_fd(), 4096, true).unwrap();
        assert_ne!(mine.base(), theirs.base());
        // SAFETY: both mappings are page-aligned, 4096 bytes long, and outlive the words;
        // the word is accessed only atomically.
        let (word, other) = unsafe {
            (
                &*mine.base().cast::<AtomicU32>().add(5),
                &*theirs.base().cast::<AtomicU32>().add(5),
            )
        };
        let (other_addr, other_len) = (other as *const AtomicU32 as usize, theirs.len());
        let waker = std::thread::spawn(move || {
            assert!(other_len >= 4096);
            // SAFETY: `theirs` outlives this thread (joined below).
            let other = unsafe { &*(other_addr as *const AtomicU32) };
            // Until the waiter is asleep (a wake before it would be lost; a store before
            // it ends the wait at once, which the loop below also accepts).
            std::thread::sleep(Duration::from_millis(50));
            other.store(7, Ordering::Release);
            futex_wake(other, true).unwrap()
        });
        let woken = futex_wait_any(
            &[FutexWait {
                word,
                expected: 0,
                shared: true,
            }],
            Duration::from_secs(20),
        )
        .unwrap();
        let count = waker.join().unwrap();
        assert!(
            woken == FutexWoken::Woken(0) || woken == FutexWoken::Changed,
            "{woken:?}"
        );
        assert_eq!(word.load(Ordering::Acquire), 7);
        if woken == FutexWoken::Woken(0) {
            assert_eq!(count, 1, "the waiter was woken through the other mapping");
        }
    }

    #[test]
    fn children_are_signalled_and_collected_with_their_status() {
        let child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(try_wait(pid), None, "still running");
        assert!(pidfd_open(pid).is_some());
        kill(pid, 9).unwrap();
        let raw = wait(pid).unwrap();
        // Killed by signal 9: the low 7 bits hold the signal.
        assert_eq!(raw & 0x7f, 9);
        assert!(kill(pid, 0).is_err(), "collected: gone");
        assert!(kill(1, 4096).is_err(), "not a signal");
        std::mem::forget(child);
    }

    /// Whether this kernel keeps a process's exit status for its pidfds (6.15 and later).
    fn kernel_keeps_exit_status() -> bool {
        tansa_testkit::kernel_at_least(6, 15)
    }

    #[test]
    fn a_pidfd_tells_how_its_process_ended_once_collected() {
        let child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pid = child.id();
        let fd = pidfd_open(pid).unwrap();
        if kernel_keeps_exit_status() {
            assert_eq!(pidfd_pid(fd.as_fd()).unwrap(), pid);
        }
        assert!(
            !matches!(pidfd_exit_status(fd.as_fd()), Ok(Some(_))),
            "still running"
        );
        kill(pid, SIGABRT).unwrap();
        let raw = wait(pid).unwrap();
        assert_eq!(raw & 0x7f, SIGABRT);
        let after = pidfd_exit_status(fd.as_fd());
        if kernel_keeps_exit_status() {
            assert_eq!(after.unwrap(), Some(raw));
            // Whose pidfd it is, it can no longer tell.
            let gone = pidfd_pid(fd.as_fd()).unwrap_err();
            assert_eq!(gone.raw_os_error(), Some(3), "ESRCH: {gone}");
        } else {
            assert!(!matches!(after, Ok(Some(_))));
        }
        std::mem::forget(child);
    }

    /// A process that its parent collects while its pidfd is asked how it ended: every
    /// answer is "not yet" or its status, never an error, and the status comes. Before,
    /// about a third of such queries failed with `ESRCH` (the process already out of its
    /// pid, its status not yet published), and the recorder, which asks once as a process
    /// is announced, then kept no pidfd for it: the process ended "without the agent seeing
    /// how" (one child in tens of thousands, under load).
    #[test]
    fn a_pidfd_asked_while_its_parent_collects_it_answers() {
        if !tansa_testkit::require(
            kernel_keeps_exit_status(),
            "Linux 6.15 or later (a pidfd keeps its process's exit status)",
        ) {
            return;
        }
        let children = 300;
        let mut asked_early = 0;
        for _ in 0..children {
            let child = std::process::Command::new("sh")
                .args(["-c", "kill -9 $$"])
                .spawn()
                .unwrap();
            let pid = child.id();
            let fd = pidfd_open(pid).unwrap();
            std::thread::scope(|scope| {
                let collector = scope.spawn(|| wait(pid).unwrap());
                let mut answers = 0u32;
                let status = loop {
                    answers += 1;
                    match pidfd_exit_status(fd.as_fd()) {
                        Ok(Some(raw)) => break raw,
                        Ok(None) => {}
                        Err(e) => panic!("asked while collected: {e}"),
                    }
                };
                let raw = collector.join().unwrap();
                assert_eq!(status, raw);
                assert_eq!(raw & 0x7f, 9, "killed by SIGKILL");
                if answers > 1 {
                    asked_early += 1;
                }
            });
            std::mem::forget(child);
        }
        // Queries came before the statuses were there, not only once they were.
        assert!(asked_early > 0, "every first query found the status");
    }

    /// SIGABRT's number on Linux.
    const SIGABRT: i32 = 6;
}
