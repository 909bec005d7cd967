//! Completing a CPU recording whose recorder was killed outright.
//!
//! `tansa sample` writes checkpoint groups while it samples ([`crate::checkpoint`]), but
//! the symbols and the summary only when it ends. A recorder killed by `SIGKILL` or the
//! OOM killer leaves a file that ends with its last complete group, or part-way through
//! the next one. [`complete_leftover`] cuts the file after its last complete group,
//! resolves the addresses it holds from the module files on disk (each checked against
//! the build id recorded; the kernel's symbols only in the same boot), and appends the
//! symbol table, a [`COMPLETED`](tansa_format::cpu::COMPLETED) frame saying what was done,
//! the summary of the last checkpoint and the end frame. The source text of the functions
//! hit is not embedded (whoever completes the file may be able to read sources that the
//! sampled program's owner could not): annotation reads it from disk.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use tansa_analysis::cpu::{CpuRecording, CpuRecordingError};
use tansa_collect::salvage::SalvageError;
use tansa_format::container::{FrameType, HEADER_LEN, Kind, Writer};
use tansa_format::cpu::{self, Completed, ModuleKind, SourceFile};
use tansa_format::symtab::SymbolTable;

use crate::finish::{Inputs, lookups_of, merge_parts, resolve_on_workers};
use crate::kernel::KernelSymbols;

/// What [`complete_leftover`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCompleted {
    /// How the recording was completed (as written in it).
    pub completed: Completed,
    /// Samples kept: those up to the last checkpoint.
    pub samples: u64,
    /// How far into sampling the last checkpoint was, in nanoseconds.
    pub at_ns: u64,
    /// Module files whose symbols could not be read, one line each.
    pub unresolved: Vec<String>,
}

/// Completes the CPU recording at `path`, left unfinished by a recorder that was killed
/// (from its last checkpoint group, see [`crate::checkpoint`]). `progress(done, total,
/// module)` is called as each module is resolved. `Ok(None)`: the file is complete
/// already.
///
/// # Errors
///
/// [`SalvageError::StillRecording`] if a recorder holds its lock, [`SalvageError::Io`] if
/// it cannot be read or written, or holds no complete checkpoint group.
pub fn complete_leftover(
    path: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Option<CpuCompleted>, SalvageError> {
    let file = tansa_collect::salvage::open_locked(path)?;
    let before_first = || {
        SalvageError::Io(io::Error::other(format!(
            "its recorder was killed before its first checkpoint ({} s into sampling): \
             nothing it sampled was written",
            crate::checkpoint::FIRST.as_secs_f64()
        )))
    };
    let rec = match CpuRecording::open(BufReader::new(&file)) {
        Ok(rec) => rec,
        // The description comes with the first checkpoint.
        Err(CpuRecordingError::NoInfo { .. }) => return Err(before_first()),
        Err(e) => return Err(SalvageError::Io(io::Error::other(e.to_string()))),
    };
    if !rec.damaged {
        return Ok(None);
    }
    if rec.checkpoints > 0 && !rec.read_to_checkpoint {
        return Err(SalvageError::Io(io::Error::other(
            "it is damaged after its summary, not cut short in a checkpoint group",
        )));
    }
    let (Some(end), Some(summary)) = (rec.checkpoint_end, rec.summary) else {
        return Err(before_first());
    };
    let kernel_sampled = rec.modules.iter().any(|m| m.kind == ModuleKind::Kernel);
    let same_boot = rec
        .last_checkpoint
        .as_ref()
        .is_some_and(|c| !c.boot_id.is_empty() && c.boot_id == crate::checkpoint::boot_id());
    let kernel = (kernel_sampled && same_boot)
        .then(KernelSymbols::read)
        .flatten();
    let symbols = resolve(&rec, kernel.as_ref(), progress);
    let completed = Completed {
        recorder_pid: rec.info.recorder_pid,
        checkpoints: rec.checkpoints,
        dropped_bytes: file.metadata()?.len().saturating_sub(end),
        kernel_symbols: !kernel_sampled || kernel.is_some(),
    };
    // The frames to append, encoded apart (a writer to memory, less its file header).
    let mut w = Writer::new(Vec::new(), Kind::Cpu)?;
    w.value(cpu::SOURCES, &Vec::<SourceFile>::new())?;
    w.value(FrameType::SYMBOLS, &symbols)?;
    w.value(cpu::COMPLETED, &completed)?;
    w.value(cpu::SUMMARY, &summary)?;
    let frames = w.finish()?;
    let frames = &frames[HEADER_LEN..];
    file.set_len(end)?;
    let mut out = BufWriter::new(&file);
    out.seek(SeekFrom::Start(end))?;
    out.write_all(frames)?;
    out.flush()?;
    drop(out);
    file.sync_data()?;
    Ok(Some(CpuCompleted {
        completed,
        samples: summary.samples,
        at_ns: summary.wall_ns,
        unresolved: symbols.unresolved_notes(),
    }))
}

/// The symbol table of every address `rec` uses, its modules resolved on worker threads
/// as when a recording is finished, `progress` called as each is done.
fn resolve(
    rec: &CpuRecording,
    kernel: Option<&KernelSymbols>,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> SymbolTable {
    let (lookups, exact) = lookups_of(
        rec.addresses.iter().map(|a| (a.pc, a.caller, a.mode)),
        rec.stacks.iter().map(|s| &s.frames[..]),
    );
    let modules: Vec<_> = rec
        .modules
        .iter()
        .filter(|m| lookups.contains_key(&m.id))
        .cloned()
        .collect();
    let elfs = HashMap::new();
    let inputs = Inputs {
        lookups: &lookups,
        exact: &exact,
        elfs: &elfs,
        kernel,
        jit: None,
        withheld: &HashMap::new(),
    };
    let total = modules.len();
    let mut resolved = 0;
    let parts = resolve_on_workers(&modules, &[], &inputs, &mut |path| {
        resolved += 1;
        progress(resolved, total, path);
    });
    merge_parts(parts).0
}
