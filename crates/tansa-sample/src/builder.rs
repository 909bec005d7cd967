//! Writing a CPU recording from any sampler: declare processes, mappings and threads,
//! feed samples, finish.
//!
//! ```no_run
//! use tansa_format::cpu::{CpuInfo, SampleSource};
//! use tansa_format::meta::RecordingMeta;
//! use tansa_sample::{CpuRecordingBuilder, MappingInfo, ProcessInfo, SampleInput};
//!
//! # fn info() -> CpuInfo { unimplemented!() }
//! # fn meta() -> RecordingMeta { unimplemented!() }
//! let mut b = CpuRecordingBuilder::new(meta(), info());
//! let p = b.add_process(ProcessInfo {
//!     pid: 1234,
//!     comm: "app".into(),
//!     exe: "/usr/bin/app".into(),
//!     ..ProcessInfo::default()
//! });
//! b.add_mapping(p, MappingInfo {
//!     start: 0x5555_5555_4000,
//!     end: 0x5555_5555_9000,
//!     file_offset: 0x1000,
//!     path: "/usr/bin/app".into(),
//!     build_id: None,
//!     load_bias: None,
//! });
//! b.add_thread(p, 1234, "app");
//! // The interrupted PC first, then return addresses.
//! b.add_sample(&SampleInput {
//!     process: p,
//!     tid: 1234,
//!     user: &[0x5555_5555_5139, 0x5555_5555_5190],
//!     ..SampleInput::default()
//! });
//! let file = std::fs::File::create("app.tansa").unwrap();
//! b.finish(std::io::BufWriter::new(file)).unwrap();
//! ```
//!
//! Every address is normalized when it is added, while the mapping that holds it is
//! known: to a module (file path and build id) and the address in that file (what the
//! symbol table and the disassembly use), or to the kernel. Counts are then kept per
//! distinct `(process, interrupted address, caller)` and per distinct
//! `(process, thread, call chain)`, so memory grows with the number of distinct
//! addresses and chains, never with the number of samples (unless a timeline is kept).
//! Adding a sample whose addresses and chain were seen before allocates nothing.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use tansa_format::cpu::{
    CpuInfo, Loc, Mode, Module, ModuleKind, NO_MODULE, Process, Thread, TimelineEntry,
};
use tansa_format::meta::{ExitStatus, RecordingMeta};
use tansa_symbols::ElfFile;

use crate::kernel::KernelSymbols;

/// Lowest kernel address on x86-64 (user addresses are below).
pub const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// A process declared to the builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId(pub(crate) u32);

impl ProcessId {
    /// Its index in the recording's process table.
    pub fn index(self) -> u32 {
        self.0
    }
}

/// What is known about a process (one program image).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id (0: the idle task).
    pub pid: u32,
    /// Parent process id (0 if unknown).
    pub ppid: u32,
    /// Name (`comm`).
    pub comm: String,
    /// Executable path (empty if unknown).
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Whether it is a kernel thread.
    pub kernel_thread: bool,
    /// Start time in the samples' clock (0: running before sampling started).
    pub start_ns: u64,
}

/// An executable mapping of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingInfo {
    /// First address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Offset in the file of the byte mapped at `start`.
    pub file_offset: u64,
    /// Path of the file, or `[vdso]`, `//anon`, ...
    pub path: String,
    /// Build id, if the sampler knows it (read from the file otherwise).
    pub build_id: Option<Vec<u8>>,
    /// Load bias (runtime address minus file address), if the sampler knows it (as the
    /// dynamic linker does); otherwise it is computed from the file's program headers.
    pub load_bias: Option<u64>,
}

