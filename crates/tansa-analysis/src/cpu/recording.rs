//! Reading a CPU recording into memory (it is a reduction: its size is that of its
//! distinct addresses and call chains, not of its samples).

use std::io::Read;

use tansa_format::FormatError;
use tansa_format::container::{FrameType, Kind, Reader};
use tansa_format::cpu::{
    self, AddressCount, CpuInfo, CpuSummary, Module, Process, SourceFile, Stack, StackCount,
    TimelineEntry, Unsampled,
};
use tansa_format::meta::RecordingMeta;
use tansa_format::symtab::SymbolTable;

/// Errors opening a CPU recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CpuRecordingError {
    /// The container could not be read at all.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The file is a recording of another kind.
    #[error("this is a {found}, not a CPU recording")]
    WrongKind {
        /// What it is.
        found: &'static str,
    },
    /// The file has no description frame: it is not usable.
    #[error("the recording holds no description of its sampling{}", damage_note(.damage))]
    NoInfo {
        /// The damage that stopped reading, if any.
        damage: Option<String>,
    },
}

fn damage_note(damage: &Option<String>) -> String {
    damage
        .as_ref()
        .map(|d| format!(" before the damage: {d}"))
        .unwrap_or_default()
}

/// A CPU recording.
#[derive(Debug, Clone)]
pub struct CpuRecording {
    /// Who recorded what.
    pub meta: Option<RecordingMeta>,
    /// What was sampled and how.
    pub info: CpuInfo,
    /// Process images.
    pub processes: Vec<Process>,
    /// Modules.
    pub modules: Vec<Module>,
    /// Counts per `(process, address, caller)`.
    pub addresses: Vec<AddressCount>,
    /// Call chains, indexed by id.
    pub stacks: Vec<Stack>,
    /// Counts per `(process, thread, chain)`.
    pub stack_counts: Vec<StackCount>,
    /// Per-sample timeline, if recorded.
    pub timeline: Vec<TimelineEntry>,
    /// Source files of the functions hit.
    pub sources: Vec<SourceFile>,
    /// Symbols.
    pub symbols: SymbolTable,
    /// Totals (absent if the file is cut short).
    pub summary: Option<CpuSummary>,
    /// CPU time no sample stands for, as the in-process sampler counted it.
    pub unsampled: Option<Unsampled>,
    /// Problems found while reading.
    pub warnings: Vec<String>,
    /// Whether the file is truncated or damaged.
    pub damaged: bool,
}

