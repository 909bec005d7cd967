//! Stopping what tansa started, also when it is interrupted.

use std::collections::BTreeSet;
use std::io;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::Signal;

use super::command::signal_group_of;

/// The process groups of the commands a [`super::LocalTarget`] started and still runs.
/// [`Cleanup::stop_all`] stops them from anywhere (a signal handler's thread).
///
/// Spawning and stopping take the same lock, so a stop either sees a child being started
/// or prevents it from starting: nothing started is left behind.
#[derive(Debug, Clone, Default)]
pub struct Cleanup(Arc<Mutex<State>>);

#[derive(Debug, Default)]
struct State {
    groups: BTreeSet<u32>,
    stopping: bool,
}

impl Cleanup {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns `cmd` (made to lead its own process group) and remembers it, unless a stop
    /// has begun.
    pub(super) fn spawn(&self, cmd: &mut Command) -> io::Result<Child> {
        let mut st = self.lock();
        if st.stopping {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "tansa is stopping",
            ));
        }
        let child = cmd.spawn()?;
        st.groups.insert(child.id());
        Ok(child)
    }

    /// Forgets a group that ended.
    pub(super) fn forget(&self, leader: u32) {
        self.lock().groups.remove(&leader);
    }

    /// Whether [`Cleanup::stop_all`] was called: what ran since cannot be trusted.
    pub fn stopped(&self) -> bool {
        self.lock().stopping
    }

    /// Terminates every remembered process group, kills what is left after a moment, and
    /// lets nothing new start.
    pub fn stop_all(&self) {
        let groups: Vec<u32> = {
            let mut st = self.lock();
            st.stopping = true;
            st.groups.iter().copied().collect()
        };
        for &g in &groups {
            signal_group_of(g, Signal::TERM);
        }
        if !groups.is_empty() {
            std::thread::sleep(Duration::from_millis(300));
        }
        for &g in &groups {
            signal_group_of(g, Signal::KILL);
        }
    }
}
