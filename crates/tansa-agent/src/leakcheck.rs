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
//! on the process itself, so a mapping that goes away while the check runs (other threads
//! still run at `exit`) is a short read, not a fault. Not scanned as roots: mappings that
//! hold a live block (the allocator's arenas, whose free chunks hold stale pointers), the
//! agent's own memory (its table holds every block's address), shared mappings, and the
//! part of the calling thread's stack below its stack pointer. Registers of other threads
//! are not read. The findings are written to the calling thread's stream: an
//! `Unreached` record per unreachable block, then a `LeakScan` record.

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

/// The live blocks and what the check found of each (pure: memory comes through `read`).
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
    found: Vec<u32>,
    work: Vec<u32>,
    /// Some memory could not be read.
    pub unreadable: bool,
    /// Bytes of roots read.
    pub root_bytes: u64,
    /// Blocks the allocator held as free (released unseen).
    pub released: Vec<u64>,
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
            unreadable: false,
            root_bytes: 0,
            released: Vec::new(),
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

    /// Appends to `found` every block that a word of `[start, end)` points into.
    fn words(&mut self, start: u64, end: u64, read: &mut impl FnMut(u64, &mut [u8]) -> usize) {
        let mut a = start.next_multiple_of(8);
        while a.saturating_add(8) <= end {
            let n = (((end - a) as usize).min(CHUNK)) & !7;
            let got = read(a, &mut self.buf[..n]).min(n);
            for w in self.buf[..got & !7].chunks_exact(8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(w);
                if let Some(j) = self.find(u64::from_ne_bytes(word)) {
                    self.found.push(j);
                }
            }
            if got < n {
                // Skip the page that could not be read.
                self.unreadable = true;
                a = (a + got as u64 + 1).next_multiple_of(4096);
            } else {
                a += n as u64;
            }
        }
    }

    fn block_words(&mut self, j: u32, read: &mut impl FnMut(u64, &mut [u8]) -> usize) {
        let start = self.starts[j as usize];
        let end = start.saturating_add(self.sizes[j as usize]);
        self.words(start, end, read);
    }

    /// Marks what the roots `[start, end)` lead to as reachable.
    pub(crate) fn mark_from(
        &mut self,
        start: u64,
        end: u64,
        read: &mut impl FnMut(u64, &mut [u8]) -> usize,
    ) {
        self.found.clear();
        self.root_bytes += end.saturating_sub(start);
        self.words(start, end, read);
        let roots = core::mem::take(&mut self.found);
        for &j in &roots {
            if self.state[j as usize] == UNREACHED {
                self.state[j as usize] = REACHABLE;
                self.work.push(j);
            }
        }
        self.found = roots;
        while let Some(j) = self.work.pop() {
            self.found.clear();
            self.block_words(j, read);
            for k in 0..self.found.len() {
                let b = self.found[k] as usize;
                if self.state[b] == UNREACHED {
                    self.state[b] = REACHABLE;
                    self.work.push(b as u32);
                }
            }
        }
    }

    /// Classifies the blocks the roots did not reach: each one not yet seen leads a group
    /// (definitely lost) and everything it points to, directly or not, is indirectly lost.
    /// A group reached from a later one joins it: its leader is indirectly lost too.
    pub(crate) fn classify_lost(&mut self, read: &mut impl FnMut(u64, &mut [u8]) -> usize) {
        let mut leader = vec![u32::MAX; self.starts.len()];
        for i in 0..self.starts.len() {
            if self.state[i] != UNREACHED {
                continue;
            }
            self.state[i] = DEFINITE;
            leader[i] = i as u32;
            self.work.push(i as u32);
            while let Some(j) = self.work.pop() {
                self.found.clear();
                self.block_words(j, read);
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

    /// The blocks found unreachable, with how, and those found released.
    pub(crate) fn lost(&self) -> impl Iterator<Item = (u64, LeakClass)> + '_ {
        self.starts
            .iter()
            .zip(&self.state)
            .filter_map(|(&p, &s)| match s {
                DEFINITE => Some((p, LeakClass::Definite)),
                INDIRECT => Some((p, LeakClass::Indirect)),
                _ => None,
            })
            .chain(self.released.iter().map(|&p| (p, LeakClass::Released)))
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

/// The size and alignment of a glibc thread arena's heap (`HEAP_MAX_SIZE` on 64 bits).
const ARENA_HEAP: u64 = 64 << 20;

/// Whether the program's allocator is glibc's.
fn is_glibc() -> bool {
    // SAFETY: a `dlsym` lookup in the global scope; the name is a valid C string.
    let version = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"gnu_get_libc_version".as_ptr()) };
    !version.is_null()
        && crate::real::address(crate::real::Func::Malloc)
            .is_some_and(|m| sys::same_object(m, version as usize))
}

static DONE: AtomicBool = AtomicBool::new(false);

/// Runs the check (once per process image) and writes its findings; called from the exit
/// handler.
pub fn at_exit() {
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    let (heap, mut scan) = {
        let _internal = Internal::enter();
        check()
    };
    let lost: Vec<(u64, LeakClass)> = match &heap {
        Some(h) => {
            scan.reachable = h.reachable();
            h.lost().collect()
        }
        None => Vec::new(),
    };
    crate::recorder::write_leak_check(&lost, &scan);
}

/// The check itself: the classified heap, or none when it could not be made.
fn check() -> (Option<Heap>, LeakScan) {
    let mut scan = LeakScan::default();
    let usable = sys::dlsym_next(c"malloc_usable_size");
    let same_allocator = !usable.is_null()
        && crate::real::address(crate::real::Func::Malloc)
            .is_some_and(|m| sys::same_object(m, usable as usize));
    let mut addrs: Vec<u64> = Vec::new();
    {
        let _busy = Busy::enter(current());
        LIVE.each(|p| addrs.push(p));
        UNRECORDED.each(|p| addrs.push(p));
    }
    scan.blocks = addrs.len() as u64;
    if !same_allocator {
        scan.status |= SCAN_NO_SIZES;
        return (None, scan);
    }
    // SAFETY: `usable` is the allocator's `malloc_usable_size` (checked to come from the
    // same object as its `malloc`).
    let usable_size: unsafe extern "C" fn(*mut c_void) -> usize =
        unsafe { core::mem::transmute(usable) };
    let blocks: Vec<(u64, u64)> = addrs
        .iter()
        // SAFETY: each address is a live block of that allocator (a block another thread
        // frees meanwhile is the program's race with its own exit).
        .map(|&p| (p, unsafe { usable_size(p as *mut c_void) } as u64))
        .collect();
    drop(addrs);
    // Blocks the allocator holds as free: the C library releases some of its own blocks
    // with internal calls that no hook sees (glibc's `dlerror` result, at exit). A block in
    // glibc's per-thread cache has the cache's key in its second word; one in a bin has no
    // usable size.
    let key = if is_glibc() { tcache_key() } else { None };
    type Blocks = Vec<(u64, u64)>;
    let (blocks, released): (Blocks, Blocks) = blocks.into_iter().partition(|&(p, size)| {
        let mut w = [0u8; 8];
        let freed = size == 0
            || (key.is_some()
                && sys::read_own_memory(p + 8, &mut w) == 8
                && Some(u64::from_ne_bytes(w)) == key);
        !freed
    });
    // With glibc, the memory a block's chunk lies in is known, so only that memory is kept
    // out of the roots (an anonymous mapping the kernel merged with a large block's stays
    // in): a chunk of its own mapping (`IS_MMAPPED` in its header), or the 64 MiB heap of a
    // thread arena. With another allocator, every mapping that holds a block is left out.
    let glibc = is_glibc();
    let mut block_holes: Vec<(u64, u64)> = Vec::new();
    if glibc {
        for &(p, size) in &blocks {
            let mut w = [0u8; 8];
            if sys::read_own_memory(p - 8, &mut w) == 8 && u64::from_ne_bytes(w) & 2 != 0 {
                block_holes.push(((p - 16) & !4095, (p + size).next_multiple_of(4096)));
            } else {
                let heap = p & !(ARENA_HEAP - 1);
                block_holes.push((heap, heap + ARENA_HEAP));
            }
        }
    }
    let mut heap = Heap::new(blocks);
    heap.released = released.iter().map(|b| b.0).collect();
    let Ok(maps) = std::fs::read("/proc/self/maps") else {
        scan.status |= SCAN_NO_MAPS;
        return (None, scan);
    };
    let mut holes: Vec<(u64, u64)> = Vec::new();
    if !sys::own::each(|s, e| holes.push((s, e))) {
        scan.status |= SCAN_OWN_MAPPINGS;
        return (None, scan);
    }
    own_segments(&mut holes);
    holes.extend(block_holes);
    holes.sort_unstable();
    holes.dedup();
    let sp = {
        let marker = 0u8;
        core::hint::black_box(&marker) as *const u8 as u64
    };
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
    let mut read = |a: u64, buf: &mut [u8]| sys::read_own_memory(a, buf);
    for &(lo, hi) in &roots {
        heap.mark_from(lo, hi, &mut read);
    }
    heap.classify_lost(&mut read);
    if heap.unreadable {
        scan.status |= SCAN_UNREADABLE;
    }
    scan.root_bytes = heap.root_bytes;
    scan.blocks = heap.len() as u64;
    (Some(heap), scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory made of words at addresses; everything else unreadable.
    struct Memory(std::collections::BTreeMap<u64, u64>);

    impl Memory {
        fn read(&self, a: u64, buf: &mut [u8]) -> usize {
            for (i, w) in buf.chunks_exact_mut(8).enumerate() {
                match self.0.get(&(a + 8 * i as u64)) {
                    Some(v) => w.copy_from_slice(&v.to_ne_bytes()),
                    None => return 8 * i,
                }
            }
            buf.len()
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
        let mut read = |x: u64, buf: &mut [u8]| mem.read(x, buf);
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
        let mut read = |x: u64, buf: &mut [u8]| mem.read(x, buf);
        heap.mark_from(roots.0, roots.1 + 4096, &mut read);
        heap.classify_lost(&mut read);
        assert_eq!(classes(&heap), vec![(0x1000, LeakClass::Definite)]);
        assert!(heap.unreadable);
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
