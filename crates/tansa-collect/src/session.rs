//! One agent session as seen by the collector: its mapped segments and the draining of its
//! rings.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use tansa_format::memory::Losses;
use tansa_format::memory::{SessionInfo, SessionPlace};
use tansa_wire::layout::{
    ClockKind, ENDED_KNOWN, EXIT_IMMEDIATE, EXIT_NONE, EXIT_NORMAL, FLAG_FREE_STACKS, FLAG_ONLINE,
    Geometry, LossCause, MAX_RINGS_PER_SEGMENT, RING_CLOSED, RING_FREE, RING_HEADER_SIZE, Ring,
    SEGMENT_MAGIC, SegmentHeader,
};

use crate::{CollectError, Sink};
use tansa_proc::os::SharedMapping as Mapping;

#[derive(Debug)]
struct Track {
    generation: u32,
    stream: u32,
    /// Ring position up to which bytes were delivered to the sink.
    tail: u64,
    /// Ring position of the stream's first byte.
    base: u64,
    /// The tail published to the agent (`tail`, or in a durable session only what the
    /// sink has stored).
    published: u64,
    open: bool,
}

/// A session of the agent.
#[derive(Debug)]
pub struct Session {
    /// Session number in the recording.
    pub id: u32,
    /// Process id.
    pub pid: u32,
    /// Description written to the recording.
    pub info: SessionInfo,
    /// Where the process ran in a parallel job, when its launcher said.
    pub place: Option<SessionPlace>,
    /// Private socket: end-of-file means the process image is gone. Closed then (a
    /// recording of a hundred thousand processes one after another must not hold a
    /// descriptor for each).
    pub private: Option<OwnedFd>,
    /// A pidfd of the process, once it closed its private socket but went on running.
    watch: Option<OwnedFd>,
    /// Whether the private socket reported end-of-file.
    pub ended: bool,
    /// Whether the session's rings were drained for the last time.
    pub finalized: bool,
    /// Whether the image was seen to replace itself with another program (`execve`).
    pub replaced: bool,
    /// The exit status read from `/proc` while the process was a zombie, if it was seen
    /// as one when its image ended, or from its pidfd once another process collected it.
    pub zombie_status: Option<tansa_format::meta::ExitStatus>,
    /// Whether how the process ended is in the shared header ([`Session::publish_end`]).
    pub end_published: bool,
    /// A pidfd of the process from its announcement on, to learn how it ended when its
    /// parent collects it (see [`Session::collected_status`]).
    exit_fd: Option<ExitFd>,
    /// Each segment's mapping and geometry, by index (none once released).
    segments: Vec<Option<(Mapping, Geometry)>>,
    /// What the header said when the segments were released ([`Session::release`]).
    kept: Option<Kept>,
    /// Consumer state of each thread ring, by segment and ring.
    tracks: Vec<Vec<Option<Track>>>,
    next_stream: u32,
    meta_tail: u64,
    /// The meta ring's tail as published to the agent.
    meta_published: u64,
    /// Durable session (segments backed by files): a ring's tail is published only up to
    /// what the sink has stored ([`Sink::stored`]), so that the ring and the recording
    /// together always hold every byte the agent wrote, whenever the collector dies.
    pub durable: bool,
    /// Largest timestamp seen in stream starts (for the session end record).
    pub last_ticks: u64,
    /// The agent's `FLAG_*` bits.
    pub info_flags: u32,
}

