//! Open events and their ring buffers.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{Ordering, fence};

use perf_event_open_sys::bindings as b;
use tansa_proc::os::SharedMapping;

use crate::PerfError;
use crate::attr::{EventAttr, SampleFormat};
use crate::sys::{self, Ioctl};

/// An open perf event.
#[derive(Debug)]
pub struct Event {
    fd: OwnedFd,
    format: SampleFormat,
}

impl AsFd for Event {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Event {
    /// Opens `attr` for process `pid` (0: the calling thread) on any CPU.
    pub fn open(attr: &EventAttr, pid: i32) -> Result<Event, PerfError> {
        Self::open_on(attr, pid, -1)
    }

    /// Opens `attr` for thread `pid` (0: the calling thread, -1: every thread) on CPU
    /// `cpu` (-1: any CPU). `pid = -1` with a CPU samples everything that runs there
    /// (system-wide; needs `kernel.perf_event_paranoid` ≤ 0 or `CAP_PERFMON`). An
    /// inherited event (see [`EventAttr::inherit`]) can only have a ring when it is bound
    /// to a CPU.
    pub fn open_on(attr: &EventAttr, pid: i32, cpu: i32) -> Result<Event, PerfError> {
        let mut raw = attr.raw;
        let fd = sys::open(&mut raw, pid, cpu).map_err(|error| PerfError::Open {
            what: attr.kind().name(),
            error,
        })?;
        Ok(Event {
            fd,
            format: attr.format(),
        })
    }

    /// Sends this event's records to `target`'s ring (both must be on the same CPU);
    /// this event then needs no ring of its own.
    pub fn set_output(&self, target: &Event) -> Result<(), PerfError> {
        sys::set_output(&self.fd, &target.fd).map_err(|error| PerfError::Io {
            op: "set-output",
            error,
        })
    }

    /// The file descriptor, for polling.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }

    /// The sample format the event was opened with.
    pub fn format(&self) -> SampleFormat {
        self.format
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<(), PerfError> {
        sys::ioctl(&self.fd, Ioctl::Enable).map_err(|error| PerfError::Io {
            op: "enable",
            error,
        })
    }

    /// Stops counting.
    pub fn disable(&self) -> Result<(), PerfError> {
        sys::ioctl(&self.fd, Ioctl::Disable).map_err(|error| PerfError::Io {
            op: "disable",
            error,
        })
    }

    /// Sets the count to zero.
    pub fn reset(&self) -> Result<(), PerfError> {
        sys::ioctl(&self.fd, Ioctl::Reset).map_err(|error| PerfError::Io { op: "reset", error })
    }

    /// The current count.
    pub fn count(&self) -> Result<u64, PerfError> {
        sys::read_count(&self.fd).map_err(|error| PerfError::Io { op: "read", error })
    }
}

/// Waits until one of `events` has records past its wakeup threshold or hung up, or
/// `timeout_ms` passes; returns how many are ready (0 on timeout or interruption).
pub fn poll(events: &[&Event], timeout_ms: i32) -> Result<usize, PerfError> {
    let fds: Vec<_> = events.iter().map(|e| e.fd.as_fd()).collect();
    let timeout = std::time::Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    tansa_proc::os::poll_readable(&fds, (timeout_ms >= 0).then_some(timeout))
        .map(|ready| ready.iter().filter(|&&r| r).count())
        .map_err(|error| PerfError::Io { op: "poll", error })
}

/// Record types (`PERF_RECORD_*`) this crate names; others keep their number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// `PERF_RECORD_SAMPLE`: decode with [`crate::Sample::parse`] or
    /// [`crate::SampleRef::parse`].
    Sample,
    /// `PERF_RECORD_LOST`: the kernel dropped records (the ring was full).
    Lost,
    /// `PERF_RECORD_THROTTLE` / `UNTHROTTLE`: the sample rate hit the kernel's limit.
    Throttle,
    /// `PERF_RECORD_MMAP2` (and the older `PERF_RECORD_MMAP`): see
    /// [`crate::SideBand::parse`].
    Mmap,
    /// `PERF_RECORD_COMM`: a thread's name changed (`exec` or `prctl`).
    Comm,
    /// `PERF_RECORD_FORK`: a process or thread was created.
    Fork,
    /// `PERF_RECORD_EXIT`: a process or thread ended.
    Exit,
    /// `PERF_RECORD_LOST_SAMPLES`: samples dropped before reaching the ring.
    LostSamples,
    /// Anything else.
    Other(u32),
}

impl RecordKind {
    /// The kind of a `perf_event_header.type`.
    pub fn from_raw(ty: u32) -> RecordKind {
        match ty {
            9 => RecordKind::Sample,
            2 => RecordKind::Lost,
            5 | 6 => RecordKind::Throttle,
            1 | 10 => RecordKind::Mmap,
            3 => RecordKind::Comm,
            7 => RecordKind::Fork,
            4 => RecordKind::Exit,
            13 => RecordKind::LostSamples,
            n => RecordKind::Other(n),
        }
    }
}

/// A record borrowed from the ring (see [`Ring::visit`]).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// `perf_event_header.type`.
    pub ty: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The bytes after the 8-byte header.
    pub body: &'a [u8],
}

