//! The agent's CPU-sampling mode (the in-process fallback of `tansa sample`), driven through
//! the collector library with a sink that resolves every sample's innermost frame.

mod common;

use std::collections::HashMap;

use common::*;
use tansa_collect::{CollectError, Config, Sink};
use tansa_format::memory::{SessionEnd, SessionInfo, SessionLosses, Unrecorded};
use tansa_format::meta::CalibrationPoint;
use tansa_symbols::ElfFile;
use tansa_wire::event::{Decoder, Record, StreamState};

#[derive(Default)]
struct Samples {
    meta: Vec<u8>,
    threads: HashMap<(u32, u32), Vec<u8>>,
}

impl Sink for Samples {
    fn session_started(&mut self, _: &SessionInfo) -> Result<(), CollectError> {
        Ok(())
    }
    fn meta(&mut self, _: u32, bytes: &[u8]) -> Result<(), CollectError> {
        self.meta.extend_from_slice(bytes);
        Ok(())
    }
    fn thread(&mut self, s: u32, st: u32, bytes: &[u8]) -> Result<(), CollectError> {
        self.threads
            .entry((s, st))
            .or_default()
            .extend_from_slice(bytes);
        Ok(())
    }
    fn stream_closed(&mut self, _: u32, _: u32) -> Result<(), CollectError> {
        Ok(())
    }
    fn session_ended(&mut self, _: &SessionEnd) -> Result<(), CollectError> {
        Ok(())
    }
    fn session_losses(&mut self, _: &SessionLosses) -> Result<(), CollectError> {
        Ok(())
    }
    fn unrecorded(&mut self, _: &Unrecorded) -> Result<(), CollectError> {
        Ok(())
    }
    fn watermark(&mut self, _: u64) -> Result<(), CollectError> {
        Ok(())
    }
    fn tick(&mut self, _: CalibrationPoint) -> Result<(), CollectError> {
        Ok(())
    }
}

/// Samples per innermost function and the deepest stacks' outermost named functions.
fn sample_functions(
    exe: &std::path::Path,
    args: &[&str],
    hz: u32,
) -> (HashMap<String, u64>, u64, Vec<Vec<String>>) {
    ensure_agent();
    let mut command = vec![exe.as_os_str().to_owned()];
    command.extend(args.iter().map(Into::into));
    let config = Config {
        free_stacks: false,
        sample_hz: Some(hz),
        ..collect_config(command)
    };
    let mut sink = Samples::default();
    let outcome = tansa_collect::record(&config, &mut sink).expect("record");
    assert!(
        matches!(
            outcome.exit,
            tansa_format::meta::ExitStatus::Exited { code: 0 }
        ),
        "{:?}",
        outcome.exit
    );
    // Modules (id -> path) and stacks (id -> frames).
    let mut modules = HashMap::new();
    let mut stacks = HashMap::new();
    for r in Decoder::new(&sink.meta) {
        match r.unwrap() {
            Record::ModuleLoad(m) => {
                modules.insert(m.id, String::from_utf8_lossy(m.path).into_owned());
            }
            Record::StackDef { id, frames } => {
                stacks.insert(id, frames.collect::<Vec<_>>());
            }
            _ => {}
        }
    }
    let elf = ElfFile::open(exe).unwrap();
    let name = |f: &tansa_wire::event::StackFrame| -> String {
        if modules.get(&f.module).map(String::as_str) == exe.to_str() {
            elf.function_containing(f.offset)
                .map_or("?".into(), |s| s.name)
        } else {
            modules
                .get(&f.module)
                .map_or("?".into(), |p| p.rsplit('/').next().unwrap().to_string())
        }
    };
    let mut by_function: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    let mut chains = Vec::new();
    for bytes in sink.threads.values() {
        for r in Decoder::with_state(bytes, StreamState::default()) {
            if let Ok(Record::Sample { stack, weight, .. }) = r {
                total += u64::from(weight);
                let frames = &stacks[&stack];
                *by_function.entry(name(&frames[0])).or_default() += u64::from(weight);
                if chains.len() < 50 {
                    chains.push(frames.iter().map(name).collect());
                }
            }
        }
    }
    (by_function, total, chains)
}

fn share(by: &HashMap<String, u64>, f: &str, total: u64) -> f64 {
    100.0 * *by.get(f).unwrap_or(&0) as f64 / total as f64
}

#[test]
fn sigprof_samples_give_the_cpu_shares_and_full_call_chains() {
    let exe = program(
        "spin-O2",
        "spin.c",
        &["-g", "-O2", "-fomit-frame-pointer", "-pthread"],
    );
    let (by, total, chains) = sample_functions(&exe, &["4500", "2"], 1000);
    // About 2.4 s of CPU time at 1 kHz, whatever the kernel's tick (weights count periods).
    assert!(total >= 400, "sampling periods recorded: {total} ({by:?})");
    let (a, b) = (share(&by, "hot_a", total), share(&by, "hot_b", total));
    let tolerance = share_tolerance(70.0, total);
    assert!(
        (a - 70.0).abs() <= tolerance,
        "hot_a {a:.1}% of {total} periods (70 +- {tolerance:.1}): {by:?}"
    );
    assert!(
        (b - 30.0).abs() <= tolerance,
        "hot_b {b:.1}% of {total} periods (30 +- {tolerance:.1}): {by:?}"
    );
    // Code without frame pointers unwinds through `work` to main (or the thread start).
    let reaching = chains
        .iter()
        .filter(|c| {
            c[0].starts_with("hot_")
                && c.iter().any(|f| f == "work")
                && c.iter().any(|f| f == "main" || f.starts_with("libc"))
        })
        .count();
    assert!(
        reaching * 10 >= chains.len() * 9,
        "chains reach work and main/libc: {chains:?}"
    );
}
