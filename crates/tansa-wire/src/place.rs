//! Where a process runs in a parallel job: its rank, the job's size and the job's id, as
//! launchers (Open MPI's `mpiexec`, MPICH's Hydra, PMIx servers, Slurm's `srun`) tell their
//! processes through the environment.
//!
//! One home for the launchers' variable names: the agent reads a process's place at session
//! start (without allocating) and the recorder expands `-o` patterns such as `%r` from its
//! own environment, both through [`Place::from_env`].

use core::ffi::CStr;

/// Variables naming a process's rank, in the order they are consulted. Open MPI sets the
/// first two, MPICH's Hydra `PMI_RANK`, Slurm `SLURM_PROCID`; under `srun` with PMIx several
/// are set and agree.
pub const RANK_VARS: [&CStr; 4] = [
    c"OMPI_COMM_WORLD_RANK",
    c"PMIX_RANK",
    c"PMI_RANK",
    c"SLURM_PROCID",
];

/// Variables naming the number of ranks of the job, in order.
pub const SIZE_VARS: [&CStr; 4] = [
    c"OMPI_COMM_WORLD_SIZE",
    c"PMI_SIZE",
    c"SLURM_NTASKS",
    c"OMPI_UNIVERSE_SIZE",
];

/// Variables naming the job, in order: Slurm's job id is the one users know; a PMIx
/// namespace and Open MPI's job id are unique per `mpiexec`.
pub const JOB_VARS: [&CStr; 4] = [
    c"SLURM_JOB_ID",
    c"PMIX_NAMESPACE",
    c"OMPI_MCA_ess_base_jobid",
    c"PMI_JOBID",
];

/// Longest job id kept (longer ids are cut).
pub const JOB_CAPACITY: usize = 64;

/// A process's place in a job, when its environment names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The rank, when one of [`RANK_VARS`] holds a number.
    pub rank: Option<u32>,
    /// Index in [`RANK_VARS`] of the variable the rank came from.
    pub rank_source: Option<usize>,
    /// The number of ranks, when one of [`SIZE_VARS`] holds a number.
    pub size: Option<u32>,
    job: [u8; JOB_CAPACITY],
    job_len: usize,
}

impl Place {
    /// No place: a process outside any job.
    pub const NONE: Place = Place {
        rank: None,
        rank_source: None,
        size: None,
        job: [0; JOB_CAPACITY],
        job_len: 0,
    };

    /// Reads the place from an environment, `get` returning a variable's value.
    pub fn from_env<V: AsRef<[u8]>>(get: impl Fn(&CStr) -> Option<V>) -> Place {
        let mut place = Place::NONE;
        for (i, var) in RANK_VARS.iter().enumerate() {
            if let Some(rank) = get(var).and_then(|v| parse_u32(v.as_ref())) {
                place.rank = Some(rank);
                place.rank_source = Some(i);
                break;
            }
        }
        place.size = SIZE_VARS
            .iter()
            .find_map(|v| get(v).and_then(|v| parse_u32(v.as_ref())));
        for var in JOB_VARS {
            if let Some(job) = get(var).filter(|j| !j.as_ref().is_empty()) {
                place.set_job(job.as_ref());
                break;
            }
        }
        place
    }

    /// Sets the job id (cut at [`JOB_CAPACITY`] bytes).
    pub fn set_job(&mut self, job: &[u8]) {
        let n = job.len().min(JOB_CAPACITY);
        self.job[..n].copy_from_slice(&job[..n]);
        self.job_len = n;
    }

    /// The job id, when the environment names one.
    pub fn job(&self) -> Option<&[u8]> {
        (self.job_len > 0).then(|| &self.job[..self.job_len])
    }

    /// The name of the variable the rank came from.
    pub fn rank_source_name(&self) -> Option<&'static str> {
        self.rank_source
            .and_then(|i| RANK_VARS.get(i))
            .and_then(|v| v.to_str().ok())
    }
}

/// A decimal `u32` with nothing around it.
fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(b - b'0');
    }
    u32::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&CStr) -> Option<&'a [u8]> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| n.as_bytes() == k.to_bytes())
                .map(|(_, v)| v.as_bytes())
        }
    }

    #[test]
    fn open_mpi_rank_size_and_job() {
        let p = Place::from_env(env(&[
            ("PMIX_RANK", "3"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "1313210369"),
            ("OMPI_MCA_ess_base_jobid", "1313210369"),
        ]));
        assert_eq!(p.rank, Some(3));
        assert_eq!(p.rank_source_name(), Some("OMPI_COMM_WORLD_RANK"));
        assert_eq!(p.size, Some(4));
        assert_eq!(p.job(), Some(&b"1313210369"[..]));
    }

    #[test]
    fn slurm_and_hydra() {
        let p = Place::from_env(env(&[
            ("SLURM_PROCID", "17"),
            ("SLURM_NTASKS", "64"),
            ("SLURM_JOB_ID", "991"),
        ]));
        assert_eq!((p.rank, p.size), (Some(17), Some(64)));
        assert_eq!(p.job(), Some(&b"991"[..]));
        let p = Place::from_env(env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]));
        assert_eq!((p.rank, p.size, p.job()), (Some(0), Some(2), None));
        assert_eq!(p.rank_source_name(), Some("PMI_RANK"));
    }

    #[test]
    fn garbage_is_no_rank() {
        for bad in ["", "-1", "1x", " 1", "4294967296", "99999999999"] {
            let p = Place::from_env(env(&[("OMPI_COMM_WORLD_RANK", bad)]));
            assert_eq!(p.rank, None, "{bad:?}");
        }
        assert_eq!(Place::from_env(env(&[])), Place::NONE);
        let p = Place::from_env(env(&[("PMI_RANK", "4294967295")]));
        assert_eq!(p.rank, Some(u32::MAX));
    }

    #[test]
    fn long_job_ids_are_cut() {
        let long = [b'j'; 100];
        let long = core::str::from_utf8(&long).unwrap();
        let p = Place::from_env(env(&[("SLURM_JOB_ID", long)]));
        assert_eq!(p.job().map(<[u8]>::len), Some(JOB_CAPACITY));
    }
}
