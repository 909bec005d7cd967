//! The tree of process images, for the blocks a forked child inherited.
//!
//! A forked child starts with a copy of its parent's heap: every block live in the parent
//! when the child started is the child's too, until the child releases it (the parent's
//! copy lives on in the parent). The events model a block in the image that allocated it
//! only; this is the one rule, shared by the heap report and `tansa leaks`, that finds the
//! image whose block an address of a child stands for.

use rustc_hash::FxHashMap;

use super::ids::SessionId;

/// How far up the tree of processes an address of a child is looked for in its ancestors
/// (a fork chain deeper than this is not met in practice; a crafted one must not make
/// each look-up walk it all).
pub const MAX_ANCESTORS: usize = 256;

/// How many earlier images of a process id are looked at to find a new image's parent.
const MAX_PARENT_CANDIDATES: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Image {
    parent: Option<SessionId>,
    start_ticks: u64,
}

/// The images of a recording and the parent of each.
#[derive(Debug, Default, Clone)]
pub struct Lineage {
    images: FxHashMap<SessionId, Image>,
    /// Images of each process id, in order of registration.
    by_pid: FxHashMap<u32, Vec<SessionId>>,
}

impl Lineage {
    /// Registers an image (process `pid`, whose parent process was `ppid` when it started
    /// at `start_ticks`) and returns its parent image: the latest image of `ppid` that
    /// started no later. An image registered already keeps its first parent.
    pub fn add(
        &mut self,
        session: SessionId,
        pid: u32,
        ppid: u32,
        start_ticks: u64,
    ) -> Option<SessionId> {
        if let Some(image) = self.images.get(&session) {
            return image.parent;
        }
        let parent = self.by_pid.get(&ppid).and_then(|images| {
            images
                .iter()
                .rev()
                .take(MAX_PARENT_CANDIDATES)
                .copied()
                .find(|s| {
                    self.images
                        .get(s)
                        .is_some_and(|i| i.start_ticks <= start_ticks)
                })
        });
        self.images.insert(
            session,
            Image {
                parent,
                start_ticks,
            },
        );
        self.by_pid.entry(pid).or_default().push(session);
        parent
    }

    /// The block of an ancestor of `session` that `session`'s address stands for, and
    /// that ancestor: the nearest ancestor in which `live` finds a block (its allocation
    /// timestamp and the block) allocated no later than the start of the image forked from
    /// it. `released(image)` says whether an image on the way released its inherited copy
    /// (the walk then stops: the ancestors' copies live on, but not in `session`).
    pub fn inherited<B>(
        &self,
        session: SessionId,
        mut live: impl FnMut(SessionId) -> Option<(u64, B)>,
        released: impl Fn(SessionId) -> bool,
    ) -> Option<(SessionId, B)> {
        let mut s = session;
        for _ in 0..MAX_ANCESTORS {
            let image = self.images.get(&s)?;
            let parent = image.parent?;
            if released(s) {
                return None;
            }
            if let Some((ts, block)) = live(parent)
                && ts <= image.start_ticks
            {
                return Some((parent, block));
            }
            s = parent;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_inherits_what_its_ancestors_held_when_it_started() {
        let mut l = Lineage::default();
        let (a, b, c) = (SessionId(1), SessionId(2), SessionId(3));
        assert_eq!(l.add(a, 10, 1, 100), None);
        assert_eq!(l.add(b, 11, 10, 200), Some(a));
        assert_eq!(l.add(c, 12, 11, 300), Some(b));
        // A block of `a` allocated at 150: before `b` started, so `b`'s and `c`'s.
        let in_a = |s: SessionId| (s == a).then_some((150u64, "a"));
        assert_eq!(l.inherited(c, in_a, |_| false), Some((a, "a")));
        assert_eq!(l.inherited(b, in_a, |_| false), Some((a, "a")));
        assert_eq!(l.inherited(a, in_a, |_| false), None);
        // Allocated after `b` started: not inherited.
        let late = |s: SessionId| (s == a).then_some((250u64, "a"));
        assert_eq!(l.inherited(c, late, |_| false), None);
        // Released by `b`: `c`, forked later, does not hold it either.
        assert_eq!(l.inherited(c, in_a, |s| s == b), None);
        assert_eq!(l.inherited(c, in_a, |s| s == c), None);
    }
}