impl RecordRef<'_> {
    /// Its kind.
    pub fn kind(&self) -> RecordKind {
        RecordKind::from_raw(self.ty)
    }
}

/// One record read from the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its type.
    pub kind: RecordKind,
    /// `perf_event_header.misc` (CPU mode, exact-IP flag, ...).
    pub misc: u16,
    /// The bytes after the 8-byte header.
    pub body: Vec<u8>,
}

impl Record {
    /// For a [`RecordKind::Lost`] record, how many records were lost.
    pub fn lost_count(&self) -> Option<u64> {
        (self.kind == RecordKind::Lost)
            .then(|| {
                self.body
                    .get(8..16)?
                    .try_into()
                    .ok()
                    .map(u64::from_ne_bytes)
            })
            .flatten()
    }
}

/// An event's mmap ring buffer.
pub struct Ring {
    map: SharedMapping,
    data_offset: usize,
    data_size: usize,
    /// Where records that wrap around the end of the data area are reassembled.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("data_size", &self.data_size)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// The metadata page at the start of the mapping.
    fn page(&self) -> *mut b::perf_event_mmap_page {
        self.map.base().cast()
    }

    /// Maps `event`'s ring with `data_pages` data pages (rounded up to a power of two).
    pub fn new(event: &Event, data_pages: usize) -> Result<Ring, PerfError> {
        let page = tansa_proc::os::page_size();
        let pages = data_pages.max(1).next_power_of_two();
        let map = SharedMapping::map(event.fd.as_fd(), (pages + 1) * page, false)
            .map_err(|error| PerfError::Io { op: "mmap", error })?;
        Ok(Ring {
            map,
            data_offset: page,
            data_size: pages * page,
            scratch: Vec::with_capacity(1 << 16),
        })
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// A snapshot of the position up to which the kernel has written complete records.
    /// Pass it to [`Ring::visit`] and [`Ring::advance`] to work on a fixed set of records.
    pub fn head(&self) -> u64 {
        let page = self.page();
        // SAFETY: `page` points at the mapped metadata page, which lives as long as
        // `self.map`; the kernel writes `data_head`, so it is read volatile, then an
        // acquire fence orders the later data reads after it (perf_event_open(2)).
        let head = unsafe { std::ptr::addr_of!((*page).data_head).read_volatile() };
        fence(Ordering::Acquire);
        head
    }

    fn tail(&self) -> u64 {
        let page = self.page();
        // SAFETY: as in `head`; only this process writes `data_tail`.
        unsafe { std::ptr::addr_of!((*page).data_tail).read_volatile() }
    }

    /// Calls `f` with every record between the consumer position and `head` (from
    /// [`Ring::head`]) without freeing them, so a second visit sees them again. Records
    /// are borrowed straight from the ring, or from a buffer of the ring's when they wrap
    /// around its end: nothing is allocated per record.
    pub fn visit(&mut self, head: u64, mut f: impl FnMut(RecordRef<'_>)) {
        self.visit_positions(head, |_, r| f(r));
    }

    /// [`Ring::visit`], handing `f` each record's position too, for [`Ring::visit_at`]
    /// (to handle the records of several rings in another order, such as by time).
    pub fn visit_positions(&mut self, head: u64, mut f: impl FnMut(u64, RecordRef<'_>)) {
        let mut pos = self.tail();
        while let Some(size) = self.visit_at(pos, head, |r| f(pos, r)) {
            pos += size;
        }
    }

    /// Calls `f` with the record at position `pos` (the consumer position, or one that
    /// [`Ring::visit_positions`] gave) if a whole record lies there before `head`, and
    /// returns its size; `None` (and no call) otherwise. The record is not freed.
    pub fn visit_at(&mut self, pos: u64, head: u64, f: impl FnOnce(RecordRef<'_>)) -> Option<u64> {
        if pos < self.tail() || pos + 8 > head {
            return None;
        }
        let mut header = [0u8; 8];
        self.copy_out(pos, &mut header);
        let ty = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let misc = u16::from_ne_bytes([header[4], header[5]]);
        let size = u64::from(u16::from_ne_bytes([header[6], header[7]]));
        if size < 8 || pos + size > head {
            return None;
        }
        let len = size as usize - 8;
        let start = ((pos + 8) % self.data_size as u64) as usize;
        if start + len <= self.data_size {
            // SAFETY: `start + len ≤ data_size`, so the range lies inside the mapped data
            // area, which the kernel does not write between tail and head (`pos` is at or
            // after the tail and the record ends before `head`); the slice lives no longer
            // than this call's `&mut self` borrow.
            let body = unsafe {
                std::slice::from_raw_parts(self.map.base().add(self.data_offset + start), len)
            };
            f(RecordRef { ty, misc, body });
        } else {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.resize(len, 0);
            self.copy_out(pos + 8, &mut scratch);
            f(RecordRef {
                ty,
                misc,
                body: &scratch,
            });
            self.scratch = scratch;
        }
        Some(size)
    }

    /// Frees the ring up to `head` (a value from [`Ring::head`] whose records were
    /// visited).
    pub fn advance(&mut self, head: u64) {
        let page = self.page();
        fence(Ordering::Release);
        // SAFETY: writing `data_tail` after the reads tells the kernel the space is free.
        unsafe { std::ptr::addr_of_mut!((*page).data_tail).write_volatile(head) };
    }

    /// Moves every complete record out of the ring into `out`.
    pub fn drain_into(&mut self, out: &mut Vec<Record>) {
        let page = self.page();
        // SAFETY: `page` points at the mapped metadata page, which lives as long as
        // `self.map`; the kernel writes `data_head`, so it is read volatile, then an
        // acquire fence orders the data reads after it (perf_event_open(2)).
        let head = unsafe { std::ptr::addr_of!((*page).data_head).read_volatile() };
        fence(Ordering::Acquire);
        // SAFETY: as above; only this process writes `data_tail`.
        let mut tail = unsafe { std::ptr::addr_of!((*page).data_tail).read_volatile() };
        while tail + 8 <= head {
            let mut header = [0u8; 8];
            self.copy_out(tail, &mut header);
            let ty = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
            let misc = u16::from_ne_bytes([header[4], header[5]]);
            let size = u64::from(u16::from_ne_bytes([header[6], header[7]]));
            if size < 8 || tail + size > head {
                break;
            }
            let mut body = vec![0u8; size as usize - 8];
            self.copy_out(tail + 8, &mut body);
            let kind = RecordKind::from_raw(ty);
            out.push(Record { kind, misc, body });
            tail += size;
        }
        fence(Ordering::Release);
        // SAFETY: writing `data_tail` after the reads tells the kernel the space is free.
        unsafe { std::ptr::addr_of_mut!((*page).data_tail).write_volatile(tail) };
    }

    /// Copies `out.len()` bytes at ring position `pos`, wrapping around the data area.
    fn copy_out(&self, pos: u64, out: &mut [u8]) {
        let start = (pos % self.data_size as u64) as usize;
        let first = out.len().min(self.data_size - start);
        // SAFETY: `data_offset + start .. + first` and `data_offset .. + rest` lie inside
        // the mapped data area (`start < data_size`, `first ≤ data_size − start`,
        // `rest < data_size` since records are smaller than the ring), and the kernel does
        // not write the part between tail and head while we read it.
        unsafe {
            let data = self.map.base().add(self.data_offset);
            std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
            let rest = out.len() - first;
            if rest > 0 {
                std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), rest);
            }
        }
    }
}
