//! Open events and their ring buffers.

use std::os::fd::OwnedFd;
use std::sync::atomic::{Ordering, fence};

use crate::PerfError;
use crate::attr::{EventAttr, SampleFormat};
use crate::sys::{self, Ioctl, Mapping};

/// An open perf event.
#[derive(Debug)]
pub struct Event {
    fd: OwnedFd,
    format: SampleFormat,
}

impl Event {
    /// Opens `attr` for process `pid` (0: the calling thread) on any CPU.
    pub fn open(attr: &EventAttr, pid: i32) -> Result<Event, PerfError> {
        let mut raw = attr.raw;
        let fd = sys::open(&mut raw, pid, -1).map_err(|error| PerfError::Open {
            what: attr.kind().name(),
            error,
        })?;
        Ok(Event {
            fd,
            format: attr.format(),
        })
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

/// Record types (`PERF_RECORD_*`) this crate names; others keep their number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// `PERF_RECORD_SAMPLE`: decode with [`crate::Sample::parse`].
    Sample,
    /// `PERF_RECORD_LOST`: the kernel dropped records (the ring was full).
    Lost,
    /// `PERF_RECORD_THROTTLE` / `UNTHROTTLE`: the sample rate hit the kernel's limit.
    Throttle,
    /// Anything else.
    Other(u32),
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
    map: Mapping,
    data_offset: usize,
    data_size: usize,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("data_size", &self.data_size)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// Maps `event`'s ring with `data_pages` data pages (rounded up to a power of two).
    pub fn new(event: &Event, data_pages: usize) -> Result<Ring, PerfError> {
        let page = sys::page_size();
        let pages = data_pages.max(1).next_power_of_two();
        let map = Mapping::new(&event.fd, (pages + 1) * page)
            .map_err(|error| PerfError::Io { op: "mmap", error })?;
        Ok(Ring {
            map,
            data_offset: page,
            data_size: pages * page,
        })
    }

    /// Moves every complete record out of the ring into `out`.
    pub fn drain_into(&mut self, out: &mut Vec<Record>) {
        let page = self.map.page();
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
            let kind = match ty {
                9 => RecordKind::Sample,
                2 => RecordKind::Lost,
                5 | 6 => RecordKind::Throttle,
                n => RecordKind::Other(n),
            };
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
            let data = self.map.base.add(self.data_offset);
            std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
            let rest = out.len() - first;
            if rest > 0 {
                std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), rest);
            }
        }
    }
}