/// One sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleInput<'a> {
    /// The process.
    pub process: ProcessId,
    /// Thread id.
    pub tid: u32,
    /// CPU (for the timeline).
    pub cpu: u32,
    /// Timestamp (any monotonic nanosecond clock, the same for every sample).
    pub time_ns: u64,
    /// Kernel frames, innermost first; the first is the interrupted kernel address, the
    /// others are return addresses. Empty for a sample of user code.
    pub kernel: &'a [u64],
    /// User frames, innermost first: the first is the interrupted user address (or the
    /// address the kernel was entered from, when `kernel` is not empty), the others are
    /// return addresses.
    pub user: &'a [u64],
    /// Whether the unwinder stopped before the outermost user frame.
    pub truncated: bool,
}

impl Default for ProcessId {
    fn default() -> Self {
        ProcessId(u32::MAX)
    }
}

/// A mapping of an address space, normalized.
#[derive(Debug, Clone, Copy)]
struct Map {
    start: u64,
    end: u64,
    module: u32,
    /// Address in the module = runtime address − `bias`.
    bias: u64,
}

#[derive(Debug, Default, Clone)]
struct Space {
    maps: Vec<Map>,
    /// The module of addresses outside every mapping, when they are generated code (see
    /// [`CpuRecordingBuilder::unmapped_code_is_generated`]).
    generated: Option<u32>,
}

impl Space {
    fn insert(&mut self, m: Map) {
        self.maps.retain(|o| o.end <= m.start || o.start >= m.end);
        let i = self.maps.partition_point(|o| o.start < m.start);
        self.maps.insert(i, m);
    }

    fn find(&self, addr: u64) -> Option<&Map> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }
}

/// What the builder knows of a file.
#[derive(Debug)]
struct FileInfo {
    build_id: Vec<u8>,
    elf: Option<Arc<ElfFile>>,
}

/// Marker frame appended to stack keys: `offset` holds the kernel frame count and the
/// truncation flag.
const STACK_META: u32 = NO_MODULE - 1;

/// Builds a CPU recording. See the [module documentation](self).
#[derive(Debug)]
pub struct CpuRecordingBuilder {
    pub(crate) meta: RecordingMeta,
    pub(crate) info: CpuInfo,
    pub(crate) processes: Vec<Process>,
    spaces: Vec<Space>,
    threads: Vec<FxHashMap<u32, usize>>,
    pub(crate) modules: Vec<Module>,
    module_index: HashMap<(String, Vec<u8>), u32>,
    files: HashMap<String, FileInfo>,
    kernel_module: Option<u32>,
    pub(crate) kernel_symbols: Option<KernelSymbols>,
    pub(crate) addresses: FxHashMap<(u32, Loc, Option<Loc>, Mode), u64>,
    stack_index: FxHashMap<Box<[Loc]>, u32>,
    pub(crate) stacks: Vec<Box<[Loc]>>,
    pub(crate) stack_counts: FxHashMap<(u32, u32, u32), u64>,
    pub(crate) timeline: Option<Vec<TimelineEntry>>,
    scratch: Vec<Loc>,
    pub(crate) samples: u64,
    pub(crate) lost_records: u64,
    pub(crate) lost_samples: u64,
    pub(crate) unsampled: tansa_format::cpu::Unsampled,
    pub(crate) short_stack_copies: tansa_format::cpu::ShortStackCopies,
    pub(crate) unwind_failures: u64,
    pub(crate) first_ns: u64,
    pub(crate) last_ns: u64,
    pub(crate) wall_ns: u64,
    pub(crate) elf_cache: HashMap<u32, Arc<ElfFile>>,
    /// Who each process ran as and which modules it mapped: a file named by a module's
    /// code is read only if every owner of a process that mapped the module could read it
    /// (see [`crate::sources`]).
    pub(crate) owners: crate::sources::Owners,
    /// With [`CpuRecordingBuilder::track_new_locations`]: the module locations that
    /// finishing will resolve, added since [`CpuRecordingBuilder::take_new_locations`],
    /// each with whether it is an interrupted user address (whose function's code is kept).
    new_locations: Option<Vec<(Loc, bool)>>,
    /// What was prepared while the target ran (see [`crate::warm`]).
    pub(crate) warm: Option<crate::warm::Warmer>,
    /// The owners of the processes, for naming their JIT code (see [`crate::jit`]).
    pub(crate) jit: crate::jit::JitSources,
    /// Whether user addresses outside every mapping are generated code.
    unmapped_generated: bool,
}

