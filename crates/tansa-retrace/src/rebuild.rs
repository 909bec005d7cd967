//! From recorded samples to a rebuilt trace: annotate, de-duplicate, merge, materialise.
//!
//! Identical partial sequences (executions sampled at the same phase) carry no new
//! information and would only duplicate instructions when merged (spec §13.4), so each
//! distinct partial is merged once and remembers how many executions produced it. That
//! count is the *support* of each position of the rebuilt trace: how many partials saw
//! that instruction there.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::annotate::{InsnId, Program};
use crate::merge::{MergeConfig, MergeError, Merged, merge};
use crate::model::{CodeAddr, Loc};
use crate::pattern::round_robin;

/// One position of a rebuilt trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The instruction's address.
    pub at: CodeAddr,
    /// The instruction in the program, if the address is known code.
    pub insn: Option<InsnId>,
    /// How many executions' partial sequences contributed this sample.
    pub support: u32,
}

/// A rebuilt trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// The trace, in execution order.
    pub entries: Vec<Entry>,
    /// Partial sequences that had at least one sample.
    pub partials: usize,
    /// Distinct partial sequences among them (what was merged).
    pub distinct_partials: usize,
    /// Samples in all partials.
    pub samples: usize,
    /// How the distinct partials were merged (indexes into them, by first appearance).
    pub merged: Merged,
}

/// Rebuilds the trace from `executions` (the samples of each execution, in time order).
pub fn rebuild(
    program: &Program,
    executions: &[Vec<CodeAddr>],
    cfg: &MergeConfig,
) -> Result<Rebuilt, MergeError> {
    let mut index: HashMap<&[CodeAddr], usize> = HashMap::new();
    let mut distinct: Vec<&[CodeAddr]> = Vec::new();
    let mut counts: Vec<u32> = Vec::new();
    let mut partials = 0;
    let mut samples = 0;
    for e in executions.iter().filter(|e| !e.is_empty()) {
        partials += 1;
        samples += e.len();
        let i = *index.entry(e.as_slice()).or_insert_with(|| {
            distinct.push(e);
            counts.push(0);
            distinct.len() - 1
        });
        counts[i] = counts[i].saturating_add(1);
    }
    let locs: Vec<Vec<Loc>> = distinct
        .iter()
        .map(|p| p.iter().map(|&a| program.loc(a)).collect())
        .collect();
    let merged = merge(&locs, cfg)?;
    let tagged: Vec<Vec<Entry>> = distinct
        .iter()
        .zip(&counts)
        .map(|(p, &support)| {
            p.iter()
                .map(|&at| Entry {
                    at,
                    insn: program.lookup(at),
                    support,
                })
                .collect()
        })
        .collect();
    Ok(Rebuilt {
        entries: round_robin(&merged.order, &tagged),
        partials,
        distinct_partials: distinct.len(),
        samples,
        merged,
    })
}
