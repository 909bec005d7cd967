//! The collector's loop, one step at a time: control messages, draining, reaping, signals,
//! and the end of the recording.
//!
//! Every process image running the agent is a [`Session`]. The collector learns of a new
//! session through a [`Hello`] on any of its control sockets: the socket pair whose other
//! end the target inherited (`TANSA_FD`), a session's private socket (a forked child whose
//! inherited descriptor was closed or reused uses its parent's), or a connection to its
//! listening socket in the abstract namespace (`TANSA_ENDPOINT`), accepted only from the
//! same user or from a descendant of the recorded command.
//!
//! A session's private socket reports end-of-file when its image is gone. The image may
//! have exited (the collector reads a zombie's status from `/proc` when it is not its
//! parent), or replaced itself with `execve`: then the new image either announces itself
//! (a new session of the same pid) or runs without the agent, and is listed as unrecorded.
//! A program may also close the private socket while it goes on running; the collector
//! then watches the process through a pidfd and keeps draining its rings until it ends.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use tansa_format::memory::{Losses, SessionEnd, SessionLosses, Unrecorded, VolatileSegment};
use tansa_format::meta::{CalibrationPoint, ExitStatus};
use tansa_wire::control::{
    HELLO_SEGMENT, HELLO_SESSION, HELLO_SPAWNED, Hello, SPAWNED_PATH_MAX, Spawn,
};
use tansa_wire::layout::{FLAG_PYTHON_MALLOC, Geometry};

use crate::session::Session;
use crate::{CollectError, Sink, sys};

/// A ring found at least this full (in thousandths) is drained again without waiting.
const DRAIN_AT_ONCE_PERMILLE: u64 = 125;

/// After this many rounds in a row that moved nothing (some 64 ms), the collector waits
/// [`IDLE_ROUND_MS`] between rounds instead of a millisecond, until a round moves events
/// again. An idle program (a server between requests) then costs an eighth of the
/// wake-ups. A burst that follows finds a ring of 2 MiB (the default), which the busiest
/// thread fills in some 40 ms: the first wait ends long before the ring is full, and
/// control messages and ended processes wake the wait anyway.
const IDLE_ROUNDS: u32 = 64;
/// The wait between rounds of an idle collector, in milliseconds.
const IDLE_ROUND_MS: u64 = 8;

/// How long the collector waits for control messages before its next round, in
/// milliseconds: not at all while a ring fills up, a millisecond while events come, and
/// [`IDLE_ROUND_MS`] after [`IDLE_ROUNDS`] rounds without any.
fn round_wait_ms(fullest_permille: u64, idle_rounds: u32) -> u64 {
    if fullest_permille >= DRAIN_AT_ONCE_PERMILLE {
        0
    } else if idle_rounds >= IDLE_ROUNDS {
        IDLE_ROUND_MS
    } else {
        1
    }
}

/// How a zombie ended, from its `/proc/<pid>/stat`; `None` while the process is not one.
fn zombie_status(stat: &tansa_proc::Stat) -> Option<ExitStatus> {
    (stat.state == 'Z')
        .then_some(stat.exit_code)
        .flatten()
        .map(ExitStatus::from_wait_status)
}

/// How long an image that replaced itself with `execve` has to announce its new session
/// before it counts as unrecorded.
const EXEC_GRACE: Duration = Duration::from_secs(1);

/// Where a control message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The inherited socket pair, or a connection to the endpoint.
    Shared,
    /// Session `i`'s private socket.
    Private(usize),
}

/// An image that ended its session by `execve` while still alive.
#[derive(Debug)]
struct PendingExec {
    since: Instant,
    /// The executable it runs now, read when its old image ended (or named by the parent
    /// that spawned it).
    exe: String,
    ppid: u32,
    /// Started by a recorded parent with `posix_spawn` or `vfork`, rather than an image
    /// that replaced itself.
    spawned: Option<Spawn>,
}