impl CpuRecordingBuilder {
    /// A builder for a recording described by `meta` and `info` (`info.timeline` decides
    /// whether per-sample timestamps are kept).
    pub fn new(meta: RecordingMeta, info: CpuInfo) -> Self {
        let timeline = info.timeline.then(Vec::new);
        CpuRecordingBuilder {
            meta,
            info,
            processes: Vec::new(),
            spaces: Vec::new(),
            threads: Vec::new(),
            modules: Vec::new(),
            module_index: HashMap::new(),
            files: HashMap::new(),
            kernel_module: None,
            kernel_symbols: None,
            addresses: FxHashMap::default(),
            stack_index: FxHashMap::default(),
            stacks: Vec::new(),
            stack_counts: FxHashMap::default(),
            timeline,
            scratch: Vec::with_capacity(256),
            samples: 0,
            lost_records: 0,
            lost_samples: 0,
            unsampled: tansa_format::cpu::Unsampled::default(),
            short_stack_copies: tansa_format::cpu::ShortStackCopies::default(),
            unwind_failures: 0,
            first_ns: u64::MAX,
            last_ns: 0,
            wall_ns: 0,
            elf_cache: HashMap::new(),
            owners: crate::sources::Owners::default(),
            jit: crate::jit::JitSources::default(),
            unmapped_generated: false,
            new_locations: None,
            warm: None,
        }
    }

    /// The recording's description, to add notes while recording.
    pub fn info_mut(&mut self) -> &mut CpuInfo {
        &mut self.info
    }

    /// Takes user addresses outside every mapping of the processes declared from now on
    /// for their generated code (`[jit PID]`, see [`crate::jit`]): for a sampler that
    /// declares the mappings of files only, as the in-process agent does (it knows the
    /// modules the dynamic linker loaded, not the memory a JIT made executable).
    pub fn unmapped_code_is_generated(&mut self) {
        self.unmapped_generated = true;
    }

    /// Declares a process (one program image; after an `exec`, declare a new one).
    pub fn add_process(&mut self, p: ProcessInfo) -> ProcessId {
        self.add_process_as(p, Vec::new())
    }

    /// Declares a process known to have run as `also` too (its parent's owner at its
    /// `fork`, its earlier image's before an `exec`), besides the owner `/proc` names now.
    /// When the process is gone already, `also` stands for it unless one of them is root,
    /// who may have become any user since (`setpriv`, a daemon's worker): then nobody is
    /// known (see [`crate::sources`]).
    pub(crate) fn add_process_as(
        &mut self,
        p: ProcessInfo,
        also: Vec<crate::sources::Reader>,
    ) -> ProcessId {
        let id = self.processes.len() as u32;
        let r = crate::sources::Reader::of_process(p.pid)
            .or_else(|| {
                also.first()
                    .filter(|_| also.iter().all(|r| r.uid() != 0))
                    .cloned()
            })
            .unwrap_or_else(crate::sources::Reader::unknown);
        self.owners
            .declare(id, std::iter::once(r.clone()).chain(also));
        // When it started, for the age of its perf map: from /proc while it lives; else
        // (gone already) when sampling began, if it began during sampling.
        let recording_started = self.meta.started_unix_ms;
        self.jit.owners.entry(p.pid).or_insert_with(|| {
            let started = tansa_proc::ProcKey::of(p.pid)
                .ok()
                .map(|k| k.start_unix_ms())
                .or((p.start_ns != 0).then_some(recording_started));
            crate::jit::JitOwner {
                reader: r,
                started_unix_ms: started,
            }
        });
        self.processes.push(Process {
            id,
            pid: p.pid,
            ppid: p.ppid,
            comm: p.comm,
            exe: p.exe,
            cmdline: p.cmdline,
            kernel_thread: p.kernel_thread,
            start_ns: p.start_ns,
            end_ns: None,
            exit: None,
            threads: Vec::new(),
        });
        let generated = self.unmapped_generated.then(|| {
            let path = crate::jit::module_path(self.processes[id as usize].pid);
            self.module(&path, &[], ModuleKind::Anonymous)
        });
        self.spaces.push(Space {
            maps: Vec::new(),
            generated,
        });
        self.threads.push(FxHashMap::default());
        ProcessId(id)
    }

