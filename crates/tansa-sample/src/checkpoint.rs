//! Writing a CPU recording as it grows: checkpoint groups while the target runs, so that a
//! recorder killed outright (`SIGKILL`, the OOM killer) leaves what it had reduced up to
//! its last checkpoint (see `tansa_format::cpu` for the layout, and
//! [`crate::complete_leftover`] for completing such a file).
//!
//! A group holds only what changed since the group before: the counts' increases (kept
//! here, per key, as what was written so far), the stacks and timeline entries added, and
//! the info, process and module lists in full (they replace the earlier ones). The first
//! group is written [`FIRST`] into the run; until [`MIN_GAP`] into it, each later one when
//! the time elapsed has doubled (a kill loses at most the last half of a short run), then
//! each once a tenth of the time elapsed has passed since the last, and at least
//! [`MIN_GAP`] apart: a long run writes some 25 groups per tenfold of its length, so its
//! hot addresses are repeated a few dozen times at most, and a kill loses at most a tenth
//! of the run.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use tansa_format::container::{FrameType, Kind, Writer};
use tansa_format::cpu::{
    self, AddressCount, Checkpoint, Loc, Mode, Stack, StackCount, TimelineEntry,
};
use tansa_format::meta::RecordingMeta;

use crate::builder::{CpuRecordingBuilder, split_stack};

/// When the first checkpoint is written.
pub const FIRST: Duration = Duration::from_millis(500);
/// The longest time between two checkpoints at the start, and the shortest later.
pub const MIN_GAP: Duration = Duration::from_secs(2);
/// Entries per counts frame.
pub(crate) const CHUNK: usize = 1 << 16;

type AddressKey = (u32, Loc, Option<Loc>, Mode);

/// The time from a checkpoint written `elapsed` into sampling to the next: the time
/// elapsed (doubling it) up to [`MIN_GAP`], then a tenth of it, at least [`MIN_GAP`].
fn next_gap(elapsed: Duration) -> Duration {
    (elapsed / 10).max(elapsed.min(MIN_GAP))
}

/// A CPU recording being written: the file header and description at once, checkpoint
/// groups while sampling ([`RecordingOut::checkpoint_if_due`]), the rest when it is
/// finished ([`CpuRecordingBuilder::finish_timed`]).
#[derive(Debug)]
pub struct RecordingOut<W: Write> {
    pub(crate) writer: Writer<W>,
    started: Instant,
    /// When the next checkpoint is due; `None`: no checkpoints.
    next: Option<Instant>,
    addresses: FxHashMap<AddressKey, u64>,
    stack_counts: FxHashMap<(u32, u32, u32), u64>,
    stacks: usize,
    timeline: usize,
    groups: u32,
    boot_id: String,
}

impl<W: Write> RecordingOut<W> {
    /// Writes the file header and `meta` to `out`; with `checkpoints`, groups are written
    /// while sampling, timed from now.
    pub fn new(out: W, meta: &RecordingMeta, checkpoints: bool) -> io::Result<Self> {
        let mut writer = Writer::new(out, Kind::Cpu)?;
        writer.value(FrameType::META, meta)?;
        writer.flush()?;
        let started = Instant::now();
        Ok(RecordingOut {
            writer,
            started,
            next: checkpoints.then(|| started + FIRST),
            addresses: FxHashMap::default(),
            stack_counts: FxHashMap::default(),
            stacks: 0,
            timeline: 0,
            groups: 0,
            boot_id: if checkpoints {
                boot_id()
            } else {
                String::new()
            },
        })
    }

    /// Writes a checkpoint group of `b` if one is due. A group that cannot be written
    /// stops the checkpoints and is noted in the recording's description (the end of the
    /// recording will meet the same trouble, and say so).
    pub fn checkpoint_if_due(&mut self, b: &mut CpuRecordingBuilder) {
        let Some(next) = self.next else {
            return;
        };
        let now = Instant::now();
        if now < next {
            return;
        }
        match self.checkpoint(b) {
            Ok(()) => {
                let elapsed = now.duration_since(self.started);
                self.next = Some(now + next_gap(elapsed));
            }
            Err(e) => {
                self.next = None;
                b.info_mut().notes.push(format!(
                    "checkpoints stopped after {} group(s): {e} (a recorder killed from then \
                     on leaves only what the last one held)",
                    self.groups
                ));
            }
        }
    }

    /// Writes one checkpoint group and flushes it to the file.
    fn checkpoint(&mut self, b: &CpuRecordingBuilder) -> io::Result<()> {
        self.write_changes(b, false)?;
        let mut summary = b.summary();
        summary.wall_ns = duration_ns(self.started.elapsed());
        self.writer.value(
            cpu::CHECKPOINT,
            &Checkpoint {
                summary,
                boot_id: self.boot_id.clone(),
            },
        )?;
        self.writer.flush()?;
        self.groups += 1;
        Ok(())
    }

