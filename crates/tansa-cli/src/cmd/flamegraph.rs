//! `tansa flamegraph`: an interactive SVG flame graph of a recording, or of the
//! difference between two.

use std::path::PathBuf;
use std::process::ExitCode;

use tansa_analysis::profile::{Profile, ProfileKind};
use tansa_export::flamegraph::{self, Options};

use super::profile;
use crate::exit;

/// Options of `tansa flamegraph`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  tansa flamegraph run.tansa                       writes run.svg: bytes live at the peak
  tansa flamegraph run.tansa --weight allocated -o alloc.svg
  tansa flamegraph run.tansa --weight live --reverse   who calls what never frees
  tansa flamegraph cpu.tansa --icicle
  tansa flamegraph --diff before.tansa after.tansa -o growth.svg
  tansa flamegraph job-*.tansa --by-rank           one MPI job, one tower per rank

Weights: heap recordings: peak (bytes live when the heap peaked, the default), allocated
(bytes), live (bytes never freed), count (allocations), live-count (blocks never freed),
temporary (allocations freed by their own thread before it allocated again: heap churn),
lost and lost-count (bytes and blocks the leak check at exit found lost: recordings made
with `tansa record --leak-check`);
CPU recordings: samples (the default), cpu (nanoseconds). Frames are named
module!function and coloured by library (one hue per library); open the SVG in a browser
to search (Ctrl-F or the Search button) and click a frame to zoom.

--diff A B draws B's flame graph with each frame red where it grew from A and blue where it
shrank. Exit status: 0; 1 when a recording cannot be read; 2 for a wrong command line; 3
when one is truncated or damaged (the graph covers what was recorded before the damage).")]
pub struct Args {
    /// The recording (from `tansa record` or `tansa sample`), or several heap recordings
    /// (the ranks of one job) drawn as one; with --diff, the first of the two (before).
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<PathBuf>,

    /// Compare FILE (before) with this recording (after).
    #[arg(long, value_name = "AFTER")]
    diff: Option<PathBuf>,

    /// What the widths are [default: peak for heap, samples for CPU].
    #[arg(long, value_name = "WEIGHT")]
    weight: Option<String>,

    /// Icicle graph: the roots at the top.
    #[arg(long)]
    icicle: bool,

    /// Reversed (callers) view: the innermost functions at the root, their callers
    /// stacked on them.
    #[arg(long)]
    reverse: bool,

    /// Start every stack with its process (name [pid], and its rank and host when known).
    #[arg(long)]
    by_process: bool,

    /// Start every stack with its MPI rank: one tower per rank.
    #[arg(long)]
    by_rank: bool,

    /// Only the processes of this MPI rank (heap recordings).
    #[arg(long, value_name = "N")]
    rank: Option<u32>,

    /// Only this process of a recorded process tree (default: all of them).
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,

    /// Title [default: the recording's name and the weight].
    #[arg(long)]
    title: Option<String>,

    /// Write to OUT.svg (`-` for standard output) [default: FILE's name with .svg (.diff.svg
    /// with --diff), in the current directory, never replacing an existing file].
    #[arg(short, long, value_name = "OUT.svg")]
    output: Option<PathBuf>,
}

fn weight_title(p: &Profile, value: usize) -> String {
    let name = p.value_types.get(value).map_or("", |v| v.name);
    tansa_export::weights(p.kind)
        .iter()
        .find(|w| w.1 == name)
        .map_or_else(|| name.to_string(), |w| w.2.to_string())
}

/// Runs `tansa flamegraph`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.diff.is_some() && args.files.len() > 1 {
        return Err(exit::usage(
            "--diff compares two recordings: give one FILE (before) and --diff AFTER",
        ));
    }
    let file = &args.files[0];
    let before = profile::load(&args.files, args.pid, args.rank)?;
    let after = match &args.diff {
        Some(b) => Some((
            b,
            profile::load(std::slice::from_ref(b), args.pid, args.rank)?,
        )),
        None => None,
    };
    let p = &before.profile;
    if let Some((b, a)) = &after
        && a.profile.kind != p.kind
    {
        let kind = |k| match k {
            ProfileKind::Heap => "a heap recording",
            ProfileKind::Cpu => "a CPU recording",
        };
        return Err(exit::usage(format!(
            "cannot compare {} ({}) with {} ({})",
            file.display(),
            kind(p.kind),
            b.display(),
            kind(a.profile.kind)
        )));
    }
    let value = tansa_export::weight_index(p, args.weight.as_deref())
        .map_err(|e| exit::usage(e.to_string()))?;
    let file_name = |f: &PathBuf| {
        f.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    };
    let title = args.title.clone().unwrap_or_else(|| match &after {
        Some((b, _)) => format!("{} → {}", file_name(file), file_name(b)),
        None => file_name(file),
    });
    let mut subtitle = weight_title(p, value);
    if after.is_some() {
        subtitle = format!("{subtitle}: widths as after; red grew, blue shrank");
    }
    let options = Options {
        value,
        title,
        subtitle: Some(subtitle),
        icicle: args.icicle,
        reverse: args.reverse,
        by_process: args.by_process,
        by_rank: args.by_rank,
        warnings: before
            .warnings
            .iter()
            .chain(after.iter().flat_map(|(_, a)| &a.warnings))
            .cloned()
            .collect(),
    };
    let default = match &after {
        Some(_) => crate::output::default_name(file, "diff.svg"),
        None => crate::output::default_name(file, "svg"),
    };
    let mut inputs: Vec<&std::path::Path> = args.files.iter().map(PathBuf::as_path).collect();
    inputs.extend(args.diff.as_deref());
    let written = crate::output::write_whole(args.output.as_deref(), &default, &inputs, |out| {
        match &after {
            Some((_, a)) => flamegraph::write_diff(p, &a.profile, &options, out)?,
            None => flamegraph::write(p, &options, out)?,
        }
        Ok(())
    })?;
    if let Some(path) = written {
        eprintln!("tansa: wrote {}", path.display());
    }
    let mut status = exit::finish_all(&args.files, before.damaged, &before.warnings);
    if let Some((b, a)) = &after {
        let s = exit::finish(b, a.damaged, &a.warnings);
        if a.damaged {
            status = s;
        }
    }
    Ok(status)
}