    /// Declares a child created by `fork` of `parent`: same name, executable, command
    /// line and mappings.
    pub fn fork_process(&mut self, parent: ProcessId, pid: u32, time_ns: u64) -> ProcessId {
        let Some(par) = self.processes.get(parent.0 as usize) else {
            return self.add_process(ProcessInfo {
                pid,
                start_ns: time_ns,
                ..ProcessInfo::default()
            });
        };
        let info = ProcessInfo {
            pid,
            ppid: par.pid,
            comm: par.comm.clone(),
            exe: par.exe.clone(),
            cmdline: par.cmdline.clone(),
            kernel_thread: par.kernel_thread,
            start_ns: time_ns,
        };
        let space = self.spaces[parent.0 as usize].clone();
        // The child ran as its parent at the fork, whatever it runs as by now.
        let child = self.add_process_as(info, self.owners.of(parent.0));
        self.spaces[child.0 as usize] = space;
        for m in self.owners.modules_of(parent.0) {
            self.owners.mapped(child.0, m);
        }
        child
    }

    /// The process's declared information.
    pub fn process(&self, p: ProcessId) -> Option<&Process> {
        self.processes.get(p.0 as usize)
    }

    /// Sets the process's name.
    pub fn set_comm(&mut self, p: ProcessId, comm: &str) {
        if let Some(proc) = self.processes.get_mut(p.0 as usize) {
            proc.comm = comm.to_string();
        }
    }

    /// Sets the process's executable path.
    pub fn set_exe(&mut self, p: ProcessId, exe: &str) {
        if let Some(proc) = self.processes.get_mut(p.0 as usize) {
            proc.exe = exe.to_string();
        }
    }

    /// Sets the process's command line.
    pub fn set_cmdline(&mut self, p: ProcessId, cmdline: Vec<String>) {
        if let Some(proc) = self.processes.get_mut(p.0 as usize) {
            proc.cmdline = cmdline;
        }
    }

    /// Records that the process ended (or replaced its image) at `time_ns`.
    pub fn end_process(&mut self, p: ProcessId, time_ns: u64, exit: Option<ExitStatus>) {
        if let Some(proc) = self.processes.get_mut(p.0 as usize) {
            proc.end_ns.get_or_insert(time_ns);
            if exit.is_some() {
                proc.exit = exit;
            }
        }
    }

    /// Declares a thread of a process, or renames it.
    pub fn add_thread(&mut self, p: ProcessId, tid: u32, name: &str) {
        self.thread(p, tid, name, true);
    }

    /// Adds a thread named `name` unless it is known already (a thread's creation, which
    /// the kernel may report after the name the thread then took).
    pub fn add_new_thread(&mut self, p: ProcessId, tid: u32, name: &str) {
        self.thread(p, tid, name, false);
    }

    fn thread(&mut self, p: ProcessId, tid: u32, name: &str, rename: bool) {
        let (Some(proc), Some(index)) = (
            self.processes.get_mut(p.0 as usize),
            self.threads.get_mut(p.0 as usize),
        ) else {
            return;
        };
        match index.get(&tid) {
            Some(&i) if rename => proc.threads[i].name = name.to_string(),
            Some(_) => {}
            None => {
                index.insert(tid, proc.threads.len());
                proc.threads.push(Thread {
                    tid,
                    name: name.to_string(),
                });
            }
        }
    }