/// What one drain pass found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Drained {
    /// Bytes moved.
    pub bytes: u64,
    /// Lowest pending-event bound of any ring (0 if none).
    pub min_pending: u64,
    /// How full the fullest ring was, in thousandths of its size.
    pub fullest_permille: u64,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The description of session `id` from its segment 0 header (every field bounded by the
/// header's own arrays).
pub(crate) fn session_info(h: &SegmentHeader, id: u32) -> SessionInfo {
    let exe = text(&h.exe[..(h.exe_len as usize).min(h.exe.len())]);
    let cmd_bytes = &h.cmdline[..(h.cmdline_len as usize).min(h.cmdline.len())];
    let cmdline = cmd_bytes
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(text)
        .collect();
    SessionInfo {
        session: id,
        pid: h.pid,
        ppid: h.ppid,
        exe,
        cmdline,
        start_ticks: h.start_ticks,
        free_stacks: h.flags & FLAG_FREE_STACKS != 0,
        online: h.flags & FLAG_ONLINE != 0,
    }
}

/// Pidfds kept for processes' ends, at most: a quarter of the collector's open-file limit
/// (its other descriptors, one socket per live process and each recording's files, must
/// still fit), set by [`set_exit_fd_limit`]; 256 until then (a quarter of the usual 1024).
/// Processes announced beyond that many at once end as before, from `/proc` or the
/// agent, or not known.
static MAX_EXIT_FDS: AtomicUsize = AtomicUsize::new(256);
/// Pidfds kept for processes' ends now, in this process.
static EXIT_FDS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many pidfds may be kept for processes' ends from the collector's open-file
/// limit (`None`: unlimited): a quarter of it, at least 256 and at most 65,536.
pub fn set_exit_fd_limit(open_files: Option<u64>) {
    let quarter = open_files.map_or(1 << 16, |n| n / 4);
    MAX_EXIT_FDS.store(quarter.clamp(256, 1 << 16) as usize, Ordering::Relaxed);
}

/// What a released session's header said ([`Session::release`]).
#[derive(Debug, Clone, Copy)]
struct Kept {
    agent_exit: Option<(i32, bool)>,
    exited_normally: bool,
    losses: Losses,
    lost_events: u64,
    unsampled: (u64, u64),
}

/// A pidfd kept for a process's end, counted in [`EXIT_FDS`] while it is open.
#[derive(Debug)]
struct ExitFd(OwnedFd);

impl ExitFd {
    fn new(fd: OwnedFd) -> ExitFd {
        EXIT_FDS.fetch_add(1, Ordering::Relaxed);
        ExitFd(fd)
    }
}

impl Drop for ExitFd {
    fn drop(&mut self) {
        EXIT_FDS.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Session {
    /// Maps segment 0 and reads the session description from its header.
    pub fn open(
        id: u32,
        memfd: BorrowedFd<'_>,
        private: OwnedFd,
        geometry: Geometry,
    ) -> Result<Session, CollectError> {
        if !geometry.is_valid() {
            return Err(CollectError::Protocol("invalid segment geometry".into()));
        }
        let map = Mapping::map(memfd, geometry.segment_size(), true)?;
        // SAFETY: the mapping covers the header page.
        let h = unsafe { &*(map.base() as *const SegmentHeader) };
        if h.magic != SEGMENT_MAGIC || h.version != tansa_wire::PROTOCOL_VERSION {
            return Err(CollectError::Protocol(format!(
                "segment header magic/version mismatch (agent protocol {}, collector {})",
                h.version,
                tansa_wire::PROTOCOL_VERSION
            )));
        }
        let info = session_info(h, id);
        let _ = ClockKind::from_raw(h.clock);
        // For a salvage, should the collector die: which session of the recording this is.
        h.collector_session
            .store(id.saturating_add(1), Ordering::Release);
        let info_flags = h.flags;
        let place = place(id, h);
        Ok(Session {
            info_flags,
            id,
            pid: h.pid,
            info,
            place,
            private: Some(private),
            watch: None,
            ended: false,
            finalized: false,
            zombie_status: None,
            end_published: false,
            exit_fd: None,
            replaced: false,
            segments: vec![Some((map, geometry))],
            kept: None,
            tracks: Vec::new(),
            next_stream: 0,
            meta_tail: 0,
            meta_published: 0,
            durable: false,
            last_ticks: h.start_ticks,
        })
    }

    /// Maps a further segment (each segment has its own ring count; the ring size is the
    /// session's).
    pub fn add_segment(
        &mut self,
        index: u32,
        memfd: OwnedFd,
        geometry: Geometry,
    ) -> Result<(), CollectError> {
        let ring_size = self.segments[0].as_ref().map(|s| s.1.ring_data_size);
        if !geometry.is_valid()
            || Some(geometry.ring_data_size) != ring_size
            || index == 0
            || index > 1024
        {
            return Err(CollectError::Protocol(format!(
                "segment {index} announced with an invalid geometry ({} rings of {} bytes)",
                geometry.ring_count, geometry.ring_data_size
            )));
        }
        let map = Mapping::map(memfd.as_fd(), geometry.segment_size(), true)?;
        let i = index as usize;
        if self.segments.len() <= i {
            self.segments.resize_with(i + 1, || None);
        }
        self.segments[i] = Some((map, geometry));
        Ok(())
    }

    /// Unmaps the session's segments once its image is gone and its rings are drained for
    /// the last time, keeping what the header says about its end: a recording of a hundred
    /// thousand processes (a build) must not keep a mapping of each (the kernel allows some
    /// 65,000 per process, `vm.max_map_count`, and each held about 12 KiB of memory).
    pub fn release(&mut self) {
        if self.kept.is_some() {
            return;
        }
        self.kept = Some(Kept {
            agent_exit: self.agent_exit(),
            exited_normally: self.exited_normally(),
            losses: self.losses(),
            lost_events: self.lost_events(),
            unsampled: self.unsampled(),
        });
        self.segments.clear();
        self.tracks.clear();
    }

    fn header(&self) -> Option<&SegmentHeader> {
        let (m, _) = self.segments.first()?.as_ref()?;
        // SAFETY: segment 0 maps the header page.
        Some(unsafe { &*(m.base() as *const SegmentHeader) })
    }

    /// How the agent saw the process end: the exit code passed to `exit` (or returned from
    /// `main`) or to `_exit`, and whether exit handlers ran.
    pub fn agent_exit(&self) -> Option<(i32, bool)> {
        if let Some(k) = &self.kept {
            return k.agent_exit;
        }
        let h = self.header()?;
        let how = h.exit_how.load(Ordering::Acquire);
        let code = h.exit_code.load(Ordering::Acquire);
        match how {
            EXIT_NONE => None,
            EXIT_NORMAL => Some((code, true)),
            EXIT_IMMEDIATE => Some((code, false)),
            _ => None,
        }
    }

    /// What the agent could not record, by cause, and how many events lack their stack.
    pub fn losses(&self) -> Losses {
        if let Some(k) = &self.kept {
            return k.losses;
        }
        let Some(h) = self.header() else {
            return Losses::default();
        };
        let lost = |c: LossCause| h.lost[c as usize].load(Ordering::Relaxed);
        Losses {
            no_ring: lost(LossCause::NoRing),
            signal_queue: lost(LossCause::SignalQueue),
            collector_gone: lost(LossCause::CollectorGone),
            samples: lost(LossCause::Sample),
            stackless: h.stackless.load(Ordering::Relaxed),
        }
    }

    /// The descriptor to poll for the end of the image: the private socket, or the pidfd
    /// after the program closed that socket.
    pub fn watched_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.watch
            .as_ref()
            .or(self.private.as_ref())
            .map(AsFd::as_fd)
    }

    /// Whether the program closed the private socket and the process itself is watched.
    pub fn is_detached(&self) -> bool {
        self.watch.is_some()
    }

    /// Watches the process through a pidfd from now on; false if that is not possible.
    pub fn detach(&mut self) -> bool {
        self.watch = tansa_proc::os::pidfd_open(self.pid);
        self.watch.is_some()
    }

    /// Keeps `pidfd`, the process's own (sent with its announcement), to learn later how
    /// it ended. Refused if it names another process while that one still runs (once
    /// collected, a pidfd no longer tells whose it is); kept only where the kernel can tell
    /// an end, and not beyond [`MAX_EXIT_FDS`] at once.
    pub fn keep_exit_fd(&mut self, pidfd: OwnedFd) {
        if EXIT_FDS.load(Ordering::Relaxed) >= MAX_EXIT_FDS.load(Ordering::Relaxed) {
            return;
        }
        let ours = match tansa_proc::os::pidfd_pid(pidfd.as_fd()) {
            Ok(pid) => pid == self.pid,
            Err(e) => e.raw_os_error() == Some(libc::ESRCH),
        };
        if ours && tansa_proc::os::pidfd_exit_status(pidfd.as_fd()).is_ok() {
            self.exit_fd = Some(ExitFd::new(pidfd));
        }
    }

    /// How the process ended, once another process (its parent) collected it: the kernel
    /// keeps the status for its pidfds (Linux 6.15 and later). The pidfd is let go once it
    /// answers: its answer cannot change.
    pub fn collected_status(&mut self) -> Option<tansa_format::meta::ExitStatus> {
        let fd = self.exit_fd.as_ref()?;
        // Not collected yet: asked again later.
        let raw = tansa_proc::os::pidfd_exit_status(fd.0.as_fd())
            .ok()
            .flatten()?;
        self.exit_fd = None;
        Some(tansa_format::meta::ExitStatus::from_wait_status(raw))
    }

    /// Whether a pidfd is still kept to learn how the process ended.
    pub fn awaits_status(&self) -> bool {
        self.exit_fd.is_some()
    }

    /// Lets go of the pidfd kept for the end (the image replaced itself: the next image's
    /// session has its own).
    pub fn drop_exit_fd(&mut self) {
        self.exit_fd = None;
    }

    /// Bumps the heartbeat the agent watches when it waits for ring space.
    pub fn heartbeat(&self) {
        if let Some(h) = self.header() {
            h.heartbeat.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the agent saw the process run its exit handlers.
    pub fn exited_normally(&self) -> bool {
        if let Some(k) = &self.kept {
            return k.exited_normally;
        }
        self.header()
            .is_some_and(|h| h.exited_normally.load(Ordering::Acquire) != 0)
    }

    /// Writes how the process ended (a raw wait status) and when the collector learned it
    /// (`ticks`) into the shared header, for a salvage ([`SegmentHeader::ended_status`]).
    pub fn publish_end(&mut self, wait_status: i32, ticks: u64) {
        if let Some(h) = self.header() {
            h.ended_ticks.store(ticks, Ordering::Relaxed);
            h.ended_status.store(
                ENDED_KNOWN | (wait_status as u32 & 0xffff),
                Ordering::Release,
            );
            self.end_published = true;
        }
    }

    /// CPU sampling in the agent: the session's unsampled CPU time (ns) and its threads.
    pub fn unsampled(&self) -> (u64, u64) {
        if let Some(k) = &self.kept {
            return k.unsampled;
        }
        self.header().map_or((0, 0), |h| {
            (
                h.unsampled_ns.load(Ordering::Relaxed),
                h.unsampled_threads.load(Ordering::Relaxed),
            )
        })
    }

    /// Events the agent reported lost, all causes together.
    pub fn lost_events(&self) -> u64 {
        if let Some(k) = &self.kept {
            return k.lost_events;
        }
        self.header().map_or(0, SegmentHeader::lost_total)
    }

    /// A durable session whose image is gone and whose rings were drained: drains again,
    /// which moves nothing new and publishes each ring's tail up to what `sink` has stored,
    /// and says whether that is everything delivered (then a salvage finds all of the
    /// session's bytes in the recording, and the rings' data is no longer needed).
    pub fn publish_stored(&mut self, sink: &mut dyn Sink) -> Result<bool, CollectError> {
        self.drain(sink)?;
        Ok(self.meta_published == self.meta_tail
            && self
                .tracks
                .iter()
                .flatten()
                .flatten()
                .all(|t| t.published == t.tail))
    }

    /// Gives the storage of every ring's data back to the file system (the headers stay,
    /// with how the process ended, and each ring's positions). Only for a session whose
    /// image is gone and whose bytes are all stored ([`Session::publish_stored`]): a
    /// durable segment file reserves its whole size on disk (the agent must never meet a
    /// full disk inside a mapping), some 16 MiB per process, until the recording ends.
    pub fn discard_rings(&self) {
        for (seg, geometry) in self.segments.iter().flatten() {
            let rings = geometry.ring_count.min(MAX_RINGS_PER_SEGMENT);
            for r in 0..rings {
                let data = geometry.ring_offset(r) + RING_HEADER_SIZE;
                // A file system that cannot punch holes keeps the space, as before.
                let _ = seg.discard(data, geometry.ring_data_size as usize);
            }
        }
    }

    /// Moves everything published in the session's rings to `sink`. Only claimed rings
    /// (the segment's bitmap) are visited; a ring given back by its thread is drained,
    /// its stream closed, and the ring freed for another thread.
    pub fn drain(&mut self, sink: &mut dyn Sink) -> Result<Drained, CollectError> {
        let mut out = Drained::default();
        let id = self.id;
        if self.tracks.len() < self.segments.len() {
            self.tracks.resize_with(self.segments.len(), Vec::new);
        }
        for (seg_index, seg) in self.segments.iter().enumerate() {
            let Some((seg, geometry)) = seg else {
                continue;
            };
            let geometry = *geometry;
            // SAFETY: every segment starts with its header page.
            let header = unsafe { &*(seg.base() as *const SegmentHeader) };
            if seg_index == 0 {
                // SAFETY: the segment is mapped with this geometry; ring 0 is the meta ring.
                let ring = unsafe { Ring::at(seg.base(), geometry, 0) };
                let head = ring.header().head.load(Ordering::Acquire);
                if head != self.meta_tail {
                    // SAFETY: we are the ring's only consumer.
                    let (a, b) = unsafe { ring.readable(self.meta_tail, head) };
                    sink.meta(id, a)?;
                    if !b.is_empty() {
                        sink.meta(id, b)?;
                    }
                    out.bytes += head.wrapping_sub(self.meta_tail);
                    self.meta_tail = head;
                }
                // The meta stream starts at ring position 0.
                let published = publish(
                    sink,
                    self.durable,
                    (id, None),
                    &ring,
                    0,
                    self.meta_tail,
                    self.meta_published,
                )?;
                self.meta_published = published;
            }
            let tracks = &mut self.tracks[seg_index];
            let rings = geometry.ring_count.min(MAX_RINGS_PER_SEGMENT);
            if tracks.len() < rings as usize {
                tracks.resize_with(rings as usize, || None);
            }
            for word in 0..rings.div_ceil(64) {
                let mut bits = header.claimed_word(word as usize);
                while bits != 0 {
                    let r = word * 64 + bits.trailing_zeros();
                    bits &= bits - 1;
                    if r >= rings || (seg_index == 0 && r == 0) {
                        continue;
                    }
                    // SAFETY: as above; `r < ring_count`.
                    let ring = unsafe { Ring::at(seg.base(), geometry, r) };
                    let track = &mut tracks[r as usize];
                    drain_ring(
                        id,
                        &ring,
                        header,
                        r,
                        track,
                        &mut self.next_stream,
                        sink,
                        &mut out,
                        self.durable,
                    )?;
                }
            }
        }
        Ok(out)
    }

    /// Closes every stream still open (the process is gone).
    pub fn close_streams(&mut self, sink: &mut dyn Sink) -> Result<(), CollectError> {
        for t in self.tracks.iter_mut().flatten().flatten() {
            if t.open {
                sink.stream_closed(self.id, t.stream)?;
                t.open = false;
            }
        }
        Ok(())
    }
}

/// Publishes the tail of a ring whose stream (`key`: session and thread stream, `None` for
/// the meta stream) starts at ring position `base` and was delivered up to `delivered`:
/// all of it, or in a durable session what the sink has stored. When the ring fills up
/// with bytes not stored yet, asks the sink to store them soon. Returns the tail published.
fn publish(
    sink: &mut dyn Sink,
    durable: bool,
    key: (u32, Option<u32>),
    ring: &Ring,
    base: u64,
    delivered: u64,
    published: u64,
) -> Result<u64, CollectError> {
    let tail = if durable {
        let got = delivered.wrapping_sub(base);
        let stored = sink.stored(key.0, key.1).map_or(got, |n| n.min(got));
        let size = ring.size();
        if delivered.wrapping_sub(base + stored) > size / 4 {
            sink.store_soon(key.0, key.1, size / 8)?;
        }
        base + stored
    } else {
        delivered
    };
    if tail != published {
        ring.header().tail.store(tail, Ordering::Release);
    }
    Ok(tail)
}

/// Drains one claimed thread ring: opens a stream when the ring has a new owner, moves its
/// published bytes, and frees the ring when its owner gave it back (in a durable session,
/// once the sink has stored all of it).
#[allow(clippy::too_many_arguments)]
fn drain_ring(
    session: u32,
    ring: &Ring,
    header: &SegmentHeader,
    r: u32,
    track: &mut Option<Track>,
    next_stream: &mut u32,
    sink: &mut dyn Sink,
    out: &mut Drained,
    durable: bool,
) -> Result<(), CollectError> {
    let h = ring.header();
    let state = h.state.load(Ordering::Acquire);
    if state == RING_FREE {
        return Ok(());
    }
    let pending = h.pending.load(Ordering::SeqCst);
    let head = h.head.load(Ordering::Acquire);
    let generation = h.generation.load(Ordering::Acquire);
    let track = track.get_or_insert_with(|| {
        let tail = h.tail.load(Ordering::Relaxed);
        Track {
            generation: u32::MAX,
            stream: 0,
            tail,
            base: tail,
            published: tail,
            open: false,
        }
    });
    if track.generation != generation {
        if track.open {
            sink.stream_closed(session, track.stream)?;
        }
        track.generation = generation;
        track.stream = *next_stream;
        track.base = track.tail;
        track.open = true;
        *next_stream += 1;
        // Which stream this owner's bytes belong to, for a salvage.
        h.stream_base.store(track.base, Ordering::Relaxed);
        h.stream
            .store(track.stream.saturating_add(1), Ordering::Relaxed);
        h.stream_generation.store(generation, Ordering::Release);
    }
    if head != track.tail {
        // SAFETY: we are the ring's only consumer.
        let (a, b) = unsafe { ring.readable(track.tail, head) };
        if b.is_empty() {
            sink.thread(session, track.stream, a)?;
        } else {
            // Wrapped: delivered in one piece, so that the sink's chunks end at record
            // boundaries (a salvage counts the records it appends from there).
            sink.thread(session, track.stream, &[a, b].concat())?;
        }
        let moved = head.wrapping_sub(track.tail);
        out.bytes += moved;
        out.fullest_permille = out.fullest_permille.max(moved * 1000 / ring.size().max(1));
        track.tail = head;
    }
    track.published = publish(
        sink,
        durable,
        (session, Some(track.stream)),
        ring,
        track.base,
        track.tail,
        track.published,
    )?;
    if pending != 0 && (out.min_pending == 0 || pending < out.min_pending) {
        out.min_pending = pending;
    }
    if state == RING_CLOSED {
        if track.open {
            sink.stream_closed(session, track.stream)?;
            track.open = false;
        }
        if track.published == track.tail {
            // Clear the claimed bit before freeing: a thread that claims the ring next
            // sets it again after its claim.
            header.clear_claimed(r);
            h.state.store(RING_FREE, Ordering::Release);
        }
    }
    Ok(())
}

/// The session's place in a parallel job, from its header (none when the agent found no
/// rank in the process's environment). The header is untrusted: lengths and indexes are
/// bounded by the arrays they index.
pub(crate) fn place(session: u32, h: &SegmentHeader) -> Option<SessionPlace> {
    let source = tansa_wire::place::RANK_VARS.get((h.place_source as usize).checked_sub(1)?)?;
    let job = &h.place_job[..(h.place_job_len as usize).min(h.place_job.len())];
    Some(SessionPlace {
        session,
        rank: h.place_rank,
        size: (h.place_size != 0).then_some(h.place_size),
        job: (!job.is_empty()).then(|| text(job)),
        source: source.to_string_lossy().into_owned(),
    })
}
