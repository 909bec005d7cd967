//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>): one
//! "sampled" profile per weight (and per MPI rank with [`Options::by_rank`]), sharing one
//! frame table.

use std::io::Write;

use rustc_hash::FxHashMap;
use serde::Serialize;
use tansa_analysis::profile::{Profile, ProfileKind};

use crate::ExportError;

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<Sampled>,
    name: &'a str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<Frame>,
}

#[derive(Serialize)]
struct Frame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
}

#[derive(Serialize)]
struct Sampled {
    #[serde(rename = "type")]
    ty: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: i64,
    #[serde(rename = "endValue")]
    end_value: i64,
    samples: Vec<Vec<usize>>,
    weights: Vec<i64>,
}

/// The weights exported, by value type name, with speedscope's unit.
fn exported(kind: ProfileKind) -> &'static [(&'static str, &'static str, &'static str)] {
    match kind {
        ProfileKind::Heap => &[
            ("peak_space", "bytes", "bytes live at the peak"),
            ("alloc_space", "bytes", "bytes allocated"),
            ("inuse_space", "bytes", "bytes never freed"),
            ("alloc_objects", "none", "allocations"),
        ],
        ProfileKind::Cpu => &[("cpu", "nanoseconds", "CPU time")],
    }
}

/// How a profile is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Start each stack with its process (`name [pid]`, with its rank and host when known).
    pub by_process: bool,
    /// One profile per MPI rank and weight (`NAME: rank N: WEIGHT`, the processes without
    /// a rank last as `(no rank)`), so that speedscope lists the ranks side by side.
    pub by_rank: bool,
}

/// Writes `profile` as a speedscope file named `name`.
pub fn write(
    profile: &Profile,
    name: &str,
    options: Options,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    let by_process = options.by_process;
    let mut frames: Vec<Frame> = Vec::new();
    // A frame is a function (speedscope aggregates by frame): the call site's line would
    // split one function into several frames.
    let mut frame_index: FxHashMap<(String, Option<String>), usize> = FxHashMap::default();
    let mut intern = |name: String, file: Option<String>| {
        let key = (name, file);
        if let Some(&i) = frame_index.get(&key) {
            return i;
        }
        let i = frames.len();
        frames.push(Frame {
            name: key.0.clone(),
            file: key.1.clone(),
        });
        frame_index.insert(key, i);
        i
    };
    // Each sample's stack, outermost first, as frame indexes.
    let stacks: Vec<Vec<usize>> = profile
        .samples
        .iter()
        .map(|s| {
            let mut stack = Vec::new();
            if by_process && let Some(p) = profile.processes.get(s.process as usize) {
                stack.push(intern(p.frame_name(), None));
            }
            for &l in s.locations.iter().rev() {
                let Some(loc) = profile.locations.get(l as usize) else {
                    continue;
                };
                for line in loc.lines.iter().rev() {
                    let file = profile
                        .functions
                        .get(line.function as usize)
                        .and_then(|f| f.file.as_deref().map(str::to_string));
                    stack.push(intern(profile.frame_name(loc, line), file));
                }
            }
            stack
        })
        .collect();
    // The rank of each sample's process; by rank, the ranks profiles are split in, in
    // order (ascending, then the processes without one).
    let rank_of = |process: u32| profile.processes.get(process as usize).and_then(|p| p.rank);
    let groups: Vec<Option<u32>> = if options.by_rank {
        let ranks: std::collections::BTreeSet<(bool, Option<u32>)> = profile
            .samples
            .iter()
            .map(|s| rank_of(s.process))
            .map(|r| (r.is_none(), r))
            .collect();
        ranks.into_iter().map(|(_, r)| r).collect()
    } else {
        vec![None]
    };
    let mut profiles = Vec::new();
    for &(value, unit, title) in exported(profile.kind) {
        let Some(index) = profile.value_index(value) else {
            continue;
        };
        for &group in &groups {
            let mut samples = Vec::new();
            let mut weights = Vec::new();
            for (s, stack) in profile.samples.iter().zip(&stacks) {
                let w = s.values.get(index).copied().unwrap_or(0);
                if w > 0 && (!options.by_rank || rank_of(s.process) == group) {
                    samples.push(stack.clone());
                    weights.push(w);
                }
            }
            let total = weights.iter().fold(0i64, |a, &w| a.saturating_add(w));
            let name = match (options.by_rank, group) {
                (false, _) => format!("{name}: {title}"),
                (true, Some(r)) => format!("{name}: rank {r}: {title}"),
                (true, None) => format!("{name}: (no rank): {title}"),
            };
            profiles.push(Sampled {
                ty: "sampled",
                name,
                unit,
                start_value: 0,
                end_value: total,
                samples,
                weights,
            });
        }
    }
    let file = File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames },
        profiles,
        name,
        active_profile_index: 0,
        exporter: format!("tansa {}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_writer(&mut *out, &file).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}
