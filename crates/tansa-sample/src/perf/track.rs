//! Process tracking from side-band records (the seed's fork, exec and dispatch hooks) and
//! the per-sample path: call-chain splitting, DWARF unwinding, handing to the builder.

use rustc_hash::{FxHashMap, FxHashSet};
use tansa_format::meta::ExitStatus;
use tansa_perf::{
    CONTEXT_KERNEL, CONTEXT_MAX, CONTEXT_USER, MmapRecord, SampleLayout, SampleRef, SideBand,
    TaskRecord, X86_REG_BP, X86_REG_IP, X86_REG_SP,
};

use crate::builder::{CpuRecordingBuilder, MappingInfo, ProcessId, ProcessInfo, SampleInput};
use crate::procfs::{self, ProcProcess};
use crate::unwind::{Unwinders, Unwound, UserRegs};

/// `PERF_RECORD_MISC_CPUMODE_MASK` value of kernel samples.
const MISC_KERNEL: u16 = 1;

/// Follows processes and turns samples into builder input.
#[derive(Debug)]
pub struct Tracker {
    /// Per pid, its program images in order: `(start time, process)`.
    epochs: FxHashMap<u32, Vec<(u64, ProcessId)>>,
    /// Images whose executable is not known yet (set by their first file mapping).
    exe_pending: FxHashSet<ProcessId>,
    unwinders: Unwinders,
    dwarf: bool,
    /// The bytes of user stack each sample asks the kernel to copy.
    stack_bytes: u32,

