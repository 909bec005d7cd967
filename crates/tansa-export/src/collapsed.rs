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
    /// Start each stack with its process, `name [pid]`.
    pub by_process: bool,
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
        if options.by_process
            && let Some(p) = profile.processes.get(s.process as usize)
        {
            frames.push(format!("{} [{}]", p.name, p.pid));
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
