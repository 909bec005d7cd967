//! The leak check at exit (`tansa record --leak-check`) as a recording's records tell it:
//! which blocks each process image's check found lost, for as long as they stay allocated
//! (other threads keep running while it reads, and may free them), and which images it
//! checked. The one reading of those records: `tansa leaks` counts them per allocation site,
//! the heap report (`tansa report`, the HTML page, `record --online`) per process and in
//! total.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use tansa_wire::event::{
    LeakClass, LeakScan, SCAN_NO_SIZES, SCAN_NOTHING_CLASSIFIED, SCAN_OWN_MAPPINGS, SCAN_UNREADABLE,
};

use super::ids::SessionId;
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

/// What the leak check's records said so far.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    /// The images the check was asked of (`None`: every image).
    asked: Option<FxHashSet<SessionId>>,
    /// The blocks found lost, while they stay allocated.
    unreached: FxHashMap<(SessionId, u64), LeakClass>,
    /// Each checked image's summary record.
    scans: FxHashMap<SessionId, LeakScan>,
}

impl Findings {
    /// Findings about `asked`, the images of the recordings made with the check (`None`:
    /// every image, as in `record --online`): the others are neither checked nor not
    /// checked.
    pub fn new(asked: Option<Vec<SessionId>>) -> Self {
        Findings {
            asked: asked.map(|a| a.into_iter().collect()),
            ..Findings::default()
        }
    }

    /// Takes `kind` if it is one of the leak check's records (`live` says whether a block
    /// starts at an address of `session`: a finding about a block not allocated is
    /// dropped); returns whether it was.
    pub fn take(
        &mut self,
        session: SessionId,
        kind: &EventKind,
        live: impl FnOnce(u64) -> bool,
    ) -> bool {
        match kind {
            EventKind::Unreached { ptr, class } => {
                if live(*ptr) {
                    self.unreached.insert((session, *ptr), *class);
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