    /// Writes what changed in `b` since the last group: the description, processes and
    /// modules in full, the counts' increases, the new stacks and timeline entries. The
    /// `last` time (the end of the recording) keeps no note of what it wrote.
    pub(crate) fn write_changes(&mut self, b: &CpuRecordingBuilder, last: bool) -> io::Result<()> {
        let w = &mut self.writer;
        w.value(cpu::INFO, &b.info)?;
        w.value(cpu::PROCESSES, &b.processes)?;
        w.value(cpu::MODULES, &b.modules)?;
        let mut addresses: Vec<AddressCount> = b
            .addresses
            .iter()
            .filter_map(|(&key, &count)| {
                let delta = increase(&mut self.addresses, key, count, last)?;
                let (process, pc, caller, mode) = key;
                Some(AddressCount {
                    process,
                    pc,
                    caller,
                    mode,
                    count: delta,
                })
            })
            .collect();
        addresses.sort_by_key(|a| (a.process, a.pc, a.caller, a.mode == Mode::Kernel));
        for chunk in addresses.chunks(CHUNK) {
            w.value(cpu::ADDRESSES, &chunk)?;
        }
        let stacks: Vec<Stack> = b.stacks[self.stacks..]
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let (frames, kernel_frames, truncated) = split_stack(key);
                Stack {
                    id: (self.stacks + i) as u32,
                    frames: frames.to_vec(),
                    kernel_frames,
                    truncated,
                }
            })
            .collect();
        for chunk in stacks.chunks(CHUNK) {
            w.value(cpu::STACKS, &chunk)?;
        }
        self.stacks = b.stacks.len();
        let mut stack_counts: Vec<StackCount> = b
            .stack_counts
            .iter()
            .filter_map(|(&key, &count)| {
                let delta = increase(&mut self.stack_counts, key, count, last)?;
                let (process, tid, stack) = key;
                Some(StackCount {
                    process,
                    tid,
                    stack,
                    count: delta,
                })
            })
            .collect();
        stack_counts.sort_by_key(|s| (s.process, s.tid, s.stack));
        for chunk in stack_counts.chunks(CHUNK) {
            w.value(cpu::STACK_COUNTS, &chunk)?;
        }
        if let Some(t) = &b.timeline {
            let new: &[TimelineEntry] = t.get(self.timeline..).unwrap_or_default();
            for chunk in new.chunks(CHUNK) {
                w.value(cpu::TIMELINE, &chunk)?;
            }
            self.timeline = t.len();
        }
        if b.unsampled.cpu_ns > 0 {
            w.value(cpu::UNSAMPLED, &b.unsampled)?;
        }
        if b.short_stack_copies.samples > 0 {
            w.value(cpu::SHORT_STACK_COPIES, &b.short_stack_copies)?;
        }
        Ok(())
    }
}

/// Whether the recording at `path` holds a whole checkpoint group: what a recorder that
/// stopped without finishing it (killed, or failed) leaves something to complete from
/// (`crate::complete_leftover`).
pub fn holds_checkpoint(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(mut reader) = tansa_format::container::Reader::new(io::BufReader::new(file)) else {
        return false;
    };
    while let Ok(Some(frame)) = reader.next_frame() {
        if frame.ty == cpu::CHECKPOINT {
            return true;
        }
    }
    false
}

/// How much `count` (the count of `key` now) grew since it was last written, if at all;
/// unless this is the `last` time, it is noted as written.
fn increase<K: std::hash::Hash + Eq>(
    written: &mut FxHashMap<K, u64>,
    key: K,
    count: u64,
    last: bool,
) -> Option<u64> {
    if last {
        let before = written.get(&key).copied().unwrap_or(0);
        return count.checked_sub(before).filter(|&d| d > 0);
    }
    let before = written.entry(key).or_insert(0);
    let delta = count.checked_sub(*before).filter(|&d| d > 0)?;
    *before = count;
    Some(delta)
}

