//! Reading a CPU recording into memory (it is a reduction: its size is that of its
//! distinct addresses and call chains, not of its samples).

use std::io::Read;

use tansa_format::FormatError;
use tansa_format::container::{FrameType, Kind, Reader};
use tansa_format::cpu::{
    self, AddressCount, Checkpoint, Completed, CpuInfo, CpuSummary, Module, NewerSource, Process,
    ShortStackCopies, SourceFile, Stack, StackCount, TimelineEntry, Unsampled, WithheldSource,
};
use tansa_format::meta::{ExitStatus, RecordingMeta, signal_name};
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
    /// Source files of the functions hit whose text the recorder did not embed, and why.
    pub withheld_sources: Vec<WithheldSource>,
    /// Source files embedded that were modified after a module naming them was built.
    pub newer_sources: Vec<NewerSource>,
    /// Symbols.
    pub symbols: SymbolTable,
    /// Totals (absent if the file is cut short).
    pub summary: Option<CpuSummary>,
    /// CPU time no sample stands for, as the in-process sampler counted it.
    pub unsampled: Option<Unsampled>,
    /// Samples whose unwinding stopped at the end of their stack copy.
    pub short_stack_copies: Option<ShortStackCopies>,
    /// Checkpoint groups the file holds (see `tansa_format::cpu`).
    pub checkpoints: u32,
    /// Where the last checkpoint group ends in the file.
    pub checkpoint_end: Option<u64>,
    /// The last checkpoint read.
    pub last_checkpoint: Option<Checkpoint>,
    /// Whether the file was cut short or damaged in a checkpoint group or after it, and is
    /// read up to the end of the last complete group.
    pub read_to_checkpoint: bool,
    /// How the recording was completed after its recorder was killed, if it was.
    pub completed: Option<Completed>,
    /// Problems found while reading.
    pub warnings: Vec<String>,
    /// Whether the file is truncated or damaged.
    pub damaged: bool,
}

/// The lists a frame replaces (description, processes, modules, CPU time in no sample):
/// taken in at the end of each checkpoint group, and at the end of the file unless it is
/// read up to its last group. Moved, never copied, so that many groups cost no more than
/// their frames.
#[derive(Debug, Default)]
struct Replaced {
    info: Option<CpuInfo>,
    processes: Option<Vec<Process>>,
    modules: Option<Vec<Module>>,
    unsampled: Option<Unsampled>,
    short_stack_copies: Option<ShortStackCopies>,
}

impl Replaced {
    fn apply(&mut self, rec: &mut CpuRecording, info: &mut Option<CpuInfo>) {
        if let Some(i) = self.info.take() {
            *info = Some(i);
        }
        if let Some(p) = self.processes.take() {
            rec.processes = p;
        }
        if let Some(m) = self.modules.take() {
            rec.modules = m;
        }
        if let Some(u) = self.unsampled.take() {
            rec.unsampled = Some(u);
        }
        if let Some(c) = self.short_stack_copies.take() {
            rec.short_stack_copies = Some(c);
        }
    }
}

/// How much of the appended lists the last complete checkpoint group covers.
#[derive(Debug)]
struct Committed {
    addresses: usize,
    stacks: usize,
    stack_counts: usize,
    timeline: usize,
    checkpoint: CpuSummary,
    /// Where the group ends in the file.
    offset: u64,
}

