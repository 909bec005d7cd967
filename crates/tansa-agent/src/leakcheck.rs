//! The leak check at exit (`tansa record --leak-check`): which of the blocks still
//! allocated when the process calls `exit` can the program still reach?
//!
//! As Valgrind's memcheck and LeakSanitizer do, a block is *reachable* when a pointer to it
//! (its start or inside it) is found in the program's memory outside the heap (the
//! writable data of every module, thread stacks, other writable private mappings) or in a
//! reachable block. Of the others, a block that another unreachable block points to is
//! *indirectly* lost; the rest (one per group of blocks that point at one another) are
//! *definitely* lost: the program dropped its last pointer to them.
//!
//! The agent keeps the live-block table in this mode, so it knows the blocks; their sizes
//! come from the allocator (`malloc_usable_size`). Memory is read with `process_vm_readv`
//! on the process itself, many blocks at a time, so a mapping that goes away while the
//! check runs (other threads still run at `exit`) is a short read, not a fault. Not
//! scanned as roots: the allocator's memory (`[heap]`, and with glibc each block's chunk
//! memory; with another allocator every mapping that holds a block), whose free chunks
//! hold stale pointers; the agent's own memory (its table holds every block's address);
//! shared mappings; and the part of the calling thread's stack below its stack pointer.
//! Registers of other threads are not read. The findings are written to the calling
//! thread's stream: an `Unreached` record per unreachable (or released) block, then a
//! `LeakScan` record.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};

use tansa_wire::event::{
    LeakClass, LeakScan, SCAN_NO_MAPS, SCAN_NO_SIZES, SCAN_OWN_MAPPINGS, SCAN_UNREADABLE,
};

use crate::livetable::{LIVE, UNRECORDED};
use crate::sys;
use crate::thread::{Busy, Internal, current};

/// A block's state during the check.
const UNREACHED: u8 = 0;
const REACHABLE: u8 = 1;
const DEFINITE: u8 = 2;
const INDIRECT: u8 = 3;

/// Bytes read at a time.
const CHUNK: usize = 64 * 1024;
/// Ranges read at a time (`IOV_MAX`).
const MAX_RANGES: usize = 1024;

/// Reads memory: the ranges `(address, length)`, one after the other into the buffer (as
/// long as their sum); returns the bytes read, fewer when a range could not be read (the
/// ranges before it were read whole).
pub(crate) trait Gather: FnMut(&[(u64, usize)], &mut [u8]) -> usize {}
impl<F: FnMut(&[(u64, usize)], &mut [u8]) -> usize> Gather for F {}

/// The live blocks and what the check found of each (pure: memory comes through a
/// [`Gather`]).
pub(crate) struct Heap {
    /// Block starts, ascending.
    starts: Vec<u64>,
    /// Where pointers into each block stop counting: its usable size less the last word,
    /// which glibc shares with the next chunk's header (a free list's pointer to that
    /// chunk is not a pointer to this block).
    ends: Vec<u64>,
    /// Bytes of each block read for pointers (its usable size).
    sizes: Vec<u64>,
    state: Vec<u8>,
    buf: Vec<u8>,
    /// Blocks the words read point into.
    found: Vec<u32>,
    /// Blocks whose contents are still to be read.
    work: Vec<u32>,
    /// Ranges of one read.
    ranges: Vec<(u64, usize)>,
    /// Some memory could not be read.
    pub unreadable: bool,
    /// Bytes of roots read.
    pub root_bytes: u64,
}

impl Heap {
    /// The blocks `(start, usable size)`, in any order.
    pub(crate) fn new(mut blocks: Vec<(u64, u64)>) -> Heap {
        blocks.sort_unstable();
        blocks.dedup_by_key(|b| b.0);
        let n = blocks.len();
        Heap {
            starts: blocks.iter().map(|b| b.0).collect(),
            ends: blocks
                .iter()
                .map(|&(s, len)| s + len.saturating_sub(8).max(1))
                .collect(),
            sizes: blocks.iter().map(|b| b.1).collect(),
            state: vec![UNREACHED; n],
            buf: vec![0; CHUNK],
            found: Vec::new(),
            work: Vec::new(),
            ranges: Vec::new(),
            unreadable: false,
            root_bytes: 0,
        }
    }

