//! Seeds the fuzz corpora from real recordings: `tansa-fuzz-seed CORPUS_DIR RECORDING...`.
//!
//! Each recording goes, as it is and with every frame stored uncompressed (so that byte
//! mutations reach the decoders), to the corpus of the container target and of the target
//! of its kind (memory, cpu or retrace); the payloads of its frames go to the corpus of
//! the frame-decoder target. A heap recording also goes to the corpus of the leftover
//! target as a killed recorder would have left it: without the frames written at the end
//! (from the first calibration, symbol or end frame on), with and without a torn last
//! frame. A CPU recording goes to the corpus of the cpu-leftover target the same way: its
//! frames up to the symbols, ended as a checkpoint group, then with the start of another
//! group, whole and torn. `fuzz/seed.sh` makes the recordings and calls this.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use tansa_format::container::{FrameType, Kind, Reader};
use tansa_fuzz::craft::Recording;

/// Largest payload kept as a seed of the frame-decoder target.
const MAX_PAYLOAD_SEED: usize = 16 * 1024;
/// Seeds kept per frame type and recording.
const PER_TYPE: usize = 3;

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(name), bytes)
}

fn seed(dir: &Path, file: &Path) -> Result<(), String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let kind = Reader::new(std::io::Cursor::new(&bytes))
        .map_err(|e| format!("{}: {e}", file.display()))?
        .kind();
    let target = match kind {
        Kind::Memory => "memory",
        Kind::Cpu => "cpu",
        Kind::Retrace => "retrace",
    };
    let rec = Recording::decode(&bytes).ok_or_else(|| format!("{}: unreadable", file.display()))?;
    let name = file
        .file_stem()
        .map_or_else(|| "recording".into(), |s| s.to_string_lossy().into_owned());
    let plain = rec.encode(false);
    let io = |e: std::io::Error| e.to_string();
    for t in ["container", target] {
        write(dir, t, &name, &bytes).map_err(io)?;
        write(dir, t, &format!("{name}-plain"), &plain).map_err(io)?;
    }
    if kind == Kind::Memory {
        let mut cut = rec.clone();
        let end = cut
            .frames
            .iter()
            .position(|f| matches!(f.ty, FrameType::CALIBRATION | FrameType::SYMBOLS))
            .unwrap_or(cut.frames.len());
        cut.frames.truncate(end);
        cut.complete = false;
        for (suffix, compress) in [("", true), ("-plain", false)] {
            let whole = cut.encode(compress);
            write(dir, "leftover", &format!("{name}{suffix}"), &whole).map_err(io)?;
            // Torn: the last frame cut in two.
            let last = cut.frames.last().map_or(0, |f| f.payload.len() / 2 + 1);
            let torn = &whole[..whole.len().saturating_sub(last)];
            write(dir, "leftover", &format!("{name}{suffix}-torn"), torn).map_err(io)?;
        }
    }
    if kind == Kind::Cpu {
        cpu_leftovers(dir, &name, &rec).map_err(io)?;
    }
    let mut per_type: HashMap<u16, usize> = HashMap::new();
    for f in &rec.frames {
        let n = per_type.entry(f.ty.0).or_default();
        if *n >= PER_TYPE || f.payload.len() > MAX_PAYLOAD_SEED {
            continue;
        }
        *n += 1;
        let seed_name = format!("{name}-{:04x}-{n}", f.ty.0);
        write(dir, "frames", &seed_name, &f.payload).map_err(io)?;
    }
    Ok(())
}

/// The CPU recording `rec` as a `tansa sample` killed after its last checkpoint would have
/// left it (the increase up to the end is one checkpoint group), and killed part-way
/// through the next group (torn).
fn cpu_leftovers(dir: &Path, name: &str, rec: &Recording) -> std::io::Result<()> {
    use tansa_format::cpu::{self, Checkpoint, CpuSummary};
    use tansa_fuzz::craft::RawFrame;
    let summary: CpuSummary = rec
        .frames
        .iter()
        .find(|f| f.ty == cpu::SUMMARY)
        .and_then(|f| postcard::from_bytes(&f.payload).ok())
        .unwrap_or_default();
    let checkpoint = Checkpoint {
        summary,
        boot_id: "seed".into(),
    };
    let mut cut = rec.clone();
    let end = cut
        .frames
        .iter()
        .position(|f| matches!(f.ty, cpu::SOURCES | FrameType::SYMBOLS))
        .unwrap_or(cut.frames.len());
    cut.frames.truncate(end);
    cut.frames.push(RawFrame {
        ty: cpu::CHECKPOINT,
        keyed: false,
        payload: postcard::to_stdvec(&checkpoint).map_err(std::io::Error::other)?,
    });
    cut.complete = false;
    let next: Vec<RawFrame> = cut
        .frames
        .iter()
        .filter(|f| matches!(f.ty, cpu::INFO | cpu::PROCESSES))
        .cloned()
        .collect();
    for (suffix, compress) in [("", true), ("-plain", false)] {
        write(
            dir,
            "cpu-leftover",
            &format!("{name}{suffix}"),
            &cut.encode(compress),
        )?;
        let mut more = cut.clone();
        more.frames.extend(next.iter().cloned());
        let whole = more.encode(compress);
        let last = more.frames.last().map_or(0, |f| f.payload.len() / 2 + 1);
        let torn = &whole[..whole.len().saturating_sub(last)];
        write(dir, "cpu-leftover", &format!("{name}{suffix}-torn"), torn)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((dir, files)) = args.split_first() else {
        eprintln!("usage: tansa-fuzz-seed CORPUS_DIR RECORDING...");
        return ExitCode::from(2);
    };
    for f in files {
        if let Err(e) = seed(Path::new(dir), Path::new(f)) {
            eprintln!("tansa-fuzz-seed: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
