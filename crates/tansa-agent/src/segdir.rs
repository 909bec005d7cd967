//! Where shared segments are created: files in the collector's private directory
//! (`TANSA_SEGMENT_DIR`, durable recordings), else memfds.
//!
//! Backed by a file, what the agent wrote into its rings outlives a collector killed with
//! `SIGKILL`, and a later `tansa report` salvages it. The directory's path is copied once,
//! at initialization (before any hook is live), into a fixed static buffer; creating a
//! segment then formats its name on the stack: nothing here allocates.

use core::ffi::{CStr, c_int};
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::sys;

/// Longest directory path kept (longer: segments are memfds).
const DIR_CAPACITY: usize = 1024;

/// The directory's path (no NUL), set once at initialization.
static DIR: [AtomicU8; DIR_CAPACITY] = [const { AtomicU8::new(0) }; DIR_CAPACITY];
/// Bytes of [`DIR`] used (0: no directory).
static DIR_LEN: AtomicUsize = AtomicUsize::new(0);
/// Segments from this index on are memfds even with a directory (a test setting that
/// stands for a directory without space; `usize::MAX` otherwise).
static FILE_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Test setting: only segments below `n` are files.
pub fn set_file_limit(n: usize) {
    FILE_LIMIT.store(n, Ordering::Relaxed);
}

/// Remembers the segment directory (at initialization, before the hooks are live). An
/// empty, relative, over-long or NUL-holding path is ignored.
pub fn set(path: Option<&[u8]>) {
    let Some(path) =
        path.filter(|p| !p.is_empty() && p[0] == b'/' && p.len() < DIR_CAPACITY && !p.contains(&0))
    else {
        DIR_LEN.store(0, Ordering::Release);
        return;
    };
    for (slot, &b) in DIR.iter().zip(path) {
        slot.store(b, Ordering::Relaxed);
    }
    DIR_LEN.store(path.len(), Ordering::Release);
}

/// Writes `n` in decimal at `out[at..]`; returns the position after it (`None` if it
/// does not fit).
fn put_decimal(out: &mut [u8], at: usize, n: u64) -> Option<usize> {
    let mut digits = [0u8; 20];
    let d = crate::sys::fmt_u64(n, &mut digits);
    out.get_mut(at..at + d.len())?.copy_from_slice(d);
    Some(at + d.len())
}

/// Creates a segment of `len` bytes for segment `index` of this process's session and maps
/// it shared: a file `PID-TOKEN-INDEX.seg` in the segment directory if there is one and the
/// file can be made (`token` is the same for every segment of a session, so a salvage
/// groups them), else a memfd named `memfd_name`. Returns the fd and the mapping.
pub fn create_segment(
    memfd_name: &CStr,
    token: u64,
    index: u32,
    len: usize,
) -> Option<(c_int, *mut u8)> {
    let dir_len = DIR_LEN.load(Ordering::Acquire);
    if dir_len > 0 && (index as usize) < FILE_LIMIT.load(Ordering::Relaxed) {
        let mut dir = [0u8; DIR_CAPACITY];
        for (b, slot) in dir.iter_mut().zip(DIR.iter().take(dir_len)) {
            *b = slot.load(Ordering::Relaxed);
        }
        let mut name = [0u8; 80];
        let made = (|| {
            let at = put_decimal(&mut name, 0, u64::from(sys::getpid()))?;
            *name.get_mut(at)? = b'-';
            let at = put_decimal(&mut name, at + 1, token)?;
            *name.get_mut(at)? = b'-';
            let at = put_decimal(&mut name, at + 1, u64::from(index))?;
            name.get_mut(at..at + 4)?.copy_from_slice(b".seg");
            Some(())
        })();
        if made.is_some()
            && let (Ok(dir), Ok(name)) = (
                CStr::from_bytes_until_nul(&dir),
                CStr::from_bytes_until_nul(&name),
            )
            && let Some(got) = sys::create_shared_in(dir, name, len)
        {
            return Some(got);
        }
    }
    sys::create_shared(memfd_name, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal() {
        let mut out = [0u8; 8];
        assert_eq!(put_decimal(&mut out, 1, 407), Some(4));
        assert_eq!(&out[1..4], b"407");
        assert_eq!(put_decimal(&mut out, 0, 0), Some(1));
        assert_eq!(put_decimal(&mut out, 5, 12345), None);
    }
}
