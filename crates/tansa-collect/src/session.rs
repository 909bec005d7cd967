//! One agent session as seen by the collector: its mapped segments and the draining of its
//! rings.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use tansa_format::memory::SessionInfo;
use tansa_wire::layout::{
    ClockKind, FLAG_FREE_STACKS, FLAG_ONLINE, Geometry, RING_CLOSED, RING_FREE, Ring,
    SEGMENT_MAGIC, SegmentHeader,
};

use crate::sys::Mapping;
use crate::{CollectError, Sink};

#[derive(Debug)]
struct Track {
    generation: u32,
    stream: u32,
    tail: u64,
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
    /// Private socket: end-of-file means the process image is gone.
    pub private: OwnedFd,
    /// Whether the private socket reported end-of-file.
    pub ended: bool,
    /// Whether the session's rings were drained for the last time.
    pub finalized: bool,
    geometry: Geometry,
    segments: Vec<Option<Mapping>>,
    /// Consumer state of each thread ring, by `segment * ring_count + ring`.
    tracks: Vec<Option<Track>>,
    next_stream: u32,
    meta_tail: u64,
    /// Largest timestamp seen in stream starts (for the session end record).
    pub last_ticks: u64,
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

impl Session {
    /// Maps segment 0 and reads the session description from its header.
    pub fn open(
        id: u32,
        memfd: OwnedFd,
        private: OwnedFd,
        geometry: Geometry,
    ) -> Result<Session, CollectError> {
        if !geometry.is_valid() {
            return Err(CollectError::Protocol("invalid segment geometry".into()));
        }
        let map = Mapping::map(&memfd, geometry.segment_size())?;
        // SAFETY: the mapping covers the header page.
        let h = unsafe { &*(map.base() as *const SegmentHeader) };
        if h.magic != SEGMENT_MAGIC || h.version != tansa_wire::PROTOCOL_VERSION {
            return Err(CollectError::Protocol(format!(
                "segment header magic/version mismatch (agent protocol {}, collector {})",
                h.version,
                tansa_wire::PROTOCOL_VERSION
            )));
        }
        let exe = text(&h.exe[..(h.exe_len as usize).min(h.exe.len())]);
        let cmd_bytes = &h.cmdline[..(h.cmdline_len as usize).min(h.cmdline.len())];
        let cmdline = cmd_bytes
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(text)
            .collect();
        let info = SessionInfo {
            session: id,
            pid: h.pid,
            ppid: h.ppid,
            exe,
            cmdline,
            start_ticks: h.start_ticks,
            free_stacks: h.flags & FLAG_FREE_STACKS != 0,
            online: h.flags & FLAG_ONLINE != 0,
        };
        let _ = ClockKind::from_raw(h.clock);
        Ok(Session {
            id,
            pid: h.pid,
            info,
            private,
            ended: false,
            finalized: false,
            geometry,
            segments: vec![Some(map)],
            tracks: Vec::new(),
            next_stream: 0,
            meta_tail: 0,
            last_ticks: h.start_ticks,
        })
    }

    /// Maps a further segment.
    pub fn add_segment(
        &mut self,
        index: u32,
        memfd: OwnedFd,
        geometry: Geometry,
    ) -> Result<(), CollectError> {
        if geometry != self.geometry || index as usize > 1024 {
            return Err(CollectError::Protocol(
                "segment geometry differs from the session's".into(),
            ));
        }
        let map = Mapping::map(&memfd, geometry.segment_size())?;
        let i = index as usize;
        if self.segments.len() <= i {
            self.segments.resize_with(i + 1, || None);
        }
        self.segments[i] = Some(map);
        Ok(())
    }

    fn header(&self) -> Option<&SegmentHeader> {
        let m = self.segments.first()?.as_ref()?;
        // SAFETY: segment 0 maps the header page.
        Some(unsafe { &*(m.base() as *const SegmentHeader) })
    }