    /// Number of blocks.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether some block starts in `[lo, hi)`.
    pub(crate) fn holds_block_in(&self, lo: u64, hi: u64) -> bool {
        let i = self.starts.partition_point(|&s| s < lo);
        i < self.starts.len() && self.starts[i] < hi
    }

    /// The block a word points into.
    #[inline]
    fn find(&self, w: u64) -> Option<u32> {
        let (Some(&first), Some(&last)) = (self.starts.first(), self.ends.last()) else {
            return None;
        };
        // Most words are small numbers or point elsewhere (blocks are disjoint, so their
        // ends ascend with their starts).
        if w < first || w >= last {
            return None;
        }
        let i = self.starts.partition_point(|&s| s <= w);
        let j = i.checked_sub(1)?;
        (w < self.ends[j]).then_some(j as u32)
    }

    /// Appends to `found` the blocks the words of `bytes` point into.
    fn parse(&mut self, from: usize, len: usize) {
        for k in (from..from + (len & !7)).step_by(8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(&self.buf[k..k + 8]);
            if let Some(j) = self.find(u64::from_ne_bytes(word)) {
                self.found.push(j);
            }
        }
    }

    /// Adds `[start, end)`, in pieces of at most [`CHUNK`] bytes, to the ranges to read.
    fn add_range(&mut self, start: u64, end: u64) {
        let mut a = start.next_multiple_of(8);
        while a.saturating_add(8) <= end {
            let n = ((end - a) as usize).min(CHUNK) & !7;
            self.ranges.push((a, n));
            a += n as u64;
        }
    }

    /// Reads the ranges added and appends to `found` the blocks their words point into. One
    /// system call reads up to [`CHUNK`] bytes in up to [`MAX_RANGES`] pieces, and ranges a
    /// few bytes apart in ascending order are read as one piece (the kernel pins every
    /// page of every piece: blocks read one piece each cost four times as much). A piece
    /// that cannot be read is read again range by range.
    fn read_ranges(&mut self, read: &mut impl Gather) {
        /// Largest gap read between two ranges to read them as one piece.
        const GAP: u64 = 256;
        let ranges = core::mem::take(&mut self.ranges);
        let mut pieces: Vec<(u64, usize)> = Vec::new();
        let mut offsets: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < ranges.len() {
            pieces.clear();
            offsets.clear();
            let mut total = 0;
            let mut j = i;
            while j < ranges.len() {
                let (a, n) = ranges[j];
                let end = a + n as u64;
                // The gap after the last piece, when this range can join it.
                let join = pieces.last().and_then(|&(p, len)| {
                    let gap = a.checked_sub(p + len as u64)?;
                    let grow = (end - p - len as u64) as usize;
                    (gap <= GAP && total + grow <= CHUNK).then_some((gap as usize, grow))
                });
                if let Some((gap, grow)) = join {
                    offsets.push(total + gap);
                    if let Some(last) = pieces.last_mut() {
                        last.1 += grow;
                    }
                    total += grow;
                } else if pieces.len() == MAX_RANGES || total + n > CHUNK {
                    break;
                } else {
                    pieces.push((a, n));
                    offsets.push(total);
                    total += n;
                }
                j += 1;
            }
            let got = read(&pieces, &mut self.buf[..total]);
            if got >= total {
                for (k, &(_, n)) in ranges[i..j].iter().enumerate() {
                    self.parse(offsets[k], n);
                }
            } else {
                for &(a, n) in &ranges[i..j] {
                    self.read_alone(a, n, read);
                }
            }
            i = j;
        }
        self.ranges = ranges;
        self.ranges.clear();
    }

    /// Reads one range on its own, skipping the pages that cannot be read.
    fn read_alone(&mut self, mut a: u64, mut n: usize, read: &mut impl Gather) {
        loop {
            let got = read(&[(a, n)], &mut self.buf[..n]).min(n);
            self.parse(0, got);
            if got == n {
                return;
            }
            self.unreadable = true;
            let resume = (a + got as u64 + 1).next_multiple_of(4096);
            let end = a + n as u64;
            if resume + 8 > end {
                return;
            }
            a = resume;
            n = (end - resume) as usize & !7;
        }
    }

