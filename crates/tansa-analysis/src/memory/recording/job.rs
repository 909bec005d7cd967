//! Several recordings on one timeline, and what a report says about the job.
//!
//! Each recording's timestamps are TSC ticks or `CLOCK_MONOTONIC` nanoseconds; its
//! calibration turns them into `CLOCK_MONOTONIC` nanoseconds of its host. Recordings made on
//! one host since one boot share that clock: their events interleave exactly as they
//! happened. Recordings of other hosts (or boots) do not: each host's timeline is placed by
//! the wall-clock time its recording started (`RecordingMeta::started_unix_ms`), so events
//! of different hosts are ordered as well as the hosts' clocks agree, which the report says.
//!
//! Two recordings are on one clock when they come from the same host name and their boot
//! times agree within [`SAME_BOOT_NS`]: a recording's boot time is estimated as its wall
//! start minus the monotonic time of its first process image (a recording starts its first
//! process within milliseconds).

use std::io::{Read, Seek};

use super::MemoryRecording;
use super::chunks::ToJob;
use crate::memory::aggregate::JobSetup;
use crate::memory::report::{JobClock, RecordingReport};

/// Boot-time estimates closer than this are one boot (the first process of a recording
/// starts within milliseconds of the recording; a reboot is far longer).
pub const SAME_BOOT_NS: u64 = 2_000_000_000;

/// See [`MemoryRecording::finish_job`].
pub(super) fn finish<R: Read + Seek>(rec: &mut MemoryRecording<R>) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut jobs: Vec<&str> = Vec::new();
    for p in &rec.places {
        if let Some(j) = p.job.as_deref()
            && !jobs.contains(&j)
        {
            jobs.push(j);
        }
    }
    if jobs.len() > 1 {
        warnings.push(format!(
            "the recordings come from {} different jobs ({}): their ranks are reported \
             together",
            jobs.len(),
            jobs.join(", ")
        ));
    }
    let rate = |m: &Option<tansa_format::meta::RecordingMeta>| {
        m.as_ref().and_then(|m| {
            m.options
                .iter()
                .find(|(k, _)| k == crate::memory::SAMPLE_RATE_OPTION)
                .map(|(_, v)| v.clone())
        })
    };
    let first_rate = rec.parts_info.first().and_then(|p| rate(&p.meta));
    if rec.parts_info.iter().any(|p| rate(&p.meta) != first_rate) {
        warnings.push(format!(
            "the recordings were not all made with the same --sample-rate: every figure is \
             computed as for the first recording's ({})",
            first_rate.as_deref().unwrap_or("every allocation recorded")
        ));
    }
    if rec.parts.len() <= 1 {
        rec.warnings.extend(warnings.iter().cloned());
        return warnings;
    }
    // Each recording's boot time (wall ns minus monotonic ns at its first image).
    let boots: Vec<(String, i128)> = rec
        .parts_info
        .iter()
        .map(|info| {
            let first = rec
                .sessions
                .iter()
                .filter(|s| info.holds(s.session))
                .map(|s| info.calibration.to_ns(s.start_ticks))
                .min()
                .unwrap_or(0);
            let wall = info
                .meta
                .as_ref()
                .map_or(0, |m| i128::from(m.started_unix_ms) * 1_000_000);
            (info.host().to_string(), wall - i128::from(first))
        })
        .collect();
    // Groups of recordings on one clock: (host, boot of the group's first recording).
    let mut groups: Vec<(String, i128)> = Vec::new();
    let group_of: Vec<usize> = boots
        .iter()
        .map(|(host, boot)| {
            match groups
                .iter()
                .position(|(h, b)| h == host && (b - boot).unsigned_abs() < SAME_BOOT_NS as u128)
            {
                Some(g) => g,
                None => {
                    groups.push((host.clone(), *boot));
                    groups.len() - 1
                }
            }
        })
        .collect();
    let earliest = groups.iter().map(|g| g.1).min().unwrap_or(0);
    rec.clock = if groups.len() > 1 {
        JobClock::WallClock
    } else {
        JobClock::Shared
    };
    for (i, info) in rec.parts_info.iter_mut().enumerate() {
        info.shift_ns = u64::try_from(groups[group_of[i]].1 - earliest).unwrap_or(0);
        rec.parts[i].to_job = Some(ToJob {
            calibration: info.calibration.clone(),
            shift_ns: info.shift_ns,
        });
    }
    // Pass one's times on the same timeline as the events.
    let to_job = |session: u32| {
        rec.parts_info
            .iter()
            .zip(&rec.parts)
            .find(|(info, _)| info.holds(session))
            .and_then(|(_, part)| part.to_job.as_ref())
    };
    for s in &mut rec.sessions {
        if let Some(j) = to_job(s.session) {
            s.start_ticks = j.ts(s.start_ticks);
        }
    }
    for e in &mut rec.ends {
        if let Some(j) = to_job(e.session) {
            e.end_ticks = j.ts(e.end_ticks);
        }
    }
    rec.calibration = tansa_format::meta::Calibration::monotonic();
    rec.warnings.extend(warnings.iter().cloned());
    warnings
}

impl<R: Read + Seek> MemoryRecording<R> {
    /// What the aggregator is told about the job: `None` for a single recording of no MPI
    /// job (its report stays as it always was).
    pub(super) fn job_setup(&self) -> Option<JobSetup> {
        if !self.is_job() && self.places.is_empty() {
            return None;
        }
        let recordings = self
            .parts_info
            .iter()
            .map(|info| RecordingReport {
                name: info.name.clone(),
                host: info.host().to_string(),
                started_unix_ms: info.meta.as_ref().map_or(0, |m| m.started_unix_ms),
                job: self
                    .places
                    .iter()
                    .find(|p| info.holds(p.session))
                    .and_then(|p| p.job.clone()),
                shift_ns: info.shift_ns,
                processes: self
                    .sessions
                    .iter()
                    .filter(|s| info.holds(s.session))
                    .count() as u32,
            })
            .collect();
        Some(JobSetup {
            id: self.places.iter().find_map(|p| p.job.clone()),
            size: self.places.iter().filter_map(|p| p.size).max(),
            recordings,
            clock: self.clock,
        })
    }
}