/// Adds up the counts of equal keys: each checkpoint group holds the increase since the
/// one before.
fn merge_counts(rec: &mut CpuRecording) {
    let mode_key = |m: cpu::Mode| m == cpu::Mode::Kernel;
    rec.addresses
        .sort_by_key(|a| (a.process, a.pc, a.caller, mode_key(a.mode)));
    rec.addresses.dedup_by(|later, kept| {
        let same = later.process == kept.process
            && later.pc == kept.pc
            && later.caller == kept.caller
            && later.mode == kept.mode;
        if same {
            kept.count = kept.count.saturating_add(later.count);
        }
        same
    });
    rec.stack_counts
        .sort_by_key(|s| (s.process, s.tid, s.stack));
    rec.stack_counts.dedup_by(|later, kept| {
        let same =
            later.process == kept.process && later.tid == kept.tid && later.stack == kept.stack;
        if same {
            kept.count = kept.count.saturating_add(later.count);
        }
        same
    });
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
            withheld_sources: Vec::new(),
            newer_sources: Vec::new(),
            symbols: SymbolTable::default(),
            summary: None,
            unsampled: None,
            short_stack_copies: None,
            checkpoints: 0,
            checkpoint_end: None,
            last_checkpoint: None,
            read_to_checkpoint: false,
            completed: None,
            warnings: Vec::new(),
            damaged: false,
        };
        // What the last complete checkpoint group left (see `tansa_format::cpu`): a file
        // cut short is read up to it, not into a group half written.
        let mut committed: Option<Committed> = None;
        let mut replaced = Replaced::default();
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
                    cpu::INFO => replaced.info = Some(frame.decode()?),
                    cpu::CHECKPOINT => {
                        let c: Checkpoint = frame.decode()?;
                        replaced.apply(&mut rec, &mut info);
                        rec.checkpoints += 1;
                        rec.checkpoint_end = Some(reader.offset());
                        committed = Some(Committed {
                            addresses: rec.addresses.len(),
                            stacks: rec.stacks.len(),
                            stack_counts: rec.stack_counts.len(),
                            timeline: rec.timeline.len(),
                            checkpoint: c.summary,
                            offset: reader.offset(),
                        });
                        rec.last_checkpoint = Some(c);
                    }
                    cpu::COMPLETED => rec.completed = Some(frame.decode()?),
                    cpu::PROCESSES => replaced.processes = Some(frame.decode()?),
                    cpu::MODULES => replaced.modules = Some(frame.decode()?),
                    cpu::ADDRESSES => rec.addresses.extend(frame.decode::<Vec<AddressCount>>()?),
                    cpu::STACKS => rec.stacks.extend(frame.decode::<Vec<Stack>>()?),
                    cpu::STACK_COUNTS => {
                        rec.stack_counts.extend(frame.decode::<Vec<StackCount>>()?)
                    }
                    cpu::TIMELINE => rec.timeline.extend(frame.decode::<Vec<TimelineEntry>>()?),
                    cpu::SOURCES => rec.sources = frame.decode()?,
                    cpu::WITHHELD_SOURCES => rec.withheld_sources = frame.decode()?,
                    cpu::NEWER_SOURCES => rec.newer_sources = frame.decode()?,
                    FrameType::SYMBOLS => rec.symbols = frame.decode()?,
                    cpu::SUMMARY => rec.summary = Some(frame.decode()?),
                    cpu::UNSAMPLED => replaced.unsampled = Some(frame.decode()?),
                    cpu::SHORT_STACK_COPIES => {
                        replaced.short_stack_copies = Some(frame.decode()?);
                    }
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
        match committed {
            Some(c) if rec.damaged && rec.summary.is_none() => {
                // Back to the end of the last complete group.
                rec.addresses.truncate(c.addresses);
                rec.stacks.truncate(c.stacks);
                rec.stack_counts.truncate(c.stack_counts);
                rec.timeline.truncate(c.timeline);
                rec.summary = Some(c.checkpoint);
                rec.read_to_checkpoint = true;
                let at = c.checkpoint.wall_ns as f64 / 1e9;
                rec.warnings.push(format!(
                    "it is read up to its last checkpoint ({at:.1} s into sampling, byte {}): \
                     what was sampled after it is not in the report",
                    c.offset
                ));
            }
            _ => replaced.apply(&mut rec, &mut info),
        }
        if rec.checkpoints > 0 {
            merge_counts(&mut rec);
        }
        if let Some(c) = &rec.completed {
            rec.warnings.push(format!(
                "its recorder (pid {}) did not finish it (it was killed, or failed): the \
                 recording was completed from its last checkpoint ({:.1} s into sampling); what \
                 was sampled after it is lost, and its symbols were read afterwards from the \
                 files on disk{}",
                c.recorder_pid,
                rec.summary.map_or(0.0, |s| s.wall_ns as f64 / 1e9),
                if c.kernel_symbols {
                    ""
                } else {
                    " (the kernel's are unknown: read in another boot, or not at all)"
                }
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
            let why = match rec.short_stack_copies.filter(|c| c.samples > 0) {
                Some(c) => format!(
                    "{} of them because the stack was {}, the others because it could not be \
                     unwound further",
                    c.samples.min(truncated),
                    c.advice()
                ),
                None => "the stack could not be unwound further, or the stack copy was too \
                         short: --stack-size"
                    .into(),
            };
            rec.warnings.push(format!(
                "{truncated} of {total} sample(s) have a call chain that stops before the \
                 outermost function ({why}): the functions above them miss those samples in \
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
        if rec.info.source == cpu::SampleSource::Agent {
            // A process killed by a signal runs none of the agent's exit code: its running
            // threads' last partial periods are in no sample and not counted above.
            let killed: Vec<String> = rec
                .processes
                .iter()
                .filter_map(|p| match p.exit {
                    Some(ExitStatus::Signaled { signal, .. }) => {
                        Some(format!("{} ({})", p.pid, signal_name(signal)))
                    }
                    _ => None,
                })
                .collect();
            if !killed.is_empty() {
                let shown: Vec<&str> = killed.iter().take(10).map(String::as_str).collect();
                rec.warnings.push(format!(
                    "{} process(es) ended by a signal ({}{}): what their threads still running \
                     then had used since their last sample (up to a sampling period, {:.1} ms, \
                     each, or a kernel tick if longer) is in no sample and not counted as such",
                    killed.len(),
                    shown.join(", "),
                    if killed.len() > shown.len() {
                        ", ..."
                    } else {
                        ""
                    },
                    rec.info.period_ns as f64 / 1e6
                ));
            }
        }
        rec.warnings.extend(rec.symbols.unresolved_notes());
        if let Some(note) = unnamed_generated_note(&rec) {
            rec.info.notes.push(note);
        }
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

/// A note when a twentieth or more of the samples are in generated code without a name:
/// how to have the runtime name it.
fn unnamed_generated_note(rec: &CpuRecording) -> Option<String> {
    // Counts come from the file: summed without overflow.
    let total = rec
        .addresses
        .iter()
        .fold(0u64, |t, a| t.saturating_add(a.count));
    let unnamed: u64 = rec
        .addresses
        .iter()
        .filter(|a| {
            rec.modules
                .get(a.pc.module as usize)
                .is_some_and(|m| m.kind == cpu::ModuleKind::Anonymous)
                && rec
                    .symbols
                    .module(u64::from(a.pc.module))
                    .and_then(|m| m.lookup(a.pc.offset))
                    .is_none_or(|s| s.frames.is_empty())
        })
        .fold(0u64, |t, a| t.saturating_add(a.count));
    (total > 0 && unnamed.saturating_mul(20) >= total).then(|| {
        format!(
            "{:.1} % of the samples are in code generated at run time that has no names \
             ([jit PID]!??); runtimes name it in a perf map when asked, which tansa sample \
             reads: node --perf-basic-prof, python3.12 -X perf, DOTNET_PerfMapEnabled=1, \
             perf-map-agent for Java",
            unnamed as f64 * 100.0 / total as f64
        )
    })
}
