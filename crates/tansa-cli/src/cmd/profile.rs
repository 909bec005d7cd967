//! Opening a heap or CPU recording as a stack profile: what `tansa export` and
//! `tansa flamegraph` draw from.

use std::fs::File;
use std::path::Path;

use tansa_analysis::profile::{self, Profile};

use super::{options, report_cpu};
use crate::exit;

/// A recording reduced to its stack profile.
#[derive(Debug)]
pub struct Loaded {
    /// The profile.
    pub profile: Profile,
    /// When the recording started (Unix ms), 0 if unknown.
    pub started_unix_ms: u64,
    /// Whether the recording is truncated or damaged (the profile covers what was read).
    pub damaged: bool,
    /// The warnings to print.
    pub warnings: Vec<String>,
}

/// Reads `path` (a heap or CPU recording) as a stack profile of every process, or of
/// process `pid`.
pub fn load(path: &Path, pid: Option<u32>) -> anyhow::Result<Loaded> {
    let file = File::open(path).map_err(|e| exit::cannot_open(path, e))?;
    if report_cpu::is_cpu_recording(&file) {
        let rec = report_cpu::open(path)?;
        if let Some(pid) = pid
            && !rec.processes.iter().any(|p| p.pid == pid)
        {
            return Err(exit::no_such_process(
                pid,
                path,
                rec.processes.iter().map(|p| p.pid),
            ));
        }
        let profile = profile::cpu::profile(&rec, pid);
        return Ok(Loaded {
            warnings: profile.comments.clone(),
            profile,
            started_unix_ms: rec.meta.as_ref().map_or(0, |m| m.started_unix_ms),
            damaged: rec.damaged,
        });
    }
    let rec = super::report::open_memory(
        path,
        file,
        pid,
        "this command reads heap recordings (tansa record) and CPU recordings (tansa sample)",
    )?;
    let progress = options::spinner("reading events");
    let (profile, report) = profile::heap::profile(&rec, pid, |n| {
        if let Some(p) = &progress {
            p.set_message(format!("{} million events", n >> 20));
            p.tick();
        }
    });
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    Ok(Loaded {
        profile,
        started_unix_ms: rec.meta.as_ref().map_or(0, |m| m.started_unix_ms),
        damaged: rec.is_damaged(),
        warnings: report.warnings,
    })
}
