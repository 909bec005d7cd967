//! Collapsed (folded) stacks: `outer;...;inner value`, one line per distinct stack.

use std::collections::BTreeMap;
use std::io::Write;

use tansa_analysis::profile::Profile;

use crate::ExportError;

/// Options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Value index (see [`crate::weight_index`]).
    pub value: usize,
    /// Start each stack with its process, `name [pid]` (with its rank and host when known).
    pub by_process: bool,
    /// Start each stack with its MPI rank, `rank N` (`(no rank)` for the others), before
    /// its process if that is asked too.
    pub by_rank: bool,
}

/// The distinct stacks with their summed values (stacks whose value is zero are left
/// out), sorted by stack. Semicolons in names are replaced by `:` (a `;` separates frames).
pub fn stacks(profile: &Profile, options: Options) -> Vec<(String, i64)> {
    let mut folded: BTreeMap<String, i64> = BTreeMap::new();
    for s in &profile.samples {
        let v = s.values.get(options.value).copied().unwrap_or(0);
        if v == 0 {
            continue;
        }
        let mut frames: Vec<String> = Vec::new();
        if let Some(p) = profile.processes.get(s.process as usize) {
            if options.by_rank {
                frames.push(p.rank_frame());
            }
            if options.by_process {
                frames.push(p.frame_name());
            }
        }
        frames.extend(profile.frame_names(s));
        let line = frames
            .iter()
            .map(|f| f.replace(';', ":"))
            .collect::<Vec<_>>()
            .join(";");
        let e = folded.entry(line).or_default();
        *e = e.saturating_add(v);
    }
    folded.into_iter().collect()
}

/// Writes the collapsed stacks.
pub fn write(profile: &Profile, options: Options, out: &mut dyn Write) -> Result<(), ExportError> {
    for (stack, v) in stacks(profile, options) {
        writeln!(out, "{stack} {v}")?;
    }
    Ok(())
}
