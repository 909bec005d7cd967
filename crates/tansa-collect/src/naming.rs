//! Names for a parallel job's recordings: `-o` patterns such as `job-%r.tansa`, expanded
//! from the recorder's own environment, so that one command line gives each rank its own
//! file under `mpiexec` and `srun`, on any number of hosts.
//!
//! | pattern | becomes |
//! |---|---|
//! | `%r` | the rank (`OMPI_COMM_WORLD_RANK`, `PMIX_RANK`, `PMI_RANK`, `SLURM_PROCID`) |
//! | `%h` | the host name |
//! | `%p` | the recorder's process id |
//! | `%j` | the job id (`SLURM_JOB_ID`, `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `PMI_JOBID`) |
//! | `%%` | `%` |

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use tansa_wire::place::{JOB_VARS, Place, RANK_VARS};

/// Why a pattern cannot be expanded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PatternError {
    /// `%r` outside a parallel job.
    #[error("%r needs the rank from the launcher, and none of {} is set", var_list(&RANK_VARS))]
    NoRank,
    /// `%j` without a job id.
    #[error("%j needs the job id from the launcher, and none of {} is set", var_list(&JOB_VARS))]
    NoJob,
    /// An unknown `%` sequence.
    #[error("unknown pattern %{0} (known: %r rank, %h host, %p pid, %j job, %% a percent sign)")]
    Unknown(char),
    /// A `%` at the end.
    #[error("a lone % at the end (write %% for a percent sign)")]
    Trailing,
}

fn var_list(vars: &[&std::ffi::CStr]) -> String {
    vars.iter()
        .map(|v| v.to_string_lossy())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the patterns stand for.
#[derive(Debug, Clone)]
pub struct JobNames {
    /// The rank and the job.
    pub place: Place,
    /// The host name.
    pub host: String,
    /// The recorder's process id.
    pub pid: u32,
}

impl JobNames {
    /// This process's: its environment, host name and pid.
    pub fn current() -> JobNames {
        JobNames {
            place: Place::from_env(|var| {
                std::env::var_os(OsStr::from_bytes(var.to_bytes())).map(OsString::into_vec)
            }),
            host: tansa_proc::os::hostname(),
            pid: std::process::id(),
        }
    }

    /// Expands the patterns of `path`. A path without `%` is returned unchanged. Values
    /// never add a directory: a `/` (or NUL) in a job id or host name becomes `_`.
    pub fn expand(&self, path: &OsStr) -> Result<PathBuf, PatternError> {
        let bytes = path.as_bytes();
        if !bytes.contains(&b'%') {
            return Ok(PathBuf::from(path));
        }
        let mut out = Vec::with_capacity(bytes.len() + 16);
        let mut it = bytes.iter();
        while let Some(&b) = it.next() {
            if b != b'%' {
                out.push(b);
                continue;
            }
            match it.next() {
                None => return Err(PatternError::Trailing),
                Some(b'%') => out.push(b'%'),
                Some(b'r') => {
                    let rank = self.place.rank.ok_or(PatternError::NoRank)?;
                    out.extend_from_slice(rank.to_string().as_bytes());
                }
                Some(b'h') => push_safe(&mut out, self.host.as_bytes()),
                Some(b'p') => out.extend_from_slice(self.pid.to_string().as_bytes()),
                Some(b'j') => push_safe(&mut out, self.place.job().ok_or(PatternError::NoJob)?),
                Some(&c) => return Err(PatternError::Unknown(char::from(c))),
            }
        }
        Ok(PathBuf::from(OsString::from_vec(out)))
    }
}

fn push_safe(out: &mut Vec<u8>, value: &[u8]) {
    out.extend(
        value
            .iter()
            .map(|&b| if b == b'/' || b == 0 { b'_' } else { b }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(&str, &str)]) -> JobNames {
        JobNames {
            place: Place::from_env(|v| {
                pairs
                    .iter()
                    .find(|(n, _)| n.as_bytes() == v.to_bytes())
                    .map(|(_, x)| x.as_bytes())
            }),
            host: "node07".into(),
            pid: 4242,
        }
    }

    fn expand(n: &JobNames, s: &str) -> Result<String, PatternError> {
        n.expand(OsStr::new(s))
            .map(|p| p.to_string_lossy().into_owned())
    }

    #[test]
    fn every_pattern() {
        let n = names(&[("SLURM_PROCID", "12"), ("SLURM_JOB_ID", "881")]);
        assert_eq!(
            expand(&n, "out/%j-%h-%r.%p.tansa").unwrap(),
            "out/881-node07-12.4242.tansa"
        );
        assert_eq!(expand(&n, "100%%-%r").unwrap(), "100%-12");
        assert_eq!(expand(&n, "plain.tansa").unwrap(), "plain.tansa");
    }

    #[test]
    fn missing_values_and_bad_patterns_are_errors() {
        let n = names(&[]);
        assert_eq!(expand(&n, "job-%r.tansa"), Err(PatternError::NoRank));
        assert_eq!(expand(&n, "job-%j.tansa"), Err(PatternError::NoJob));
        assert_eq!(expand(&n, "x-%h-%p"), Ok("x-node07-4242".into()));
        assert_eq!(expand(&n, "job-%x"), Err(PatternError::Unknown('x')));
        assert_eq!(expand(&n, "job-%"), Err(PatternError::Trailing));
        assert!(
            PatternError::NoRank
                .to_string()
                .contains("OMPI_COMM_WORLD_RANK")
        );
    }

    #[test]
    fn values_never_make_directories() {
        let n = names(&[("PMIX_RANK", "1"), ("PMIX_NAMESPACE", "prterun/vm@1")]);
        assert_eq!(expand(&n, "%j-%r").unwrap(), "prterun_vm@1-1");
    }
}
