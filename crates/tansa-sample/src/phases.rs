//! Where a recording run's time goes, phase by phase (`tansa sample`'s `TANSA_TIMINGS=1`).
//!
//! The recorder marks the end of each phase; the caller decides whether to show them.
//! Marking costs a clock read, so it is always done.

use std::time::{Duration, Instant};

/// Phase durations, in the order the phases ran.
#[derive(Debug, Clone)]
pub struct Phases {
    list: Vec<(&'static str, Duration)>,
    last: Instant,
}

impl Default for Phases {
    fn default() -> Self {
        Phases::new()
    }
}

impl Phases {
    /// Starts timing now.
    pub fn new() -> Phases {
        Phases {
            list: Vec::new(),
            last: Instant::now(),
        }
    }

    /// Ends the current phase, named `name`, and starts the next one.
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.list.push((name, now - self.last));
        self.last = now;
    }

    /// Adds the phases of `other` after these (their durations as measured there).
    pub fn extend(&mut self, other: Phases) {
        self.list.extend(other.list);
        self.last = Instant::now();
    }

    /// The phases and their durations, in order.
    pub fn list(&self) -> &[(&'static str, Duration)] {
        &self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_kept_in_order() {
        let mut p = Phases::new();
        p.mark("one");
        p.mark("two");
        let names: Vec<&str> = p.list().iter().map(|x| x.0).collect();
        assert_eq!(names, ["one", "two"]);
    }
}
