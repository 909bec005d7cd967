//! The aggregator's process images, indexed by session number.
//!
//! Session numbers come from the recording: a real one numbers its sessions 0, 1, 2, ... in
//! order, so they index a vector; a number far beyond the sessions seen so far (a damaged
//! or crafted file) is kept in a map instead, so that no number can make the aggregator
//! reserve memory for sessions that do not exist.

use rustc_hash::FxHashMap;

/// Session numbers up to `SLACK + 2 * count` (of the sessions added so far) are stored
/// densely.
const SLACK: usize = 64;

/// Sessions by number.
#[derive(Debug)]
pub(super) struct Sessions<T> {
    dense: Vec<Option<T>>,
    sparse: FxHashMap<u32, T>,
    count: usize,
}

impl<T> Default for Sessions<T> {
    fn default() -> Self {
        Sessions {
            dense: Vec::new(),
            sparse: FxHashMap::default(),
            count: 0,
        }
    }
}

impl<T> Sessions<T> {
    /// The session numbered `id`.
    #[inline]
    pub(super) fn get(&self, id: u32) -> Option<&T> {
        match self.dense.get(id as usize) {
            Some(s) => s.as_ref(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&id),
        }
    }

    /// The session numbered `id`.
    #[inline]
    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        match self.dense.get_mut(id as usize) {
            Some(s) => s.as_mut(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get_mut(&id),
        }
    }

    /// Whether `id` is known.
    pub(super) fn contains(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    /// Adds session `id` (which must not be known yet).
    pub(super) fn insert(&mut self, id: u32, session: T) {
        self.count += 1;
        let i = id as usize;
        if i < self.dense.len() {
            self.dense[i] = Some(session);
        } else if i <= SLACK + 2 * self.count {
            self.dense.resize_with(i + 1, || None);
            self.dense[i] = Some(session);
            // Sessions kept aside that the vector now covers move into it.
            let len = self.dense.len();
            let moved: Vec<u32> = self
                .sparse
                .keys()
                .copied()
                .filter(|&k| (k as usize) < len)
                .collect();
            for k in moved {
                if let Some(s) = self.sparse.remove(&k) {
                    self.dense[k as usize] = Some(s);
                }
            }
        } else {
            self.sparse.insert(id, session);
        }
    }

    /// Every session, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.dense.iter().flatten().chain(self.sparse.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_numbers_reserve_nothing_and_move_in_when_covered() {
        let mut s = Sessions::default();
        s.insert(u32::MAX, "crafted");
        s.insert(70, "far");
        assert!(s.dense.is_empty());
        for i in 0..40 {
            s.insert(i, "near");
        }
        assert_eq!(s.get(u32::MAX), Some(&"crafted"));
        assert_eq!(s.get(70), Some(&"far"));
        assert_eq!(s.get(5), Some(&"near"));
        assert_eq!(s.get(41), None);
        assert!(s.dense.len() <= 72, "{}", s.dense.len());
        assert_eq!(s.iter().count(), 42);
        assert!(s.contains(70) && !s.contains(69));
    }
}
