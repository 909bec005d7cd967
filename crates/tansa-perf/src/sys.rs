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
