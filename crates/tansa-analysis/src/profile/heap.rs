//! Heap recordings as stack profiles.

use std::io::{Read, Seek};

use rustc_hash::FxHashMap;

use super::{Builder, Line, Mapping, ProcessInfo, Profile, ProfileKind, ValueType, hex};
use crate::memory::aggregate::StackProfileData;
use crate::memory::model::{LogicalFrame, Registry};
use crate::memory::recording::MemoryRecording;
use crate::memory::{Config, MemoryReport};

/// The value types of a heap profile, in order.
pub const VALUE_TYPES: [ValueType; 7] = [
    ValueType {
        name: "alloc_objects",
        unit: "count",
    },
    ValueType {
        name: "alloc_space",
        unit: "bytes",
    },
    ValueType {
        name: "inuse_objects",
        unit: "count",
    },
    ValueType {
        name: "inuse_space",
        unit: "bytes",
    },
    ValueType {
        name: "peak_objects",
        unit: "count",
    },
    ValueType {
        name: "peak_space",
        unit: "bytes",
    },
    ValueType {
        name: "temporary_objects",
        unit: "count",
    },
];

/// Index of `inuse_space`, the default (as in Go heap profiles).
pub const INUSE_SPACE: usize = 3;

/// The value types a profile of a recording made with the leak check at exit (`tansa
/// record --leak-check`) has after [`VALUE_TYPES`]: the blocks it found lost, definitely or
/// indirectly, and their bytes.
pub const LOST_VALUE_TYPES: [ValueType; 2] = [
    ValueType {
        name: "lost_objects",
        unit: "count",
    },
    ValueType {
        name: "lost_space",
        unit: "bytes",
    },
];

/// The stack profile of a heap recording (only process `pid`, or the processes of MPI
/// rank `rank`, if given), and the report of the same pass (for its totals, losses and
/// warnings). `progress` is called with the number of events read, every 2^20.
pub fn profile<R: Read + Seek>(
    rec: &MemoryRecording<R>,
    pid: Option<u32>,
    rank: Option<u32>,
    progress: impl FnMut(u64),
) -> (Profile, MemoryReport) {
    let config = Config {
        pid,
        rank,
        ..Config::default()
    };
    let (report, data) = rec.report_with_stacks(config, progress);
    (from_figures(&rec.registry, &data, &report), report)
}

/// Builds the profile from the aggregator's per-stack figures.
pub fn from_figures(reg: &Registry, data: &StackProfileData, report: &MemoryReport) -> Profile {
    let leak_check = report.leak_check.is_some();
    let mut types = VALUE_TYPES.to_vec();
    if leak_check {
        types.extend(LOST_VALUE_TYPES);
    }
    let mut b = Builder::new(ProfileKind::Heap, types, INUSE_SPACE);
    {
        let p = b.profile_mut();
        p.mappings = reg
            .modules()
            .iter()
            .map(|m| Mapping {
                path: m.path.clone(),
                name: m.name.clone(),
                build_id: hex(&m.build_id),
                kernel: false,
            })
            .collect();
        p.duration_ns = report.duration_ns;
        // A sampled recording: one sample per `rate` bytes on average, as Go heap profiles
        // give their sampling rate (the values are already scaled to estimates).
        p.period = report.sample_rate_bytes.map(|rate| {
            (
                ValueType {
                    name: "space",
                    unit: "bytes",
                },
                i64::try_from(rate).unwrap_or(i64::MAX),
            )
        });
        p.peak_ns = Some(data.peak_ns);
        p.comments = comments(report);
    }
    // A process is a recording and a pid (pids repeat across the recordings of a job). Each
    // program it runs (`exec`) is drawn apart, named after its own executable, as CPU
    // profiles draw it: `sh -c 'exec ./prog'` is `dash [pid]`, then `prog [pid]`. The rank
    // a launcher gives a later image is the process's, its earlier images' too.
    let mut ranks: FxHashMap<(Option<u32>, u32), u32> = FxHashMap::default();
    for pr in &report.processes {
        if let Some(rank) = pr.rank {
            ranks.entry((pr.recording, pr.pid)).or_insert(rank);
        }
    }
    let mut processes: FxHashMap<(Option<u32>, u32, &str), u32> = FxHashMap::default();
    let mut by_session: FxHashMap<u32, u32> = FxHashMap::default();
    for pr in &report.processes {
        let key = (pr.recording, pr.pid, pr.exe.as_str());
        let index = *processes.entry(key).or_insert_with(|| {
            let p = b.profile_mut();
            p.processes.push(ProcessInfo {
                pid: pr.pid,
                name: crate::program::image_name(&pr.exe, &pr.command),
                exe: pr.exe.clone(),
                rank: ranks.get(&(pr.recording, pr.pid)).copied(),
                host: pr.host.clone(),
            });
            (p.processes.len() - 1) as u32
        });
        by_session.insert(pr.session, index);
    }
    let mut unknown: FxHashMap<u32, u32> = FxHashMap::default();
    for f in &data.stacks {
        let process = match by_session.get(&f.session.0) {
            Some(&i) => i,
            None => *unknown.entry(f.pid).or_insert_with(|| {
                let p = b.profile_mut();
                p.processes.push(ProcessInfo {
                    pid: f.pid,
                    name: String::new(),
                    exe: String::new(),
                    rank: None,
                    host: None,
                });
                (p.processes.len() - 1) as u32
            }),
        };
        let mut locations = Vec::new();
        if let Some(stack) = reg.stack(f.session, f.stack) {
            for segment in stack.segments() {
                locations.push(location(&mut b, segment));
            }
        }
        if locations.is_empty() {
            // A block whose stack was not recorded still counts.
            let function = b.function(Some("[no stack]"), None);
            locations.push(b.location(None, 0, vec![Line { function, line: 0 }]));
        }
        let values = [
            clamp(f.alloc_objects),
            clamp(f.alloc_bytes),
            clamp(f.live_objects),
            clamp(f.live_bytes),
            clamp(f.peak_objects),
            clamp(f.peak_bytes),
            clamp(f.temporary_objects),
            clamp(f.lost_objects),
            clamp(f.lost_bytes),
        ];
        let n = if leak_check {
            values.len()
        } else {
            VALUE_TYPES.len()
        };
        b.add(locations, process, None, &values[..n]);
    }
    b.finish()
}

fn location(b: &mut Builder, segment: &[LogicalFrame]) -> u32 {
    let physical = segment.last().expect("segments are never empty");
    let lines = segment
        .iter()
        .map(|f| Line {
            function: b.function(f.function.as_deref(), f.file.as_deref()),
            line: f.line,
        })
        .collect();
    b.location(physical.module, physical.offset, lines)
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What a reader of an export must know: losses and damage.
fn comments(report: &MemoryReport) -> Vec<String> {
    let mut c = Vec::new();
    if let Some(rate) = report.sample_rate_bytes {
        c.push(format!(
            "sampled recording: every figure is an estimate from allocations sampled every \
             {rate} bytes on average"
        ));
    }
    // Counts come from the file: a damaged one can hold any.
    let lost = report
        .processes
        .iter()
        .fold(0u64, |sum, p| sum.saturating_add(p.lost_events));
    if lost > 0 {
        c.push(format!(
            "{lost} events were lost while recording: figures are a lower bound"
        ));
    }
    if !report.unrecorded.is_empty() {
        c.push(format!(
            "{} processes ran without being recorded",
            report.unrecorded.len()
        ));
    }
    c.extend(report.warnings.iter().cloned());
    c
}