    /// Bumps the heartbeat the agent watches when it waits for ring space.
    pub fn heartbeat(&self) {
        if let Some(h) = self.header() {
            h.heartbeat.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the agent saw the process run its exit handlers.
    pub fn exited_normally(&self) -> bool {
        self.header()
            .is_some_and(|h| h.exited_normally.load(Ordering::Acquire) != 0)
    }

    /// Events the agent reported lost.
    pub fn lost_events(&self) -> u64 {
        self.header()
            .map_or(0, |h| h.lost_events.load(Ordering::Relaxed))
    }

    /// Moves everything published in the session's rings to `sink`.
    pub fn drain(&mut self, sink: &mut dyn Sink) -> Result<Drained, CollectError> {
        let mut out = Drained::default();
        let geometry = self.geometry;
        for (seg_index, seg) in self.segments.iter().enumerate() {
            let Some(seg) = seg else {
                continue;
            };
            let first = if seg_index == 0 { 1 } else { 0 };
            if seg_index == 0 {
                // SAFETY: the segment is mapped with this geometry; ring 0 is the meta ring.
                let ring = unsafe { Ring::at(seg.base(), geometry, 0) };
                let head = ring.header().head.load(Ordering::Acquire);
                if head != self.meta_tail {
                    // SAFETY: we are the ring's only consumer.
                    let (a, b) = unsafe { ring.readable(self.meta_tail, head) };
                    sink.meta(self.id, a)?;
                    if !b.is_empty() {
                        sink.meta(self.id, b)?;
                    }
                    out.bytes += head - self.meta_tail;
                    self.meta_tail = head;
                    ring.header().tail.store(head, Ordering::Release);
                }
            }
            for r in first..geometry.ring_count {
                // SAFETY: as above.
                let ring = unsafe { Ring::at(seg.base(), geometry, r) };
                let h = ring.header();
                let state = h.state.load(Ordering::Acquire);
                let key = seg_index * geometry.ring_count as usize + r as usize;
                if state == RING_FREE && self.tracks.get(key).is_none_or(Option::is_none) {
                    continue;
                }
                let pending = h.pending.load(Ordering::SeqCst);
                let head = h.head.load(Ordering::Acquire);
                let generation = h.generation.load(Ordering::Acquire);
                if self.tracks.len() <= key {
                    self.tracks.resize_with(key + 1, || None);
                }
                let track = self.tracks[key].get_or_insert_with(|| Track {
                    generation: u32::MAX,
                    stream: 0,
                    tail: h.tail.load(Ordering::Relaxed),
                    open: false,
                });
                if track.generation != generation && state != RING_FREE {
                    if track.open {
                        sink.stream_closed(self.id, track.stream)?;
                    }
                    track.generation = generation;
                    track.stream = self.next_stream;
                    track.open = true;
                    self.next_stream += 1;
                }
                if head != track.tail {
                    // SAFETY: we are the ring's only consumer.
                    let (a, b) = unsafe { ring.readable(track.tail, head) };
                    sink.thread(self.id, track.stream, a)?;
                    if !b.is_empty() {
                        sink.thread(self.id, track.stream, b)?;
                    }
                    out.bytes += head - track.tail;
                    out.fullest_permille = out.fullest_permille.max(
                        (head - track.tail) * 1000 / u64::from(geometry.ring_data_size).max(1),
                    );
                    track.tail = head;
                    h.tail.store(head, Ordering::Release);
                }
                if pending != 0 && (out.min_pending == 0 || pending < out.min_pending) {
                    out.min_pending = pending;
                }
                if state == RING_CLOSED {
                    if track.open {
                        sink.stream_closed(self.id, track.stream)?;
                        track.open = false;
                    }
                    h.state.store(RING_FREE, Ordering::Release);
                }
            }
        }
        Ok(out)
    }

    /// Closes every stream still open (the process is gone).
    pub fn close_streams(&mut self, sink: &mut dyn Sink) -> Result<(), CollectError> {
        for t in self.tracks.iter_mut().flatten() {
            if t.open {
                sink.stream_closed(self.id, t.stream)?;
                t.open = false;
            }
        }
        Ok(())
    }
}
