//! In-process stack unwinding with framehop over the module map's DWARF CFI, made
//! incremental by a validated per-thread stack cache.
//!
//! Unwinding starts at the hook's caller (its return address, stack pointer and frame
//! pointer, captured by the entry stubs in `hooks`), so no agent frame is ever part of a
//! stack. Stack memory is only read inside the calling thread's known stack bounds, so a
//! corrupt frame ends the stack instead of faulting.
//!
//! # The stack cache
//!
//! Unwinding one frame is a pure function of the frame's registers (return address, stack
//! pointer, frame pointer), of the unwind rules (fixed while the module map is unchanged)
//! and of the stack words it reads. The cache keeps the last few stacks of the thread with,
//! for every frame, its registers and every word read (and its value) while unwinding it.
//! When a new stack reaches a frame whose registers equal a cached frame's, and every word
//! read while unwinding that cached frame and those outside it still holds the same value,
//! the rest of the stack is exactly the cached one: only the frames that changed are
//! unwound. Reads are re-checked against memory, never assumed; a stale entry is simply
//! unwound afresh. The cache is dropped whenever the module map changes.
//!
//! Optimised code keeps ordinary variables in the callee-saved frame-pointer register, so
//! the saved-`rbp` words on the stack change all the time although no frame uses `rbp` to
//! find its caller. Only *relevant* reads are validated: a frame's return-address word
//! always; a word it restores into `rbp` only if `rbp` is *live* after it, i.e. some frame
//! further out uses `rbp` as an input (framehop's frame-pointer rules read at `[rbp]`)
//! before another frame restores it. Likewise a frame's own `rbp` is compared only when
//! live. Liveness is computed from the outer end, so a cached suffix keeps its flags.
//!
//! # Signal frames
//!
//! A signal handler returns into the C library's signal-return trampoline (`__restore_rt`:
//! `mov $15, %rax; syscall`), which the kernel put in the handler's return-address slot of
//! its `rt_sigframe`. Its address is learnt once, when the agent starts: the kernel is
//! asked for the trampoline the C library installs with every handler
//! ([`crate::sys::libc_signal_trampoline`]), and it is taken only if its code bytes are
//! those of `rt_sigreturn` ([`SIGRETURN_CODE`], as libgcc's and GDB's x86-64 Linux
//! unwinders recognise it). Checking a frame is then one comparison of its return address
//! with that address, on the slow path only. A frame whose return address is the
//! trampoline ([`FrameKind::Sigreturn`]) is not unwound with framehop (its hand-written
//! CFI uses DWARF expressions, which framehop does not evaluate: it used to fall back to
//! `rbp`, skip the interrupted function, and often stop): once the handler returned, the
//! stack pointer is at the signal frame's `struct ucontext`, whose `uc_mcontext.gregs`
//! hold the interrupted `rip`, `rsp` and `rbp` ([`UC_RIP`], [`UC_RSP`], [`UC_RBP`]). Those
//! three words are reads of the frame like any other, so the cache validates them: a
//! cached stack is not reused for another interrupted context. The next frame
//! ([`FrameKind::Interrupted`]) is unwound from the interrupted instruction itself, as
//! the innermost frame of a CPU sample is (no lookup one byte back; framehop is told it is
//! a first frame, which may be mid-prologue). The stack definition writes the trampoline
//! frame as `tansa_wire::event::SIGNAL_FRAME` and the interrupted instruction plus one, so
//! that readers, who look every frame up one byte back, find the instruction itself.
//!
//! A handler that runs on an alternate signal stack (`sigaltstack`) has its signal frame
//! there, within the bounds it is unwound in, but the interrupted stack pointer is on the
//! thread's own stack, outside them: the interrupted instruction is then the last frame
//! ([`FrameKind::InterruptedLast`]). Reads never leave `[sp, top)` of the stack the hook's
//! caller runs on, and the frames' stack pointers only grow, as the cache's validation
//! requires.

use core::sync::atomic::{AtomicU64, Ordering};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind};
use tansa_wire::event::SIGNAL_FRAME;

use crate::modules::AgentUnwinder;

/// framehop's unwinder cache: the rules of 509 addresses, direct-mapped by address.
type RuleCache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// The number of rules one framehop cache holds (its slot is the lookup address modulo
/// this). Should framehop change it, [`UnwindCache::for_address`] only spreads addresses
/// less evenly.
const RULES_PER_CACHE: u64 = 509;

/// Extra framehop caches of a thread whose code is too large for one.
const MORE_CACHES: usize = 7;

/// Conflict misses (a slot held another address's rule) after which a thread gets its
/// extra caches: by then it has spent about a millisecond evaluating CFI afresh.
const WIDEN_AFTER_CONFLICTS: u64 = 1024;

/// A thread's unwind-rule caches. One framehop cache holds the rules of 509 addresses,
/// direct-mapped: a large program (a compiler, whose stacks differ from one allocation to
/// the next) evicts rules all the time, and every miss evaluates the function's CFI from
/// its start (about a microsecond). A thread that has had [`WIDEN_AFTER_CONFLICTS`]
/// conflict misses gets [`MORE_CACHES`] more, and an address then goes to cache
/// `(address / 509) % 8`: together one direct-mapped cache of 4,072 rules. Each framehop
/// cache costs 33 KiB (its CFI evaluation context included), so threads that do not need
/// them do not get them.
pub struct UnwindCache {
    first: RuleCache,
    more: Option<Box<[RuleCache; MORE_CACHES]>>,
}

impl core::fmt::Debug for UnwindCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UnwindCache")
            .field("caches", &(1 + self.more.as_ref().map_or(0, |m| m.len())))
            .finish()
    }
}

impl UnwindCache {
    /// One framehop cache.
    pub fn new() -> UnwindCache {
        UnwindCache {
            first: RuleCache::new_in(),
            more: None,
        }
    }

