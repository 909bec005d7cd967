//! Decoding the side-band records that describe processes: mappings, names, forks,
//! exits and losses.

use crate::attr::SampleFormat;
use crate::ring::{RecordKind, RecordRef};

/// `PERF_RECORD_MISC_COMM_EXEC`: the name changed because of `exec`.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an `MMAP2` record carries a build id.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `PERF_RECORD_MMAP2`.
const RECORD_MMAP2: u32 = 10;

/// The sample-id trailer of a side-band record (with [`crate::EventAttr::sample_id_all`]);
/// fields the format lacks are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleId {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp.
    pub time: u64,
    /// CPU.
    pub cpu: u32,
}

/// A mapping (`PERF_RECORD_MMAP2` or `PERF_RECORD_MMAP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapRecord<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Offset in the file.
    pub pgoff: u64,
    /// `PROT_*` bits (0 for the old `MMAP` record, which only reports executable maps).
    pub prot: u32,
    /// Build id, when the kernel sent one instead of device and inode.
    pub build_id: Option<&'a [u8]>,
    /// Path (`//anon`, `[vdso]`, ... for special mappings).
    pub filename: &'a [u8],
}

impl MmapRecord<'_> {
    /// Whether the mapping is executable.
    pub fn is_exec(&self) -> bool {
        self.prot == 0 || self.prot & libc::PROT_EXEC as u32 != 0
    }
}

/// A fork or an exit (`PERF_RECORD_FORK`, `PERF_RECORD_EXIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRecord {
    /// Process id (of the new or ending task).
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// Timestamp.
    pub time: u64,
}

