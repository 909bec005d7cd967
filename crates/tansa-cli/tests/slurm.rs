//! MPI jobs under Slurm's `srun` (Open MPI over Slurm's PMIx), on a private one-node Slurm
//! cluster that each test starts: `slurmctld` and `slurmd` on free loopback ports, with
//! their state, spool and logs in a temporary directory, no munge (`auth/none`) and no
//! control groups (`proctrack/pgid`). `srun --kill-on-bad-exit=1` ends the other ranks
//! (SIGTERM, then SIGKILL after `KillWait`) when one fails, and, unlike `mpiexec`, does
//! not start the ranks itself: each node's `slurmstepd` does. So a recording of the whole
//! job (`tansa record -- srun ...`) holds ranks that are not the recorder's descendants.
//! `tests/programs/mpi_ranks.c` runs as 4 ranks, rank 2 aborting; rank r keeps exactly
//! (r + 1) MiB allocated from main.
//!
//! Needs `slurmctld`, `slurmd` and `srun` (`.ci/install-deps` installs Debian's), Open MPI,
//! and root (`slurmd` starts the tasks). In CI they must be there: the tests fail without
//! them (`require`).

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// One cluster at a time: both would be named after this host.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A running private Slurm cluster; stopped when dropped.
struct Cluster {
    daemons: Vec<Child>,
    dir: tempfile::TempDir,
    _one: MutexGuard<'static, ()>,
}

/// Whether `name` is an executable in `PATH` or an `sbin` directory.
fn installed(name: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .any(|d| Path::new(d).join(name).is_file())
}

/// A free loopback port (there is a small window for another process to take it).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("address").port()
}

