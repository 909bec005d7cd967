//! CPU recordings as stack profiles.

use rustc_hash::FxHashMap;
use tansa_format::cpu::{Loc, ModuleKind, NO_MODULE};

use super::{Builder, Line, Mapping, ProcessInfo, Profile, ProfileKind, ValueType, hex};
use crate::cpu::names::Names;
use crate::cpu::recording::CpuRecording;

/// The value types of a CPU profile, in order: samples, then CPU time (samples times the
/// period).
pub const VALUE_TYPES: [ValueType; 2] = [
    ValueType {
        name: "samples",
        unit: "count",
    },
    ValueType {
        name: "cpu",
        unit: "nanoseconds",
    },
];

/// The stack profile of a CPU recording (only process `pid`, if given). Samples come from
/// the call-chain table; a recording without chains gives each sample its interrupted
/// address and, when known, its caller.
pub fn profile(rec: &CpuRecording, pid: Option<u32>) -> Profile {
    let names = Names::new(rec);
    let period = i64::try_from(rec.info.period_ns).unwrap_or(i64::MAX);
    let mut b = Builder::new(ProfileKind::Cpu, VALUE_TYPES.to_vec(), 1);
    {
        let p = b.profile_mut();
        p.period = Some((VALUE_TYPES[1], period));
        p.mappings = rec
            .modules
            .iter()
            .map(|m| Mapping {
                path: m.path.clone(),
                name: names.module(m.id).to_string(),
                build_id: hex(&m.build_id),
                kernel: m.kind == ModuleKind::Kernel,
            })
            .collect();
        let summary = rec.summary.unwrap_or_default();
        p.duration_ns = summary.wall_ns;
        p.comments = rec.warnings.clone();
        if summary.lost_samples.saturating_add(summary.lost_records) > 0 {
            p.comments.push(format!(
                "{} samples and {} records were lost (the reader fell behind): counts are \
                 a lower bound",
                summary.lost_samples, summary.lost_records
            ));
        }
    }
    let wanted =
        |process: u32| pid.is_none_or(|pid| rec.process(process).is_some_and(|p| p.pid == pid));
    let mut processes: FxHashMap<u32, u32> = FxHashMap::default();
    let mut process_index = |b: &mut Builder, process: u32| {
        *processes.entry(process).or_insert_with(|| {
            let p = b.profile_mut();
            let (pid, name, exe) = rec
                .process(process)
                .map_or((0, String::new(), String::new()), |p| {
                    (p.pid, p.comm.clone(), p.exe.clone())
                });
            p.processes.push(ProcessInfo {
                pid,
                name,
                exe,
                rank: None,
                host: None,
            });
            (p.processes.len() - 1) as u32
        })
    };
    let mut locations_of: FxHashMap<Loc, u32> = FxHashMap::default();
    let mut location = |b: &mut Builder, loc: Loc| {
        *locations_of
            .entry(loc)
            .or_insert_with(|| location(b, &names, loc))
    };
    if rec.stack_counts.is_empty() {
        for a in rec.addresses.iter().filter(|a| wanted(a.process)) {
            let mut locations = vec![location(&mut b, a.pc)];
            if let Some(caller) = a.caller {
                locations.push(location(&mut b, caller));
            }
            let process = process_index(&mut b, a.process);
            let n = i64::try_from(a.count).unwrap_or(i64::MAX);
            b.add(locations, process, None, &[n, n.saturating_mul(period)]);
        }
    } else {
        for c in rec.stack_counts.iter().filter(|c| wanted(c.process)) {
            let Some(stack) = rec.stack(c.stack) else {
                continue;
            };
            let locations: Vec<u32> = stack
                .frames
                .iter()
                .map(|&loc| location(&mut b, loc))
                .collect();
            let process = process_index(&mut b, c.process);
            let n = i64::try_from(c.count).unwrap_or(i64::MAX);
            b.add(
                locations,
                process,
                Some(c.tid),
                &[n, n.saturating_mul(period)],
            );
        }
    }
    b.finish()
}

fn location(b: &mut Builder, names: &Names<'_>, loc: Loc) -> u32 {
    let frames = names.frames(loc);
    let lines = if frames.is_empty() {
        vec![Line {
            function: b.function(None, None),
            line: 0,
        }]
    } else {
        frames
            .iter()
            .map(|f| Line {
                // Two functions of one name in a module stay two (`helper@0x1180`), in
                // flame graphs and collapsed stacks as in the report.
                function: b.function(f.function.map(|_| f.name()).as_deref(), f.file),
                line: f.line,
            })
            .collect()
    };
    let mapping = (loc.module != NO_MODULE
        && (loc.module as usize) < b.profile_mut().mappings.len())
    .then_some(loc.module);
    b.location(mapping, loc.offset, lines)
}
