//! Completing a durable recording whose recorder was killed.
//!
//! A durable recording ([`crate::Config::segment_dir`]) is written in place at its final
//! name, under an exclusive `flock` held while it is written, and its agents' shared
//! segments are files in a private directory next to it ([`segment_dir`]). The collector
//! lets an agent reuse ring space only once the bytes there are in the recording file
//! ([`crate::Sink::stored`]), so whenever the collector dies, the recording and the segment
//! files together hold every byte the agents wrote.
//!
//! [`salvage`] completes such a recording when its lock is free and its end frame missing:
//! it cuts off a torn last frame, appends what the rings hold beyond what the file holds
//! (each ring header says which stream its owner's bytes belong to and at which ring
//! position that stream starts; the file says how many bytes of each stream it has), ends
//! the process images whose end was not recorded ([`ExitStatus::RecorderKilled`]), adds
//! the clock calibration, the symbols, a [`memory::SALVAGED`] frame and the end frame, and
//! removes the segment directory.
//!
//! Segment files are untrusted input: [`recover`] bounds every count, index and position
//! by what the file holds and by the ring's size, and is fuzzed (`tansa-fuzz`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tansa_format::FormatError;
use tansa_format::container::{FrameEncoder, FrameType, Kind, Reader};
use tansa_format::memory::{
    self, Losses, Salvage, SessionEnd, SessionInfo, SessionLosses, SessionPlace, meta_chunk_prefix,
    thread_chunk_prefix,
};
use tansa_format::meta::{Calibration, CalibrationPoint, ClockSource, ExitStatus, RecordingMeta};
use tansa_wire::event::Decoder;
use tansa_wire::layout::{
    ClockKind, ENDED_KNOWN, EXIT_IMMEDIATE, EXIT_NORMAL, Geometry, LossCause,
    MAX_RINGS_PER_SEGMENT, RING_FREE, RING_HEADER_SIZE, RingHeader, SEGMENT_HEADER_SIZE,
    SEGMENT_MAGIC, SegmentHeader, segment_ring_count,
};

use crate::symbolize::{AddressSet, BackgroundResolver};

pub use tansa_analysis::memory::DURABLE_OPTION;

/// Most segments of one session a salvage reads (the agent makes at most 64).
const MAX_SEGMENTS: u32 = 64;

/// Bytes per appended chunk.
const CHUNK: usize = 256 * 1024;

/// Errors of a salvage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SalvageError {
    /// The recorder still holds the recording's lock.
    #[error("the recording is still being recorded{}", match .pid {
        Some(p) => format!(" by pid {p}"),
        None => String::new(),
    })]
    StillRecording {
        /// The process holding the lock, when `/proc/locks` says.
        pid: Option<u32>,
    },
    /// The recorder is gone, but a process it recorded still runs and writes its events
    /// into the segment files: completing the recording now would lose what it writes
    /// next (the segments are removed once their events are in the file).
    #[error("process {pid}, which it recorded, still runs and writes its events there")]
    StillWritten {
        /// A process that has the segment files mapped.
        pid: u32,
    },
    /// The file is not a heap recording, or its start is unreadable.
    #[error("{0}")]
    Format(#[from] FormatError),
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What [`salvage`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Salvaged {
    /// What is recorded in the file about it.
    pub salvage: Salvage,
    /// Segment files read.
    pub segments: usize,
    /// Things that could not be recovered, for people.
    pub notes: Vec<String>,
}

/// The private directory of a durable recording's segment files: `.NAME.d` next to it.
pub fn segment_dir(recording: &Path) -> PathBuf {
    let name = recording
        .file_name()
        .map_or_else(|| "tansa".into(), |n| n.to_string_lossy().into_owned());
    recording.with_file_name(format!(".{name}.d"))
}

/// Creates [`segment_dir`] of `recording`, mode 0700 (an existing one is an error: it
/// belongs to another recording of that name, which may still need salvaging).
pub fn create_segment_dir(recording: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = segment_dir(recording);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{} exists: the segments of an unfinished recording of that name \
                         (tansa report salvages it; remove the directory if it is not needed)",
                        dir.display()
                    ),
                )
            } else {
                e
            }
        })?;
    Ok(dir)
}

/// Removes the segment files of `recording` and their directory (after a clean finish or
/// a salvage). Only `*.seg` files are removed; the directory stays if anything else is in
/// it.
pub fn remove_segment_dir(recording: &Path) {
    let dir = segment_dir(recording);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(".seg") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(&dir);
}

