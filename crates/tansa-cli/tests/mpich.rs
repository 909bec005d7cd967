//! MPI jobs under MPICH's Hydra launcher (`mpiexec.hydra`), whose proxy ends the other
//! ranks with SIGKILL when one fails, and reaps them itself (Open MPI sends SIGTERM first:
//! tests/mpi.rs, durable.rs). `tests/programs/mpi_ranks.c` is built against MPICH's
//! `libmpich` and run as 4 ranks, rank 2 aborting, recorded both ways: one recording per
//! rank (each recorder killed outright, its recording salvaged) and the whole job in one.
//! Rank r keeps exactly (r + 1) MiB allocated from main.
//!
//! MPICH is unpacked by `.ci/install-deps` under `.ci/cache/mpich` rather than installed
//! (installing it would switch the system's `mpiexec` away from Open MPI). In CI it must be
//! there: these tests fail without it (`require`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;

/// MPICH's unpacked tree and `mpi_ranks` built against it.
struct Mpich {
    root: PathBuf,
    prog: PathBuf,
}

impl Mpich {
    fn lib(&self) -> PathBuf {
        self.root.join("usr/lib/x86_64-linux-gnu")
    }

    /// `mpiexec.hydra -n 4`, with the unpacked tree on the paths (the launcher's own
    /// libraries, and `hydra_pmi_proxy`, which it starts).
    fn mpiexec(&self) -> Command {
        let bin = self.root.join("usr/bin");
        let path = std::env::var("PATH").unwrap_or_default();
        let lib = self.lib();
        let mut cmd = Command::new(bin.join("mpiexec.hydra"));
        cmd.env("PATH", format!("{}:{path}", bin.display()))
            .env(
                "LD_LIBRARY_PATH",
                format!("{}:{}", lib.display(), lib.join("slurm-wlm").display()),
            )
            .args(["-n", "4"]);
        cmd
    }
}

/// MPICH and the program, or `None` (outside CI) without MPICH.
fn mpich() -> Option<&'static Mpich> {
    static BUILT: OnceLock<Mpich> = OnceLock::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/cache/mpich/root");
    if !require(
        root.join("usr/bin/mpiexec.hydra").is_file(),
        "MPICH unpacked under .ci/cache/mpich (bash .ci/install-deps does it)",
    ) {
        return None;
    }
    Some(BUILT.get_or_init(|| {
        let include = root.join("usr/include/x86_64-linux-gnu/mpich");
        let lib = root.join("usr/lib/x86_64-linux-gnu");
        let prog = build_dir().join("mpi_ranks_mpich");
        let flags = [
            "-O1".to_string(),
            "-g".to_string(),
            format!("-I{}", include.display()),
            format!("-L{}", lib.display()),
            "-lmpich".to_string(),
            format!("-Wl,-rpath,{}", lib.display()),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        compile(&prog, &[source("mpi_ranks.c")], &flags);
        Mpich { root, prog }
    }))
}

/// One recording per rank: Hydra kills every rank's recorder outright when rank 2
/// aborts; each recording is salvaged whole by the next report, and says so.
#[test]
fn per_rank_recordings_survive_hydra_killing_their_recorders() {
    let Some(mpich) = mpich() else {
        return;
    };
    ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    let cmd = record_each_rank(mpich.mpiexec(), dir.path(), &mpich.prog);
    let out = output_within(cmd, RUN_DEADLINE);
    assert!(!out.status.success(), "rank 2 aborts, so the job fails");
    let files: Vec<PathBuf> = (0..4)
        .map(|r| dir.path().join(format!("job-{r}.tansa")))
        .collect();
    for f in &files {
        assert!(f.is_file(), "no {}: {}", f.display(), stderr(&out));
    }
    let whole = check_aborted_job(&files, "mpi_ranks_mpich", "per rank", "end-time");
    // The other ranks' recorders were killed: their recordings were salvaged, and the
    // report says so for each.
    let salvaged = warnings(&whole)
        .iter()
        .filter(|w| w.contains("the recorder was killed before it finished this recording"))
        .count();
    assert_eq!(salvaged, 3, "{:?}", warnings(&whole));
    // When those ranks ended is not known (the salvage came later), and not given; rank
    // 2's end is.
    for r in [0, 1, 3] {
        let rank = &whole["job"]["ranks"][r];
        assert_eq!(rank["exit"]["kind"], "recorder_killed", "rank {r}: {rank}");
        assert!(rank["end_ns"].is_null(), "rank {r}: {rank}");
    }
    assert!(whole["job"]["ranks"][2]["end_ns"].is_u64());
}

/// The whole job in one recording: the proxy collects every rank, the one that aborted
/// and those it killed, so the agent sees none of their ends; the kernel keeps each one's
/// status for the collector's pidfd, and the rank that aborted is the one named.
#[test]
fn a_job_recorded_whole_under_hydra_names_the_rank_that_aborted() {
    let Some(mpich) = mpich() else {
        return;
    };
    // How a rank the proxy collected ended is known only from its pidfd.
    if !require_pidfd_exit_status() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.tansa");
    let cmd = record_whole_job(&mpich.mpiexec(), &file, &mpich.prog);
    let out = output_within(cmd, RUN_DEADLINE);
    assert!(file.is_file(), "no recording: {}", stderr(&out));
    let whole = check_aborted_job(
        std::slice::from_ref(&file),
        "mpi_ranks_mpich",
        "whole job",
        "exit-status",
    );
    // The proxy collected every rank; the kernel told how each ended.
    for r in [0, 1, 3] {
        let exit = &whole["job"]["ranks"][r]["exit"];
        assert_eq!(exit["signal_name"], "SIGKILL", "rank {r}: {exit}");
    }
    // mpiexec.hydra and its proxy were recorded too, without a rank.
    assert!(
        whole["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["command"][0]
                .as_str()
                .is_some_and(|c| c.ends_with("hydra_pmi_proxy"))
                && p["rank"].is_null()),
        "{}",
        whole["processes"]
    );
}