/// The collector's state; see the module documentation.
#[derive(Debug)]
pub struct Collector {
    listener: OwnedFd,
    endpoint: Option<OwnedFd>,
    /// Connections accepted on the endpoint, until they hang up.
    accepted: Vec<OwnedFd>,
    /// The recorded command's process id.
    root: u32,
    tsc: bool,
    /// Every session, in order of announcement.
    pub sessions: Vec<Session>,
    /// The sessions not yet finalized (drained to their end), in order of announcement:
    /// what each round of polling and draining looks at. A recording of a build or a test
    /// suite has thousands of sessions that ended long ago; walking every one of them on
    /// every round made each new process cost more than the last.
    active: Vec<usize>,
    /// Exit statuses of the processes this collector reaped (its children and orphans).
    pub statuses: HashMap<u32, ExitStatus>,
    /// Processes that ran without being recorded.
    pub unrecorded: Vec<Unrecorded>,
    pending_exec: HashMap<u32, PendingExec>,
    /// The sessions of each process id that had one, in order of announcement.
    by_pid: HashMap<u32, Vec<usize>>,
    /// Processes whose announcement could not be taken (no descriptor left for it): not
    /// said again to be unrecorded when they are reaped.
    refused_pids: HashSet<u32>,
    /// Processes reaped without a session yet: their announcement may still be queued.
    reaped_unknown: Vec<(Instant, Unrecorded)>,
    /// Children of `vfork` that ended without executing a program ([`Spawn::VforkNoExec`]):
    /// nothing of them went unrecorded, even when this collector reaps them (orphaned).
    /// A pid leaves the set when a process of that pid announces itself or is reaped.
    ran_no_program: HashSet<u32>,
    /// Sessions whose image ended before it was collected, whose pidfd will tell how.
    awaiting_status: Vec<usize>,
    /// Sessions whose process was still ending when its socket hung up (it closes its
    /// files before it becomes a zombie), with its start time in `/proc` (field 22): its
    /// zombie's status is read at the next ticks, as its parent may never collect it.
    dying: Vec<(usize, u64)>,
    /// Durable recording: sessions finalized whose segments are still mapped (see
    /// [`Collector::retire_durable`]).
    retiring: Vec<usize>,
    /// How full the fullest ring was at the last drain.
    fullest_permille: u64,
    /// Drains in a row that moved nothing.
    idle_rounds: u32,
    /// Bytes drained so far.
    pub total_bytes: u64,
    /// Events the agents of ended sessions could not record, all together.
    pub lost_events: u64,
    /// Durable recording: sessions publish ring tails only for bytes the sink stored.
    pub durable: bool,
    /// The signal that stopped the recording while processes ran (their sessions end as
    /// stopped by it).
    pub stopped_by: Option<i32>,
}

impl Collector {
    /// A collector listening on `listener` (its end of the inherited pair) and, if it has
    /// one, on `endpoint`, for the tree started as process `root`.
    pub fn new(listener: OwnedFd, endpoint: Option<OwnedFd>, root: u32, tsc: bool) -> Collector {
        Collector {
            listener,
            endpoint,
            accepted: Vec::new(),
            root,
            tsc,
            sessions: Vec::new(),
            active: Vec::new(),
            statuses: HashMap::new(),
            unrecorded: Vec::new(),
            pending_exec: HashMap::new(),
            by_pid: HashMap::new(),
            refused_pids: HashSet::new(),
            reaped_unknown: Vec::new(),
            ran_no_program: HashSet::new(),
            awaiting_status: Vec::new(),
            dying: Vec::new(),
            retiring: Vec::new(),
            fullest_permille: 0,
            idle_rounds: 0,
            total_bytes: 0,
            lost_events: 0,
            durable: false,
            stopped_by: None,
        }
    }

    /// Sessions whose process image is still running.
    pub fn live_sessions(&self) -> impl Iterator<Item = &Session> {
        self.active
            .iter()
            .map(|&i| &self.sessions[i])
            .filter(|s| !s.ended)
    }