/// Whether `file` ends with an end frame (a finished recording). Cheap: reads the last
/// frame header only.
pub fn is_finished(file: &File) -> io::Result<bool> {
    let len = file.metadata()?.len();
    let header = tansa_format::container::FRAME_HEADER_LEN as u64;
    if len < tansa_format::container::HEADER_LEN as u64 + header {
        return Ok(false);
    }
    let mut h = [0u8; 16];
    file.read_exact_at(&mut h, len - header)?;
    let ty = u16::from_le_bytes([h[0], h[1]]);
    let stored = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    Ok(ty == FrameType::END.0 && stored == 0)
}

/// Whether the recording in `file` says it is durable (its first frame, `META`).
fn is_durable(file: &File) -> bool {
    let Ok(mut reader) = Reader::new(BufReader::new(file)) else {
        return false;
    };
    let Ok(Some(frame)) = reader.next_frame() else {
        return false;
    };
    frame.ty == FrameType::META
        && frame
            .decode::<RecordingMeta>()
            .is_ok_and(|m| tansa_analysis::memory::is_durable(&m))
}

/// Random access to a segment's bytes (a file, or bytes in memory for tests and fuzzing).
pub trait ReadAt {
    /// Its length in bytes.
    fn len(&self) -> u64;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fills `buf` from `offset`; an error if it does not hold that many bytes.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

impl ReadAt for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A segment file with its length taken once.
struct SegFile {
    file: File,
    len: u64,
}

impl ReadAt for SegFile {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.file.read_exact_at(buf, offset)
    }
}

/// A segment header copied out of a file, aligned like the header itself.
#[repr(C, align(4096))]
struct HeaderPage([u8; SEGMENT_HEADER_SIZE]);

/// A ring header copied out of a file.
#[repr(C, align(128))]
struct RingPage([u8; RING_HEADER_SIZE]);

const _: () = assert!(core::mem::size_of::<SegmentHeader>() <= SEGMENT_HEADER_SIZE);
const _: () = assert!(core::mem::align_of::<SegmentHeader>() <= 4096);
const _: () = assert!(core::mem::size_of::<RingHeader>() == RING_HEADER_SIZE);
const _: () = assert!(core::mem::align_of::<RingHeader>() <= 128);

impl HeaderPage {
    fn read(src: &dyn ReadAt) -> io::Result<Box<HeaderPage>> {
        let mut page = Box::new(HeaderPage([0; SEGMENT_HEADER_SIZE]));
        src.read_at(0, &mut page.0)?;
        Ok(page)
    }

    fn get(&self) -> &SegmentHeader {
        // SAFETY: the page is aligned and large enough for a SegmentHeader (asserted
        // above), and every field of it is an integer, an atomic integer or an array of
        // them: any bytes are a valid value. Nothing else refers to the copy.
        unsafe { &*(self.0.as_ptr() as *const SegmentHeader) }
    }
}

impl RingPage {
    fn get(&self) -> &RingHeader {
        // SAFETY: as for `HeaderPage::get`: aligned, large enough, integers only.
        unsafe { &*(self.0.as_ptr() as *const RingHeader) }
    }
}

/// Bytes of a stream recovered from a ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredStream {
    /// The stream the collector gave the ring's owner (`None`: it never saw this owner;
    /// the salvage gives it a new number).
    pub stream: Option<u32>,
    /// The bytes beyond those the recording holds.
    pub bytes: Vec<u8>,
}

/// What a session's segments hold beyond the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The session as its header describes it (`session` is the collector's number if it
    /// wrote one, else 0).
    pub info: SessionInfo,
    /// The session's rank in a parallel job, when its agent found one (`session` as in
    /// `info`).
    pub place: Option<SessionPlace>,
    /// The collector's number for the session, if it wrote one.
    pub collector_session: Option<u32>,
    /// The clock of the session's timestamps.
    pub clock: Option<ClockKind>,
    /// How the agent saw the process end: exit code, if it saw an `exit` or `_exit`.
    pub exit_code: Option<i32>,
    /// When the agent saw that exit (the session's clock), if it says.
    pub exit_ticks: Option<u64>,
    /// How the process ended as the collector learned it (a wait status), and when (the
    /// session's clock), if it wrote that before it was killed.
    pub ended: Option<(ExitStatus, u64)>,
    /// What the agent could not record.
    pub losses: Losses,
    /// All causes of loss together.
    pub lost_events: u64,
    /// The meta stream beyond the recording's bytes.
    pub meta: Vec<u8>,
    /// Thread streams beyond the recording's bytes.
    pub streams: Vec<RecoveredStream>,
    /// What could not be recovered.
    pub notes: Vec<String>,
}