    /// Adds the extra caches if the first one has thrashed (allocates: never call it from a
    /// signal handler).
    pub fn widen_if_thrashing(&mut self) {
        if self.more.is_none()
            && self.first.stats().miss_wrong_address_count >= WIDEN_AFTER_CONFLICTS
        {
            self.more = Some(Box::new(core::array::from_fn(|_| RuleCache::new_in())));
        }
    }

    /// Whether the extra caches were added.
    #[cfg(test)]
    fn is_wide(&self) -> bool {
        self.more.is_some()
    }

    /// Rule lookups that missed, in all caches.
    #[cfg(test)]
    fn misses(&self) -> u64 {
        core::iter::once(&self.first)
            .chain(self.more.iter().flat_map(|m| m.iter()))
            .map(|c| {
                let s = c.stats();
                s.miss_empty_slot_count + s.miss_wrong_address_count + s.miss_wrong_modules_count
            })
            .sum()
    }

    /// The cache that holds the rule of `address`.
    #[inline]
    fn for_address(&mut self, address: FrameAddress) -> &mut RuleCache {
        match &mut self.more {
            None => &mut self.first,
            Some(more) => {
                let which =
                    (address.address_for_lookup() / RULES_PER_CACHE) as usize % (MORE_CACHES + 1);
                match which.checked_sub(1) {
                    Some(i) => &mut more[i],
                    None => &mut self.first,
                }
            }
        }
    }

    /// Unwinds one frame with the cache for its address.
    #[inline]
    fn unwind_frame<F>(
        &mut self,
        unwinder: &AgentUnwinder,
        address: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        read_stack: &mut F,
    ) -> Result<Option<u64>, framehop::Error>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        framehop::Unwinder::unwind_frame(
            unwinder,
            address,
            regs,
            self.for_address(address),
            read_stack,
        )
    }
}

impl Default for UnwindCache {
    fn default() -> Self {
        UnwindCache::new()
    }
}

/// The code of the x86-64 Linux signal-return trampoline: `mov $15, %rax; syscall`
/// (`rt_sigreturn`).
pub const SIGRETURN_CODE: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Offsets, from the stack pointer at the trampoline (the signal frame's `struct
/// ucontext`), of the interrupted `rip`, `rsp` and `rbp`: `uc_mcontext.gregs[REG_RIP]`,
/// `[REG_RSP]` and `[REG_RBP]` (`<sys/ucontext.h>`; the kernel's `struct sigcontext` has
/// `ip`, `sp` and `bp` at the same places).
pub const UC_RIP: u64 = gregs_offset(libc::REG_RIP);
/// See [`UC_RIP`].
pub const UC_RSP: u64 = gregs_offset(libc::REG_RSP);
/// See [`UC_RIP`].
pub const UC_RBP: u64 = gregs_offset(libc::REG_RBP);

const fn gregs_offset(reg: libc::c_int) -> u64 {
    (core::mem::offset_of!(libc::ucontext_t, uc_mcontext)
        + core::mem::offset_of!(libc::mcontext_t, gregs)
        + 8 * reg as usize) as u64
}

// The kernel's layout (`struct ucontext`: flags, link, a 24-byte stack_t, then `struct
// sigcontext`: r8-r15, di, si, bp, bx, dx, ax, cx, sp, ip).
const _: () = assert!(UC_RBP == 40 + 80 && UC_RSP == 40 + 120 && UC_RIP == 40 + 128);

/// Address of the C library's signal-return trampoline, 0 while unknown.
static SIGRETURN: AtomicU64 = AtomicU64::new(0);

/// Takes `addr` for the signal-return trampoline if its code is [`SIGRETURN_CODE`] (read
/// without faulting). Returns whether it was taken.
pub fn set_sigreturn_trampoline(addr: u64) -> bool {
    let mut code = [0u8; SIGRETURN_CODE.len()];
    let ok = crate::sys::read_own_memory(addr, &mut code) == code.len() && code == SIGRETURN_CODE;
    if ok {
        SIGRETURN.store(addr, Ordering::Relaxed);
    }
    ok
}

/// The signal-return trampoline's address (0: unknown).
#[inline]
pub fn sigreturn_trampoline() -> u64 {
    SIGRETURN.load(Ordering::Relaxed)
}

/// Hard limit on frames per stack.
pub const MAX_FRAMES: usize = 256;

/// Stacks remembered per thread.
const ENTRIES: usize = 32;

/// Sets of the index from a stack's innermost frame to its entries.
const SETS: usize = 32;

/// Entries per set of the index. The index is set-associative because the hash of a frame
/// includes its stack pointer, which address-space randomization changes from run to run: a
/// direct-mapped index of 128 slots made two alternating call sites of sqlite share a slot
/// in about one run in ten, and each then evicted the other, so that 600,000 of 2.7 million
/// events took the slow path and the run took 40 % longer. Four ways of 32 sets take the
/// same 128 bytes; a set overflows only when five busy frames share it.
const WAYS: usize = 4;

#[inline]
fn index_set(regs: &CallerRegs) -> usize {
    let h = (regs.ra ^ regs.sp.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 59) as usize % SETS
}

/// The registers of the hook's caller at the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerRegs {
    /// Return address into the caller.
    pub ra: u64,
    /// The caller's stack pointer after the call returns.
    pub sp: u64,
    /// The caller's frame pointer register.
    pub bp: u64,
}

/// A 128-bit stack key built from the outermost frame inwards, so that the key of a stack
/// is the key of its outer part extended by its inner frames.
pub type StackKey = (u64, u64);

/// The key of the empty stack under module-map epoch `epoch`.
#[inline]
pub fn key_seed(epoch: u64) -> StackKey {
    (0x9e37_79b9_7f4a_7c15 ^ epoch, 0xc2b2_ae3d_27d4_eb4f)
}

