//! Frames of a CPU recording (`tansa sample`, or any recorder using the builder of
//! `tansa-sample`).
//!
//! ```text
//! META group* INFO PROCESSES MODULES ADDRESSES* STACKS* STACK_COUNTS* TIMELINE* SOURCES?
//! WITHHELD_SOURCES? NEWER_SOURCES? SYMBOLS UNSAMPLED? SUMMARY END
//! group := INFO PROCESSES MODULES ADDRESSES* STACKS* STACK_COUNTS* TIMELINE* UNSAMPLED?
//!          CHECKPOINT
//! ```
//!
//! While it runs, the recorder appends a checkpoint group now and then (half a second into
//! the run, then whenever the time elapsed has doubled, up to 2 s apart, then whenever a
//! tenth of the time elapsed has passed since the last): what changed
//! since the group before, ended by a [`CHECKPOINT`] frame. Counts in a group are the
//! increase since the last group (a reader adds up the counts of equal keys), stacks are
//! the new ones, and the info, process and module lists replace the earlier ones. The end
//! of the file is the last such increase, then the symbols and the summary. A recorder
//! killed outright leaves its file cut short: what the last complete group says is kept,
//! and completing the file ([`COMPLETED`]) adds the symbols and the summary.
//!
//! The recording is the seed's real-time reduction, not a sample log: the recorder keeps
//! one count per distinct `(process, interrupted address, caller)` ([`AddressCount`], the
//! seed's table 108) and one per distinct `(process, thread, call chain)`
//! ([`StackCount`]), so its size grows with the number of distinct addresses and chains,
//! not with the length of the run. Per-sample timestamps ([`TimelineEntry`]) are kept only
//! when asked for.
//!
//! Addresses are [`Loc`]s: a module of [`MODULES`] and an address in that module's file
//! (the ELF virtual address, independent of where the module was loaded), or, for the
//! kernel, the kernel address itself. The recording is self-contained: the common
//! [`SYMBOLS`](crate::FrameType::SYMBOLS) frame resolves every address used to function,
//! source line and inlined frames, and keeps the machine code of every function that was
//! hit (`ModuleSymbols::code`) and the text of their source files ([`SOURCES`]), so
//! reports and annotation work after the binaries are gone. Symbol-table module keys are
//! [`Module::id`]s.

use serde::{Deserialize, Serialize};

use crate::container::FrameType;
use crate::meta::ExitStatus;

/// [`CpuInfo`] (postcard).
pub const INFO: FrameType = FrameType(0x0200);
/// `Vec<`[`Process`]`>` (postcard).
pub const PROCESSES: FrameType = FrameType(0x0201);
/// `Vec<`[`Module`]`>` (postcard).
pub const MODULES: FrameType = FrameType(0x0202);
/// `Vec<`[`AddressCount`]`>` (postcard); there may be several.
pub const ADDRESSES: FrameType = FrameType(0x0203);
/// `Vec<`[`Stack`]`>` (postcard); there may be several.
pub const STACKS: FrameType = FrameType(0x0204);
/// `Vec<`[`StackCount`]`>` (postcard); there may be several.
pub const STACK_COUNTS: FrameType = FrameType(0x0205);
/// `Vec<`[`TimelineEntry`]`>` (postcard); only with `--timeline`; there may be several.
pub const TIMELINE: FrameType = FrameType(0x0206);
/// `Vec<`[`SourceFile`]`>` (postcard).
pub const SOURCES: FrameType = FrameType(0x0207);
/// [`CpuSummary`] (postcard).
pub const SUMMARY: FrameType = FrameType(0x0208);
/// [`Unsampled`] (postcard), written before [`SUMMARY`] when there is any (readers that
/// predate it skip it).
pub const UNSAMPLED: FrameType = FrameType(0x0209);
/// [`Checkpoint`] (postcard): ends a checkpoint group (see the module documentation).
pub const CHECKPOINT: FrameType = FrameType(0x020A);
/// [`Completed`] (postcard): the recording was completed after its recorder was killed,
/// from its last checkpoint; written before [`SUMMARY`].
pub const COMPLETED: FrameType = FrameType(0x020B);
/// [`ShortStackCopies`] (postcard), written with each checkpoint group when there is any
/// (the last counts; readers that predate it skip it).
pub const SHORT_STACK_COPIES: FrameType = FrameType(0x020C);
/// `Vec<`[`WithheldSource`]`>` (postcard): the source files of the functions hit whose text
/// was not embedded, and why; written after [`SOURCES`] when there is any (readers that
/// predate it skip it).
pub const WITHHELD_SOURCES: FrameType = FrameType(0x020D);
/// `Vec<`[`NewerSource`]`>` (postcard): the source files embedded that were modified after
/// a module whose code names them was built, so that their lines may not be the code's;
/// written after [`SOURCES`] when there is any (readers that predate it skip it).
pub const NEWER_SOURCES: FrameType = FrameType(0x020E);