/// What a salvage knows of how a session ended ([`Recovered`]'s fields).
#[derive(Debug, Clone, Copy, Default)]
struct Ending {
    code: Option<i32>,
    code_ticks: Option<u64>,
    ended: Option<(ExitStatus, u64)>,
    losses: Losses,
    lost: u64,
}

/// Bytes `[from, head)` of the ring whose header is at `offset` in `src` (data after the
/// header, `size` bytes, positions wrapping), or `None` when they are not all in the ring
/// any more (or the positions make no sense).
fn ring_bytes(src: &dyn ReadAt, offset: u64, size: u64, from: u64, head: u64) -> Option<Vec<u8>> {
    let n = head.checked_sub(from)?;
    if n > size {
        return None;
    }
    let data = offset.checked_add(RING_HEADER_SIZE as u64)?;
    let mut out = vec![0u8; n as usize];
    let start = from & (size - 1);
    let first = (size - start).min(n) as usize;
    src.read_at(data.checked_add(start)?, &mut out[..first])
        .ok()?;
    if first < out.len() {
        src.read_at(data, &mut out[first..]).ok()?;
    }
    Some(out)
}

/// Reads a session's segment files (`segments`: index and contents; segment 0 first or
/// anywhere, at most one per index) and returns what they hold beyond the recording:
/// `have_meta` bytes of its meta stream and `have(stream)` bytes of each thread stream are
/// in the file already. Every value read from a segment is bounded before use.
pub fn recover(
    segments: &[(u32, &dyn ReadAt)],
    have_meta: u64,
    have: &dyn Fn(u32) -> u64,
) -> Result<Recovered, String> {
    let Some((_, seg0)) = segments.iter().find(|(i, _)| *i == 0) else {
        return Err("no segment 0".into());
    };
    let page0 = HeaderPage::read(*seg0).map_err(|e| format!("segment 0: {e}"))?;
    let h0 = page0.get();
    if h0.magic != SEGMENT_MAGIC || h0.version != tansa_wire::PROTOCOL_VERSION {
        return Err("segment 0 is not a segment of this tansa version".into());
    }
    let ring_size = h0.ring_data_size;
    let first = h0.ring_count;
    let mut info = crate::session::session_info(h0, 0);
    info.session = 0;
    let collector_session = h0
        .collector_session
        .load(std::sync::atomic::Ordering::Relaxed)
        .checked_sub(1);
    let how = h0.exit_how.load(std::sync::atomic::Ordering::Relaxed);
    let exit_code = matches!(how, EXIT_NORMAL | EXIT_IMMEDIATE)
        .then(|| h0.exit_code.load(std::sync::atomic::Ordering::Relaxed));
    let exit_ticks = exit_code
        .map(|_| h0.exit_ticks.load(std::sync::atomic::Ordering::Relaxed))
        .filter(|&t| t != 0);
    let ended_status = h0.ended_status.load(std::sync::atomic::Ordering::Relaxed);
    let ended = (ended_status & ENDED_KNOWN != 0).then(|| {
        (
            ExitStatus::from_wait_status((ended_status & 0xffff) as i32),
            h0.ended_ticks.load(std::sync::atomic::Ordering::Relaxed),
        )
    });
    let lost = |c: LossCause| h0.lost[c as usize].load(std::sync::atomic::Ordering::Relaxed);
    let losses = Losses {
        no_ring: lost(LossCause::NoRing),
        signal_queue: lost(LossCause::SignalQueue),
        collector_gone: lost(LossCause::CollectorGone),
        samples: lost(LossCause::Sample),
        stackless: h0.stackless.load(std::sync::atomic::Ordering::Relaxed),
    };
    let mut out = Recovered {
        place: crate::session::place(0, h0),
        info,
        collector_session,
        clock: ClockKind::from_raw(h0.clock),
        exit_code,
        exit_ticks,
        ended,
        losses,
        lost_events: h0.lost_total(),
        meta: Vec::new(),
        streams: Vec::new(),
        notes: Vec::new(),
    };
    let mut seen = HashSet::new();
    for &(index, src) in segments {
        if index >= MAX_SEGMENTS || !seen.insert(index) {
            out.notes
                .push(format!("segment {index} left out (unexpected index)"));
            continue;
        }
        let page = match HeaderPage::read(src) {
            Ok(p) => p,
            Err(e) => {
                out.notes.push(format!("segment {index}: {e}"));
                continue;
            }
        };
        let h = page.get();
        let geometry = Geometry {
            ring_count: h.ring_count,
            ring_data_size: h.ring_data_size,
        };
        if h.magic != SEGMENT_MAGIC
            || h.version != tansa_wire::PROTOCOL_VERSION
            || h.segment_index != index
            || h.pid != out.info.pid
            || !geometry.is_valid()
            || geometry.ring_data_size != ring_size
            || geometry.ring_count != segment_ring_count(first, index)
            || (geometry.segment_size() as u64) > src.len()
        {
            out.notes.push(format!(
                "segment {index} left out (its header does not match its session)"
            ));
            continue;
        }
        let size = u64::from(ring_size);
        if index == 0 {
            let mut rp = RingPage([0; RING_HEADER_SIZE]);
            let at = geometry.ring_offset(0) as u64;
            if src.read_at(at, &mut rp.0).is_ok() {
                let head = rp.get().head.load(std::sync::atomic::Ordering::Relaxed);
                match ring_bytes(src, at, size, have_meta, head) {
                    Some(bytes) => out.meta = bytes,
                    None => out.notes.push(format!(
                        "the meta ring holds bytes {}..{head} of its stream, the recording {have_meta}: \
                         its stack and module records are left out",
                        head.saturating_sub(size)
                    )),
                }
            }
        }
        let rings = geometry.ring_count.min(MAX_RINGS_PER_SEGMENT);
        for r in 0..rings {
            if index == 0 && r == 0 {
                continue;
            }
            if h.claimed_word((r / 64) as usize) & (1 << (r % 64)) == 0 {
                continue;
            }
            let mut rp = RingPage([0; RING_HEADER_SIZE]);
            let at = geometry.ring_offset(r) as u64;
            if src.read_at(at, &mut rp.0).is_err() {
                continue;
            }
            let rh = rp.get();
            let load = std::sync::atomic::Ordering::Relaxed;
            if rh.state.load(load) == RING_FREE {
                continue;
            }
            let head = rh.head.load(load);
            let known = (rh.stream_generation.load(load) == rh.generation.load(load))
                .then(|| rh.stream.load(load).checked_sub(1))
                .flatten();
            let from = match known {
                Some(stream) => rh.stream_base.load(load).checked_add(have(stream)),
                None => Some(rh.tail.load(load)),
            };
            match from.and_then(|from| ring_bytes(src, at, size, from, head)) {
                Some(bytes) if !bytes.is_empty() => out.streams.push(RecoveredStream {
                    stream: known,
                    bytes,
                }),
                Some(_) => {}
                None => out.notes.push(format!(
                    "ring {r} of segment {index}: its positions do not match the recording; \
                     left out"
                )),
            }
        }
    }
    Ok(out)
}

