//! Every system call of this crate.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use perf_event_open_sys::bindings as b;
use perf_event_open_sys::ioctls;

/// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
pub(crate) fn open(attr: &mut b::perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a fully initialised `perf_event_attr` whose `size` field is the
    // size of the struct; the kernel reads it and may write `size` back, both within it.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            attr,
            pid,
            cpu,
            -1,
            libc::c_ulong::from(b::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The perf ioctls without an argument pointer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ioctl {
    Enable,
    Disable,
    Reset,
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: send `fd`'s records to `target`'s ring.
pub(crate) fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: both descriptors are open perf events; SET_OUTPUT takes the target's
    // descriptor number as an integer argument, no pointer.
    let rc = unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until one of `fds` is readable or hung up, or `timeout_ms` passes. Returns the
/// number of ready descriptors (0 on timeout; an interrupted wait counts as a timeout).
pub(crate) fn poll(fds: &[std::os::fd::RawFd], timeout_ms: i32) -> io::Result<usize> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structures that the kernel
    // may write `revents` into.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(rc as usize)
}

pub(crate) fn ioctl(fd: &OwnedFd, op: Ioctl) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: `raw` is an open perf event descriptor owned by `fd`; these ioctls take an
    // integer flag argument (0: this event only) and no pointer.
    let rc = unsafe {
        match op {
            Ioctl::Enable => ioctls::ENABLE(raw, 0),
            Ioctl::Disable => ioctls::DISABLE(raw, 0),
            Ioctl::Reset => ioctls::RESET(raw, 0),
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the event's 8-byte count (the default `read_format`).
pub(crate) fn read_count(fd: &OwnedFd) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is valid for 8 bytes of writes and `fd` is open.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n != 8 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short read of a perf count",
        ));
    }
    Ok(u64::from_ne_bytes(buf))
}

/// A shared read-write mapping of an event's ring buffer.
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; access to it is
// synchronised by `&mut self` on the owner (`Ring`).
unsafe impl Send for Mapping {}

impl Mapping {
    pub(crate) fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: mapping a perf event fd with a length of 1 + 2^n pages is the documented
        // way to get its ring; a null hint lets the kernel choose the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }

    /// The metadata page.
    pub(crate) fn page(&self) -> *mut b::perf_event_mmap_page {
        self.base.cast()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe a mapping created by `Mapping::new` and not yet
        // unmapped; nothing borrows it past this point.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}
