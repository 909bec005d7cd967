//! The leak check at exit (`tansa record --leak-check`) as a recording's records tell it:
//! which blocks each process image's check found lost, for as long as they stay allocated
//! (other threads keep running while it reads, and may free them), and which images it
//! checked. The one reading of those records: `tansa leaks` counts them per allocation site,
//! the heap report (`tansa report`, the HTML page, `record --online`) per process and in
//! total.
//!
//! A forked child's check covers the blocks it inherited from its parent (see
//! [`super::lineage`]) as well as its own: an inherited block the child lost (definitely or
//! indirectly) counts in the child's figures, charged to the site in the parent that
//! allocated it. An inherited block the child could still reach does not: it is the
//! parent's, counted in the parent's figures if the parent's check finds it there (a
//! forking server's workers would otherwise each report the server's whole heap as their
//! own). So totals count each image's lost blocks once, and each reachable block once, in
//! the image that allocated it.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use tansa_wire::event::{
    LeakClass, LeakScan, SCAN_NO_SIZES, SCAN_NOTHING_CLASSIFIED, SCAN_OWN_MAPPINGS, SCAN_UNREADABLE,
};

use super::ids::SessionId;
use super::lineage::Lineage;
use super::merge::EventKind;

/// The blocks still allocated at a process image's end, as the leak check at exit
/// (`tansa record --leak-check`) found them.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct AtExit {
    /// Blocks no pointer outside the lost blocks leads to: the program dropped its last
    /// pointer to them (of a group pointing at one another, one).
    pub definite_blocks: u64,
    /// Their bytes.
    pub definite_bytes: u64,
    /// Blocks only lost blocks point to.
    pub indirect_blocks: u64,
    /// Their bytes.
    pub indirect_bytes: u64,
    /// Blocks the program could still reach (from its globals, stacks or reachable
    /// blocks).
    pub reachable_blocks: u64,
    /// Their bytes.
    pub reachable_bytes: u64,
    /// Blocks the allocator held as free at exit: released by the C library with a call
    /// tansa does not see (glibc frees some of its own blocks internally). Not lost.
    pub released_blocks: u64,
    /// Their bytes.
    pub released_bytes: u64,
}

impl AtExit {
    /// Counts a block of `bytes` the check classified `class` (`None`: reachable).
    pub fn add(&mut self, class: Option<LeakClass>, bytes: u64) {
        let (n, b) = match class {
            Some(LeakClass::Definite) => (&mut self.definite_blocks, &mut self.definite_bytes),
            Some(LeakClass::Indirect) => (&mut self.indirect_blocks, &mut self.indirect_bytes),
            Some(LeakClass::Released) => (&mut self.released_blocks, &mut self.released_bytes),
            None => (&mut self.reachable_blocks, &mut self.reachable_bytes),
        };
        *n += 1;
        *b = b.saturating_add(bytes);
    }

    /// Adds the blocks of `o`.
    pub fn sum(&mut self, o: &AtExit) {
        self.definite_blocks += o.definite_blocks;
        self.definite_bytes = self.definite_bytes.saturating_add(o.definite_bytes);
        self.indirect_blocks += o.indirect_blocks;
        self.indirect_bytes = self.indirect_bytes.saturating_add(o.indirect_bytes);
        self.reachable_blocks += o.reachable_blocks;
        self.reachable_bytes = self.reachable_bytes.saturating_add(o.reachable_bytes);
        self.released_blocks += o.released_blocks;
        self.released_bytes = self.released_bytes.saturating_add(o.released_bytes);
    }

    /// Bytes lost, definitely and indirectly.
    pub fn lost_bytes(&self) -> u64 {
        self.definite_bytes.saturating_add(self.indirect_bytes)
    }

    /// Blocks lost, definitely and indirectly.
    pub fn lost_blocks(&self) -> u64 {
        self.definite_blocks + self.indirect_blocks
    }
}