/// The pid holding a `flock` on the file with inode `ino`, from `/proc/locks`.
fn lock_holder(ino: u64) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (pid, id) = (fields.get(4)?, fields.get(5)?);
        (fields.get(1) == Some(&"FLOCK") && id.rsplit(':').next()?.parse::<u64>().ok()? == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// What the file holds, read frame by frame.
#[derive(Default)]
struct FileState {
    meta: Option<RecordingMeta>,
    sessions: BTreeMap<u32, SessionInfo>,
    ended: HashSet<u32>,
    with_losses: HashSet<u32>,
    metas: HashMap<u32, Vec<u8>>,
    thread_bytes: HashMap<(u32, u32), u64>,
    calibration: Option<Calibration>,
    /// Offset just after the last whole frame.
    valid_end: u64,
    finished: bool,
}

fn read_file(file: &File) -> Result<FileState, SalvageError> {
    let mut reader = Reader::new(BufReader::with_capacity(1 << 20, file))?;
    if reader.kind() != Kind::Memory {
        return Err(FormatError::NotARecording.into());
    }
    let mut st = FileState {
        valid_end: reader.offset(),
        ..FileState::default()
    };
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if e.is_damage() => break,
            Err(e) => return Err(e.into()),
        };
        st.valid_end = reader.offset();
        // A frame that does not decode is kept as it is; the reader warns about it.
        match frame.ty {
            FrameType::META => st.meta = frame.decode().ok(),
            FrameType::CALIBRATION => st.calibration = frame.decode().ok(),
            memory::SESSION => {
                if let Ok(info) = frame.decode::<SessionInfo>() {
                    st.sessions.entry(info.session).or_insert(info);
                }
            }
            memory::SESSION_END => {
                if let Ok(end) = frame.decode::<SessionEnd>() {
                    st.ended.insert(end.session);
                }
            }
            memory::SESSION_LOSSES => {
                if let Ok(l) = frame.decode::<SessionLosses>() {
                    st.with_losses.insert(l.session);
                }
            }
            memory::META_CHUNK => {
                if let Some((s, bytes)) = memory::split_meta_chunk(&frame.payload) {
                    st.metas.entry(s).or_default().extend_from_slice(bytes);
                }
            }
            memory::THREAD_CHUNK => {
                if let Some((s, stream, bytes)) = memory::split_thread_chunk(&frame.payload) {
                    *st.thread_bytes.entry((s, stream)).or_default() += bytes.len() as u64;
                }
            }
            _ => {}
        }
    }
    st.finished = reader.is_complete();
    Ok(st)
}

