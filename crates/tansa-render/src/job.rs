//! The header lines of a report over several recordings or an MPI job: the recordings and
//! how their timelines were put together, the ranks (host, pid, peak heap, how each ended)
//! and which rank ended first.

use tansa_analysis::memory::report::{JobClock, MemoryReport, RankReport};

use crate::header::Header;
use crate::memory::duration;

/// Ranks listed one per line up to this many; beyond, the first and the abnormal ones.
pub const MAX_LISTED_RANKS: usize = 32;

fn rank_line(r: &RankReport, first_end: Option<u64>) -> String {
    let after = match (r.end_ns, first_end) {
        (Some(e), Some(f)) if e > f => format!(" ({} after the first end)", duration(e - f)),
        _ => String::new(),
    };
    format!(
        "  rank {} on {}, pid {}: peak {}, {} at its end; {}{after}",
        r.rank,
        if r.host.is_empty() { "?" } else { &r.host },
        r.pid,
        crate::bytes(r.peak_bytes),
        crate::bytes(r.net_bytes),
        r.exit.description,
    )
}

/// Adds the job's lines to `h` (nothing for a report of one recording of no job).
pub(crate) fn lines(r: &MemoryReport, h: &mut Header) {
    let Some(job) = &r.job else {
        return;
    };
    let mut hosts: Vec<&str> = r.recordings.iter().map(|x| x.host.as_str()).collect();
    if hosts.is_empty() {
        hosts = job.ranks.iter().map(|x| x.host.as_str()).collect();
    }
    hosts.sort_unstable();
    hosts.dedup();
    let ranks = match job.size {
        Some(size) => format!("{} of {size} ranks", job.ranks.len()),
        None => format!("{} ranks", job.ranks.len()),
    };
    let id = job
        .id
        .as_deref()
        .map_or_else(String::new, |id| format!(" {id}"));
    let clock = match (job.recordings, job.clock) {
        (0 | 1, _) => String::new(),
        (_, JobClock::Shared) => "; one clock".to_string(),
        (_, JobClock::WallClock) => {
            "; timelines aligned by each recording's wall-clock start (hosts' clocks differ)"
                .to_string()
        }
    };
    h.line(format!(
        "job{id}: {ranks} recorded, in {} recording(s) on {} host(s) ({}){clock}",
        job.recordings,
        hosts.len(),
        hosts.join(", ")
    ));
    let first_end = job
        .first_ended
        .and_then(|f| job.ranks.iter().find(|x| x.rank == f));
    if let Some(f) = first_end {
        let how = match (job.first_ended_by, f.exit.kind) {
            (Some("exit-status"), "unknown") => {
                " (no rank was seen to fail, and this one's end was not seen: the recording \
                 does not tell when each rank ended)"
            }
            (Some("exit-status"), _) => {
                " (the first to fail by itself: the recording does not tell when each rank \
                 ended)"
            }
            _ => "",
        };
        h.line(format!(
            "rank {} (pid {} on {}) ended first{how}: {}",
            f.rank, f.pid, f.host, f.exit.description
        ));
    }
    if let Some(l) = &job.launcher {
        let signal = l
            .exit
            .code
            .filter(|c| (129..160).contains(c))
            .map(|c| {
                format!(
                    " (128 + {}: how Open MPI reports a rank killed by that signal)",
                    tansa_analysis::memory::report::signal_name(c - 128)
                )
            })
            .unwrap_or_default();
        h.line(format!(
            "launcher pid {} `{}`: {}{signal}",
            l.pid,
            l.command.join(" "),
            l.exit.description
        ));
    }
    let first_ns = first_end.and_then(|f| f.end_ns);
    let abnormal = |x: &RankReport| {
        !(x.exit.kind == "exited" && x.exit.code == Some(0)) && x.exit.kind != "running"
    };
    for (i, x) in job.ranks.iter().enumerate() {
        if i < MAX_LISTED_RANKS || abnormal(x) {
            h.line(rank_line(x, first_ns));
        }
    }
    if job.ranks.len() > MAX_LISTED_RANKS {
        h.line(format!(
            "  ... ({} ranks in all; `--format json` lists every one)",
            job.ranks.len()
        ));
    }
}