/// The leak check at exit over a whole recording.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LeakCheckSummary {
    /// Process images checked when they called `exit`.
    pub images_checked: u64,
    /// Process images not checked: they ended otherwise (a signal, `_exit`, `exec`), or
    /// the check could not be made (`warnings` says why).
    pub images_not_checked: u64,
    /// The blocks still allocated at the end of the images checked.
    pub at_exit: AtExit,
}

/// Which block an address an image's check reported stands for, as the reader models its
/// blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<B> {
    /// A block the image allocated itself.
    Own,
    /// A block an ancestor allocated and the image inherited when it was forked, and
    /// the reader's copy of it (its size and site).
    Inherited(B),
    /// No block: the finding is dropped.
    None,
}

/// What the leak check's records said so far; `B` is a reader's copy of an inherited block
/// (its size and site, which outlive the ancestor's block: the parent may release its own
/// copy before the child's check is read).
#[derive(Debug, Clone)]
pub struct Findings<B = ()> {
    /// The images the check was asked of (`None`: every image).
    asked: Option<FxHashSet<SessionId>>,
    /// The blocks found lost, while they stay allocated.
    unreached: FxHashMap<(SessionId, u64), LeakClass>,
    /// The inherited blocks found lost (definitely or indirectly), by the image that lost
    /// them, while it holds them.
    inherited: FxHashMap<(SessionId, u64), (B, LeakClass)>,
    /// Inherited blocks their image released (its copy only), while the check is read.
    released_inherited: FxHashSet<(SessionId, u64)>,
    /// Each checked image's summary record.
    scans: FxHashMap<SessionId, LeakScan>,
}

impl<B> Default for Findings<B> {
    fn default() -> Self {
        Findings {
            asked: None,
            unreached: FxHashMap::default(),
            inherited: FxHashMap::default(),
            released_inherited: FxHashSet::default(),
            scans: FxHashMap::default(),
        }
    }
}

impl<B> Findings<B> {
    /// Findings about `asked`, the images of the recordings made with the check (`None`:
    /// every image, as in `record --online`): the others are neither checked nor not
    /// checked.
    pub fn new(asked: Option<Vec<SessionId>>) -> Self {
        Findings {
            asked: asked.map(|a| a.into_iter().collect()),
            ..Findings::default()
        }
    }

    /// Takes `kind` if it is one of the leak check's records (`holder` says which block
    /// starts at an address of `session`: a finding about a block not allocated is
    /// dropped, and so is one about an inherited block the image can still reach or that
    /// the allocator holds as free); returns whether it was.
    pub fn take(
        &mut self,
        session: SessionId,
        kind: &EventKind,
        holder: impl FnOnce(u64) -> Holder<B>,
    ) -> bool {
        match kind {
            EventKind::Unreached { ptr, class } => {
                match holder(*ptr) {
                    Holder::Own => {
                        self.unreached.insert((session, *ptr), *class);
                    }
                    Holder::Inherited(block)
                        if matches!(class, LeakClass::Definite | LeakClass::Indirect) =>
                    {
                        self.inherited.insert((session, *ptr), (block, *class));
                    }
                    Holder::Inherited(_) | Holder::None => {}
                }
                true
            }
            EventKind::LeakScan(scan) => {
                self.scans.insert(session, **scan);
                true
            }
            _ => false,
        }
    }

    /// The block at `ptr` of `session` was released: it is no longer lost.
    #[inline]
    pub fn released(&mut self, session: SessionId, ptr: u64) {
        if !self.unreached.is_empty() {
            self.unreached.remove(&(session, ptr));
        }
    }

    /// The block at `ptr` that `session` inherited was released by `session` (its copy
    /// only): it is no longer lost, and `session` no longer holds it.
    pub fn released_inherited(&mut self, session: SessionId, ptr: u64) {
        self.inherited.remove(&(session, ptr));
        self.released_inherited.insert((session, ptr));
    }