    kernel_frames: Vec<u64>,
    fp_user: Vec<u64>,
    dwarf_user: Vec<u64>,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Tracker {
    /// A tracker; `dwarf` when samples carry user registers and copies of `stack_bytes` of
    /// their stacks.
    pub fn new(dwarf: bool, stack_bytes: u32) -> Self {
        Tracker {
            epochs: FxHashMap::default(),
            exe_pending: FxHashSet::default(),
            unwinders: Unwinders::default(),
            dwarf,
            stack_bytes,
            kernel_frames: Vec::with_capacity(128),
            fp_user: Vec::with_capacity(128),
            dwarf_user: Vec::with_capacity(256),
        }
    }

    /// The process image of `pid` at `time`.
    fn current(&self, pid: u32, time: u64) -> Option<ProcessId> {
        let e = self.epochs.get(&pid)?;
        let i = e.partition_point(|&(t, _)| t <= time);
        Some(e[i.saturating_sub(1)].1)
    }

    fn push_epoch(&mut self, pid: u32, time: u64, p: ProcessId) {
        let e = self.epochs.entry(pid).or_default();
        let i = e.partition_point(|&(t, _)| t <= time);
        e.insert(i, (time, p));
    }

    /// Declares the idle task (pid 0) for system-wide sampling.
    pub fn add_idle(&mut self, b: &mut CpuRecordingBuilder) {
        let p = b.add_process(ProcessInfo {
            pid: 0,
            comm: "idle".into(),
            kernel_thread: true,
            ..ProcessInfo::default()
        });
        self.push_epoch(0, 0, p);
    }

    /// Declares a process read from `/proc` (the initial scan, or a process first seen in
    /// a sample), unless it is already known.
    pub fn add_from_proc(&mut self, b: &mut CpuRecordingBuilder, pp: &ProcProcess) -> ProcessId {
        if let Some(p) = self.current(pp.pid, u64::MAX) {
            return p;
        }
        let p = b.add_process(ProcessInfo {
            pid: pp.pid,
            ppid: pp.ppid,
            comm: pp.comm.clone(),
            exe: pp.exe.clone(),
            cmdline: pp.cmdline.clone(),
            kernel_thread: pp.is_kernel_thread(),
            start_ns: 0,
        });
        self.push_epoch(pp.pid, 0, p);
        for (tid, name) in &pp.threads {
            b.add_thread(p, *tid, name);
        }
        for m in &pp.mappings {
            self.map(
                b,
                p,
                MappingInfo {
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    path: m.path.clone(),
                    build_id: None,
                    load_bias: None,
                },
            );
        }
        p
    }

    fn process_for(&mut self, b: &mut CpuRecordingBuilder, pid: u32, time: u64) -> ProcessId {
        if let Some(p) = self.current(pid, time) {
            return p;
        }
        let pp = procfs::read_process(pid).unwrap_or_else(|| ProcProcess {
            pid,
            comm: format!("[pid {pid}]"),
            ..ProcProcess::default()
        });
        self.add_from_proc(b, &pp)
    }

    fn map(&mut self, b: &mut CpuRecordingBuilder, p: ProcessId, m: MappingInfo) {
        let (start, end, path) = (m.start, m.end, m.path.clone());
        b.add_mapping(p, m);
        let Some((module, offset)) = b.locate(p, start) else {
            return;
        };
        // The file whose unwind information covers the mapping: the vDSO's is tansa's own
        // image when the builder found it the same (its module's build id;
        // `tansa_symbols::vdso`).
        let file = if path.starts_with('/') {
            Some(path)
        } else if path == "[vdso]" {
            b.modules
                .iter()
                .find(|m| m.id == module)
                .and_then(|m| tansa_symbols::vdso::file_for(&m.build_id))
                .map(|f| f.to_string_lossy().into_owned())
        } else {
            None
        };
        if let Some(file) = file {
            // The file as the builder opened it for this module: the version mapped, even
            // when the program was rebuilt at its path since.
            let elf = b.elf_cache.get(&module).cloned();
            self.unwinders.add_module(
                p.index(),
                &file,
                elf,
                (start, end, start.wrapping_sub(offset)),
            );
        }
    }

    fn on_mmap(&mut self, b: &mut CpuRecordingBuilder, m: &MmapRecord<'_>, time: u64) {
        if !m.is_exec() {
            return;
        }
        let p = self.process_for(b, m.pid, time);
        b.refresh_owner(p);
        let path = text(m.filename);
        if self.exe_pending.contains(&p) && path.starts_with('/') {
            self.exe_pending.remove(&p);
            b.set_exe(p, &path);
        }
        self.map(
            b,
            p,
            MappingInfo {
                start: m.addr,
                end: m.addr.saturating_add(m.len),
                file_offset: m.pgoff,
                path,
                build_id: m.build_id.map(<[u8]>::to_vec),
                load_bias: None,
            },
        );
    }

    fn on_fork(&mut self, b: &mut CpuRecordingBuilder, t: &TaskRecord) {
        if t.pid == t.ppid {
            let p = self.process_for(b, t.pid, t.time);
            let name = b.process(p).map(|x| x.comm.clone()).unwrap_or_default();
            b.add_new_thread(p, t.tid, &name);
            return;
        }
        let parent = self.process_for(b, t.ppid, t.time);
        let child = b.fork_process(parent, t.pid, t.time);
        self.push_epoch(t.pid, t.time, child);
        self.unwinders.fork(parent.index(), child.index());
        let name = b.process(child).map(|x| x.comm.clone()).unwrap_or_default();
        b.add_thread(child, t.tid, &name);
    }

    fn on_comm(
        &mut self,
        b: &mut CpuRecordingBuilder,
        pid: u32,
        tid: u32,
        name: &str,
        exec: bool,
        time: u64,
    ) {
        if exec {
            let old = self.current(pid, time);
            let ppid = old
                .and_then(|old| {
                    b.end_process(old, time, Some(ExitStatus::Exec));
                    b.process(old).map(|x| x.ppid)
                })
                .unwrap_or(0);
            // The new image ran as the old one until the exec.
            let also = old.map(|old| b.owners.of(old.index())).unwrap_or_default();
            let cmdline = procfs::read_process(pid)
                .map(|pp| pp.cmdline)
                .unwrap_or_default();
            let p = b.add_process_as(
                ProcessInfo {
                    pid,
                    ppid,
                    comm: name.to_string(),
                    cmdline,
                    start_ns: time,
                    ..ProcessInfo::default()
                },
                also,
            );
            self.push_epoch(pid, time, p);
            self.exe_pending.insert(p);
            b.add_thread(p, tid, name);
        } else {
            let p = self.process_for(b, pid, time);
            b.add_thread(p, tid, name);
            if tid == pid {
                b.set_comm(p, name);
            }
        }
    }

    /// Applies a side-band record.
    pub fn side_band(&mut self, b: &mut CpuRecordingBuilder, sb: &SideBand<'_>, time: u64) {
        match sb {
            SideBand::Mmap(m) => self.on_mmap(b, m, time),
            SideBand::Comm {
                pid,
                tid,
                name,
                exec,
            } => self.on_comm(b, *pid, *tid, &text(name), *exec, time),
            SideBand::Fork(t) => self.on_fork(b, t),
            SideBand::Exit(t) => {
                if t.pid == t.tid
                    && let Some(p) = self.current(t.pid, t.time)
                {
                    b.end_process(p, t.time, None);
                }
            }
            SideBand::Lost(n) => b.note_lost(*n, 0),
            SideBand::LostSamples(n) => b.note_lost(0, *n),
        }
    }

    /// The last image of `pid`, if known.
    pub fn last(&self, pid: u32) -> Option<ProcessId> {
        self.current(pid, u64::MAX)
    }

    /// Handles one sample record.
    pub fn sample(
        &mut self,
        b: &mut CpuRecordingBuilder,
        body: &[u8],
        misc: u16,
        layout: &SampleLayout,
    ) {
        let Ok(s) = SampleRef::parse(body, layout) else {
            b.note_lost(0, 1);
            return;
        };
        let p = self.process_for(b, s.pid, s.time);
        self.kernel_frames.clear();
        self.fp_user.clear();
        let mut in_kernel = misc & 7 == MISC_KERNEL;
        let mut any_marker = false;
        for a in s.callchain() {
            if a >= CONTEXT_MAX {
                any_marker = true;
                in_kernel = a == CONTEXT_KERNEL;
                if a != CONTEXT_KERNEL && a != CONTEXT_USER {
                    // Guest or hypervisor contexts: not followed.
                    break;
                }
                continue;
            }
            if in_kernel {
                self.kernel_frames.push(a);
            } else {
                self.fp_user.push(a);
            }
        }
        if !any_marker {
            if misc & 7 == MISC_KERNEL {
                self.kernel_frames.push(s.ip);
            } else {
                self.fp_user.push(s.ip);
            }
        }
        let mut use_dwarf = false;
        let mut truncated = false;
        if self.dwarf
            && let (Some(ip), Some(sp), Some(bp)) = (
                s.user_reg(layout.regs_user, X86_REG_IP),
                s.user_reg(layout.regs_user, X86_REG_SP),
                s.user_reg(layout.regs_user, X86_REG_BP),
            )
        {
            let how = self.unwinders.unwind(
                p.index(),
                UserRegs { ip, sp, bp },
                s.user_stack(),
                &mut self.dwarf_user,
            );
            truncated = how != Unwound::Complete;
            // The copy ran out (rather than the stack: the kernel copies less where the
            // stack ends) before the unwinder reached the outermost frame.
            let short_copy =
                how == Unwound::PastCopy && s.user_stack().len() >= self.stack_bytes as usize;
            // Frame-pointer chains are used where they are valid and longer: every
            // frame in a known module.
            let fp_better = truncated
                && self.fp_user.len() > self.dwarf_user.len()
                && self.fp_user.iter().all(|&a| b.locate(p, a).is_some());
            use_dwarf = !self.dwarf_user.is_empty() && !fp_better;
            if fp_better {
                truncated = false;
            } else if short_copy {
                b.note_short_stack_copy(self.stack_bytes);
            }
            if truncated && self.dwarf_user.len() <= 1 {
                b.note_unwind_failure();
            }
        }
        let user: &[u64] = if use_dwarf {
            &self.dwarf_user
        } else {
            &self.fp_user
        };
        b.add_sample(&SampleInput {
            process: p,
            tid: s.tid,
            cpu: s.cpu,
            time_ns: s.time,
            kernel: &self.kernel_frames,
            user,
            truncated,
        });
    }
}