    /// Gives the kernel's symbols (from `/proc/kallsyms`), to name kernel frames.
    pub fn set_kernel_symbols(&mut self, symbols: KernelSymbols) {
        self.kernel_symbols = Some(symbols);
    }

    /// From now on, keeps the locations that finishing will resolve as they appear (see
    /// [`CpuRecordingBuilder::take_new_locations`]).
    pub(crate) fn track_new_locations(&mut self) {
        self.new_locations.get_or_insert_with(Vec::new);
    }

    /// The locations in modules that finishing will resolve, added since the last call
    /// (in no order, possibly repeated), each with whether it is an interrupted user
    /// address; empty unless tracked.
    pub(crate) fn take_new_locations(&mut self) -> Vec<(Loc, bool)> {
        self.new_locations
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Module `id`.
    pub(crate) fn module_of(&self, id: u32) -> Option<&Module> {
        self.modules.get(id as usize)
    }

    /// Whether a kernel address was sampled.
    pub(crate) fn kernel_hit(&self) -> bool {
        self.kernel_module.is_some()
    }

    /// Counts records or samples the sampler lost.
    pub fn note_lost(&mut self, records: u64, samples: u64) {
        self.lost_records += records;
        self.lost_samples += samples;
    }

    /// Counts CPU time that no sample stands for (see [`tansa_format::cpu::Unsampled`]).
    pub fn note_unsampled(&mut self, cpu_ns: u64, threads: u64) {
        self.unsampled.cpu_ns = self.unsampled.cpu_ns.saturating_add(cpu_ns);
        self.unsampled.threads = self.unsampled.threads.saturating_add(threads);
    }

    /// Counts a sample whose unwinding stopped at the end of its stack copy, of
    /// `copy_bytes` (see [`tansa_format::cpu::ShortStackCopies`]).
    pub fn note_short_stack_copy(&mut self, copy_bytes: u32) {
        self.short_stack_copies.samples += 1;
        self.short_stack_copies.copy_bytes = copy_bytes;
    }

    /// Counts a sample whose user stack could not be unwound.
    pub fn note_unwind_failure(&mut self) {
        self.unwind_failures += 1;
    }

    /// Sets the wall-clock duration of sampling.
    pub fn set_wall_ns(&mut self, ns: u64) {
        self.wall_ns = ns;
    }

    /// The module for `path` and `build_id`, created on first use.
    fn module(&mut self, path: &str, build_id: &[u8], kind: ModuleKind) -> u32 {
        if let Some(&m) = self
            .module_index
            .get(&(path.to_string(), build_id.to_vec()))
        {
            return m;
        }
        let id = self.modules.len() as u32;
        self.modules.push(Module {
            id,
            path: path.to_string(),
            build_id: build_id.to_vec(),
            kind,
        });
        self.module_index
            .insert((path.to_string(), build_id.to_vec()), id);
        id
    }

    /// The file at `path` that a mapping whose build id the kernel gave as `mapped` (when
    /// it did) maps. Opened once, and again when the path names another file since: a
    /// program rebuilt while it is sampled is mapped anew from a new file, and each
    /// version's mappings must be read from their own. A file that is gone stays the one
    /// opened (the mapping was made before it went).
    fn file(&mut self, path: &str, mapped: Option<&[u8]>) -> &FileInfo {
        let stale = self
            .files
            .get(path)
            .is_some_and(|f| match (mapped, &f.elf) {
                (Some(b), Some(_)) => *b != *f.build_id,
                (None, Some(elf)) => !elf.is_current() && std::fs::exists(path).unwrap_or(false),
                (_, None) => false,
            });
        if stale || !self.files.contains_key(path) {
            let elf = ElfFile::open(path).ok().map(Arc::new);
            let build_id = elf.as_ref().and_then(|e| e.build_id()).unwrap_or_default();
            self.files
                .insert(path.to_string(), FileInfo { build_id, elf });
        }
        &self.files[path]
    }

    /// Declares an executable mapping of a process. Returns the module it belongs to.
    pub fn add_mapping(&mut self, p: ProcessId, m: MappingInfo) -> u32 {
        let (module, bias) = if m.path == "[vdso]" {
            // Named from tansa's own vDSO when it is the same image (`tansa_symbols::vdso`):
            // by the build id the agent read, or, from `/proc/PID/maps`, by the mapping's
            // size (the same size: the same ABI).
            let build_id = m.build_id.clone().unwrap_or_else(|| {
                tansa_symbols::vdso::build_id_for_size(m.end.saturating_sub(m.start))
            });
            (self.module("[vdso]", &build_id, ModuleKind::Vdso), m.start)
        } else if m.path.starts_with('[') || m.path.starts_with("//") || m.path.is_empty() {
            // Each process's generated code is its own module: its runtime's perf map
            // names it (`crate::jit`), and other processes' code at the same addresses
            // is other code.
            let pid = self.processes.get(p.0 as usize).map_or(0, |q| q.pid);
            let path = crate::jit::module_path(pid);
            (self.module(&path, &[], ModuleKind::Anonymous), 0)
        } else {
            let file = self.file(&m.path, m.build_id.as_deref());
            let file_build_id = file.build_id.clone();
            let elf = file.elf.clone();
            let build_id = m.build_id.clone().unwrap_or(file_build_id.clone());
            let bias = m.load_bias.unwrap_or_else(|| {
                // The file on disk describes the mapping only if it is the same file.
                let same = m.build_id.as_ref().is_none_or(|b| *b == file_build_id);
                let vaddr = elf
                    .as_ref()
                    .filter(|_| same)
                    .and_then(|e| e.address_of_offset(m.file_offset))
                    .unwrap_or(m.file_offset);
                m.start.wrapping_sub(vaddr)
            });
            let module = self.module(&m.path, &build_id, ModuleKind::Elf);
            if let Some(elf) = elf {
                self.elf_cache.entry(module).or_insert(elf);
            }
            (module, bias)
        };
        self.owners.mapped(p.0, module);
        if let Some(space) = self.spaces.get_mut(p.0 as usize) {
            space.insert(Map {
                start: m.start,
                end: m.end,
                module,
                bias,
            });
        }
        module
    }

    /// Notes the owner `/proc` names now for `p`, if it may have changed since `p` was
    /// declared: a process that ran as root may have dropped to a user (a daemon's worker)
    /// before it maps that user's files. Call before declaring a mapping made while
    /// sampling.
    pub(crate) fn refresh_owner(&mut self, p: ProcessId) {
        if !self.owners.root(p.0) {
            return;
        }
        if let Some(pid) = self.processes.get(p.0 as usize).map(|x| x.pid)
            && let Some(r) = crate::sources::Reader::of_process(pid)
        {
            self.owners.declare(p.0, [r]);
        }
    }

    fn kernel(&mut self) -> u32 {
        match self.kernel_module {
            Some(k) => k,
            None => {
                let k = self.module("[kernel.kallsyms]", &[], ModuleKind::Kernel);
                self.kernel_module = Some(k);
                k
            }
        }
    }

    /// Normalizes a user address of process `p`.
    fn user_loc(&self, p: usize, addr: u64) -> Loc {
        match self.spaces.get(p).and_then(|s| s.find(addr)) {
            Some(m) => Loc {
                module: m.module,
                offset: addr.wrapping_sub(m.bias),
            },
            None => Loc {
                module: self
                    .spaces
                    .get(p)
                    .and_then(|s| s.generated)
                    .unwrap_or(NO_MODULE),
                offset: addr,
            },
        }
    }

    /// Whether a user address of process `p` lies in a mapping the builder was told of
    /// (not only in its generated code).
    pub fn is_mapped(&self, p: ProcessId, addr: u64) -> bool {
        self.spaces
            .get(p.0 as usize)
            .is_some_and(|s| s.find(addr).is_some())
    }

    /// Where a user address of process `p` lands: its module and address in the module.
    pub fn locate(&self, p: ProcessId, addr: u64) -> Option<(u32, u64)> {
        let l = self.user_loc(p.0 as usize, addr);
        (l.module != NO_MODULE).then_some((l.module, l.offset))
    }

    /// Adds one sample. Returns `false` (and records nothing) for an unknown process or a
    /// sample without any frame.
    pub fn add_sample(&mut self, s: &SampleInput<'_>) -> bool {
        let p = s.process.0 as usize;
        if p >= self.processes.len() || (s.kernel.is_empty() && s.user.is_empty()) {
            return false;
        }
        let kernel = if s.kernel.is_empty() {
            0
        } else {
            self.kernel()
        };
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        for (i, &a) in s.kernel.iter().enumerate() {
            let a = if i == 0 { a } else { a.wrapping_sub(1) };
            frames.push(Loc {
                module: kernel,
                offset: a,
            });
        }
        for (i, &a) in s.user.iter().enumerate() {
            let a = if i == 0 { a } else { a.wrapping_sub(1) };
            let loc = if a >= KERNEL_START {
                // vsyscall page and the like: user-mode code at a kernel address.
                Loc {
                    module: NO_MODULE,
                    offset: a,
                }
            } else {
                self.user_loc(p, a)
            };
            frames.push(loc);
        }
        let mode = if s.kernel.is_empty() {
            Mode::User
        } else {
            Mode::Kernel
        };
        let inner = if s.kernel.is_empty() {
            &frames[..]
        } else {
            &frames[..s.kernel.len()]
        };
        let caller = inner.get(1).copied();
        match self.addresses.entry((p as u32, frames[0], caller, mode)) {
            std::collections::hash_map::Entry::Occupied(mut e) => *e.get_mut() += 1,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(1);
                if let Some(new) = &mut self.new_locations {
                    new.push((frames[0], mode == Mode::User));
                    new.extend(caller.map(|c| (c, false)));
                }
            }
        }
        frames.push(Loc {
            module: STACK_META,
            offset: s.kernel.len() as u64 | (u64::from(s.truncated) << 32),
        });
        let stack = match self.stack_index.get(&frames[..]) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                let key: Box<[Loc]> = frames.clone().into_boxed_slice();
                if let Some(new) = &mut self.new_locations {
                    new.extend(
                        frames
                            .iter()
                            .filter(|f| f.module != NO_MODULE && f.module != STACK_META)
                            .map(|&f| (f, false)),
                    );
                }
                self.stacks.push(key.clone());
                self.stack_index.insert(key, id);
                id
            }
        };
        *self
            .stack_counts
            .entry((p as u32, s.tid, stack))
            .or_insert(0) += 1;
        if let Some(t) = &mut self.timeline {
            t.push(TimelineEntry {
                time_ns: s.time_ns,
                cpu: s.cpu,
                process: p as u32,
                tid: s.tid,
                stack,
            });
        }
        self.samples += 1;
        self.first_ns = self.first_ns.min(s.time_ns);
        self.last_ns = self.last_ns.max(s.time_ns);
        self.scratch = frames;
        true
    }

    /// Samples added so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Distinct `(process, address, caller)` entries so far.
    pub fn distinct_addresses(&self) -> usize {
        self.addresses.len()
    }

    /// Distinct call chains so far.
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// The totals so far.
    pub(crate) fn summary(&self) -> tansa_format::cpu::CpuSummary {
        tansa_format::cpu::CpuSummary {
            samples: self.samples,
            lost_records: self.lost_records,
            lost_samples: self.lost_samples,
            unwind_failures: self.unwind_failures,
            first_ns: if self.samples == 0 { 0 } else { self.first_ns },
            last_ns: self.last_ns,
            wall_ns: self.wall_ns,
        }
    }

    #[cfg(test)]
    pub(crate) fn address_counts(&self) -> Vec<tansa_format::cpu::AddressCount> {
        use tansa_format::cpu::AddressCount;
        let mut v: Vec<AddressCount> = self
            .addresses
            .iter()
            .map(|(&(process, pc, caller, mode), &count)| AddressCount {
                process,
                pc,
                caller,
                mode,
                count,
            })
            .collect();
        v.sort_by_key(|a| (a.process, a.pc, a.caller));
        v
    }
}