/// Extends a key by one (inner) frame.
#[inline]
pub fn key_extend(k: StackKey, ra: u64) -> StackKey {
    let mut a = (k.0 ^ ra).wrapping_mul(0xff51_afd7_ed55_8ccd);
    a ^= a >> 32;
    let mut b = (k.1 ^ ra.rotate_left(29)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    b ^= b >> 31;
    (a ^ b.rotate_left(17), b)
}

/// The table key of a stack key (its low half is never zero).
#[inline]
pub fn table_key(k: StackKey) -> StackKey {
    (k.0 | 1, k.1)
}

/// What a frame's `regs.ra` is, and so how the frame is unwound (see the module
/// documentation on signal frames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A return address: unwound with its rule one byte back.
    Call,
    /// The signal-return trampoline: the caller is the context saved in the signal frame.
    Sigreturn,
    /// The instruction a signal interrupted: unwound with its own rule.
    Interrupted,
    /// As [`FrameKind::Interrupted`], on a stack other than the signal frame's (the handler
    /// ran on an alternate stack): not unwound further.
    InterruptedLast,
}

#[derive(Debug, Clone, Copy)]
struct FrameState {
    regs: CallerRegs,
    kind: FrameKind,
    /// Whether this frame's value of `rbp` influences the frames outside it.
    bp_live: bool,
    /// Key of the stack from this frame outwards.
    key: StackKey,
    /// Index of this frame's first read in the entry's reads (later frames' reads follow).
    reads_start: u32,
    /// Index of this frame's first check in the entry's checks (later frames' follow).
    checks_start: u32,
    /// End of the highest word any check from this frame outwards reads.
    checks_end: u64,
}