impl CpuRecording {
    /// Reads a whole recording. A truncated or damaged file is read up to the damage,
    /// with a warning.
    pub fn open(input: impl Read) -> Result<CpuRecording, CpuRecordingError> {
        let mut reader = Reader::new(input)?;
        if reader.kind() != Kind::Cpu {
            return Err(CpuRecordingError::WrongKind {
                found: reader.kind().describe(),
            });
        }
        let mut meta = None;
        let mut info = None;
        let mut rec = CpuRecording {
            meta: None,
            info: CpuInfo {
                source: cpu::SampleSource::Perf,
                event: String::new(),
                period_ns: 0,
                frequency_hz: 0,
                target: String::new(),
                unwinding: String::new(),
                kernel: false,
                cpus: 0,
                timeline: false,
                notes: Vec::new(),
                recorder_pid: 0,
            },
            processes: Vec::new(),
            modules: Vec::new(),
            addresses: Vec::new(),
            stacks: Vec::new(),
            stack_counts: Vec::new(),
            timeline: Vec::new(),
            sources: Vec::new(),
            symbols: SymbolTable::default(),
            summary: None,
            unsampled: None,
            warnings: Vec::new(),
            damaged: false,
        };
        loop {
            let frame = match reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) if e.is_damage() => {
                    rec.damaged = true;
                    rec.warnings.push(format!(
                        "{e}; the report covers what was recorded before it"
                    ));
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let result: Result<(), FormatError> = (|| {
                match frame.ty {
                    FrameType::META => meta = Some(frame.decode()?),
                    cpu::INFO => info = Some(frame.decode()?),
                    cpu::PROCESSES => rec.processes = frame.decode()?,
                    cpu::MODULES => rec.modules = frame.decode()?,
                    cpu::ADDRESSES => rec.addresses.extend(frame.decode::<Vec<AddressCount>>()?),
                    cpu::STACKS => rec.stacks.extend(frame.decode::<Vec<Stack>>()?),
                    cpu::STACK_COUNTS => {
                        rec.stack_counts.extend(frame.decode::<Vec<StackCount>>()?)
                    }
                    cpu::TIMELINE => rec.timeline.extend(frame.decode::<Vec<TimelineEntry>>()?),
                    cpu::SOURCES => rec.sources = frame.decode()?,
                    FrameType::SYMBOLS => rec.symbols = frame.decode()?,
                    cpu::SUMMARY => rec.summary = Some(frame.decode()?),
                    cpu::UNSAMPLED => rec.unsampled = Some(frame.decode()?),
                    _ => {}
                }
                Ok(())
            })();
            if let Err(e) = result {
                rec.damaged = true;
                rec.warnings.push(format!(
                    "{e}; the report covers what was recorded before it"
                ));
                break;
            }
        }
        if !reader.is_complete() && !rec.damaged {
            rec.damaged = true;
            rec.warnings.push(format!(
                "the file ends without its end marker at byte {} (the recorder did not finish \
                 writing it); the report covers what was recorded before it",
                reader.offset()
            ));
        }
        rec.meta = meta;
        rec.info = info.ok_or_else(|| CpuRecordingError::NoInfo {
            damage: rec.damaged.then(|| rec.warnings.join("; ")),
        })?;
        // Stacks are referred to by id: keep them indexable even if frames were lost.
        rec.stacks.sort_by_key(|s| s.id);
        // Call chains that stop short: their samples are missing from their callers'
        // totals, which must be said.
        let truncated: u64 = rec
            .stack_counts
            .iter()
            .filter(|c| {
                rec.stacks
                    .binary_search_by_key(&c.stack, |s| s.id)
                    .is_ok_and(|i| rec.stacks[i].truncated)
            })
            .fold(0u64, |sum, c| sum.saturating_add(c.count));
        let total: u64 = rec
            .stack_counts
            .iter()
            .fold(0u64, |sum, c| sum.saturating_add(c.count));
        if truncated > 0 {
            rec.warnings.push(format!(
                "{truncated} of {total} sample(s) have a call chain that stops before the \
                 outermost function (the stack could not be unwound further, or the stack copy \
                 was too short: --stack-size): the functions above them miss those samples in \
                 their totals"
            ));
        }
        if let Some(u) = rec.unsampled.filter(|u| u.cpu_ns > 0) {
            let sampled = total.saturating_mul(rec.info.period_ns);
            let share = u.cpu_ns as f64 * 100.0 / (sampled.saturating_add(u.cpu_ns)) as f64;
            rec.warnings.push(format!(
                "{:.1} ms of CPU time ({share:.1} % of the {:.1} ms the sampled threads used) \
                 is in no sample: {} thread(s) ended, or their process exited, between two \
                 signals of their CPU-time timer, whose last partial period is not sampled \
                 (the kernel checks these timers at its tick, so a thread that runs for less \
                 than a tick may get no sample at all); every figure is short by that time",
                u.cpu_ns as f64 / 1e6,
                (sampled.saturating_add(u.cpu_ns)) as f64 / 1e6,
                u.threads
            ));
        }
        rec.warnings.extend(rec.symbols.unresolved_notes());
        if rec.symbols.modules.is_empty() && !rec.modules.is_empty() {
            rec.warnings
                .push("the recording has no symbol table: functions and lines are unknown".into());
        }
        Ok(rec)
    }

    /// The stack with `id`.
    pub fn stack(&self, id: u32) -> Option<&Stack> {
        self.stacks
            .get(id as usize)
            .filter(|s| s.id == id)
            .or_else(|| {
                self.stacks
                    .binary_search_by_key(&id, |s| s.id)
                    .ok()
                    .map(|i| &self.stacks[i])
            })
    }

    /// The process with `id`.
    pub fn process(&self, id: u32) -> Option<&Process> {
        self.processes
            .get(id as usize)
            .filter(|p| p.id == id)
            .or_else(|| self.processes.iter().find(|p| p.id == id))
    }

    /// Total samples in the recording.
    pub fn total_samples(&self) -> u64 {
        self.addresses
            .iter()
            .fold(0u64, |sum, a| sum.saturating_add(a.count))
    }
}
