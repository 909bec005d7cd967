//! Opening a heap or CPU recording as a stack profile: what `tansa export` and
//! `tansa flamegraph` draw from.

use std::path::PathBuf;

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

/// Reads `paths` (a heap or CPU recording, or several heap recordings read as one job)
/// as a stack profile of every process, of process `pid`, or of the processes of `rank`.
pub fn load(paths: &[PathBuf], pid: Option<u32>, rank: Option<u32>) -> anyhow::Result<Loaded> {
    let path = paths[0].as_path();
    let file = options::open_recording(path)?;
    if paths.len() > 1 {
        super::report::refuse_cpu(paths, "this command")?;
    } else if report_cpu::is_cpu_recording(&file) {
        if rank.is_some() {
            return Err(exit::usage(format!(
                "--rank applies to heap recordings; {} is a CPU recording",
                path.display()
            )));
        }
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
    drop(file);
    let rec = super::report::open_memory_job(
        paths,
        pid,
        rank,
        &[],
        "this command reads heap recordings (tansa record) and CPU recordings (tansa sample)",
    )?;
    let progress = options::spinner("reading events");
    let (profile, report) = profile::heap::profile(&rec, pid, rank, |n| {
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
