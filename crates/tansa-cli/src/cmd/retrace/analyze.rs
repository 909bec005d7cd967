//! `tansa retrace FILE`: read the recording, rebuild the trace, render it.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;
use tansa_retrace::recording::{RetraceRecording, RetraceRecordingError};
use tansa_retrace::report::{Alignment, ReportInput, build_report};
use tansa_retrace::{GroupSimilarity, MergeConfig, Method, Ranking, Scores, Variant};

use super::Format;
use crate::{exit, output};

/// Annotation variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VariantArg {
    /// Function + instruction index (seed embodiment 1).
    Function,
    /// Function + basic block + offset in block (seed embodiment 2).
    Block,
}

/// Pattern search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// Enumerate up to --enumeration-limit patterns, else dynamic programming.
    Auto,
    /// Always enumerate the C(a+b, a) patterns (the seed's procedure).
    Enumerate,
    /// Always use the equivalent dynamic program.
    Dp,
}

/// Group similarity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimilarityArg {
    /// Similarity of the groups' merged sequences, lock-step (the seed's literal procedure).
    Literal,
    /// Best similarity between any two of their partial sequences (robust for large periods).
    Linkage,
}

/// How samples are put in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlignArg {
    /// By position from the sampler's exact instruction counts, one trace per path, gaps
    /// filled from the control-flow graph (falls back to `merge` without exact counts).
    Counts,
    /// The seed's method: merge per-execution partial sequences by similarity.
    Merge,
}

/// Top-K ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RankingArg {
    /// Raw likelihood (literal to the seed).
    Raw,
    /// Likelihood gained by the merge.
    Gain,
}

/// Options of `tansa retrace FILE`.
#[derive(Debug, clap::Args)]
pub struct ReportOptions {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Which annotation the score tables use.
    #[arg(long, value_enum, default_value_t = VariantArg::Block)]
    variant: VariantArg,
    /// Score tables as JSON (the `scores` object of the JSON report); overrides --variant.
    #[arg(long, value_name = "FILE")]
    scores: Option<PathBuf>,
    /// How samples are put in order: by their exact positions, or by the seed's similarity
    /// merge (which --merge, --similarity, --top-k and --ranking tune).
    #[arg(long, value_enum, default_value_t = AlignArg::Counts)]
    align: AlignArg,
    /// How the best combination pattern of a pair is found.
    #[arg(long = "merge", value_enum, default_value_t = MethodArg::Auto)]
    method: MethodArg,
    /// How the similarity of two already-merged groups is computed.
    #[arg(long, value_enum, default_value_t = SimilarityArg::Linkage)]
    similarity: SimilarityArg,
    /// With --merge auto: enumerate pairs with at most this many patterns.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    enumeration_limit: u64,
    /// Pairs tried per merge step (1: the seed's procedure; more: its top-K variant).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    top_k: u64,
    /// How the top-K variant compares patterns of different pairs.
    #[arg(long, value_enum, default_value_t = RankingArg::Raw)]
    ranking: RankingArg,
    /// Text: list every instruction instead of collapsing straight-line runs.
    #[arg(long)]
    expand: bool,
    /// Write the report here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Reads a retrace recording, with clear messages.
fn load(path: &Path) -> anyhow::Result<RetraceRecording> {
    let file = crate::cmd::options::open_recording(path)?;
    match RetraceRecording::read(BufReader::new(file)) {
        Ok(r) => Ok(r),
        Err(RetraceRecordingError::WrongKind { found }) => anyhow::bail!(
            "{}: a {found}, not an instruction-trace recording; make one with `tansa retrace record`",
            path.display()
        ),
        Err(RetraceRecordingError::Format(e)) => Err(exit::unreadable(path, &e)),
        Err(e) => anyhow::bail!("{}: {e}; record again", path.display()),
    }
}

fn merge_config(args: &ReportOptions, time_based: bool) -> anyhow::Result<MergeConfig> {
    let scores = match &args.scores {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            serde_json::from_str::<Scores>(&text).with_context(|| {
                format!(
                    "{} is not a score-table document (see `scores` in the JSON report)",
                    p.display()
                )
            })?
        }
        None => Scores::defaults(
            match args.variant {
                VariantArg::Function => Variant::Function,
                VariantArg::Block => Variant::Block,
            },
            time_based,
        ),
    };
    if scores.similarity.variant() != scores.likelihood.variant() {
        anyhow::bail!("the similarity and likelihood tables must use the same variant");
    }
    let mut cfg = MergeConfig::new(scores);
    cfg.method = match args.method {
        MethodArg::Auto => Method::Auto,
        MethodArg::Enumerate => Method::Enumerate,
        MethodArg::Dp => Method::Dp,
    };
    cfg.enumeration_limit = u128::from(args.enumeration_limit);
    cfg.group_similarity = match args.similarity {
        SimilarityArg::Literal => GroupSimilarity::Literal,
        SimilarityArg::Linkage => GroupSimilarity::Linkage,
    };
    cfg.top_k = usize::try_from(args.top_k).unwrap_or(usize::MAX);
    cfg.ranking = match args.ranking {
        RankingArg::Raw => Ranking::Raw,
        RankingArg::Gain => Ranking::Gain,
    };
    Ok(cfg)
}

/// Runs `tansa retrace FILE`.
pub fn run(path: &Path, args: ReportOptions) -> anyhow::Result<ExitCode> {
    let l = load(path)?;
    if l.executions.is_empty() {
        let why = if l.damaged { " before the damage" } else { "" };
        for w in &l.warnings {
            eprintln!("tansa: warning: {}: {w}", path.display());
        }
        anyhow::bail!(
            "{}: the recording holds no sampled executions{why}; record again",
            path.display()
        );
    }
    let cfg = merge_config(&args, l.info.source.is_time_based())?;
    let command = l
        .meta
        .as_ref()
        .map(|m| m.command.clone())
        .unwrap_or_default();
    let report = build_report(
        ReportInput {
            command: &command,
            info: &l.info,
            code: &l.code,
            executions: &l.executions,
            phases: l.phases.as_deref(),
            ground_truth: l.ground_truth.as_ref(),
            summary: l.summary.as_ref(),
        },
        &cfg,
        match args.align {
            AlignArg::Counts => Alignment::Counts,
            AlignArg::Merge => Alignment::Merge,
        },
    )
    .context("merging the partial sequences failed")?;
    let mut out = output::open(args.output.as_deref(), &[path])?;
    match args.format {
        Format::Json => tansa_render::retrace::json(&report, &mut out)?,
        Format::Text => tansa_render::retrace::text(&report, args.expand, &mut out)?,
    }
    out.finish()?;
    Ok(exit::finish(path, l.damaged, &l.warnings))
}