impl Cluster {
    /// Starts the cluster and waits until its node is idle; `None` (outside CI) without
    /// Slurm or root.
    fn start() -> Option<Cluster> {
        if !require(
            ["slurmctld", "slurmd", "srun"].iter().all(|t| installed(t)),
            "slurmctld, slurmd and srun (.ci/install-deps installs slurmctld slurmd slurm-client)",
        ) || !require(
            rustix::process::geteuid().is_root(),
            "root (slurmd starts a job's tasks)",
        ) {
            return None;
        }
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["state", "spool"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        // slurmctld runs only on the host its configuration names.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let host = host.trim().split('.').next().unwrap().to_string();
        let conf = format!(
            "ClusterName=tansa\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             AuthType=auth/none\n\
             CredType=cred/none\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/pgid\n\
             TaskPlugin=task/none\n\
             MpiDefault=none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             KillWait=5\n\
             JobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             SlurmdParameters=config_overrides\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN\n\
             PartitionName=tansa Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
            ctld = free_port(),
            slurmd = free_port(),
            d = d.display(),
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        let mut cluster = Cluster {
            daemons: Vec::new(),
            dir,
            _one: one,
        };
        // In the foreground (-D), ignoring any saved state (-i).
        for daemon in [&["slurmctld", "-D", "-i"][..], &["slurmd", "-D"]] {
            let child = cluster
                .command(daemon[0])
                .args(&daemon[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", daemon[0]));
            cluster.daemons.push(child);
        }
        let start = Instant::now();
        loop {
            let out = cluster
                .command("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .expect("run sinfo");
            if String::from_utf8_lossy(&out.stdout).trim() == "idle" {
                return Some(cluster);
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the Slurm node did not come up: sinfo said {:?} {:?}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `program` with this cluster's configuration.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", self.dir.path().join("slurm.conf"));
        cmd
    }

    /// `srun` of 4 MPI ranks that ends them all when one fails.
    fn srun(&self) -> Command {
        let mut cmd = self.command("srun");
        cmd.args(["--mpi=pmix", "-n", "4", "--kill-on-bad-exit=1"]);
        cmd
    }

    /// The daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        ["slurmctld.log", "slurmd.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {f} (its end):\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Runs `cmd` (an `srun` or a recorder of one), failing with the daemons' logs if it hangs.
fn run_job(cluster: &Cluster, cmd: Command) -> std::process::Output {
    let out = output_within(cmd, RUN_DEADLINE);
    assert!(
        !out.status.success(),
        "rank 2 aborts, so the job fails: {}\n{}",
        stderr(&out),
        cluster.logs()
    );
    out
}

/// The ranks' exits, in rank order, as `(kind, signal_name)`.
fn exits(report: &Value) -> Vec<(String, String)> {
    report["job"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let e = &r["exit"];
            (
                e["kind"].as_str().unwrap_or_default().to_string(),
                e["signal_name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// One recording per rank (`srun ... tansa record -o job-%r.tansa -- ./prog`): when rank 2
/// aborts, Slurm ends the other ranks, and every rank's recording is read whole.
#[test]
fn per_rank_recordings_of_a_job_srun_ends() {
    let Some(prog) = mpi_program() else {
        return;
    };
    let Some(cluster) = Cluster::start() else {
        return;
    };
    ensure_agent();
    let dir = tempfile::tempdir().unwrap();
    let cmd = record_each_rank(cluster.srun(), dir.path(), &prog);
    let out = run_job(&cluster, cmd);
    let files: Vec<PathBuf> = (0..4)
        .map(|r| dir.path().join(format!("job-{r}.tansa")))
        .collect();
    for f in &files {
        assert!(f.is_file(), "no {}: {}", f.display(), stderr(&out));
    }
    let whole = check_aborted_job(&files, "mpi_ranks", "per rank", "end-time");
    // Slurm ends the other ranks one of two ways, whichever comes first: srun, seeing
    // rank 2's task end, signals the step (SIGTERM, and SIGKILL only after KillWait), and
    // the recorders finish their files; or Slurm's PMIx server, seeing rank 2's connection
    // drop, aborts the step, killing every task outright, recorders included (rank 2's
    // too, which may not have finished its file), whose recordings the report then
    // salvages and says so. Rank 2's recorder had collected it first, and wrote how it
    // ended where the salvage finds it (check_aborted_job: SIGABRT).
    let ended = exits(&whole);
    let all = warnings(&whole);
    let salvaged = |r: usize| {
        all.iter().any(|w| {
            w.contains(&format!("job-{r}.tansa: "))
                && w.contains("the recorder was killed before it finished this recording")
        })
    };
    for r in [0, 1, 3] {
        let rank = &whole["job"]["ranks"][r];
        match ended[r].0.as_str() {
            "signaled" => {
                assert_eq!(ended[r].1, "SIGTERM", "rank {r}: {rank}");
                assert!(rank["end_ns"].is_u64(), "rank {r}: {rank}");
                assert!(!salvaged(r), "rank {r}: {all:?}");
            }
            "recorder_killed" => {
                assert!(rank["end_ns"].is_null(), "rank {r}: {rank}");
                assert!(salvaged(r), "rank {r}: {all:?}");
            }
            other => panic!("rank {r} ended as {other}: {rank}"),
        }
    }
    assert!(
        whole["job"]["ranks"][2]["end_ns"].is_u64(),
        "{}",
        whole["job"]
    );
    // The job's id and size come from Slurm's environment.
    assert!(whole["job"]["id"].is_string(), "{}", whole["job"]);
}

/// The whole job in one recording (`tansa record -- srun ...`): the ranks are started by
/// `slurmstepd`, which is not recorded; they find the recorder through their environment,
/// which `srun` passes on, and each one's end is known.
#[test]
fn a_job_recorded_whole_through_srun_holds_ranks_it_did_not_start() {
    let Some(prog) = mpi_program() else {
        return;
    };
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.tansa");
    let cmd = record_whole_job(&cluster.srun(), &file, &prog);
    let out = run_job(&cluster, cmd);
    assert!(file.is_file(), "no recording: {}", stderr(&out));
    let whole = check_aborted_job(
        std::slice::from_ref(&file),
        "mpi_ranks",
        "whole job",
        "exit-status",
    );
    // Ended by srun's SIGTERM or by the step's abort (SIGKILL), as in the test above; the
    // ranks' parent collected them, and the kernel told how each ended.
    let ended = exits(&whole);
    for r in [0, 1, 3] {
        assert!(
            ended[r] == ("signaled".into(), "SIGTERM".into())
                || ended[r] == ("signaled".into(), "SIGKILL".into()),
            "rank {r}: {}",
            whole["job"]
        );
    }
    // srun was recorded, without a rank; the ranks' parent (slurmstepd) was not.
    let processes = whole["processes"].as_array().unwrap();
    let pids: Vec<&Value> = processes.iter().map(|p| &p["pid"]).collect();
    assert!(
        processes.iter().any(|p| p["command"][0]
            .as_str()
            .is_some_and(|c| c.ends_with("srun"))
            && p["rank"].is_null()),
        "{processes:?}"
    );
    let ranks: Vec<&Value> = processes.iter().filter(|p| !p["rank"].is_null()).collect();
    assert_eq!(ranks.len(), 4, "{processes:?}");
    for p in ranks {
        assert!(!pids.contains(&&p["ppid"]), "{p}");
    }
}