    /// Waits (at most a millisecond, not at all while a ring fills up) for control messages
    /// and handles them: new sessions and segments, images that ended.
    pub fn poll_control(&mut self, sink: &mut dyn Sink) -> Result<(), CollectError> {
        let mut fds: Vec<BorrowedFd<'_>> = vec![self.listener.as_fd()];
        let endpoint_at = self.endpoint.as_ref().map(|e| {
            fds.push(e.as_fd());
            fds.len() - 1
        });
        let accepted_at = fds.len();
        fds.extend(self.accepted.iter().map(AsFd::as_fd));
        let sessions_at = fds.len();
        let live: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&i| !self.sessions[i].ended && self.sessions[i].watched_fd().is_some())
            .collect();
        fds.extend(live.iter().filter_map(|&i| self.sessions[i].watched_fd()));
        // Drain again at once only while some ring is filling up; otherwise wait a
        // millisecond, or longer while nothing comes (new sessions and hang-ups wake the
        // poll early). Polling the rings back to back would take a CPU from the target
        // and pull the rings' head words away from the threads writing them on every
        // event.
        let timeout = round_wait_ms(self.fullest_permille, self.idle_rounds);
        let ready = tansa_proc::os::poll_readable(&fds, Some(Duration::from_millis(timeout)))
            .unwrap_or_else(|_| vec![false; fds.len()]);
        drop(fds);
        if ready[0] {
            let fd = self.listener.as_raw_fd();
            self.receive(fd, Source::Shared, sink)?;
        }
        if let Some(at) = endpoint_at
            && ready[at]
        {
            self.accept_connections()?;
        }
        let mut hung_up = Vec::new();
        for k in 0..self.accepted.len().min(ready.len() - accepted_at) {
            if ready[accepted_at + k] {
                let fd = self.accepted[k].as_raw_fd();
                if self.receive(fd, Source::Shared, sink)? {
                    hung_up.push(k);
                }
            }
        }
        for k in hung_up.into_iter().rev() {
            self.accepted.swap_remove(k);
        }
        for (k, &i) in live.iter().enumerate() {
            if !ready.get(sessions_at + k).copied().unwrap_or(false) {
                continue;
            }
            if self.sessions[i].is_detached() {
                // The pidfd of a process that closed its private socket: it has exited.
                self.image_gone(i);
                continue;
            }
            let Some(fd) = self.sessions[i].private.as_ref().map(AsRawFd::as_raw_fd) else {
                continue;
            };
            if self.receive(fd, Source::Private(i), sink)? {
                // Its other end is closed: the socket has nothing more to say.
                self.sessions[i].private = None;
                self.image_gone(i);
            }
        }
        Ok(())
    }

    /// Receives every message waiting on `fd`; returns whether the peer hung up.
    fn receive(
        &mut self,
        fd: RawFd,
        from: Source,
        sink: &mut dyn Sink,
    ) -> Result<bool, CollectError> {
        loop {
            match sys::recv_with_fds(fd)? {
                sys::Received::Message(bytes, received, truncated) => {
                    self.handle_hello(&bytes, received, truncated, from, sink)?;
                }
                sys::Received::WouldBlock => return Ok(false),
                sys::Received::Eof => return Ok(true),
            }
        }
    }

    /// Accepts pending connections on the endpoint from the same user or from a process of
    /// the recorded tree; others are closed at once.
    fn accept_connections(&mut self) -> Result<(), CollectError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(());
        };
        while let Some(conn) = sys::accept(endpoint.as_raw_fd())? {
            let Ok((pid, uid)) = sys::peer_credentials(conn.as_raw_fd()) else {
                continue;
            };
            if uid == tansa_proc::os::euid() || self.is_descendant(pid) {
                self.accepted.push(conn);
            }
        }
        Ok(())
    }

    /// Whether `pid` descends from the recorded command (or is it).
    fn is_descendant(&self, mut pid: u32) -> bool {
        for _ in 0..4096 {
            if pid == self.root {
                return true;
            }
            match tansa_proc::read_stat(pid).ok().map(|s| s.ppid) {
                Some(p) if p > 1 && p != pid => pid = p,
                _ => return false,
            }
        }
        false
    }

    fn handle_hello(
        &mut self,
        bytes: &[u8],
        fds: Vec<OwnedFd>,
        truncated: bool,
        from: Source,
        sink: &mut dyn Sink,
    ) -> Result<(), CollectError> {
        let Some(hello) = Hello::from_bytes(bytes) else {
            return Err(CollectError::Protocol("malformed control message".into()));
        };
        if hello.version != tansa_wire::PROTOCOL_VERSION {
            return Err(CollectError::Protocol(format!(
                "agent speaks protocol {} but this collector speaks {} (mixed tansa versions?)",
                hello.version,
                tansa_wire::PROTOCOL_VERSION
            )));
        }
        let geometry = Geometry {
            ring_count: hello.ring_count,
            ring_data_size: hello.ring_data_size,
        };
        let mut fds = fds.into_iter();
        match (hello.kind, from) {
            (HELLO_SESSION, _) => {
                let (Some(memfd), Some(private)) = (fds.next(), fds.next()) else {
                    if !truncated {
                        return Err(CollectError::Protocol(
                            "session announcement without descriptors".into(),
                        ));
                    }
                    // The kernel dropped its descriptors: this process had none left. The
                    // process runs on unrecorded (its agent sees the recorder let go of
                    // it), and the recording says so; the others are recorded.
                    self.refused_pids.insert(hello.pid);
                    self.unrecorded.push(Unrecorded {
                        pid: hello.pid,
                        ppid: tansa_proc::read_stat(hello.pid).map_or(0, |s| s.ppid),
                        exe: tansa_proc::exe_of(hello.pid).unwrap_or_default(),
                        reason: format!(
                            "the recorder had no file descriptor left to take it (its \
                             open-file limit is {}; raise the hard limit, `ulimit -Hn`)",
                            rustix::process::getrlimit(rustix::process::Resource::Nofile)
                                .current
                                .map_or("unlimited".to_string(), |n| n.to_string())
                        ),
                    });
                    return Ok(());
                };
                let id = self.sessions.len() as u32;
                let volatile = self.volatile(&memfd, id, 0);
                let mut s = Session::open(id, memfd.as_fd(), private, geometry)?;
                // Leak-cause mode: the header mapped on its own for the sink (checked by
                // Session::open). Only then: a recording of thousands of processes would
                // map and unmap it for each.
                let header = if s.info_flags & tansa_wire::layout::FLAG_LEAK_CAUSE != 0 {
                    crate::SharedHeader::map(&memfd).ok()
                } else {
                    None
                };
                drop(memfd);
                s.durable = self.durable;
                if let Some(pidfd) = fds.next() {
                    s.keep_exit_fd(pidfd);
                }
                // An earlier image of this pid still counted as running has replaced itself.
                // (Announcements travel on different sockets, so a later image may be heard
                // of first: the images' start times order them.)
                let images = self.by_pid.entry(s.pid).or_default();
                for &o in images.iter() {
                    let old = &mut self.sessions[o];
                    if !old.ended && old.info.start_ticks < s.info.start_ticks {
                        old.ended = true;
                        old.drop_exit_fd();
                    }
                }
                images.push(self.sessions.len());
                self.pending_exec.remove(&s.pid);
                self.ran_no_program.remove(&s.pid);
                sink.session_started(&s.info)?;
                if s.info_flags & FLAG_PYTHON_MALLOC != 0 {
                    sink.session_python_malloc(s.id);
                }
                if let Some(place) = &s.place {
                    sink.session_place(place)?;
                }
                if let Some(v) = volatile {
                    sink.volatile_segment(&v)?;
                }
                if let Some(h) = header {
                    sink.session_header(id, s.pid, h);
                }
                self.active.push(self.sessions.len());
                self.sessions.push(s);
            }
            (HELLO_SEGMENT, Source::Private(i)) => {
                let Some(memfd) = fds.next() else {
                    return Err(CollectError::Protocol(
                        "segment announcement without descriptor".into(),
                    ));
                };
                let volatile = self.volatile(&memfd, self.sessions[i].id, hello.segment_index);
                self.sessions[i].add_segment(hello.segment_index, memfd, geometry)?;
                if let Some(v) = volatile {
                    sink.volatile_segment(&v)?;
                }
            }
            (HELLO_SPAWNED, Source::Private(i)) => {
                // A child the session's process started with posix_spawn: it runs the agent
                // and announces itself within the grace period, or it runs unrecorded.
                let child = hello.segment_index;
                let how = Spawn::from_u32(hello.reserved);
                if how == Spawn::VforkNoExec {
                    // A vfork child that ended without executing anything: no program of
                    // it went unrecorded.
                    if child != 0 {
                        self.pending_exec.remove(&child);
                        self.ran_no_program.insert(child);
                    }
                } else if child != 0 && !self.by_pid.contains_key(&child) {
                    let path = &bytes[Hello::SIZE..bytes.len().min(Hello::SIZE + SPAWNED_PATH_MAX)];
                    // The program as the parent named it (posix_spawnp: maybe found on PATH;
                    // vfork: as /proc said when the parent resumed).
                    let exe = String::from_utf8_lossy(path).into_owned();
                    self.pending_exec.entry(child).or_insert(PendingExec {
                        since: Instant::now(),
                        exe,
                        ppid: self.sessions[i].pid,
                        spawned: Some(how),
                    });
                }
            }
            _ => return Err(CollectError::Protocol("unexpected control message".into())),
        }
        Ok(())
    }

    /// In a durable recording, segment `segment` of session `session` when its descriptor
    /// is not a file in the segment directory (a memfd, or a file already unlinked): no
    /// name, so nothing of it outlives the processes that map it.
    fn volatile(&self, fd: &OwnedFd, session: u32, segment: u32) -> Option<VolatileSegment> {
        (self.durable && rustix::fs::fstat(fd).is_ok_and(|st| st.st_nlink == 0))
            .then_some(VolatileSegment { session, segment })
    }

    /// Session `i`'s private socket hung up (or its process exited after it had closed
    /// the socket): find out whether the image exited or replaced itself.
    fn image_gone(&mut self, i: usize) {
        let pid = self.sessions[i].pid;
        let stat = tansa_proc::read_stat(pid).ok();
        if let Some(status) = stat.as_ref().and_then(zombie_status) {
            self.sessions[i].ended = true;
            self.sessions[i].zombie_status = Some(status);
            self.sessions[i].drop_exit_fd();
            self.publish_end(i);
            return;
        }
        let Some(exe) = tansa_proc::exe_of(pid) else {
            // Gone: collected already by its parent, or still ending (its memory and files
            // go before it is a zombie). Its pidfd tells how it ended once it is collected.
            self.sessions[i].ended = true;
            self.sessions[i].zombie_status = self.sessions[i].collected_status();
            self.publish_end(i);
            if self.sessions[i].awaits_status() {
                self.awaiting_status.push(i);
            }
            // Still ending (not collected: its entry is there): a zombie in a moment.
            if let Some(stat) = stat
                && self.sessions[i].zombie_status.is_none()
            {
                self.dying.push((i, stat.start_ticks));
            }
            return;
        };
        let was_detached = self.sessions[i].is_detached();
        if exe != self.sessions[i].info.exe || was_detached {
            // Another program: the image replaced itself. Its new image announces itself
            // within the grace period, or it runs unrecorded.
            self.sessions[i].ended = true;
            self.sessions[i].replaced = true;
            self.sessions[i].drop_exit_fd();
            // Its new image may have announced itself already (announcements and hang-ups
            // travel on different sockets): then nothing is pending.
            let started = self.sessions[i].info.start_ticks;
            let announced = self
                .sessions
                .iter()
                .any(|t| t.pid == pid && t.info.start_ticks > started);
            if !was_detached && !announced {
                self.pending_exec.insert(
                    pid,
                    PendingExec {
                        since: Instant::now(),
                        exe,
                        ppid: tansa_proc::read_stat(pid).map_or(0, |s| s.ppid),
                        spawned: None,
                    },
                );
            }
            return;
        }
        // The same program still running: either it closed our socket, or it re-executed
        // itself (then its new session ends this one). Watch the process itself.
        if !self.sessions[i].detach() {
            self.sessions[i].ended = true;
        }
    }

    /// Moves what every session published to `sink`; returns the lowest pending timestamp
    /// (the online watermark) given the current time `now_ticks`.
    pub fn drain(&mut self, sink: &mut dyn Sink, now_ticks: u64) -> Result<u64, CollectError> {
        let mut watermark = now_ticks;
        let mut moved = 0;
        self.fullest_permille = 0;
        for &i in &self.active {
            let s = &mut self.sessions[i];
            let d = s.drain(sink)?;
            moved += d.bytes;
            self.fullest_permille = self.fullest_permille.max(d.fullest_permille);
            if d.min_pending != 0 {
                watermark = watermark.min(d.min_pending);
            }
            s.heartbeat();
        }
        self.total_bytes += moved;
        self.idle_rounds = if moved == 0 {
            self.idle_rounds.saturating_add(1)
        } else {
            0
        };
        // Sessions whose process image is gone: drain what is left and close their streams.
        // (Their end records are written last, when every exit status is known.)
        let mut finalized = false;
        for &i in &self.active {
            let s = &mut self.sessions[i];
            if s.ended && !s.finalized {
                self.total_bytes += s.drain(sink)?.bytes;
                s.close_streams(sink)?;
                s.finalized = true;
                finalized = true;
                // A durable recording's segments stay mapped until how the process ended
                // is written into its header, for a salvage, and its bytes are stored
                // (`retire_durable`).
                if self.durable {
                    self.retiring.push(i);
                } else {
                    s.release();
                }
            }
        }
        if finalized {
            let sessions = &self.sessions;
            self.active.retain(|&i| !sessions[i].finalized);
        }
        Ok(watermark)
    }

    /// Collects exited children (the command, and orphans this collector inherited);
    /// returns the command's status once it has exited.
    pub fn reap(&mut self) -> Option<ExitStatus> {
        let mut root = None;
        while let Some((pid, raw, comm)) = sys::reap_any() {
            let status = tansa_format::meta::ExitStatus::from_wait_status(raw);
            self.statuses.insert(pid, status);
            if let Some(i) = self.latest(pid) {
                self.publish_end(i);
            }
            if pid == self.root {
                root = Some(status);
            }
            if !self.by_pid.contains_key(&pid)
                && !self.refused_pids.contains(&pid)
                && !self.pending_exec.contains_key(&pid)
                && !self.ran_no_program.remove(&pid)
            {
                self.reaped_unknown.push((
                    Instant::now(),
                    Unrecorded {
                        pid,
                        ppid: 0,
                        exe: comm,
                        reason: format!(
                            "it never ran the agent (a statically linked or set-uid program, \
                             or LD_PRELOAD removed); it {}",
                            status.describe()
                        ),
                    },
                ));
            }
        }
        self.expire_pending_exec(false);
        self.settle_reaped(false);
        root
    }

    /// Durable recording: lets go of the segments of each image that is gone once how it
    /// ended is in their header and the recording holds all of its bytes. The storage of
    /// their rings goes back to the file system, and the mapping is closed: each process
    /// kept some 16 MiB of disk and a mapping until the recording ended, so that 3,000
    /// processes took 47 GB, and a build of 65,000 would have met `vm.max_map_count`.
    /// (An image whose end never becomes known keeps them to the end.)
    pub(crate) fn retire_durable(&mut self, sink: &mut dyn Sink) -> Result<(), CollectError> {
        let sessions = &mut self.sessions;
        let mut failed = Ok(());
        self.retiring.retain(|&i| {
            let s = &mut sessions[i];
            if failed.is_err() || !(s.end_published || s.replaced) {
                return true;
            }
            match s.publish_stored(sink) {
                Ok(true) => {
                    s.discard_rings();
                    s.release();
                    false
                }
                Ok(false) => true,
                Err(e) => {
                    failed = Err(e);
                    true
                }
            }
        });
        failed
    }

    /// Learns how the images that ended before they were collected ended (now and then,
    /// and at the end): from their zombie, while the same process is one, else from their
    /// pidfd once another process collected them. Each one that answers is let go.
    pub(crate) fn settle_statuses(&mut self) {
        let sessions = &mut self.sessions;
        let mut known = Vec::new();
        self.dying.retain(|&(i, start_ticks)| {
            let s = &mut sessions[i];
            if s.zombie_status.is_some() {
                return false;
            }
            match tansa_proc::read_stat(s.pid) {
                // The same process (a pid is not reused before its zombie is collected).
                Ok(stat) if stat.start_ticks == start_ticks => match zombie_status(&stat) {
                    Some(status) => {
                        s.zombie_status = Some(status);
                        s.drop_exit_fd();
                        known.push(i);
                        false
                    }
                    None => true,
                },
                // Collected already: its pidfd, if it has one, tells.
                _ => false,
            }
        });
        self.awaiting_status.retain(|&i| {
            let s = &mut sessions[i];
            if let Some(status) = s.collected_status() {
                s.zombie_status = Some(status);
                known.push(i);
            }
            s.awaits_status()
        });
        for i in known {
            self.publish_end(i);
        }
    }

    /// Processes reaped without a session are unrecorded once their announcement could no
    /// longer be in flight (or at the end, with `all`).
    fn settle_reaped(&mut self, all: bool) {
        let recorded = &self.by_pid;
        let unrecorded = &mut self.unrecorded;
        let ran_no_program = &mut self.ran_no_program;
        self.reaped_unknown.retain(|(when, u)| {
            if recorded.contains_key(&u.pid) || ran_no_program.remove(&u.pid) {
                return false;
            }
            // Its announcement, sent before it exited, may still be queued behind others
            // on a loaded machine: a second before it counts as unrecorded.
            if all || when.elapsed() >= Duration::from_secs(1) {
                unrecorded.push(u.clone());
                return false;
            }
            true
        });
    }

    /// Images that replaced themselves and did not announce a new session in time (or at
    /// all, with `all`) ran unrecorded.
    fn expire_pending_exec(&mut self, all: bool) {
        let expired: Vec<u32> = self
            .pending_exec
            .iter()
            .filter(|(_, p)| all || p.since.elapsed() >= EXEC_GRACE)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in expired {
            if let Some(p) = self.pending_exec.remove(&pid) {
                let how = match p.spawned {
                    Some(how) => format!("its parent started it ({}) with", how.name()),
                    None => "it replaced itself (execve) with".to_string(),
                };
                self.unrecorded.push(Unrecorded {
                    pid,
                    ppid: p.ppid,
                    exe: p.exe,
                    reason: format!(
                        "{how} a program that did not run the agent: statically linked, \
                         set-uid, or started without LD_PRELOAD"
                    ),
                });
            }
        }
    }

    /// Whether a later session of the same process replaced `s` (an `execve`).
    fn exec_later(&self, s: &Session) -> bool {
        self.latest(s.pid)
            .is_some_and(|l| self.sessions[l].info.start_ticks > s.info.start_ticks)
    }

    /// The latest session (by start time) of process `pid`, if it had one.
    fn latest(&self, pid: u32) -> Option<usize> {
        self.by_pid
            .get(&pid)?
            .iter()
            .copied()
            .max_by_key(|&i| self.sessions[i].info.start_ticks)
    }

    /// How `s`'s process ended, from a wait status (its zombie's or its pidfd's, which are
    /// its own, else ours as the parent of its pid), once known.
    fn status_of(&self, s: &Session) -> Option<ExitStatus> {
        s.zombie_status
            .or_else(|| self.statuses.get(&s.pid).copied())
    }

    /// Writes into session `i`'s shared header how its process ended, as soon as that is
    /// known (and when), so that a recording whose recorder is killed before it writes the
    /// sessions' ends still tells them after its salvage: a launcher that kills every
    /// rank's recorder at once when one rank fails must not take that rank's status along.
    fn publish_end(&mut self, i: usize) {
        let s = &self.sessions[i];
        if s.end_published || s.replaced {
            return;
        }
        if let Some(raw) = self.status_of(s).and_then(|st| st.wait_status()) {
            let now = crate::clock_now(self.tsc);
            self.sessions[i].publish_end(raw, now);
        }
    }

    /// Ends the recording: drains everything left, closes every stream and writes each
    /// session's end with the best exit status known, its losses, and the processes that ran
    /// unrecorded.
    pub fn finish(&mut self, sink: &mut dyn Sink) -> Result<(), CollectError> {
        // Announcements still queued (a process that started and ended in the last moments,
        // or while the recorder was starved of CPU): read them before any process is
        // declared unrecorded. Each pass accepts connections and reads their messages.
        for _ in 0..4 {
            self.poll_control(sink)?;
        }
        // The finalized sessions were drained and closed when their images ended.
        for &i in &self.active {
            let s = &mut self.sessions[i];
            self.total_bytes += s.drain(sink)?.bytes;
            s.close_streams(sink)?;
        }
        sink.watermark(u64::MAX)?;
        self.settle_statuses();
        let end_ticks = crate::clock_now(self.tsc);
        for s in &self.sessions {
            let exit = if self.exec_later(s) || s.replaced {
                ExitStatus::Exec
            } else if !s.ended {
                match self.stopped_by {
                    Some(signal) => ExitStatus::Stopped { signal },
                    None => ExitStatus::Running,
                }
            } else if let Some(st) = self.status_of(s) {
                st
            } else if let Some((code, _)) = s.agent_exit() {
                ExitStatus::Exited { code }
            } else {
                ExitStatus::Unknown {
                    normal_exit: s.exited_normally(),
                }
            };
            let lost_events = s.lost_events();
            self.lost_events = self.lost_events.saturating_add(lost_events);
            sink.session_ended(&SessionEnd {
                session: s.id,
                exit,
                lost_events,
                end_ticks,
            })?;
            let losses = s.losses();
            if losses != Losses::default() {
                sink.session_losses(&SessionLosses {
                    session: s.id,
                    losses,
                })?;
            }
            let (unsampled_ns, threads) = s.unsampled();
            if unsampled_ns > 0 {
                sink.session_unsampled(s.id, unsampled_ns, threads)?;
            }
        }
        self.expire_pending_exec(true);
        self.settle_reaped(true);
        for u in &self.unrecorded {
            sink.unrecorded(u)?;
        }
        sink.tick(CalibrationPoint {
            ticks: crate::clock_now(self.tsc),
            ns: sys::monotonic_ns(),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collector_waits_longer_only_once_idle_and_never_while_a_ring_fills() {
        assert_eq!(round_wait_ms(0, 0), 1);
        assert_eq!(round_wait_ms(0, IDLE_ROUNDS - 1), 1);
        assert_eq!(round_wait_ms(0, IDLE_ROUNDS), IDLE_ROUND_MS);
        assert_eq!(round_wait_ms(0, u32::MAX), IDLE_ROUND_MS);
        assert_eq!(round_wait_ms(DRAIN_AT_ONCE_PERMILLE - 1, 0), 1);
        assert_eq!(round_wait_ms(DRAIN_AT_ONCE_PERMILLE, 0), 0);
        assert_eq!(round_wait_ms(DRAIN_AT_ONCE_PERMILLE, IDLE_ROUNDS), 0);
    }
}