/// The segment files of `dir`, grouped by session (`PID-TOKEN-INDEX.seg`): each group's
/// segments by index. Only regular files are opened, without following links.
fn segment_groups(dir: &Path) -> BTreeMap<(u32, u64), Vec<(u32, SegFile)>> {
    let mut groups: BTreeMap<(u32, u64), Vec<(u32, SegFile)>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return groups;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".seg") else {
            continue;
        };
        let parts: Vec<&str> = stem.split('-').collect();
        let [pid, token, index] = parts[..] else {
            continue;
        };
        let (Ok(pid), Ok(token), Ok(index)) = (pid.parse(), token.parse(), index.parse()) else {
            continue;
        };
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(e.path())
        else {
            continue;
        };
        let Ok(md) = file.metadata() else { continue };
        if !md.is_file() {
            continue;
        }
        groups.entry((pid, token)).or_default().push((
            index,
            SegFile {
                file,
                len: md.len(),
            },
        ));
    }
    groups
}

/// Removes the segments left next to the finished durable recording at `path`, if any.
/// A recorder killed after it finished the file but before it removed its segments (a
/// launcher's `SIGKILL` can land there) leaves them behind; every byte they hold is in the
/// file. They go once nobody holds the file's lock (the recorder holds it until they are
/// gone). Cheap when there is nothing to remove: one `stat`.
pub fn tidy_finished(path: &Path) {
    if !segment_dir(path).exists() {
        return;
    }
    let Ok(file) = open_read(path) else {
        return;
    };
    if is_durable(&file) && is_finished(&file).unwrap_or(false) {
        remove_finished_segments(path, &file);
    }
}

/// [`tidy_finished`] for a file known to be a finished durable recording.
fn remove_finished_segments(path: &Path, file: &File) {
    if segment_dir(path).exists() && takes_lock(file) {
        remove_segment_dir(path);
    }
}

/// Opens the recording at `path` to read (never through a symbolic link).
fn open_read(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Whether `file`'s exclusive lock could be taken (nobody records it); it is held until
/// the descriptor closes.
fn takes_lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor the caller owns.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// A recorder killed between creating its (durable) file and writing the file's header
/// leaves an empty file and an empty segment directory: it had not started the command, so
/// no agent made a segment there. The directory goes once nobody holds the file's lock (a
/// recorder still starting holds it); one with anything in it stays.
fn remove_empty_segment_dir(path: &Path, file: &File) {
    if segment_dir(path).exists() && takes_lock(file) {
        let _ = std::fs::remove_dir(segment_dir(path));
    }
}

/// Completes the durable recording at `path` if it is unfinished and nobody records it
/// any more (see the module documentation). `Ok(None)`: nothing to do (finished, or not
/// a durable recording). `progress` is called before each module is symbolized.
pub fn salvage(
    path: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Option<Salvaged>, SalvageError> {
    {
        let file = open_read(path)?;
        if file.metadata()?.len() == 0 {
            remove_empty_segment_dir(path, &file);
            return Ok(None);
        }
        if !is_durable(&file) {
            return Ok(None);
        }
        if is_finished(&file)? {
            remove_finished_segments(path, &file);
            return Ok(None);
        }
    }
    let file = open_locked(path)?;
    if let Some(pid) = writer_of(&segment_dir(path)) {
        return Err(SalvageError::StillWritten { pid });
    }
    let st = read_file(&file)?;
    let durable = st
        .meta
        .as_ref()
        .is_some_and(tansa_analysis::memory::is_durable);
    if st.finished || !durable {
        return Ok(None);
    }
    let done = complete(&file, &st, Some(&segment_dir(path)), progress)?;
    remove_segment_dir(path);
    Ok(Some(done))
}

/// A process (other than this one) that has a file of the segment directory `dir` mapped:
/// an agent still writing its events there. Processes whose mappings cannot be read (other
/// users') are not ours to wait for.
fn writer_of(dir: &Path) -> Option<u32> {
    let dir = dir.canonicalize().ok()?;
    let prefix = format!("{}/", dir.display());
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| {
                maps.lines().any(|l| {
                    l.split_once('/')
                        .is_some_and(|(_, p)| format!("/{p}").starts_with(&prefix))
                })
            })
        })
}