/// A decoded side-band record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideBand<'a> {
    /// A new mapping.
    Mmap(MmapRecord<'a>),
    /// A thread's new name.
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The name (at most 15 bytes).
        name: &'a [u8],
        /// Whether it comes from `exec` (a new program image) rather than a rename.
        exec: bool,
    },
    /// A new process or thread (`pid == ppid` and `tid != pid` for a thread).
    Fork(TaskRecord),
    /// An ending process or thread.
    Exit(TaskRecord),
    /// Records the kernel dropped because the ring was full.
    Lost(u64),
    /// Samples dropped before they reached the ring.
    LostSamples(u64),
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn c_string(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

/// Size of the sample-id trailer for `format`.
pub fn sample_id_len(format: SampleFormat) -> usize {
    [
        SampleFormat::TID,
        SampleFormat::TIME,
        SampleFormat::ID,
        SampleFormat::STREAM_ID,
        SampleFormat::CPU,
        SampleFormat::IDENTIFIER,
    ]
    .iter()
    .filter(|f| format.contains(**f))
    .count()
        * 8
}

impl<'a> SideBand<'a> {
    /// Decodes a side-band record; `None` for other record types or a malformed body.
    /// `format` is the event's sample format and `sample_id_all` whether its records
    /// carry the sample-id trailer.
    pub fn parse(
        record: &RecordRef<'a>,
        format: SampleFormat,
        sample_id_all: bool,
    ) -> Option<(SideBand<'a>, SampleId)> {
        let trailer = if sample_id_all {
            sample_id_len(format)
        } else {
            0
        };
        let body = record.body;
        let main = body.get(..body.len().checked_sub(trailer)?)?;
        let id = if sample_id_all {
            parse_sample_id(&body[main.len()..], format)
        } else {
            SampleId::default()
        };
        let sb = match record.kind() {
            RecordKind::Mmap if record.ty == RECORD_MMAP2 => {
                let has_build_id = record.misc & MISC_MMAP_BUILD_ID != 0;
                let build_id = if has_build_id {
                    let n = usize::from(*main.get(32)?).min(20);
                    Some(main.get(36..36 + n)?)
                } else {
                    None
                };
                SideBand::Mmap(MmapRecord {
                    pid: u32_at(main, 0)?,
                    tid: u32_at(main, 4)?,
                    addr: u64_at(main, 8)?,
                    len: u64_at(main, 16)?,
                    pgoff: u64_at(main, 24)?,
                    prot: u32_at(main, 56)?,
                    build_id,
                    filename: c_string(main.get(64..)?),
                })
            }
            RecordKind::Mmap => SideBand::Mmap(MmapRecord {
                pid: u32_at(main, 0)?,
                tid: u32_at(main, 4)?,
                addr: u64_at(main, 8)?,
                len: u64_at(main, 16)?,
                pgoff: u64_at(main, 24)?,
                prot: 0,
                build_id: None,
                filename: c_string(main.get(32..)?),
            }),
            RecordKind::Comm => SideBand::Comm {
                pid: u32_at(main, 0)?,
                tid: u32_at(main, 4)?,
                name: c_string(main.get(8..)?),
                exec: record.misc & MISC_COMM_EXEC != 0,
            },
            RecordKind::Fork | RecordKind::Exit => {
                let t = TaskRecord {
                    pid: u32_at(main, 0)?,
                    ppid: u32_at(main, 4)?,
                    tid: u32_at(main, 8)?,
                    ptid: u32_at(main, 12)?,
                    time: u64_at(main, 16)?,
                };
                if record.kind() == RecordKind::Fork {
                    SideBand::Fork(t)
                } else {
                    SideBand::Exit(t)
                }
            }
            RecordKind::Lost => SideBand::Lost(u64_at(main, 8)?),
            RecordKind::LostSamples => SideBand::LostSamples(u64_at(main, 0)?),
            _ => return None,
        };
        Some((sb, id))
    }
}

fn parse_sample_id(t: &[u8], format: SampleFormat) -> SampleId {
    let mut id = SampleId::default();
    let mut at = 0;
    if format.contains(SampleFormat::TID) {
        id.pid = u32_at(t, at).unwrap_or(0);
        id.tid = u32_at(t, at + 4).unwrap_or(0);
        at += 8;
    }
    if format.contains(SampleFormat::TIME) {
        id.time = u64_at(t, at).unwrap_or(0);
        at += 8;
    }
    for f in [SampleFormat::ID, SampleFormat::STREAM_ID] {
        if format.contains(f) {
            at += 8;
        }
    }
    if format.contains(SampleFormat::CPU) {
        id.cpu = u32_at(t, at).unwrap_or(0);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap2_with_build_id_and_trailer() {
        let format = SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU;
        let mut b = Vec::new();
        b.extend(7u32.to_ne_bytes());
        b.extend(8u32.to_ne_bytes());
        b.extend(0x5000u64.to_ne_bytes());
        b.extend(0x2000u64.to_ne_bytes());
        b.extend(0x1000u64.to_ne_bytes());
        b.push(3); // build id size
        b.extend([0u8; 3]);
        let mut bid = [0u8; 20];
        bid[..3].copy_from_slice(&[0xab, 0xcd, 0xef]);
        b.extend(bid);
        b.extend(5u32.to_ne_bytes()); // prot r-x
        b.extend(2u32.to_ne_bytes()); // flags
        b.extend(b"/lib/x.so\0\0\0\0\0\0\0");
        // trailer: pid/tid, time, cpu
        b.extend(7u32.to_ne_bytes());
        b.extend(8u32.to_ne_bytes());
        b.extend(42u64.to_ne_bytes());
        b.extend(1u64.to_ne_bytes());
        let r = RecordRef {
            ty: RECORD_MMAP2,
            misc: MISC_MMAP_BUILD_ID,
            body: &b,
        };
        let (sb, id) = SideBand::parse(&r, format, true).unwrap();
        assert_eq!(
            id,
            SampleId {
                pid: 7,
                tid: 8,
                time: 42,
                cpu: 1
            }
        );
        let SideBand::Mmap(m) = sb else {
            panic!("not an mmap: {sb:?}")
        };
        assert_eq!((m.addr, m.len, m.pgoff), (0x5000, 0x2000, 0x1000));
        assert_eq!(m.build_id, Some(&[0xab, 0xcd, 0xef][..]));
        assert_eq!(m.filename, b"/lib/x.so");
        assert!(m.is_exec());
    }

    #[test]
    fn comm_exec_fork_and_short_bodies() {
        let mut b = Vec::new();
        b.extend(5u32.to_ne_bytes());
        b.extend(5u32.to_ne_bytes());
        b.extend(b"worker\0\0");
        let r = RecordRef {
            ty: 3,
            misc: MISC_COMM_EXEC,
            body: &b,
        };
        assert_eq!(
            SideBand::parse(&r, SampleFormat::default(), false).map(|x| x.0),
            Some(SideBand::Comm {
                pid: 5,
                tid: 5,
                name: b"worker",
                exec: true
            })
        );
        let f: Vec<u8> = [9u32, 5, 9, 5]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .chain(77u64.to_ne_bytes())
            .collect();
        let r = RecordRef {
            ty: 7,
            misc: 0,
            body: &f,
        };
        assert!(matches!(
            SideBand::parse(&r, SampleFormat::default(), false),
            Some((
                SideBand::Fork(TaskRecord {
                    pid: 9,
                    ppid: 5,
                    time: 77,
                    ..
                }),
                _
            ))
        ));
        let r = RecordRef {
            ty: 7,
            misc: 0,
            body: &f[..10],
        };
        assert_eq!(SideBand::parse(&r, SampleFormat::default(), false), None);
    }
}