/// Samples whose call chain stops where the copy of their stack ended: the stack was
/// deeper than the bytes each sample copies (`--stack-size`), so their unwinding could not
/// reach the outermost frame. They are among the truncated chains ([`Stack::truncated`]);
/// this says why, and what would reach further.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShortStackCopies {
    /// Such samples.
    pub samples: u64,
    /// The bytes of stack each sample copied.
    pub copy_bytes: u32,
}

impl ShortStackCopies {
    /// The stack copy to suggest instead: four times as much, at most what the kernel
    /// copies (65528 bytes), and never less than the copy (the size is read from a file).
    pub fn larger_copy(&self) -> u32 {
        self.copy_bytes
            .saturating_mul(4)
            .min(65528)
            .max(self.copy_bytes)
    }

    /// Why such chains stop, and what reaches further, for reports and `tansa sample` to
    /// say alike: "deeper than the 8192 bytes each sample copied (`tansa sample
    /// --stack-size 32768` copies more)".
    pub fn advice(&self) -> String {
        format!(
            "deeper than the {} bytes each sample copied (`tansa sample --stack-size {}` \
             copies more)",
            self.copy_bytes,
            self.larger_copy()
        )
    }
}

/// [`Loc::module`] of an address that is in no known module (the offset is then the raw
/// address).
pub const NO_MODULE: u32 = u32::MAX;

/// Where samples came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SampleSource {
    /// `perf_event_open` (kernel-driven sampling, any process, kernel frames).
    Perf,
    /// An in-process `SIGPROF` timer in the agent (user frames only).
    Agent,
}

impl SampleSource {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            SampleSource::Perf => "perf",
            SampleSource::Agent => "agent",
        }
    }
}

/// What was sampled and how. Written first, after the common META frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// The sampler.
    pub source: SampleSource,
    /// The event, e.g. `cpu-clock`, `cycles`, `ITIMER_PROF`.
    pub event: String,
    /// Nominal time between two samples on one CPU, in nanoseconds (a sample count times
    /// this is CPU time).
    pub period_ns: u64,
    /// Requested sampling frequency (per CPU).
    pub frequency_hz: u64,
    /// What was sampled: `command`, `pids` or `system`.
    pub target: String,
    /// How user stacks were unwound, e.g. `dwarf+fp`, `fp`.
    pub unwinding: String,
    /// Whether kernel code was sampled.
    pub kernel: bool,
    /// Number of CPUs sampled.
    pub cpus: u32,
    /// Whether [`TIMELINE`] frames are present.
    pub timeline: bool,
    /// Things a reader should know (fallbacks taken, parts not covered).
    pub notes: Vec<String>,
    /// Process id of the recorder itself (it is sampled like any process with `-a`), 0 if
    /// not applicable.
    pub recorder_pid: u32,
}

/// A thread of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// Thread id.
    pub tid: u32,
    /// Last name seen.
    pub name: String,
}