/// Completes a heap recording that a recorder killed outright left under its temporary
/// name (`tansa_format::output::leftovers`), as [`salvage`] does a durable one, except
/// that there are no segment files to add from: the rings of an ordinary recording are in
/// memory, gone with the recorder (agents still running count what they could not hand
/// over as lost). `Ok(None)`: the file is already complete (the recorder was killed after
/// finishing it, before moving it into place).
pub fn complete_leftover(
    path: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Option<Salvaged>, SalvageError> {
    let file = open_locked(path)?;
    let st = read_file(&file)?;
    if st.finished {
        return Ok(None);
    }
    complete(&file, &st, None, progress).map(Some)
}

/// What [`recover_leftover`] found for a recording that does not exist (`T`: what
/// completing the file gave).
#[derive(Debug)]
pub enum Recovery<T = Option<Salvaged>> {
    /// No temporary file of a recorder that could have written it.
    Nothing,
    /// A recorder (`pid`) is writing it now, into `temp`.
    InUse {
        /// The temporary file.
        temp: PathBuf,
        /// The process that created it.
        pid: u32,
    },
    /// A recorder (`pid`) was killed before it wrote anything into `temp`.
    Empty {
        /// The temporary file.
        temp: PathBuf,
        /// The process that created it.
        pid: u32,
    },
    /// The temporary file a killed recorder (`pid`) left cannot be completed (a CPU
    /// recording killed before its first checkpoint, say).
    Unusable {
        /// The temporary file.
        temp: PathBuf,
        /// The process that created it.
        pid: u32,
        /// Why.
        error: SalvageError,
    },
    /// The recording a killed recorder (`pid`) left in `temp` was completed and moved
    /// into place.
    Completed {
        /// Where it was.
        temp: PathBuf,
        /// The process that created it.
        pid: u32,
        /// What completing it did (for a heap recording, `None`: it was complete
        /// already).
        salvaged: T,
        /// Older temporary files of killed recorders of the same name, left as they are.
        others: Vec<PathBuf>,
    },
}

/// For a heap recording `dest` that does not exist: completes the newest temporary file a
/// killed recorder left for it ([`complete_leftover`]) and moves it into place at `dest`
/// (`tansa_format::output::settle_leftover`: never over a file), or says why not.
pub fn recover_leftover(dest: &Path, progress: &mut dyn FnMut(usize, usize, &str)) -> Recovery {
    recover_leftover_with(dest, |temp| complete_leftover(temp, progress))
}

/// [`recover_leftover`] with `complete` completing the temporary file (a recording of any
/// kind).
pub fn recover_leftover_with<T>(
    dest: &Path,
    complete: impl FnOnce(&Path) -> Result<T, SalvageError>,
) -> Recovery<T> {
    use tansa_format::output::{leftovers, settle_leftover};
    let found = leftovers(dest);
    if let Some(l) = found.iter().find(|l| l.in_use) {
        return Recovery::InUse {
            temp: l.path.clone(),
            pid: l.pid,
        };
    }
    let Some(newest) = found.first() else {
        return Recovery::Nothing;
    };
    let (temp, pid) = (newest.path.clone(), newest.pid);
    if newest.len == 0 {
        return Recovery::Empty { temp, pid };
    }
    let salvaged = match complete(&temp) {
        Ok(s) => s,
        Err(SalvageError::StillRecording { .. }) => return Recovery::InUse { temp, pid },
        Err(error) => return Recovery::Unusable { temp, pid, error },
    };
    if let Err(e) = settle_leftover(&temp, dest) {
        return Recovery::Unusable {
            temp,
            pid,
            error: SalvageError::Io(e),
        };
    }
    Recovery::Completed {
        temp,
        pid,
        salvaged,
        others: found[1..].iter().map(|l| l.path.clone()).collect(),
    }
}

/// Opens a recording to complete it and takes its lock: [`SalvageError::StillRecording`]
/// if a recorder (or another process completing it) holds it.
pub fn open_locked(path: &Path) -> Result<File, SalvageError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if !takes_lock(&file) {
        let ino = file.metadata()?.ino();
        return Err(SalvageError::StillRecording {
            pid: lock_holder(ino),
        });
    }
    Ok(file)
}