fn duration_ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// This boot's id, or empty if it cannot be read.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::builder::tests::test_builder;
    use crate::{ProcessInfo, SampleInput};
    use tansa_analysis::cpu::CpuRecording;

    /// The schedule: half a second in, then doubling up to 2 s apart, then a tenth of the
    /// time elapsed.
    #[test]
    fn checkpoints_come_at_half_a_second_then_doubling_then_a_tenth_of_the_run() {
        let mut at = FIRST;
        let mut times = vec![at];
        while at < Duration::from_secs(60) {
            at += next_gap(at);
            times.push(at);
        }
        let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
        assert_eq!(ms[..6], [500, 1000, 2000, 4000, 6000, 8000]);
        assert!(ms.contains(&20_000) && ms.contains(&22_000), "{ms:?}");
        assert!(ms.contains(&24_200), "{ms:?}");
        // A long run: some 25 groups per tenfold of its length.
        let mut n = 0;
        let mut at = Duration::from_secs(100);
        while at < Duration::from_secs(1000) {
            at += next_gap(at);
            n += 1;
        }
        assert!((20..=30).contains(&n), "{n} groups from 100 s to 1000 s");
    }

    type Totals = (
        BTreeMap<(u32, u64, Option<u64>), u64>,
        BTreeMap<(u32, u32, u32), u64>,
    );

    fn totals_of_builder(b: &CpuRecordingBuilder) -> Totals {
        (
            b.addresses
                .iter()
                .map(|(&(p, pc, caller, _), &n)| ((p, pc.offset, caller.map(|c| c.offset)), n))
                .collect(),
            b.stack_counts.iter().map(|(&k, &n)| (k, n)).collect(),
        )
    }

    fn totals_of(rec: &CpuRecording) -> Totals {
        let mut t = Totals::default();
        for a in &rec.addresses {
            *t.0.entry((a.process, a.pc.offset, a.caller.map(|c| c.offset)))
                .or_default() += a.count;
        }
        for s in &rec.stack_counts {
            *t.1.entry((s.process, s.tid, s.stack)).or_default() += s.count;
        }
        t
    }

    /// Three rounds of samples over a few addresses and chains (new ones each round, and
    /// old ones again), a checkpoint after each of the first two, then the end. Returns
    /// the file, and the totals at each checkpoint and at the end.
    fn recording() -> (Vec<u8>, Vec<Totals>) {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut b = test_builder();
        let mut out = RecordingOut::new(file.reopen().unwrap(), &b.meta.clone(), true).unwrap();
        let p = b.add_process(ProcessInfo {
            pid: 1,
            comm: "p".into(),
            ..ProcessInfo::default()
        });
        let mut at = Vec::new();
        for round in 0..3u64 {
            for i in 0..(50 + 30 * round) {
                let user = [
                    0x1000 + (i % (3 + round)) * 16,
                    0x2000 + (i % 2) * 8,
                    0x3000,
                ];
                assert!(b.add_sample(&SampleInput {
                    process: p,
                    tid: 1 + (i % 2) as u32,
                    user: &user,
                    ..SampleInput::default()
                }));
            }
            if round < 2 {
                out.checkpoint(&b).unwrap();
            }
            at.push(totals_of_builder(&b));
        }
        b.finish_timed(out, &mut crate::phases::Phases::new())
            .unwrap();
        (std::fs::read(file.path()).unwrap(), at)
    }

    #[test]
    fn checkpoint_groups_add_up_and_a_file_cut_anywhere_reads_to_a_whole_group() {
        let (bytes, at) = recording();
        let whole = CpuRecording::open(&bytes[..]).unwrap();
        assert!(!whole.damaged, "{:?}", whole.warnings);
        assert_eq!(whole.checkpoints, 2);
        assert_eq!(totals_of(&whole), at[2]);
        assert_eq!(whole.summary.unwrap().samples, 50 + 80 + 110);
        // Equal keys were added up: one entry per key, as in a recording without groups.
        assert_eq!(whole.addresses.len(), at[2].0.len());
        assert_eq!(whole.stack_counts.len(), at[2].1.len());

        // Cut at every byte: the file reads as it was at the last whole group (or, before
        // the first, not at all), never part-way into one.
        let mut seen = [0usize; 2];
        for len in 0..bytes.len() {
            let Ok(rec) = CpuRecording::open(&bytes[..len]) else {
                assert!(seen == [0, 0], "unreadable at {len} after a checkpoint");
                continue;
            };
            assert!(rec.damaged, "cut at {len}");
            let k = rec.checkpoints as usize;
            if k == 0 {
                // Cut in the first group: read up to the damage, as a file without
                // checkpoints is (and not completed: nothing to complete from).
                assert!(
                    seen == [0, 0] && rec.checkpoint_end.is_none(),
                    "cut at {len}"
                );
                continue;
            }
            assert!(k <= 2, "cut at {len}: {k} checkpoints");
            if !rec.read_to_checkpoint {
                // Cut after the summary: only the end marker is missing.
                assert_eq!(totals_of(&rec), at[2], "cut at {len}");
                assert_eq!(rec.summary.unwrap().samples, 240, "cut at {len}");
                continue;
            }
            seen[k - 1] += 1;
            assert_eq!(totals_of(&rec), at[k - 1], "cut at {len}");
            let samples: u64 = at[k - 1].1.values().sum();
            assert_eq!(rec.summary.unwrap().samples, samples, "cut at {len}");
            for s in &rec.stack_counts {
                assert!(
                    rec.stack(s.stack).is_some(),
                    "cut at {len}: stack {}",
                    s.stack
                );
            }
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    }
}
