//! `tansa export`: a recording in another tool's format.

use std::path::PathBuf;
use std::process::ExitCode;

use tansa_export::{collapsed, pprof, speedscope};

use super::profile;
use crate::exit;

/// An interchange format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Gzipped profile.proto, for `go tool pprof`, Pyroscope, Parca.
    Pprof,
    /// Collapsed stacks (`frame;frame value`), for flamegraph.pl, inferno.
    Collapsed,
    /// speedscope's JSON file format.
    Speedscope,
}

impl ExportFormat {
    fn extension(self) -> &'static str {
        match self {
            ExportFormat::Pprof => "pb.gz",
            ExportFormat::Collapsed => "folded",
            ExportFormat::Speedscope => "speedscope.json",
        }
    }
}

/// Options of `tansa export`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa export run.tansa --format pprof          writes run.pb.gz
  go tool pprof -top -sample_index=alloc_space run.pb.gz
  tansa export cpu.tansa --format collapsed -o - | inferno-flamegraph > cpu.svg
  tansa export run.tansa --format speedscope     open run.speedscope.json in speedscope
  tansa export job-*.tansa --format pprof -o job.pb.gz   one MPI job, samples labelled rank, host
  go tool pprof -top -tagfocus=rank=2 job.pb.gz
  tansa export job-*.tansa --format collapsed --by-rank -o - | inferno-flamegraph > job.svg
  tansa export job-*.tansa --format speedscope --by-rank   one speedscope profile per rank

Heap recordings export, per allocation stack: alloc_objects and alloc_space (every block
allocated), inuse_objects and inuse_space (blocks never freed: live at the end), as Go heap
profiles name them, peak_objects and peak_space (live when the heap peaked), and
temporary_objects (blocks freed by their own thread before it allocated again). CPU
recordings export samples and cpu (nanoseconds: samples times the period). Collapsed
stacks and speedscope frames are named module!function, as tansa's reports name them; pprof
names functions alone and gives each location its module as a mapping, as pprof's own
profiles do. Inlined functions are frames of their own.

Without -o, the output is written in the current directory under FILE's name with the
format's extension, never replacing an existing file (a number is added). Exit status: 0; 1 when the
recording cannot be read; 2 for a wrong command line; 3 when it is truncated or damaged
(the export covers what was recorded before the damage).")]
pub struct Args {
    /// The recording (from `tansa record` or `tansa sample`); several heap recordings (the
    /// ranks of one job) are exported as one profile.
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum)]
    format: ExportFormat,

    /// Only this process of a recorded process tree (default: all of them).
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,

    /// Collapsed stacks: the weight of each stack (heap: peak, allocated, live, count,
    /// live-count, temporary, lost, lost-count (the last two for recordings made with
    /// --leak-check); CPU: samples, cpu) [default: peak for heap, samples for CPU].
    #[arg(long, value_name = "WEIGHT")]
    weight: Option<String>,

    /// Only the processes of this MPI rank (heap recordings).
    #[arg(long, value_name = "N")]
    rank: Option<u32>,

    /// Collapsed stacks and speedscope: start every stack with its process (name [pid],
    /// and its rank and host when known).
    #[arg(long)]
    by_process: bool,

    /// Collapsed stacks: start every stack with its MPI rank (`rank N`, `(no rank)`), so
    /// that a flame graph splits per rank. speedscope: one profile per rank and weight.
    #[arg(long)]
    by_rank: bool,

    /// Write to FILE (`-` for standard output) [default: FILE's name with the format's
    /// extension, in the current directory].
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

/// Runs `tansa export`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.weight.is_some() && args.format != ExportFormat::Collapsed {
        return Err(exit::usage(
            "--weight applies to --format collapsed (pprof and speedscope carry every weight)",
        ));
    }
    if args.by_rank && args.format == ExportFormat::Pprof {
        return Err(exit::usage(
            "--by-rank applies to --format collapsed and speedscope (pprof labels every \
             sample with its rank and host: `go tool pprof -tagfocus=rank=N`)",
        ));
    }
    let file = &args.files[0];
    let loaded = profile::load(&args.files, args.pid, args.rank)?;
    let p = &loaded.profile;
    let value = tansa_export::weight_index(p, args.weight.as_deref())
        .map_err(|e| exit::usage(e.to_string()))?;
    let default = crate::output::default_name(file, args.format.extension());
    let name = file
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let inputs: Vec<&std::path::Path> = args.files.iter().map(PathBuf::as_path).collect();
    let written = crate::output::write_whole(args.output.as_deref(), &default, &inputs, |out| {
        match args.format {
            ExportFormat::Pprof => {
                let ns =
                    i64::try_from(loaded.started_unix_ms.saturating_mul(1_000_000)).unwrap_or(0);
                pprof::write(p, ns, out)?
            }
            ExportFormat::Collapsed => collapsed::write(
                p,
                collapsed::Options {
                    value,
                    by_process: args.by_process,
                    by_rank: args.by_rank,
                },
                out,
            )?,
            ExportFormat::Speedscope => speedscope::write(
                p,
                &name,
                speedscope::Options {
                    by_process: args.by_process,
                    by_rank: args.by_rank,
                },
                out,
            )?,
        }
        Ok(())
    })?;
    if let Some(path) = written {
        eprintln!("tansa: wrote {}", path.display());
    }
    Ok(exit::finish_all(
        &args.files,
        loaded.damaged,
        &loaded.warnings,
    ))
}