impl FrameState {
    /// The frame as stack keys and definitions have it: [`SIGNAL_FRAME`] for the
    /// trampoline, the interrupted instruction plus one (looked up one byte back, like a
    /// return address, by every reader).
    #[inline]
    fn reported(&self) -> u64 {
        match self.kind {
            FrameKind::Call => self.regs.ra,
            FrameKind::Sigreturn => SIGNAL_FRAME,
            FrameKind::Interrupted | FrameKind::InterruptedLast => self.regs.ra.wrapping_add(1),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Read {
    addr: u64,
    value: u64,
    ok: bool,
    /// Whether the value influences the stack (see the module documentation).
    relevant: bool,
}

#[derive(Debug, Default)]
struct Entry {
    frames: Vec<FrameState>,
    reads: Vec<Read>,
    /// The relevant successful reads as (address, value), in frame order: what validation
    /// re-reads. Failed reads need no re-check: they were beyond the top of the stack, which
    /// does not move, and every read of a frame lies above that frame's stack pointer.
    checks: Vec<(u64, u64)>,
}

/// What the fast path compares of an entry: its innermost frame, the extent of its checks
/// and its id, kept in the cache itself rather than behind the entry's vectors, so that a
/// lookup does not wait for one more cache line before it can read the stack. Packed into
/// 32 bytes: a thread's context then still fits the agent allocator's 4 KiB class (at
/// 40 bytes it took 8 KiB, and 20,000 short-lived threads ran 30 % slower).
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    ra: u64,
    /// 0 for an entry that never matches: no frames, or checks too far above it.
    sp: u64,
    /// Compared only when live ([`HEAD_BP_LIVE`]).
    bp: u64,
    /// Bytes from `sp` to the end of the highest word the stack's checks read.
    checks_span: u32,
    /// The stack's id (0 until interned), and [`HEAD_BP_LIVE`].
    tag: u32,
}

/// The bit of [`Head::tag`] saying that the innermost frame's `rbp` is live.
const HEAD_BP_LIVE: u32 = 1 << 31;

const _: () = assert!(core::mem::size_of::<Head>() == 32);

impl Head {
    fn new(f: &FrameState) -> Head {
        match u32::try_from(f.checks_end.saturating_sub(f.regs.sp)) {
            Ok(checks_span) => Head {
                ra: f.regs.ra,
                sp: f.regs.sp,
                bp: f.regs.bp,
                checks_span,
                tag: if f.bp_live { HEAD_BP_LIVE } else { 0 },
            },
            Err(_) => Head::default(),
        }
    }

    fn id(&self) -> u32 {
        self.tag & !HEAD_BP_LIVE
    }

    /// Records the stack's id; an id too large for the tag leaves the entry off the fast
    /// path.
    fn set_id(&mut self, id: u32) {
        if id & HEAD_BP_LIVE == 0 {
            self.tag = (self.tag & HEAD_BP_LIVE) | id;
        }
    }

    fn matches(&self, regs: &CallerRegs) -> bool {
        self.ra == regs.ra
            && self.sp == regs.sp
            && (self.tag & HEAD_BP_LIVE == 0 || self.bp == regs.bp)
    }

    fn checks_end(&self) -> u64 {
        self.sp + u64::from(self.checks_span)
    }
}

/// A thread's stack cache and scratch buffers. All buffers come from the agent's own
/// allocator and are reused.
#[derive(Debug)]
pub struct StackCache {
    entries: [Entry; ENTRIES],
    /// When each entry was last used (the clock's value), 0 for an entry that holds no
    /// stack. Kept apart from the entries, so choosing the entry to replace reads four
    /// cache lines, not one per entry.
    used: [u64; ENTRIES],
    heads: [Head; ENTRIES],
    /// Per set, the entries (plus one; 0 for none) whose innermost frames hash to it, most
    /// recently used first; the used ways come first.
    index: [[u8; WAYS]; SETS],
    clock: u64,
    generation: u64,
    current: usize,
    scratch_frames: Vec<FrameState>,
    scratch_reads: Vec<Read>,
    scratch_checks: Vec<(u64, u64)>,
}

impl Default for StackCache {
    fn default() -> Self {
        StackCache {
            entries: core::array::from_fn(|_| Entry::default()),
            used: [0; ENTRIES],
            heads: [Head::default(); ENTRIES],
            index: [[0; WAYS]; SETS],
            clock: 0,
            generation: 0,
            current: 0,
            scratch_frames: Vec::new(),
            scratch_reads: Vec::new(),
            scratch_checks: Vec::new(),
        }
    }
}

/// The result of a capture.
#[derive(Debug, Clone, Copy)]
pub struct Captured {
    /// The stack's key.
    pub key: StackKey,
    /// Its id if the cache already knows it.
    pub id: Option<u32>,
    /// Number of frames.
    pub len: usize,
}

#[inline]
fn readable(addr: u64, lo: u64, hi: u64) -> bool {
    addr >= lo && addr.checked_add(8).is_some_and(|end| end <= hi)
}

/// Whether a frame of `entry` matches registers `regs` of a frame of kind `kind` (comparing
/// `rbp` only when live).
#[inline]
fn same_frame(f: &FrameState, regs: &CallerRegs, kind: FrameKind) -> bool {
    f.regs.ra == regs.ra
        && f.regs.sp == regs.sp
        && (!f.bp_live || f.regs.bp == regs.bp)
        && f.kind == kind
}

/// Whether every check (an address and the value read there when the stack was unwound)
/// still holds. `checks_end` is the end of the highest word they read, `stack_hi` the top
/// of the stack the current stack pointer is on.
///
/// # Safety
///
/// Every checked address lies at or above the stack pointer of a frame that matches the
/// current registers: a stack pointer of the current stack.
#[inline]
unsafe fn checks_hold(checks: &[(u64, u64)], checks_end: u64, stack_hi: u64) -> bool {
    // The checks must also lie below the current stack's top (a cached stack may have run
    // on a coroutine stack that no longer exists).
    if checks_end > stack_hi {
        return false;
    }
    // Differences are accumulated without branching, in blocks: most stacks are valid, so
    // every word is read anyway.
    let read = |&(addr, value): &(u64, u64)| {
        // SAFETY: the address lies between a stack pointer of the current stack (the
        // caller's promise) and the top of that stack (checked above): mapped memory of
        // this thread's stack.
        unsafe { (addr as *const u64).read_unaligned() ^ value }
    };
    let mut blocks = checks.chunks_exact(4);
    for b in &mut blocks {
        if (read(&b[0]) | read(&b[1]) | read(&b[2]) | read(&b[3])) != 0 {
            return false;
        }
    }
    blocks.remainder().iter().fold(0, |acc, c| acc | read(c)) == 0
}

impl StackCache {
    /// Forgets everything (the module map changed).
    fn invalidate(&mut self, generation: u64) {
        self.used = [0; ENTRIES];
        self.index = [[0; WAYS]; SETS];
        self.generation = generation;
    }

    /// Whether the relevant reads of `entry`'s frames from `from` outwards still hold.
    /// `stack_hi` is the top of the stack the current stack pointer is on.
    ///
    /// # Safety
    ///
    /// Frame `from` of `entry` matches the current registers ([`same_frame`]).
    #[inline]
    unsafe fn validate(entry: &Entry, from: usize, stack_hi: u64) -> bool {
        entry.frames.get(from).is_some_and(|f| {
            // SAFETY: the checks from frame `from` outwards lie above its stack pointer,
            // which is the current one (the caller's promise).
            unsafe {
                checks_hold(
                    &entry.checks[f.checks_start as usize..],
                    f.checks_end,
                    stack_hi,
                )
            }
        })
    }

    /// Removes entry `slot` from index set `set`, keeping the other ways in order.
    fn unindex(&mut self, set: usize, slot: usize) {
        let ways = &mut self.index[set];
        if let Some(w) = ways.iter().position(|&e| usize::from(e) == slot + 1) {
            ways[w..].rotate_left(1);
            ways[WAYS - 1] = 0;
        }
    }

    /// The frames of the stack captured last, innermost first, as definitions write them
    /// (return addresses, and for a signal delivery [`SIGNAL_FRAME`] then the interrupted
    /// instruction plus one).
    pub fn frames(&self) -> impl ExactSizeIterator<Item = u64> + Clone + '_ {
        self.entries[self.current]
            .frames
            .iter()
            .map(FrameState::reported)
    }

    /// Records the id the stack captured last was interned under.
    pub fn set_id(&mut self, id: u32) {
        self.heads[self.current].set_id(id);
    }

    /// The id of the stack at `regs` if it is exactly a cached, interned stack (same call
    /// site, same frame, same relevant stack contents) under module-map `generation`. Needs
    /// no module data, so no lock.
    #[inline]
    pub fn lookup(&mut self, regs: CallerRegs, stack_hi: u64, generation: u64) -> Option<u32> {
        if generation != self.generation {
            return None;
        }
        let set = index_set(&regs);
        // The set's most recently used way first, apart: it is the usual hit.
        let i = usize::from(self.index[set][0]).checked_sub(1)?;
        if self.holds(i, &regs, stack_hi) {
            return Some(self.hit(i));
        }
        self.lookup_other_ways(set, &regs, stack_hi)
    }

    /// The rest of [`StackCache::lookup`]: the set's other ways, the one that holds moved to
    /// the front.
    #[cold]
    #[inline(never)]
    fn lookup_other_ways(&mut self, set: usize, regs: &CallerRegs, stack_hi: u64) -> Option<u32> {
        for way in 1..WAYS {
            let i = usize::from(self.index[set][way]).checked_sub(1)?;
            if self.holds(i, regs, stack_hi) {
                self.index[set][..=way].rotate_right(1);
                return Some(self.hit(i));
            }
        }
        None
    }

    /// Whether entry `i` is an interned stack whose innermost frame is at `regs` and whose
    /// checks hold.
    #[inline]
    fn holds(&self, i: usize, regs: &CallerRegs, stack_hi: u64) -> bool {
        let h = &self.heads[i];
        self.used[i] != 0
            && h.id() != 0
            && h.matches(regs)
            // SAFETY: the checks lie above the entry's innermost stack pointer, which was
            // just found equal to the current one.
            && unsafe { checks_hold(&self.entries[i].checks, h.checks_end(), stack_hi) }
    }

    /// Makes entry `i` the most recently used and returns its id.
    #[inline]
    fn hit(&mut self, i: usize) -> u32 {
        self.clock += 1;
        self.used[i] = self.clock;
        self.current = i;
        self.heads[i].id()
    }

    /// Captures the stack at `regs`: unwinds only what differs from a cached stack.
    /// `generation` identifies the module map (and epoch) the cache is valid for; reads
    /// are allowed in `[regs.sp, stack_hi)`.
    #[allow(clippy::too_many_arguments)]
    pub fn capture(
        &mut self,
        unwinder: &AgentUnwinder,
        cache: &mut UnwindCache,
        regs: CallerRegs,
        stack_hi: u64,
        max_frames: usize,
        generation: u64,
        epoch: u64,
    ) -> Captured {
        if generation != self.generation {
            self.invalidate(generation);
        }
        self.clock += 1;
        let lo = regs.sp;
        // Fast path: the very same call site, frame and stack contents as a cached stack.
        if let Some(id) = self.lookup(regs, stack_hi, generation) {
            let e = &self.entries[self.current];
            return Captured {
                key: e.frames[0].key,
                id: Some(id),
                len: e.frames.len(),
            };
        }
        // Slow path: unwind until a frame matches the most recently used stack: the current
        // one (every use makes its entry current), if the cache was not dropped since.
        let base = Some(self.current).filter(|&i| self.used[i] != 0);
        let mut frames = core::mem::take(&mut self.scratch_frames);
        let mut reads = core::mem::take(&mut self.scratch_reads);
        frames.clear();
        reads.clear();
        let mut state = regs;
        let mut kind = FrameKind::Call;
        // Loaded once per capture: an ordinary frame costs one comparison with it.
        let trampoline = sigreturn_trampoline();
        let mut matched: Option<(usize, usize)> = None;
        let mut scan = 0usize;
        if regs.ra != 0 {
            loop {
                if let Some(b) = base {
                    let e = &self.entries[b];
                    // Cached frames are ordered by stack pointer; skip those below ours.
                    while scan < e.frames.len() && e.frames[scan].regs.sp < state.sp {
                        scan += 1;
                    }
                    if scan < e.frames.len()
                        && same_frame(&e.frames[scan], &state, kind)
                        // SAFETY: the frame was just found to match the current one.
                        && unsafe { Self::validate(e, scan, stack_hi) }
                    {
                        matched = Some((b, scan));
                        break;
                    }
                }
                if frames.len() >= max_frames {
                    break;
                }
                let reads_start = reads.len() as u32;
                if kind == FrameKind::InterruptedLast {
                    // Its stack is not the one this stack is read in: keep the frame, read
                    // nothing.
                    frames.push(FrameState {
                        regs: state,
                        kind,
                        bp_live: true,
                        key: (0, 0),
                        reads_start,
                        checks_start: 0,
                        checks_end: 0,
                    });
                    break;
                }
                // An interrupted instruction's frame reads nothing below its own stack
                // pointer (framehop may try, for a first frame), so that every frame's
                // reads lie above its stack pointer, as validation requires.
                let frame_lo = if kind == FrameKind::Interrupted {
                    state.sp
                } else {
                    lo
                };
                let mut read_stack = |addr: u64| -> Result<u64, ()> {
                    let ok = readable(addr, frame_lo, stack_hi);
                    let value = if ok {
                        // SAFETY: the address lies inside this thread's live stack.
                        unsafe { (addr as *const u64).read_unaligned() }
                    } else {
                        0
                    };
                    reads.push(Read {
                        addr,
                        value,
                        ok,
                        relevant: true,
                    });
                    if ok { Ok(value) } else { Err(()) }
                };
                // The caller's registers and kind, if this frame has a caller.
                let next: Option<(CallerRegs, FrameKind)>;
                let uses_bp;
                if kind == FrameKind::Sigreturn {
                    // The interrupted context, from the signal frame's `struct ucontext`
                    // at the stack pointer.
                    let uc = state.sp;
                    let ip = read_stack(uc + UC_RIP);
                    let sp = read_stack(uc + UC_RSP);
                    let bp = read_stack(uc + UC_RBP);
                    // The saved `rip` and `rsp` decide the caller, like a return address;
                    // the saved `rbp` matters only if live outside (settled below).
                    for r in &mut reads[reads_start as usize..] {
                        r.relevant = r.addr != uc + UC_RBP;
                    }
                    uses_bp = false;
                    next = match (ip, sp, bp) {
                        (Ok(ip), Ok(sp), Ok(bp)) if ip != 0 => {
                            // Unwound further only on this stack, above the signal frame.
                            let more = sp > state.sp && sp < stack_hi;
                            Some((
                                CallerRegs { ra: ip, sp, bp },
                                if more {
                                    FrameKind::Interrupted
                                } else {
                                    FrameKind::InterruptedLast
                                },
                            ))
                        }
                        _ => None,
                    };
                } else {
                    let mut regs_fh = UnwindRegsX86_64::new(state.ra, state.sp, state.bp);
                    let address = if kind == FrameKind::Interrupted {
                        Some(FrameAddress::from_instruction_pointer(state.ra))
                    } else {
                        FrameAddress::from_return_address(state.ra)
                    };
                    let unwound = address.map(|address| {
                        cache.unwind_frame(unwinder, address, &mut regs_fh, &mut read_stack)
                    });
                    // Mark the reads: the return-address word (just below the caller's
                    // stack pointer) is always relevant; any other word restores `rbp` and
                    // is relevant only if `rbp` is live outside (settled below, from the
                    // outer end). A read at `[rbp]` means this frame's rule takes `rbp` as
                    // input.
                    uses_bp = reads[reads_start as usize..]
                        .iter()
                        .any(|r| r.addr == state.bp);
                    let ra_slot = regs_fh.sp().wrapping_sub(8);
                    for r in &mut reads[reads_start as usize..] {
                        r.relevant = r.addr == ra_slot;
                    }
                    next = match unwound {
                        Some(Ok(Some(ra))) if ra != 0 && regs_fh.sp() > state.sp => Some((
                            CallerRegs {
                                ra,
                                sp: regs_fh.sp(),
                                bp: regs_fh.bp(),
                            },
                            if ra == trampoline {
                                FrameKind::Sigreturn
                            } else {
                                FrameKind::Call
                            },
                        )),
                        _ => None,
                    };
                }
                frames.push(FrameState {
                    regs: state,
                    kind,
                    // Provisionally "uses rbp"; turned into liveness below.
                    bp_live: uses_bp,
                    key: (0, 0),
                    reads_start,
                    checks_start: 0,
                    checks_end: 0,
                });
                match next {
                    Some((caller, caller_kind)) => {
                        state = caller;
                        kind = caller_kind;
                    }
                    None => {
                        // The last frame: keep every read (they decided that it is last).
                        for r in &mut reads[reads_start as usize..] {
                            r.relevant = true;
                        }
                        frames.last_mut().expect("just pushed").bp_live = true;
                        break;
                    }
                }
            }
        }
        // The new stack: the frames just unwound, then the matched cached suffix.
        let slot = least_recently_used(&self.used);
        let mut outer_key = key_seed(epoch);
        if let Some((b, j)) = matched {
            outer_key = self.entries[b].frames[j].key;
            let e = &self.entries[b];
            let base_read = e.frames[j].reads_start as usize;
            let shift = reads.len() as i64 - base_read as i64;
            reads.extend_from_slice(&e.reads[base_read..]);
            frames.extend(e.frames[j..].iter().map(|f| FrameState {
                reads_start: (f.reads_start as i64 + shift) as u32,
                ..*f
            }));
        }
        let new_count = matched.map_or(frames.len(), |(b, j)| {
            frames.len() - (self.entries[b].frames.len() - j)
        });
        // Liveness of rbp, from the outer end (the cached suffix already has its own).
        let mut live_outside = frames.get(new_count).is_some_and(|f| f.bp_live);
        for k in (0..new_count).rev() {
            outer_key = key_extend(outer_key, frames[k].reported());
            frames[k].key = outer_key;
            let start = frames[k].reads_start as usize;
            let end = frames
                .get(k + 1)
                .map_or(reads.len(), |f| f.reads_start as usize);
            let is_last = k + 1 == frames.len();
            let restores_bp = reads[start..end].iter().any(|r| !r.relevant);
            if !is_last {
                for r in &mut reads[start..end] {
                    if !r.relevant {
                        r.relevant = live_outside;
                    }
                }
            }
            let uses_bp = frames[k].bp_live;
            let live = if is_last {
                true
            } else {
                uses_bp || (!restores_bp && live_outside)
            };
            frames[k].bp_live = live;
            live_outside = live;
        }
        // The checks: the new frames' relevant successful reads, then the suffix's.
        let mut checks = core::mem::take(&mut self.scratch_checks);
        checks.clear();
        for k in 0..new_count {
            frames[k].checks_start = checks.len() as u32;
            let start = frames[k].reads_start as usize;
            let end = frames
                .get(k + 1)
                .map_or(reads.len(), |f| f.reads_start as usize);
            checks.extend(
                reads[start..end]
                    .iter()
                    .filter(|r| r.relevant && r.ok)
                    .map(|r| (r.addr, r.value)),
            );
        }
        if let Some((b, j)) = matched {
            let e = &self.entries[b];
            let from = e.frames[j].checks_start as usize;
            let shift = checks.len() as i64 - from as i64;
            checks.extend_from_slice(&e.checks[from..]);
            for f in &mut frames[new_count..] {
                f.checks_start = (f.checks_start as i64 + shift) as u32;
            }
        }
        // Highest checked word from each new frame outwards.
        let mut end = frames.get(new_count).map_or(0, |f| f.checks_end);
        for k in (0..new_count).rev() {
            let from = frames[k].checks_start as usize;
            let to = frames
                .get(k + 1)
                .map_or(checks.len(), |f| f.checks_start as usize);
            for &(addr, _) in &checks[from..to] {
                end = end.max(addr + 8);
            }
            frames[k].checks_end = end;
        }
        let key = frames.first().map_or(key_seed(epoch), |f| f.key);
        if let Some(old) = self.entries[slot].frames.first() {
            self.unindex(index_set(&old.regs), slot);
        }
        // At the front of its set; a full set forgets its least recently used way. A stack
        // without frames is never looked up.
        if let Some(first) = frames.first() {
            let ways = &mut self.index[index_set(&first.regs)];
            ways.rotate_right(1);
            ways[0] = slot as u8 + 1;
        }
        let e = &mut self.entries[slot];
        core::mem::swap(&mut e.frames, &mut frames);
        core::mem::swap(&mut e.reads, &mut reads);
        core::mem::swap(&mut e.checks, &mut checks);
        self.scratch_checks = checks;
        self.heads[slot] = e.frames.first().map_or(Head::default(), Head::new);
        self.used[slot] = self.clock;
        self.current = slot;
        self.scratch_frames = frames;
        self.scratch_reads = reads;
        Captured {
            key,
            id: None,
            len: self.entries[slot].frames.len(),
        }
    }
}

/// The entry to replace: an empty one, else the least recently used.
#[inline]
fn least_recently_used(used: &[u64; ENTRIES]) -> usize {
    let mut best = 0;
    for (i, &u) in used.iter().enumerate().skip(1) {
        if u < used[best] {
            best = i;
        }
    }
    best
}

/// Unwinds a full stack from an interrupted instruction (a CPU sample: the first frame is
/// the instruction pointer itself, not a return address), into `out` (never grown beyond
/// its capacity). Reads the stack only within `[sp, stack_hi)`.
pub fn unwind_from_ip(
    unwinder: &AgentUnwinder,
    cache: &mut UnwindCache,
    regs: CallerRegs,
    stack_hi: u64,
    out: &mut Vec<u64>,
) {
    out.clear();
    if out.capacity() == 0 || regs.ra == 0 {
        return;
    }
    let lo = regs.sp;
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        if readable(addr, lo, stack_hi) {
            // SAFETY: the address lies inside the interrupted thread's live stack.
            Ok(unsafe { (addr as *const u64).read_unaligned() })
        } else {
            Err(())
        }
    };
    out.push(regs.ra);
    let mut state = UnwindRegsX86_64::new(regs.ra, regs.sp, regs.bp);
    let mut address = FrameAddress::from_instruction_pointer(regs.ra);
    while out.len() < out.capacity() {
        let sp_before = state.sp();
        match cache.unwind_frame(unwinder, address, &mut state, &mut read_stack) {
            Ok(Some(ra)) if ra != 0 && state.sp() > sp_before => {
                out.push(ra);
                match FrameAddress::from_return_address(ra) {
                    Some(a) => address = a,
                    None => break,
                }
            }
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compose_from_the_outer_end() {
        let frames = [0x1111u64, 0x2222, 0x3333];
        let mut k = key_seed(7);
        for &f in frames.iter().rev() {
            k = key_extend(k, f);
        }
        let outer = key_extend(key_extend(key_seed(7), 0x3333), 0x2222);
        assert_eq!(key_extend(outer, 0x1111), k);
        assert_ne!(key_seed(7), key_seed(8));
        assert_ne!(table_key(k).0, 0);
    }

    /// A frame-pointer stack in memory: the innermost frame's registers point into it, and
    /// the unwinder (without modules) follows saved `rbp` words.
    struct FpStack {
        words: Vec<u64>,
    }

    impl FpStack {
        /// Three frames: the hook's caller (return address given per capture), then return
        /// addresses `outer` and 0x5000_2000.
        fn new(outer: u64) -> FpStack {
            let mut words = vec![0u64; 64];
            let base = words.as_ptr() as u64;
            words[4] = base + 64;
            words[5] = outer;
            words[8] = 0;
            words[9] = 0x5000_2000;
            FpStack { words }
        }

        fn regs(&self, ra: u64) -> CallerRegs {
            let base = self.words.as_ptr() as u64;
            CallerRegs {
                ra,
                sp: base,
                bp: base + 32,
            }
        }

        fn hi(&self) -> u64 {
            self.words.as_ptr() as u64 + 8 * self.words.len() as u64
        }
    }

    /// Captures at `ra` with `unwinder` and gives a stack met for the first time the id
    /// `new_id`; returns the id the cache knew (None: the slow path) and the stack's key.
    /// The rule caches keep rules only while the same unwinder is used.
    fn capture_with(
        unwinder: &AgentUnwinder,
        cache: &mut StackCache,
        rules: &mut UnwindCache,
        stack: &FpStack,
        ra: u64,
        new_id: u32,
    ) -> (Option<u32>, StackKey) {
        let c = cache.capture(
            unwinder,
            rules,
            stack.regs(ra),
            stack.hi(),
            MAX_FRAMES,
            1,
            0,
        );
        assert_eq!(c.len, 3, "three frames unwound at {ra:#x}");
        if c.id.is_none() {
            cache.set_id(new_id);
        }
        (c.id, c.key)
    }

    #[test]
    fn a_thread_whose_rules_thrash_gets_more_caches_and_the_same_stacks() {
        let stack = FpStack::new(0x5000_1000);
        let mut cache = StackCache::default();
        let mut rules = UnwindCache::new();
        let unwinder = AgentUnwinder::new();
        // Return addresses whose lookup addresses (one byte before) all share one slot of a
        // single framehop cache.
        let ra = |k: u64| 0x4000_0001 + RULES_PER_CACHE * k;
        let expected = |r: u64| {
            [r, 0x5000_1000, 0x5000_2000]
                .iter()
                .rev()
                .fold(key_seed(0), |k, &f| key_extend(k, f))
        };
        let mut k = 0;
        loop {
            // As `capture_inner` does before each slow capture.
            rules.widen_if_thrashing();
            if rules.is_wide() {
                break;
            }
            assert!(k <= WIDEN_AFTER_CONFLICTS, "not widened after {k} captures");
            let (_, key) = capture_with(&unwinder, &mut cache, &mut rules, &stack, ra(k), 1);
            assert_eq!(key, expected(ra(k)), "stack at {:#x}", ra(k));
            k += 1;
        }
        // The first capture filled the slot; each later one evicted the rule before it.
        assert_eq!(k, WIDEN_AFTER_CONFLICTS + 1, "captures before widening");
        // Widened: as many addresses as there are caches, all sharing that slot, each keep
        // their rule (a second round misses nothing), and the stacks are the same. Each
        // capture starts from an empty stack cache, so that every frame is unwound.
        let wide: Vec<u64> = (0..=MORE_CACHES as u64).map(|i| ra(10_000 + i)).collect();
        for round in 0..2 {
            let before = rules.misses();
            for &r in &wide {
                let mut fresh = StackCache::default();
                let (_, key) = capture_with(&unwinder, &mut fresh, &mut rules, &stack, r, 2);
                assert_eq!(key, expected(r), "stack at {r:#x}");
            }
            let missed = rules.misses() - before;
            if round == 0 {
                assert!(
                    missed >= wide.len() as u64,
                    "only {missed} rules missed at first"
                );
            } else {
                assert_eq!(missed, 0, "rules missed again");
            }
        }
    }

    #[test]
    fn call_sites_sharing_an_index_set_all_stay_on_the_fast_path() {
        let stack = FpStack::new(0x5000_1000);
        // WAYS + 1 return addresses whose innermost frames hash to the same set, as two
        // busy call sites of a run may after address-space randomization.
        let set = index_set(&stack.regs(0x4000_0000));
        let sites: Vec<u64> = (0..)
            .map(|i| 0x4000_0000 + 16 * i)
            .filter(|&ra| index_set(&stack.regs(ra)) == set)
            .take(WAYS + 1)
            .collect();
        let mut cache = StackCache::default();
        let mut rules = UnwindCache::new();
        let unwinder = AgentUnwinder::new();
        let ids = |k: usize| k as u32 + 1;
        let mut keys = Vec::new();
        for (k, &ra) in sites[..WAYS].iter().enumerate() {
            let (known, key) = capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, ids(k));
            assert_eq!(known, None, "site {k} is new");
            keys.push(key);
        }
        for round in 0..3 {
            for (k, &ra) in sites[..WAYS].iter().enumerate() {
                let (known, key) = capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 99);
                assert_eq!(known, Some(ids(k)), "round {round}, site {k}: cached");
                assert_eq!(key, keys[k]);
            }
        }
        // One site more than the set holds: the least recently used one leaves the index,
        // and is unwound again when it comes back; no site is ever given another's id.
        let (known, _) = capture_with(
            &unwinder,
            &mut cache,
            &mut rules,
            &stack,
            sites[WAYS],
            ids(WAYS),
        );
        assert_eq!(known, None);
        let (known, _) = capture_with(&unwinder, &mut cache, &mut rules, &stack, sites[0], 98);
        assert_eq!(known, None, "the least recently used site left the set");
        for (k, &ra) in sites.iter().enumerate().skip(2) {
            let (known, _) = capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 97);
            assert_eq!(known, Some(ids(k)), "site {k} stayed in the set");
        }
    }

    #[test]
    fn a_frame_met_again_under_another_caller_is_unwound_and_both_stay_cached() {
        let mut stack = FpStack::new(0x5000_1000);
        let mut cache = StackCache::default();
        let mut rules = UnwindCache::new();
        let unwinder = AgentUnwinder::new();
        let ra = 0x4000_0000;
        let (known, first) = capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 1);
        assert_eq!(known, None);
        assert_eq!(
            capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 9),
            (Some(1), first)
        );
        // The same innermost frame, called from elsewhere: the cached stack no longer holds.
        stack.words[5] = 0x5000_1800;
        let (known, second) = capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 2);
        assert_eq!(known, None);
        assert_ne!(second, first);
        // Both stacks now share the frame and its set: each is found where it holds.
        for _ in 0..2 {
            stack.words[5] = 0x5000_1000;
            assert_eq!(
                capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 9),
                (Some(1), first)
            );
            stack.words[5] = 0x5000_1800;
            assert_eq!(
                capture_with(&unwinder, &mut cache, &mut rules, &stack, ra, 9),
                (Some(2), second)
            );
        }
    }

    /// A handler's stack in memory: the hook's caller (frame pointer at word 4) returns to
    /// the signal-return trampoline, whose signal frame (`struct ucontext` at word 6) holds
    /// the interrupted `rip`, `rsp` (word 40) and `rbp` (word 44); two frame-pointer frames
    /// are outside the interrupted one.
    fn signal_stack(trampoline: u64, ip: u64) -> FpStack {
        let mut words = vec![0u64; 64];
        let base = words.as_ptr() as u64;
        words[5] = trampoline;
        let uc = 6;
        words[uc + (UC_RIP / 8) as usize] = ip;
        words[uc + (UC_RSP / 8) as usize] = base + 8 * 40;
        words[uc + (UC_RBP / 8) as usize] = base + 8 * 44;
        words[44] = base + 8 * 50;
        words[45] = 0x5000_1000;
        words[50] = 0;
        words[51] = 0x5000_2000;
        FpStack { words }
    }

    #[test]
    fn a_signal_frame_is_unwound_into_the_interrupted_code_and_its_words_are_validated() {
        // The trampoline's code, somewhere readable.
        static TRAMPOLINE: [u8; 9] = SIGRETURN_CODE;
        let t = TRAMPOLINE.as_ptr() as u64;
        assert!(set_sigreturn_trampoline(t));
        assert!(
            !set_sigreturn_trampoline(t + 1),
            "other code is no trampoline"
        );
        assert_eq!(sigreturn_trampoline(), t);
        let unwinder = AgentUnwinder::new();
        let mut rules = UnwindCache::new();
        let mut cache = StackCache::default();
        let ra = 0x4000_0000;
        let mut stack = signal_stack(t, 0x4000_5000);
        let capture = |cache: &mut StackCache, rules: &mut UnwindCache, stack: &FpStack| {
            let c = cache.capture(
                &unwinder,
                rules,
                stack.regs(ra),
                stack.hi(),
                MAX_FRAMES,
                1,
                0,
            );
            if c.id.is_none() {
                // Any id: the test only asks whether the cache knew the stack.
                cache.set_id(7);
            }
            (c.id, cache.frames().collect::<Vec<u64>>())
        };
        // The trampoline's frame is the signal frame; the interrupted instruction is
        // written plus one; unwinding goes on from it.
        let (known, frames) = capture(&mut cache, &mut rules, &stack);
        assert_eq!(known, None);
        assert_eq!(
            frames,
            [ra, SIGNAL_FRAME, 0x4000_5001, 0x5000_1000, 0x5000_2000]
        );
        let (known, again) = capture(&mut cache, &mut rules, &stack);
        assert!(known.is_some(), "the same stack is cached");
        assert_eq!(again, frames);
        // Another interrupted instruction in the same signal frame: not the cached stack.
        stack.words[6 + (UC_RIP / 8) as usize] = 0x4000_6000;
        let (known, other) = capture(&mut cache, &mut rules, &stack);
        assert_eq!(known, None, "a changed signal frame is unwound again");
        assert_eq!(other[2], 0x4000_6001);
        // An interrupted stack pointer off this stack (a handler on an alternate stack):
        // the interrupted instruction is the last frame.
        stack.words[6 + (UC_RSP / 8) as usize] = stack.hi() + 0x1000;
        let (known, cut) = capture(&mut cache, &mut rules, &stack);
        assert_eq!(known, None);
        assert_eq!(cut, [ra, SIGNAL_FRAME, 0x4000_6001]);
    }
}