    /// Reads the blocks on the work list, in address order; false when it is empty.
    fn read_work(&mut self, read: &mut impl Gather) -> bool {
        if self.work.is_empty() {
            return false;
        }
        self.found.clear();
        let mut work = core::mem::take(&mut self.work);
        // Block numbers ascend with addresses.
        work.sort_unstable();
        work.dedup();
        for &j in &work {
            let start = self.starts[j as usize];
            self.add_range(start, start.saturating_add(self.sizes[j as usize]));
        }
        work.clear();
        self.work = work;
        self.read_ranges(read);
        true
    }

    /// Marks what the roots `[start, end)` lead to as reachable.
    pub(crate) fn mark_from(&mut self, start: u64, end: u64, read: &mut impl Gather) {
        self.found.clear();
        self.root_bytes += end.saturating_sub(start);
        self.add_range(start, end);
        self.read_ranges(read);
        loop {
            for k in 0..self.found.len() {
                let b = self.found[k] as usize;
                if self.state[b] == UNREACHED {
                    self.state[b] = REACHABLE;
                    self.work.push(b as u32);
                }
            }
            if !self.read_work(read) {
                break;
            }
        }
    }

    /// Classifies the blocks the roots did not reach: each one not yet seen leads a group
    /// (definitely lost) and everything it points to, directly or not, is indirectly lost.
    /// A group reached from a later one joins it: its leader is indirectly lost too.
    pub(crate) fn classify_lost(&mut self, read: &mut impl Gather) {
        let mut leader = vec![u32::MAX; self.starts.len()];
        for i in 0..self.starts.len() {
            if self.state[i] != UNREACHED {
                continue;
            }
            self.state[i] = DEFINITE;
            leader[i] = i as u32;
            self.work.push(i as u32);
            while self.read_work(read) {
                for k in 0..self.found.len() {
                    let b = self.found[k] as usize;
                    match self.state[b] {
                        UNREACHED => {
                            self.state[b] = INDIRECT;
                            leader[b] = i as u32;
                            self.work.push(b as u32);
                        }
                        DEFINITE | INDIRECT if leader[b] != i as u32 => {
                            self.state[leader[b] as usize] = INDIRECT;
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// The blocks found unreachable, with how.
    pub(crate) fn lost(&self) -> impl Iterator<Item = (u64, LeakClass)> + '_ {
        self.starts
            .iter()
            .zip(&self.state)
            .filter_map(|(&p, &s)| match s {
                DEFINITE => Some((p, LeakClass::Definite)),
                INDIRECT => Some((p, LeakClass::Indirect)),
                _ => None,
            })
    }

    /// Blocks found reachable.
    pub(crate) fn reachable(&self) -> u64 {
        self.state.iter().filter(|&&s| s == REACHABLE).count() as u64
    }
}

/// One line of `/proc/self/maps`: a readable, writable, private mapping.
fn writable_private(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let mut fields = line.splitn(6, |&b| b == b' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let (_, _, _) = (fields.next()?, fields.next()?, fields.next()?);
    let path = fields.next().map_or(&b""[..], |p| p.trim_ascii_start());
    if perms.len() < 4 || perms[0] != b'r' || perms[1] != b'w' || perms[3] != b'p' {
        return None;
    }
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |s: &[u8]| u64::from_str_radix(core::str::from_utf8(s).ok()?, 16).ok();
    Some((hex(&range[..dash])?, hex(&range[dash + 1..])?, path))
}

/// `[lo, hi)` less the ranges of `holes` (sorted by start), appended to `out`.
fn subtract(lo: u64, hi: u64, holes: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    let mut at = lo;
    let first = holes.partition_point(|h| h.1 <= lo);
    for &(s, e) in &holes[first..] {
        if s >= hi {
            break;
        }
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
    }
    if at < hi {
        out.push((at, hi));
    }
}

/// The writable segments of the agent's own library (its statics: the bootstrap arena,
/// the membership filter).
fn own_segments(out: &mut Vec<(u64, u64)>) {
    struct Search {
        anchor: u64,
        found: Vec<(u64, u64)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info`, and `data` is the `Search`
        // given to `iterate_phdr` below.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: the loader's program headers, `dlpi_phnum` of them.
        let phdrs = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let base = info.dlpi_addr;
        let range = |p: &libc::Elf64_Phdr| (base + p.p_vaddr, base + p.p_vaddr + p.p_memsz);
        let ours = phdrs.iter().any(|p| {
            let (s, e) = range(p);
            p.p_type == libc::PT_LOAD && (s..e).contains(&search.anchor)
        });
        if ours {
            for p in phdrs {
                if p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_W != 0 {
                    let (s, e) = range(p);
                    search.found.push((s & !4095, e.next_multiple_of(4096)));
                }
            }
            return 1;
        }
        0
    }
    let mut search = Search {
        anchor: &DONE as *const AtomicBool as u64,
        found: Vec::new(),
    };
    // SAFETY: `each` only reads what the loader passes and writes `search`.
    unsafe { sys::iterate_phdr(each, &mut search as *mut Search as *mut c_void) };
    out.extend(search.found);
}

/// The key glibc (2.34 and later; before, the cache's address) writes in the second word of
/// a block it keeps in this thread's cache of freed blocks (tcache), learnt by freeing a
/// block of our own; `None` if the allocator does not do so.
fn tcache_key() -> Option<u64> {
    // SAFETY: a block of the real allocator, released at once; its memory stays mapped
    // (the allocator keeps small blocks), and it is read without dereferencing.
    let p = unsafe { crate::real::malloc(24) } as u64;
    if p == 0 {
        return None;
    }
    // SAFETY: `p` was just allocated by the real allocator.
    unsafe { crate::real::free(p as *mut c_void) };
    let mut w = [0u8; 8];
    (sys::read_own_memory(p + 8, &mut w) == 8)
        .then(|| u64::from_ne_bytes(w))
        .filter(|&k| k != 0)
}

/// `/proc/self/pagemap`: a page is in memory (bit 63) or in swap (bit 62).
const PAGE_PRESENT: u64 = 1 << 63;
const PAGE_SWAPPED: u64 = 1 << 62;

/// The parts of `roots` whose pages were ever written or read: a page neither in memory
/// nor in swap holds zeros, and reading it would only make the kernel map it. Thread
/// stacks are mapped whole (8 MiB each by default) and mostly untouched: 10,000 threads
/// would be 80 GB to read. Without `/proc/self/pagemap`, `roots` as they are.
fn touched(roots: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let Ok(pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return roots;
    };
    let mut out = Vec::new();
    let mut entries = vec![0u8; 8 * 8192];
    for (lo, hi) in roots {
        let mut page = lo & !4095;
        while page < hi {
            let pages = ((hi - page).div_ceil(4096) as usize).min(8192);
            let bytes = &mut entries[..pages * 8];
            if pagemap.read_exact_at(bytes, page / 4096 * 8).is_err() {
                // Unknown: read it all.
                out.push((page.max(lo), hi));
                break;
            }
            let words = bytes
                .chunks_exact(8)
                .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()));
            touched_runs(page, words, lo, hi, &mut out);
            page += pages as u64 * 4096;
        }
    }
    out
}

/// Appends to `out` the runs of pages from `first` (one pagemap entry each) that were
/// touched, clipped to `[lo, hi)`; a run joins the last one of `out` when they meet.
fn touched_runs(
    first: u64,
    entries: impl Iterator<Item = u64>,
    lo: u64,
    hi: u64,
    out: &mut Vec<(u64, u64)>,
) {
    for (i, e) in entries.enumerate() {
        if e & (PAGE_PRESENT | PAGE_SWAPPED) == 0 {
            continue;
        }
        let start = (first + i as u64 * 4096).max(lo);
        let end = (first + (i as u64 + 1) * 4096).min(hi);
        match out.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => out.push((start, end)),
        }
    }
}

/// The size and alignment of a glibc thread arena's heap (`HEAP_MAX_SIZE` on 64 bits).
const ARENA_HEAP: u64 = 64 << 20;
/// glibc's chunk header bit for a chunk in a mapping of its own.
const IS_MMAPPED: u64 = 2;
/// glibc's chunk header bit: the chunk belongs to a thread arena (whose heap is an
/// `ARENA_HEAP`-aligned mapping of its own), not to the main arena.
const NON_MAIN_ARENA: u64 = 4;

/// Whether `f` (an address in a loaded object) comes from the object of the real `malloc`.
fn from_allocator(f: *mut c_void) -> bool {
    !f.is_null()
        && crate::real::address(crate::real::Func::Malloc)
            .is_some_and(|m| sys::same_object(m, f as usize))
}

static DONE: AtomicBool = AtomicBool::new(false);

/// Runs the check (once per process image) and writes its findings; called from the exit
/// handler.
pub fn at_exit() {
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    // The calling thread's stack is a root above this point only: below it, the check's
    // own frames hold block addresses (in a build without optimization, many).
    let sp: u64;
    // SAFETY: reads the stack pointer; no memory, no flags.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    let (lost, scan) = {
        let _internal = Internal::enter();
        check(sp)
    };
    crate::recorder::write_leak_check(&lost, &scan);
}

/// The check itself, for a caller whose stack pointer is `sp`: the blocks found
/// unreachable or released, and the summary.
fn check(sp: u64) -> (Vec<(u64, LeakClass)>, LeakScan) {
    let mut scan = LeakScan::default();
    let mut addrs: Vec<u64> = Vec::new();
    {
        let _busy = Busy::enter(current());
        LIVE.each(|p| addrs.push(p));
        UNRECORDED.each(|p| addrs.push(p));
    }
    scan.blocks = addrs.len() as u64;
    let usable = sys::dlsym_next(c"malloc_usable_size");
    if !from_allocator(usable) {
        scan.status |= SCAN_NO_SIZES;
        return (Vec::new(), scan);
    }
    // SAFETY: `usable` is the allocator's `malloc_usable_size` (it comes from the same
    // object as its `malloc`).
    let usable_size: unsafe extern "C" fn(*mut c_void) -> usize =
        unsafe { core::mem::transmute(usable) };
    // SAFETY: a `dlsym` lookup in the global scope; the name is a valid C string.
    let glibc = from_allocator(unsafe {
        libc::dlsym(libc::RTLD_DEFAULT, c"gnu_get_libc_version".as_ptr())
    });
    // With glibc, blocks the allocator holds as free are told apart (the C library releases
    // some of its own blocks with internal calls no hook sees: its `dlerror` result, at
    // exit): a block in the per-thread cache has the cache's key in its second word, one in
    // a bin has no usable size. And the memory a block's chunk lies in is known, so only
    // that memory is kept out of the roots (an anonymous mapping the kernel merged with a
    // large block's stays in): a chunk of its own mapping, or a thread arena's 64 MiB heap.
    // With another allocator, every mapping that holds a block is left out.
    let key = if glibc { tcache_key() } else { None };
    let mut blocks: Vec<(u64, u64)> = Vec::with_capacity(addrs.len());
    let mut lost: Vec<(u64, LeakClass)> = Vec::new();
    let mut holes: Vec<(u64, u64)> = Vec::new();
    for &p in &addrs {
        // SAFETY: each address is a live block of that allocator (a block another thread
        // frees meanwhile is the program's race with its own exit). Its header word and
        // its first 16 bytes are mapped with it, as `malloc_usable_size` relies on too.
        let (size, header, second) = unsafe {
            let size = usable_size(p as *mut c_void) as u64;
            let header = core::ptr::read_volatile((p - 8) as *const u64);
            let second = if size >= 16 {
                core::ptr::read_volatile((p + 8) as *const u64)
            } else {
                0
            };
            (size, header, second)
        };
        if glibc && (size == 0 || Some(second) == key) {
            lost.push((p, LeakClass::Released));
            continue;
        }
        blocks.push((p, size));
        if glibc {
            if header & IS_MMAPPED != 0 {
                holes.push(((p - 16) & !4095, (p + size).next_multiple_of(4096)));
            } else if header & NON_MAIN_ARENA != 0 {
                let heap = p & !(ARENA_HEAP - 1);
                holes.push((heap, heap + ARENA_HEAP));
            }
            // A chunk of the main arena lies in `[heap]`, left out whole below. Its 64 MiB
            // window would be wrong: it can hold the executable's data, whose globals are
            // roots (the brk heap starts at most 32 MiB after them).
        }
    }
    drop(addrs);
    let mut heap = Heap::new(blocks);
    let Ok(maps) = std::fs::read("/proc/self/maps") else {
        scan.status |= SCAN_NO_MAPS;
        return (Vec::new(), scan);
    };
    if !sys::own::each(|s, e| holes.push((s, e))) {
        scan.status |= SCAN_OWN_MAPPINGS;
        return (Vec::new(), scan);
    }
    own_segments(&mut holes);
    holes.sort_unstable();
    holes.dedup();
    let mut roots: Vec<(u64, u64)> = Vec::new();
    for line in maps.split(|&b| b == b'\n') {
        let Some((mut lo, hi, path)) = writable_private(line) else {
            continue;
        };
        if (lo..hi).contains(&sp) {
            // The calling thread's stack: only the frames still live.
            lo = sp & !7;
        }
        if path == b"[heap]" || (!glibc && heap.holds_block_in(lo, hi)) {
            continue;
        }
        subtract(lo, hi, &holes, &mut roots);
    }
    let roots = touched(roots);
    let mut read = |ranges: &[(u64, usize)], buf: &mut [u8]| sys::gather_own_memory(ranges, buf);
    for &(lo, hi) in &roots {
        heap.mark_from(lo, hi, &mut read);
    }
    heap.classify_lost(&mut read);
    if heap.unreadable {
        scan.status |= SCAN_UNREADABLE;
    }
    scan.root_bytes = heap.root_bytes;
    scan.blocks = heap.len() as u64;
    scan.reachable = heap.reachable();
    lost.extend(heap.lost());
    (lost, scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory made of words at addresses; everything else unreadable.
    struct Memory(std::collections::BTreeMap<u64, u64>);

    impl Memory {
        /// As `process_vm_readv` reads: range after range, stopping where one fails.
        fn read(&self, ranges: &[(u64, usize)], buf: &mut [u8]) -> usize {
            let mut at = 0;
            for &(a, n) in ranges {
                for i in 0..n / 8 {
                    match self.0.get(&(a + 8 * i as u64)) {
                        Some(v) => buf[at..at + 8].copy_from_slice(&v.to_ne_bytes()),
                        None => return at,
                    }
                    at += 8;
                }
            }
            at
        }
    }

    fn memory(words: &[(u64, u64)], blocks: &[(u64, u64)], roots: (u64, u64)) -> Memory {
        let mut m = std::collections::BTreeMap::new();
        for &(s, len) in blocks {
            for a in (s..s + len).step_by(8) {
                m.insert(a, 0);
            }
        }
        for a in (roots.0..roots.1).step_by(8) {
            m.insert(a, 0);
        }
        for &(a, v) in words {
            m.insert(a, v);
        }
        Memory(m)
    }

    fn classes(h: &Heap) -> Vec<(u64, LeakClass)> {
        h.lost().collect()
    }

    #[test]
    fn reachable_lost_indirect_and_cycles() {
        // Blocks of 32 bytes: A reachable from the roots, B from A (interior pointer);
        // C lost, D only from C; E and F point at each other; G points into the group of
        // E and F, so G leads it; H's pointer to itself does not make it reachable.
        let [a, b, c, d, e, f, g, h] = [
            0x1000, 0x1100, 0x1200, 0x1300, 0x1400, 0x1500, 0x1600, 0x1700,
        ];
        let blocks: Vec<(u64, u64)> = [a, b, c, d, e, f, g, h].iter().map(|&s| (s, 32)).collect();
        let roots = (0x9000, 0x9040);
        let mem = memory(
            &[
                (0x9008, a),
                (a + 16, b + 8),
                (c, d),
                (e, f),
                (f + 8, e),
                (g + 24, f),
                (h, h),
            ],
            &blocks,
            roots,
        );
        let mut heap = Heap::new(blocks.clone());
        let mut read = |r: &[(u64, usize)], buf: &mut [u8]| mem.read(r, buf);
        heap.mark_from(roots.0, roots.1, &mut read);
        heap.classify_lost(&mut read);
        assert_eq!(heap.reachable(), 2);
        assert_eq!(
            classes(&heap),
            vec![
                (c, LeakClass::Definite),
                (d, LeakClass::Indirect),
                (e, LeakClass::Indirect),
                (f, LeakClass::Indirect),
                (g, LeakClass::Definite),
                (h, LeakClass::Definite),
            ]
        );
        assert!(!heap.unreadable);
        assert_eq!(heap.root_bytes, 0x40);
    }

    #[test]
    fn the_last_word_of_a_block_and_unreadable_memory() {
        // A pointer to a block's last word is taken for a pointer to the chunk after it
        // (glibc's free lists point there); unreadable roots are skipped and said so.
        let blocks = vec![(0x1000, 32), (0x1100, 32)];
        let roots = (0x9000, 0x9010);
        let mem = memory(
            &[(0x9000, 0x1000 + 24), (0x9008, 0x1100 + 16)],
            &blocks,
            roots,
        );
        let mut heap = Heap::new(blocks);
        let mut read = |r: &[(u64, usize)], buf: &mut [u8]| mem.read(r, buf);
        heap.mark_from(roots.0, roots.1 + 4096, &mut read);
        heap.classify_lost(&mut read);
        assert_eq!(classes(&heap), vec![(0x1000, LeakClass::Definite)]);
        assert!(heap.unreadable);
    }

    #[test]
    fn blocks_read_together_skip_what_lies_between_them() {
        // Blocks 64 bytes apart reached together are read as one piece; the words between
        // them (a chunk header, free memory) point at C, which stays lost.
        let (a, b, c) = (0x1000, 0x1040, 0x5000);
        let blocks = vec![(a, 32), (b, 32), (c, 32)];
        let roots = (0x9000, 0x9010);
        let mut words = vec![(0x9000, a), (0x9008, b)];
        // Everything between and around the blocks is readable and points at C.
        for w in (0x0fc0..0x10c0u64).step_by(8) {
            if !(a..a + 32).contains(&w) && !(b..b + 32).contains(&w) {
                words.push((w, c));
            }
        }
        let mem = memory(&words, &blocks, roots);
        let mut heap = Heap::new(blocks);
        let mut reads = 0;
        let mut read = |r: &[(u64, usize)], buf: &mut [u8]| {
            reads += 1;
            mem.read(r, buf)
        };
        heap.mark_from(roots.0, roots.1, &mut read);
        heap.classify_lost(&mut read);
        assert_eq!(classes(&heap), vec![(c, LeakClass::Definite)]);
        assert!(!heap.unreadable);
        // The roots, A and B together, then C on its own.
        assert_eq!(reads, 3);
    }

    #[test]
    fn only_touched_pages_are_roots() {
        let mut out = Vec::new();
        let present = PAGE_PRESENT;
        // Pages 0x10000.. : present, untouched, swapped, present; the range starts inside
        // the first page and ends inside the last.
        let entries = [present, 0, PAGE_SWAPPED, present];
        touched_runs(0x10000, entries.into_iter(), 0x10010, 0x13ff0, &mut out);
        assert_eq!(out, vec![(0x10010, 0x11000), (0x12000, 0x13ff0)]);
    }

    #[test]
    fn maps_lines_and_holes() {
        assert_eq!(
            writable_private(b"7f00-7f10 rw-p 00000000 00:00 0 "),
            Some((0x7f00, 0x7f10, &b""[..]))
        );
        assert_eq!(
            writable_private(b"7f00-7f10 rw-p 00000000 00:00 0          [stack]"),
            Some((0x7f00, 0x7f10, &b"[stack]"[..]))
        );
        assert_eq!(writable_private(b"7f00-7f10 r--p 00000000 00:00 0"), None);
        assert_eq!(
            writable_private(b"7f00-7f10 rw-s 00000000 00:01 5 /memfd:x"),
            None
        );
        let mut out = Vec::new();
        subtract(0, 100, &[(10, 20), (15, 30), (90, 200)], &mut out);
        assert_eq!(out, vec![(0, 10), (30, 90)]);
    }
}