    /// Whether `session` released its inherited copy of the block at `ptr`
    /// ([`Findings::released_inherited`]).
    pub fn released_inherited_at(&self, session: SessionId, ptr: u64) -> bool {
        !self.released_inherited.is_empty() && self.released_inherited.contains(&(session, ptr))
    }

    /// The inherited blocks each classified image lost and held at its end: the image, the
    /// reader's copy of the block and how the check classified it.
    pub fn inherited_lost(&self) -> impl Iterator<Item = (SessionId, &B, LeakClass)> {
        self.inherited
            .iter()
            .filter(|((session, _), _)| self.classified(*session))
            .map(|(&(session, _), (block, class))| (session, block, *class))
    }

    /// Whether the check of `session` classified its blocks.
    pub fn classified(&self, session: SessionId) -> bool {
        self.scans
            .get(&session)
            .is_some_and(|s| s.status & SCAN_NOTHING_CLASSIFIED == 0)
    }

    /// How the check classified the block at `ptr` of `session`, still allocated at its
    /// end (`None`: reachable). Meaningful for images [`Findings::classified`] only.
    pub fn class(&self, session: SessionId, ptr: u64) -> Option<LeakClass> {
        self.unreached.get(&(session, ptr)).copied()
    }

    /// The summary over `images` (session and process id of each; those the check was
    /// asked of count), whose blocks still allocated at their ends are `at_exit`; says in
    /// `warnings` which checks were not complete.
    pub fn summary(
        &self,
        images: impl IntoIterator<Item = (SessionId, u32)>,
        at_exit: AtExit,
        warnings: &mut Vec<String>,
    ) -> LeakCheckSummary {
        let mut summary = LeakCheckSummary {
            at_exit,
            ..LeakCheckSummary::default()
        };
        let asked = |s: &SessionId| self.asked.as_ref().is_none_or(|a| a.contains(s));
        let mut unasked = 0u64;
        for (session, pid) in images {
            if !asked(&session) {
                unasked += 1;
                continue;
            }
            match self.scans.get(&session) {
                Some(scan) if scan.status & SCAN_NOTHING_CLASSIFIED == 0 => {
                    summary.images_checked += 1;
                    if scan.status & SCAN_UNREADABLE != 0 {
                        warnings.push(format!(
                            "the leak check at exit of process {pid} could not read all of its \
                             memory (a mapping went away while other threads ran): a block \
                             only that memory pointed to is counted as lost"
                        ));
                    }
                }
                Some(scan) => {
                    summary.images_not_checked += 1;
                    warnings.push(format!(
                        "the leak check at exit of process {pid} classified no block: {}",
                        scan_failure(scan.status)
                    ));
                }
                None => summary.images_not_checked += 1,
            }
        }
        if unasked > 0 {
            warnings.push(format!(
                "{unasked} process image(s) come from recordings made without --leak-check: \
                 the leak check's figures leave their blocks out"
            ));
        }
        summary
    }
}

/// Which block the address `ptr` of `session` stands for (see [`Holder`]): `own(image)`
/// gives the block at `ptr` that `image` allocated, with its allocation timestamp, if one
/// is live. The one rule of both readers of the check.
pub fn holder<B, C>(
    lineage: &Lineage,
    findings: &Findings<C>,
    session: SessionId,
    ptr: u64,
    mut own: impl FnMut(SessionId) -> Option<(u64, B)>,
) -> Holder<B> {
    if own(session).is_some() {
        return Holder::Own;
    }
    match lineage.inherited(session, own, |image| {
        findings.released_inherited_at(image, ptr)
    }) {
        Some((_, block)) => Holder::Inherited(block),
        None => Holder::None,
    }
}

/// Why a leak check classified nothing, from its status bits.
fn scan_failure(status: u32) -> &'static str {
    if status & SCAN_NO_SIZES != 0 {
        "the program's allocator gives no block sizes (it has no malloc_usable_size)"
    } else if status & SCAN_OWN_MAPPINGS != 0 {
        "the recorder had more memory mappings of its own than it could tell apart"
    } else {
        "its memory map could not be read"
    }
}