/// One program image of a process: a process id from one `exec` (or creation) to the
/// next, so samples before and after an `exec` are separate processes, as are two
/// processes that reused a pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// Index of this entry; [`AddressCount::process`] and friends refer to it.
    pub id: u32,
    /// Process id (0 is the idle task).
    pub pid: u32,
    /// Parent process id (0 if unknown).
    pub ppid: u32,
    /// Name (`comm`, at most 15 bytes).
    pub comm: String,
    /// Executable path, if known.
    pub exe: String,
    /// Command line, if known.
    pub cmdline: Vec<String>,
    /// Whether this is a kernel thread (no user space).
    pub kernel_thread: bool,
    /// Start time (perf clock, ns), 0 if it was running when sampling started.
    pub start_ns: u64,
    /// End time, if it ended (or exec'ed) during sampling.
    pub end_ns: Option<u64>,
    /// How it ended, if known.
    pub exit: Option<ExitStatus>,
    /// Its threads.
    pub threads: Vec<Thread>,
}

/// What kind of code a module is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModuleKind {
    /// An ELF file (executable or shared library; which one depends on the process).
    Elf,
    /// The kernel and its modules (offsets are kernel addresses).
    Kernel,
    /// The vDSO (offsets are relative to its mapping).
    Vdso,
    /// Anonymous executable memory (JIT code; offsets are absolute addresses).
    Anonymous,
}

/// A module: a file of code, the kernel, the vDSO.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    /// Index of this entry (and the symbol table's module key).
    pub id: u32,
    /// Path, or a bracketed name (`[kernel.kallsyms]`, `[vdso]`, `[jit PID]`: a process's
    /// generated code).
    pub path: String,
    /// GNU build id, if any.
    pub build_id: Vec<u8>,
    /// Kind.
    pub kind: ModuleKind,
}

/// An address: a module and an address in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Loc {
    /// A [`Module::id`], or [`NO_MODULE`].
    pub module: u32,
    /// Address in the module's file (or the kernel or raw address).
    pub offset: u64,
}

/// CPU mode of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// User code.
    User,
    /// Kernel code.
    Kernel,
}

/// How many samples interrupted one address of one process with one caller (the seed's
/// `<PID, SID, address, count>`, plus the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressCount {
    /// A [`Process::id`].
    pub process: u32,
    /// The interrupted address (the address execution resumes at).
    pub pc: Loc,
    /// The call site of the routine containing `pc` (return address minus one), if known.
    pub caller: Option<Loc>,
    /// CPU mode.
    pub mode: Mode,
    /// Samples.
    pub count: u64,
}

/// A distinct call chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stack {
    /// Index of this entry.
    pub id: u32,
    /// Frames, innermost first. Frame 0 is the interrupted address; when
    /// `kernel_frames > 0`, frames `0..kernel_frames` are kernel code and frame
    /// `kernel_frames` is the user address the kernel was entered from. Every other frame
    /// is a return address minus one (the last byte of the call instruction), so it
    /// resolves to the call's source line.
    pub frames: Vec<Loc>,
    /// How many frames are kernel frames.
    pub kernel_frames: u32,
    /// Whether the unwinder stopped before the outermost frame (the chain is truncated).
    pub truncated: bool,
}

/// How many samples of one thread had one call chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCount {
    /// A [`Process::id`].
    pub process: u32,
    /// Thread id.
    pub tid: u32,
    /// A [`Stack::id`].
    pub stack: u32,
    /// Samples.
    pub count: u64,
}

/// One sample in time (with `--timeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// Timestamp (perf clock, ns).
    pub time_ns: u64,
    /// CPU.
    pub cpu: u32,
    /// A [`Process::id`].
    pub process: u32,
    /// Thread id.
    pub tid: u32,
    /// A [`Stack::id`].
    pub stack: u32,
}

/// The text of a source file of a function that was hit, for annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// Path, as the debug information names it.
    pub path: String,
    /// Contents.
    pub text: String,
}

