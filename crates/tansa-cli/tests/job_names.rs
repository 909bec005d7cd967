//! A parallel job's place reaches its recordings: `-o` patterns (`%r %h %p %j %%`) name each
//! rank's file from the launcher's environment, and every process image records the rank
//! its own environment names (a rank exec'd by a launcher has its own; `mpiexec` itself has
//! none). Launchers are stood in for by their variables here; tests/mpi.rs runs the real one.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use common::*;

/// The rank of every process image of `file` that has one, in order of appearance, and the
/// report's `job` object (null outside a job), from `tansa report --format json`
/// (docs/json/memory-report.v1.md).
fn ranks_and_job(file: &Path) -> (Vec<u32>, Value) {
    let report = report_json(file, &[]);
    let ranks = report["processes"]
        .as_array()
        .expect("processes array")
        .iter()
        .filter_map(|p| p.get("rank"))
        .map(|r| u32::try_from(r.as_u64().expect("rank is an integer")).unwrap())
        .collect();
    (ranks, report["job"].clone())
}

/// `(size, job)` of every `place` frame of `file`, from `tansa dump`'s debug text. The
/// report JSON has each image's rank but only the job's size and id (the largest size, the
/// first id), so checking that every image recorded them still needs the dump.
fn place_jobs(file: &Path) -> Vec<(Option<u32>, Option<String>)> {
    let o = run_tansa(&["dump", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    let field = |line: &str, name: &str| -> String {
        let start = line.find(&format!("{name}: ")).unwrap() + name.len() + 2;
        let rest = &line[start..];
        let end = rest.find([',', ' ']).unwrap_or(rest.len());
        rest[..end].to_string()
    };
    text.lines()
        .filter(|l| l.contains(" place SessionPlace {"))
        .map(|l| {
            let opt = |v: String| {
                v.strip_prefix("Some(")
                    .map(|s| s.trim_end_matches(')').to_string())
            };
            (
                opt(field(l, "size")).map(|s| s.parse().unwrap()),
                opt(field(l, "job")).map(|s| s.trim_matches('"').to_string()),
            )
        })
        .collect()
}

#[test]
fn patterns_name_the_file_and_each_image_records_its_own_rank() {
    ensure_agent();
    let exe = program("forker", "forker.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("%j-%h-%r-100%%.tansa");
    // The forked child changes its rank before exec: the exec'd image records rank 9, the
    // parent and the forked image (the same environment as the parent) rank 5.
    let script = format!(
        "\"{exe}\" & wait; SLURM_PROCID=9 exec \"{exe}\" child",
        exe = exe.display()
    );
    let mut cmd = Command::new(tansa());
    cmd.args([
        "record",
        "-o",
        pattern.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ])
    .env("SLURM_PROCID", "5")
    .env("SLURM_NTASKS", "16")
    .env("SLURM_JOB_ID", "4711")
    .env_remove("OMPI_COMM_WORLD_RANK")
    .env_remove("PMIX_RANK")
    .env_remove("PMI_RANK");
    let o = output_within(cmd, RUN_DEADLINE);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let file = dir
        .path()
        .join(format!("4711-{}-5-100%.tansa", tansa_proc::os::hostname()));
    assert!(
        file.is_file(),
        "{}: {:?}",
        file.display(),
        std::fs::read_dir(dir.path()).unwrap().collect::<Vec<_>>()
    );
    let (ranks, job) = ranks_and_job(&file);
    // sh (rank 5), forker (5), its forked child (5), forker's exec'd child (9); `sh` runs
    // forker in a forked shell first, which is also rank 5.
    assert!(ranks.contains(&9), "{ranks:?}");
    assert_eq!(ranks.iter().filter(|&&r| r == 9).count(), 1, "{ranks:?}");
    assert!(ranks.iter().filter(|&&r| r == 5).count() >= 3, "{ranks:?}");
    assert_eq!(job["size"], 16, "{job}");
    assert_eq!(job["id"], "4711", "{job}");
    let places = place_jobs(&file);
    assert_eq!(places.len(), ranks.len(), "{places:?} {ranks:?}");
    for p in &places {
        assert_eq!(p.0, Some(16), "{places:?}");
        assert_eq!(p.1.as_deref(), Some("4711"), "{places:?}");
    }
}

#[test]
fn outside_a_job_there_is_no_place_and_rank_patterns_are_refused() {
    ensure_agent();
    let exe = program("allocer", "allocer.c", &["-O1"]);
    let dir = tempfile::tempdir().unwrap();
    let clean = |cmd: &mut Command| {
        for v in [
            "OMPI_COMM_WORLD_RANK",
            "PMIX_RANK",
            "PMI_RANK",
            "SLURM_PROCID",
            "SLURM_JOB_ID",
            "PMIX_NAMESPACE",
            "OMPI_MCA_ess_base_jobid",
            "PMI_JOBID",
        ] {
            cmd.env_remove(v);
        }
    };
    for (pattern, complaint) in [
        ("job-%r.tansa", "%r needs the rank"),
        ("job-%j.tansa", "%j needs the job id"),
        ("job-%y.tansa", "unknown pattern %y"),
        ("job-%", "lone %"),
    ] {
        for sub in ["record", "sample"] {
            let mut cmd = Command::new(tansa());
            cmd.args([sub, "-o", dir.path().join(pattern).to_str().unwrap(), "--"])
                .arg(&exe);
            clean(&mut cmd);
            let o = output_within(cmd, RUN_DEADLINE);
            assert_eq!(o.status.code(), Some(2), "{sub} {pattern}: {}", stderr(&o));
            assert!(
                stderr(&o).contains(complaint),
                "{sub} {pattern}: {}",
                stderr(&o)
            );
        }
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // %h and %p need no launcher; the recording has no place.
    let mut cmd = Command::new(tansa());
    cmd.args([
        "record",
        "-o",
        dir.path().join("r-%h-%p.tansa").to_str().unwrap(),
        "--",
    ])
    .arg(&exe);
    clean(&mut cmd);
    let o = output_within(cmd, RUN_DEADLINE);
    assert!(o.status.success(), "{}", stderr(&o));
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let prefix = format!("r-{}-", tansa_proc::os::hostname());
    let pid = files[0]
        .strip_prefix(&prefix)
        .and_then(|s| s.strip_suffix(".tansa"));
    assert!(pid.is_some_and(|p| p.parse::<u32>().is_ok()), "{files:?}");
    // Every place has a rank and makes a job: no job and no ranks means no place.
    let (ranks, job) = ranks_and_job(&dir.path().join(&files[0]));
    assert!(ranks.is_empty(), "{ranks:?}");
    assert!(job.is_null(), "{job}");
}