/// Completes the unfinished recording `file` (read as `st`): cuts off a torn last frame,
/// appends what the segment files in `segments` hold beyond the file, ends the process
/// images, adds the calibration, the symbols, the salvage frame and the end frame.
fn complete(
    mut file: &File,
    st: &FileState,
    segments: Option<&Path>,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Salvaged, SalvageError> {
    let len = file.metadata()?.len();
    let mut done = Salvaged::default();
    done.salvage.torn_bytes = len.saturating_sub(st.valid_end);
    file.set_len(st.valid_end)?;
    file.seek(SeekFrom::Start(st.valid_end))?;
    let mut w = FrameWriter {
        out: io::BufWriter::new(file),
        encoder: FrameEncoder::new(3)?,
        scratch: Vec::new(),
    };
    let mut sessions = st.sessions.clone();
    let mut metas = st.metas.clone();
    let mut clock = None;
    let mut exits: HashMap<u32, Ending> = HashMap::new();
    let groups = segments.map(segment_groups).unwrap_or_default();
    for ((pid, _), group) in groups {
        let segments: Vec<(u32, &dyn ReadAt)> =
            group.iter().map(|(i, f)| (*i, f as &dyn ReadAt)).collect();
        done.segments += segments.len();
        // Which session of the file this is: the collector's number if it wrote one and
        // the file agrees (or does not know the number yet).
        let probe = recover(&segments, u64::MAX, &|_| u64::MAX);
        let Ok(probe) = probe else {
            done.notes
                .push(format!("segments of pid {pid} left out: unreadable"));
            continue;
        };
        let id = match probe.collector_session {
            Some(id)
                if sessions.get(&id).is_none_or(|s| {
                    s.pid == probe.info.pid && s.start_ticks == probe.info.start_ticks
                }) =>
            {
                id
            }
            _ => sessions.keys().next_back().map_or(0, |k| k + 1),
        };
        let have_meta = st.metas.get(&id).map_or(0, |m| m.len() as u64);
        let have = |stream: u32| st.thread_bytes.get(&(id, stream)).copied().unwrap_or(0);
        let Ok(rec) = recover(&segments, have_meta, &have) else {
            continue;
        };
        done.notes.extend(rec.notes.iter().cloned());
        clock = clock.or(rec.clock);
        if let std::collections::btree_map::Entry::Vacant(v) = sessions.entry(id) {
            let mut info = rec.info.clone();
            info.session = id;
            w.value(memory::SESSION, &info)?;
            if let Some(mut place) = rec.place.clone() {
                place.session = id;
                w.value(memory::SESSION_PLACE, &place)?;
            }
            v.insert(info);
        }
        exits.insert(
            id,
            Ending {
                code: rec.exit_code,
                code_ticks: rec.exit_ticks,
                ended: rec.ended,
                losses: rec.losses,
                lost: rec.lost_events,
            },
        );
        for chunk in rec.meta.chunks(CHUNK) {
            let mut payload = meta_chunk_prefix(id).to_vec();
            payload.extend_from_slice(chunk);
            w.frame(memory::META_CHUNK, &payload, false)?;
            done.salvage.bytes += chunk.len() as u64;
        }
        metas.entry(id).or_default().extend_from_slice(&rec.meta);
        let mut next_stream = st
            .thread_bytes
            .keys()
            .filter(|k| k.0 == id)
            .map(|k| k.1 + 1)
            .chain(rec.streams.iter().filter_map(|s| s.stream.map(|n| n + 1)))
            .max()
            .unwrap_or(0);
        for s in &rec.streams {
            let stream = s.stream.unwrap_or_else(|| {
                next_stream += 1;
                next_stream - 1
            });
            done.salvage.events += Decoder::new(&s.bytes).take_while(Result::is_ok).count() as u64;
            done.salvage.bytes += s.bytes.len() as u64;
            for chunk in s.bytes.chunks(CHUNK) {
                let mut payload = thread_chunk_prefix(id, stream).to_vec();
                payload.extend_from_slice(chunk);
                w.frame(memory::THREAD_CHUNK, &payload, true)?;
            }
        }
    }
    // Every image whose end was not recorded ended as the collector had learned (it
    // writes that into the segment as soon as it knows), or as the agent saw it exit, or
    // else with the recorder, as far as anyone knows; at the moment the collector learned
    // it, or the agent saw it, or else this one (which a job report does not take for the
    // image's end: `MemoryRecording::origins`).
    let calibration = extend_calibration(st.calibration.clone(), clock);
    let end_ticks = calibration.points.last().map_or(0, |p| p.ticks);
    for (&id, info) in &sessions {
        if st.ended.contains(&id) {
            continue;
        }
        let Ending {
            code,
            code_ticks,
            ended,
            losses,
            lost,
        } = exits.get(&id).copied().unwrap_or_default();
        let (exit, ticks) = match (ended, code) {
            (Some((status, ticks)), _) => (status, ticks.min(end_ticks)),
            (None, Some(code)) => (
                ExitStatus::Exited { code },
                code_ticks.unwrap_or(end_ticks).min(end_ticks),
            ),
            (None, None) => (ExitStatus::RecorderKilled, end_ticks),
        };
        w.value(
            memory::SESSION_END,
            &SessionEnd {
                session: id,
                exit,
                lost_events: lost,
                end_ticks: ticks.max(info.start_ticks),
            },
        )?;
        if losses != Losses::default() && !st.with_losses.contains(&id) {
            w.value(
                memory::SESSION_LOSSES,
                &SessionLosses {
                    session: id,
                    losses,
                },
            )?;
        }
        done.salvage.sessions_ended += 1;
    }
    w.value(FrameType::CALIBRATION, &calibration)?;
    let mut addresses = AddressSet::default();
    for (id, bytes) in &metas {
        addresses.add_meta_stream(*id, bytes);
    }
    let table = BackgroundResolver::start().resolve(addresses, progress);
    w.value(FrameType::SYMBOLS, &table)?;
    w.value(memory::SALVAGED, &done.salvage)?;
    w.frame(FrameType::END, &[], false)?;
    w.out.flush()?;
    drop(w);
    file.sync_data()?;
    Ok(done)
}

/// The file's calibration with a point taken now (a salvage soon after the recording runs
/// on the same boot, whose clock goes on), or a calibration of one point now.
fn extend_calibration(found: Option<Calibration>, clock: Option<ClockKind>) -> Calibration {
    let mut c = found.unwrap_or(Calibration {
        source: match clock {
            Some(ClockKind::Tsc) => ClockSource::Tsc,
            _ => ClockSource::Monotonic,
        },
        points: Vec::new(),
    });
    let ticks = crate::clock_now(c.source == ClockSource::Tsc);
    let point = CalibrationPoint {
        ticks,
        ns: crate::sys::monotonic_ns(),
    };
    if c.points
        .last()
        .is_none_or(|p| p.ticks < point.ticks && p.ns < point.ns)
    {
        c.points.push(point);
    }
    c
}

/// Writes frames after the file's last whole frame.
struct FrameWriter<W: Write> {
    out: W,
    encoder: FrameEncoder,
    scratch: Vec<u8>,
}

impl<W: Write> FrameWriter<W> {
    fn frame(&mut self, ty: FrameType, payload: &[u8], keyed: bool) -> io::Result<()> {
        self.scratch.clear();
        if keyed {
            self.encoder.encode_keyed(ty, payload, &mut self.scratch)?;
        } else {
            self.encoder.encode(ty, payload, &mut self.scratch)?;
        }
        self.out.write_all(&self.scratch)
    }

    fn value<T: serde::Serialize>(&mut self, ty: FrameType, value: &T) -> io::Result<()> {
        let bytes = postcard::to_stdvec(value)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.frame(ty, &bytes, false)
    }
}