/// A source file of a function that was hit whose text the recording does not hold, and
/// why (for instance: a user whose process ran the code could not read it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithheldSource {
    /// Path, as the debug information names it.
    pub path: String,
    /// Why its text was not embedded.
    pub reason: String,
}

/// A source file embedded whose modification time is later than that of a module whose
/// line table names it: edited (or replaced) after the module was built, so that its line
/// numbers may not be those of the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewerSource {
    /// Path, as the debug information names it.
    pub path: String,
    /// The module's path.
    pub module: String,
    /// Seconds from the module's modification to the source file's (at least 1).
    pub seconds: u64,
}

/// CPU time that no sample stands for, as the in-process sampler (`--source agent`)
/// counted it: each thread's time after the last period its CPU-time timer signalled, when
/// the thread ended or its process exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Unsampled {
    /// The time, in nanoseconds.
    pub cpu_ns: u64,
    /// The threads it is the time of.
    pub threads: u64,
}

/// Totals, written last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuSummary {
    /// Samples recorded.
    pub samples: u64,
    /// Records the kernel dropped because a ring was full (`PERF_RECORD_LOST`).
    pub lost_records: u64,
    /// Samples dropped before they reached a ring (`PERF_RECORD_LOST_SAMPLES`).
    pub lost_samples: u64,
    /// Samples whose user stack could not be unwound past the interrupted address.
    pub unwind_failures: u64,
    /// Time of the first sample (perf clock, ns).
    pub first_ns: u64,
    /// Time of the last sample.
    pub last_ns: u64,
    /// Wall-clock duration of sampling, in nanoseconds.
    pub wall_ns: u64,
}

/// The end of a checkpoint group: the totals up to it, as [`SUMMARY`] would give them had
/// the recording ended there.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The totals so far (`wall_ns`: time since sampling began).
    pub summary: CpuSummary,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`): the kernel's symbols can
    /// be read when completing the recording only in the same boot.
    pub boot_id: String,
}

/// How a recording whose recorder was killed was completed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Completed {
    /// The recorder that was killed.
    pub recorder_pid: u32,
    /// The checkpoint groups kept.
    pub checkpoints: u32,
    /// Bytes after the last complete group, dropped.
    pub dropped_bytes: u64,
    /// Whether the kernel's symbols were read (same boot) when kernel code was sampled.
    pub kernel_symbols: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::{Kind, Reader, Writer};

    /// The suggestion is larger, bounded by what the kernel copies, and never smaller than
    /// a copy size read from a file (the fuzzer found `clamp` panicking on one above the
    /// bound).
    #[test]
    fn a_larger_stack_copy_is_suggested_within_bounds() {
        let copy = |copy_bytes| ShortStackCopies {
            samples: 1,
            copy_bytes,
        };
        assert_eq!(copy(8192).larger_copy(), 32768);
        assert_eq!(copy(32768).larger_copy(), 65528);
        assert_eq!(copy(65528).larger_copy(), 65528);
        assert_eq!(copy(u32::MAX).larger_copy(), u32::MAX);
        assert_eq!(copy(0).larger_copy(), 0);
    }

    #[test]
    fn frames_round_trip() {
        let mut w = Writer::new(Vec::new(), Kind::Cpu).unwrap();
        let counts = vec![AddressCount {
            process: 0,
            pc: Loc {
                module: 1,
                offset: 0x1139,
            },
            caller: Some(Loc {
                module: 1,
                offset: 0x1180,
            }),
            mode: Mode::User,
            count: 7,
        }];
        w.value(ADDRESSES, &counts).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = Reader::new(std::io::Cursor::new(bytes)).unwrap();
        assert_eq!(r.kind(), Kind::Cpu);
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(f.ty, ADDRESSES);
        assert_eq!(f.decode::<Vec<AddressCount>>().unwrap(), counts);
    }
}