/// Splits a stored stack key into frames, kernel frame count and truncation flag.
pub(crate) fn split_stack(key: &[Loc]) -> (&[Loc], u32, bool) {
    match key.split_last() {
        Some((meta, frames)) if meta.module == STACK_META => {
            (frames, meta.offset as u32, meta.offset >> 32 != 0)
        }
        _ => (key, 0, false),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tansa_format::cpu::SampleSource;

    pub(crate) fn test_builder() -> CpuRecordingBuilder {
        CpuRecordingBuilder::new(
            RecordingMeta {
                tool: "test".into(),
                started_unix_ms: 0,
                hostname: String::new(),
                command: Vec::new(),
                options: Vec::new(),
            },
            CpuInfo {
                source: SampleSource::Agent,
                event: "test".into(),
                period_ns: 1_000_000,
                frequency_hz: 1000,
                target: "command".into(),
                unwinding: "test".into(),
                kernel: false,
                cpus: 1,
                timeline: false,
                notes: Vec::new(),
                recorder_pid: 0,
            },
        )
    }

    #[test]
    fn counts_are_reduced_per_address_and_per_chain() {
        let mut b = test_builder();
        let p = b.add_process(ProcessInfo {
            pid: 10,
            ..ProcessInfo::default()
        });
        b.add_mapping(
            p,
            MappingInfo {
                start: 0x10000,
                end: 0x20000,
                file_offset: 0x1000,
                path: "/nonexistent/app".into(),
                build_id: Some(vec![1, 2]),
                load_bias: Some(0x10000),
            },
        );
        for _ in 0..5 {
            assert!(b.add_sample(&SampleInput {
                process: p,
                tid: 10,
                user: &[0x10100, 0x10200],
                ..SampleInput::default()
            }));
        }
        assert!(b.add_sample(&SampleInput {
            process: p,
            tid: 11,
            kernel: &[0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020],
            user: &[0x10100, 0x10200],
            ..SampleInput::default()
        }));
        assert!(!b.add_sample(&SampleInput {
            process: ProcessId(9),
            user: &[1],
            ..SampleInput::default()
        }));
        assert_eq!(b.samples(), 6);
        assert_eq!(b.distinct_addresses(), 2);
        assert_eq!(b.distinct_stacks(), 2);
        let counts = b.address_counts();
        let user = counts.iter().find(|a| a.mode == Mode::User).unwrap();
        assert_eq!(user.count, 5);
        assert_eq!(user.pc.offset, 0x100);
        assert_eq!(
            user.caller.map(|c| c.offset),
            Some(0x1ff),
            "return address − 1"
        );
        let (frames, kernel, truncated) = split_stack(&b.stacks[1]);
        assert_eq!((frames.len(), kernel, truncated), (4, 2, false));
        assert_eq!(frames[2].offset, 0x100, "the user entry address is exact");
    }

    #[test]
    fn forked_children_inherit_mappings_and_unknown_addresses_stay_raw() {
        let mut b = test_builder();
        let p = b.add_process(ProcessInfo {
            pid: 1,
            comm: "parent".into(),
            ..ProcessInfo::default()
        });
        b.add_mapping(
            p,
            MappingInfo {
                start: 0x4000,
                end: 0x5000,
                path: "[vdso]".into(),
                ..MappingInfo::default()
            },
        );
        let c = b.fork_process(p, 2, 5);
        assert_eq!(b.process(c).unwrap().comm, "parent");
        assert_eq!(b.locate(c, 0x4010).map(|l| l.1), Some(0x10));
        assert_eq!(b.locate(c, 0x9000), None);
    }
}
