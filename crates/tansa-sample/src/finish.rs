//! Finishing a recording: resolve every address used, keep the code of every function
//! hit and the text of its source files, write the frames.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use iced_x86::{Decoder, DecoderOptions};
use tansa_format::container::{FrameType, Kind, Writer};
use tansa_format::cpu::{
    self, CpuSummary, Mode, Module, ModuleKind, NO_MODULE, SourceFile, Stack, StackCount,
};
use tansa_format::symtab::{
    AddrSymbols, CodeBlock, ModuleStatus, ModuleSymbols, NO_STRING, StrId, SymFrame, SymbolTable,
    SymbolTableBuilder,
};
use tansa_symbols::{ElfFile, Resolver};

use crate::SampleError;
use crate::builder::{CpuRecordingBuilder, split_stack};
use crate::kernel::KernelSymbols;
use crate::phases::Phases;
use crate::warm::Warmer;

/// Largest function whose code is kept for annotation.
const MAX_FUNCTION_BYTES: u64 = 1 << 20;
/// Largest source file kept.
const MAX_SOURCE_BYTES: u64 = 4 << 20;
/// Most source text kept in one recording.
const MAX_SOURCES_TOTAL: u64 = 64 << 20;
/// Entries per counts frame.
const CHUNK: usize = 1 << 16;

/// The functions of `elf` that contain `offsets`: `(start, size)`.
fn hit_functions(elf: &ElfFile, offsets: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let funcs = elf.functions();
    // Functions without a symbol (a stripped library's internal ones) by their extent.
    let mut unnamed: Option<tansa_symbols::Unnamed> = None;
    let mut hit = BTreeSet::new();
    for &o in offsets {
        let i = funcs.partition_point(|f| f.address <= o);
        let symbol = i.checked_sub(1).map(|i| {
            let f = &funcs[i];
            let size = if f.size > 0 {
                f.size
            } else {
                funcs
                    .get(i + 1..)
                    .and_then(|rest| rest.iter().find(|g| g.address > f.address))
                    .map_or(0, |g| g.address - f.address)
            };
            (f.address, size)
        });
        let found = match symbol {
            Some((start, size)) if o < start + size => Some((start, size)),
            _ => unnamed
                .get_or_insert_with(|| tansa_symbols::Unnamed::new(elf))
                .extent(o)
                .map(|e| (e.start, e.end - e.start)),
        };
        if let Some((start, size)) = found
            && size <= MAX_FUNCTION_BYTES
        {
            hit.insert((start, size));
        }
    }
    hit.into_iter().collect()
}

/// The start address of every instruction of `bytes` placed at `start`.
fn instruction_starts(start: u64, bytes: &[u8]) -> Vec<u64> {
    let mut d = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut out = Vec::new();
    while d.can_decode() {
        let ip = d.ip();
        let _ = d.decode();
        out.push(ip);
    }
    out
}

impl CpuRecordingBuilder {
    /// Resolves symbols (function, source line, inlined frames) of every address used,
    /// keeps the machine code of every function hit and the text of its source files, and
    /// writes the recording to `out`. Returns the totals.
    pub fn finish<W: Write>(self, out: W) -> Result<CpuSummary, SampleError> {
        self.finish_timed(out, &mut Phases::new())
    }

    /// [`CpuRecordingBuilder::finish`], marking its phases (resolving symbols, reading
    /// sources, writing) in `phases`.
    pub fn finish_timed<W: Write>(
        mut self,
        out: W,
        phases: &mut Phases,
    ) -> Result<CpuSummary, SampleError> {
        // Every offset each module needs, and the exact (interrupted) ones.
        let mut lookups: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        let mut exact: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for &(_, pc, caller, mode) in self.addresses.keys() {
            if pc.module != NO_MODULE {
                lookups.entry(pc.module).or_default().insert(pc.offset);
                if mode == Mode::User {
                    exact.entry(pc.module).or_default().insert(pc.offset);
                }
            }
            if let Some(c) = caller.filter(|c| c.module != NO_MODULE) {
                lookups.entry(c.module).or_default().insert(c.offset);
            }
        }
        for key in &self.stacks {
            let (frames, _, _) = split_stack(key);
            for f in frames.iter().filter(|f| f.module != NO_MODULE) {
                lookups.entry(f.module).or_default().insert(f.offset);
            }
        }

        // Modules are resolved in parallel (large libraries take seconds each), each
        // worker with its own string table, merged afterwards. The modules read while the
        // target ran are resolved by the thread that read them, which holds them.
        let mut warm = self.warm.take();
        let warm_modules = warm.as_mut().map(Warmer::finish).unwrap_or_default();
        let mut order: Vec<(usize, Module)> = self
            .modules
            .iter()
            .map(|m| (lookups.get(&m.id).map_or(0, BTreeSet::len), m.clone()))
            .collect();
        order.sort_by_key(|m| std::cmp::Reverse(m.0));
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        let mut shares: Vec<Vec<Module>> = vec![Vec::new(); workers];
        let mut warm_share = Vec::new();
        let mut next = 0;
        for (_, m) in order {
            if warm_modules.contains(&m.id) {
                warm_share.push(m);
            } else {
                shares[next % workers].push(m);
                next += 1;
            }
        }
        let warm_part = warm.as_ref().and_then(|w| {
            let pick = |map: &BTreeMap<u32, BTreeSet<u64>>| -> BTreeMap<u32, BTreeSet<u64>> {
                warm_share
                    .iter()
                    .filter_map(|m| Some((m.id, map.get(&m.id)?.clone())))
                    .collect()
            };
            let (lookups, exact) = (pick(&lookups), pick(&exact));
            let elfs: HashMap<u32, Arc<ElfFile>> = warm_share
                .iter()
                .filter_map(|m| Some((m.id, self.elf_cache.get(&m.id)?.clone())))
                .collect();
            let modules = std::mem::take(&mut warm_share);
            let (tx, rx) = std::sync::mpsc::channel();
            w.run(Box::new(move |resolver| {
                let inputs = Inputs {
                    lookups: &lookups,
                    exact: &exact,
                    elfs: &elfs,
                    kernel: None,
                };
                let _ = tx.send(resolve_modules(resolver, &modules, &inputs));
            }))
            .then_some(rx)
        });
        // Modules the warm thread was not given after all are resolved here.
        if !warm_share.is_empty() {
            shares[0].append(&mut warm_share);
        }
        let inputs = Inputs {
            lookups: &lookups,
            exact: &exact,
            elfs: &self.elf_cache,
            kernel: self.kernel_symbols.as_ref(),
        };
        let inputs = &inputs;
        let mut parts: Vec<(SymbolTable, BTreeSet<String>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .iter()
                .map(|share| scope.spawn(move || resolve_modules(&Resolver::new(), share, inputs)))
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        parts.extend(warm_part.and_then(|rx| rx.recv().ok()));
        if let Some(w) = warm {
            w.detach();
        }
        let mut symtab = SymbolTableBuilder::default();
        let mut source_paths: BTreeSet<String> = BTreeSet::new();
        for (part, sources) in parts {
            source_paths.extend(sources);
            for mut m in part.modules {
                for a in &mut m.addrs {
                    for f in &mut a.frames {
                        f.function = remap(&mut symtab, &part.strings, f.function);
                        f.file = remap(&mut symtab, &part.strings, f.file);
                    }
                }
                symtab.add_module(m);
            }
        }
        let symbols = symtab.finish();
        phases.mark("finish: symbols");
        let sources = read_sources(&source_paths, &self.readers);
        phases.mark("finish: sources");

        let summary = CpuSummary {
            samples: self.samples,
            lost_records: self.lost_records,
            lost_samples: self.lost_samples,
            unwind_failures: self.unwind_failures,
            first_ns: if self.samples == 0 { 0 } else { self.first_ns },
            last_ns: self.last_ns,
            wall_ns: self.wall_ns,
        };
        let mut w = Writer::new(out, Kind::Cpu).map_err(SampleError::Write)?;
        w.value(FrameType::META, &self.meta)
            .map_err(SampleError::Write)?;
        w.value(cpu::INFO, &self.info).map_err(SampleError::Write)?;
        w.value(cpu::PROCESSES, &self.processes)
            .map_err(SampleError::Write)?;
        w.value(cpu::MODULES, &self.modules)
            .map_err(SampleError::Write)?;
        let counts = self.address_counts();
        for chunk in counts.chunks(CHUNK) {
            w.value(cpu::ADDRESSES, &chunk)
                .map_err(SampleError::Write)?;
        }
        let stacks: Vec<Stack> = self
            .stacks
            .iter()
            .enumerate()
            .map(|(id, key)| {
                let (frames, kernel_frames, truncated) = split_stack(key);
                Stack {
                    id: id as u32,
                    frames: frames.to_vec(),
                    kernel_frames,
                    truncated,
                }
            })
            .collect();
        for chunk in stacks.chunks(CHUNK) {
            w.value(cpu::STACKS, &chunk).map_err(SampleError::Write)?;
        }
        let mut stack_counts: Vec<StackCount> = self
            .stack_counts
            .iter()
            .map(|(&(process, tid, stack), &count)| StackCount {
                process,
                tid,
                stack,
                count,
            })
            .collect();
        stack_counts.sort_by_key(|s| (s.process, s.tid, s.stack));
        for chunk in stack_counts.chunks(CHUNK) {
            w.value(cpu::STACK_COUNTS, &chunk)
                .map_err(SampleError::Write)?;
        }
        if let Some(t) = self.timeline.take() {
            for chunk in t.chunks(CHUNK) {
                w.value(cpu::TIMELINE, &chunk).map_err(SampleError::Write)?;
            }
        }
        w.value(cpu::SOURCES, &sources)
            .map_err(SampleError::Write)?;
        w.value(FrameType::SYMBOLS, &symbols)
            .map_err(SampleError::Write)?;
        w.value(cpu::SUMMARY, &summary)
            .map_err(SampleError::Write)?;
        w.finish().map_err(SampleError::Write)?;
        phases.mark("finish: write");
        Ok(summary)
    }
}

/// What resolving needs besides the resolver.
struct Inputs<'a> {
    lookups: &'a BTreeMap<u32, BTreeSet<u64>>,
    exact: &'a BTreeMap<u32, BTreeSet<u64>>,
    elfs: &'a HashMap<u32, Arc<ElfFile>>,
    kernel: Option<&'a KernelSymbols>,
}

/// Resolves `modules` with a resolver and string table of its own; returns the
/// partial symbol table and the source files named by the functions hit.
fn resolve_modules(
    resolver: &Resolver,
    modules: &[Module],
    inputs: &Inputs<'_>,
) -> (SymbolTable, BTreeSet<String>) {
    let (lookups, exact) = (inputs.lookups, inputs.exact);
    let mut symtab = SymbolTableBuilder::default();
    let mut source_files: BTreeSet<u32> = BTreeSet::new();
    for module in modules {
        let mut offsets = lookups.get(&module.id).cloned().unwrap_or_default();
        if module.kind == ModuleKind::Kernel {
            let m = kernel_module_symbols(inputs.kernel, &mut symtab, module.id, &offsets);
            symtab.add_module(m);
            continue;
        }
        let mut code = Vec::new();
        if module.kind == ModuleKind::Elf
            && let (Some(elf), Some(hit)) = (inputs.elfs.get(&module.id), exact.get(&module.id))
        {
            for (start, size) in hit_functions(elf, hit) {
                if let Some(bytes) = elf.read_at(start, size) {
                    offsets.extend(instruction_starts(start, bytes));
                    code.push(CodeBlock {
                        start,
                        bytes: bytes.to_vec(),
                    });
                }
            }
        }
        let pairs: Vec<(u64, u64)> = offsets.iter().map(|&o| (o, o)).collect();
        let mut m = resolver.module_symbols(
            &mut symtab,
            u64::from(module.id),
            &module.path,
            &module.build_id,
            &pairs,
        );
        if m.status == ModuleStatus::Resolved {
            for block in &code {
                let end = block.start + block.bytes.len() as u64;
                let lo = m.addrs.partition_point(|a| a.offset < block.start);
                for a in m.addrs[lo..].iter().take_while(|a| a.offset < end) {
                    source_files
                        .extend(a.frames.iter().map(|f| f.file).filter(|&f| f != NO_STRING));
                }
            }
            m.code = code;
        }
        symtab.add_module(m);
    }
    let table = symtab.finish();
    let sources = source_files
        .iter()
        .filter_map(|&id| table.string(id).map(str::to_string))
        .collect();
    (table, sources)
}

fn kernel_module_symbols(
    kernel: Option<&KernelSymbols>,
    symtab: &mut SymbolTableBuilder,
    id: u32,
    offsets: &BTreeSet<u64>,
) -> ModuleSymbols {
    let status = if kernel.is_some() {
        ModuleStatus::Resolved
    } else {
        ModuleStatus::Failed("kernel symbols are hidden (kernel.kptr_restrict)".into())
    };
    let addrs = offsets
        .iter()
        .map(|&o| {
            let hit = kernel.and_then(|k| k.lookup(o));
            AddrSymbols {
                offset: o,
                frames: hit
                    .map(|(_, name, module)| {
                        let name = if module.is_empty() {
                            name.to_string()
                        } else {
                            format!("{name} [{module}]")
                        };
                        vec![SymFrame {
                            function: symtab.intern(&name),
                            file: NO_STRING,
                            line: 0,
                            column: 0,
                        }]
                    })
                    .unwrap_or_default(),
                function_start: hit.map(|h| h.0),
            }
        })
        .collect();
    ModuleSymbols {
        key: u64::from(id),
        path: "[kernel.kallsyms]".into(),
        build_id: Vec::new(),
        status,
        addrs,
        code: Vec::new(),
    }
}

/// The id in `symtab` of string `id` of `strings`.
fn remap(symtab: &mut SymbolTableBuilder, strings: &[String], id: StrId) -> StrId {
    match strings.get(id as usize) {
        Some(s) if id != NO_STRING => symtab.intern(s),
        _ => NO_STRING,
    }
}

/// Reads the source files at `paths` that the sampled processes' owners could read,
/// within the size limits.
fn read_sources(paths: &BTreeSet<String>, readers: &[crate::sources::Reader]) -> Vec<SourceFile> {
    let mut total = 0u64;
    let mut out = Vec::new();
    for path in paths {
        let budget = MAX_SOURCE_BYTES.min(MAX_SOURCES_TOTAL.saturating_sub(total));
        if let Some(text) = crate::sources::read(Path::new(path), readers, budget) {
            total += text.len() as u64;
            out.push(SourceFile {
                path: path.to_string(),
                text,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_decoded_from_their_start() {
        // push rbp; mov rbp, rsp; nop; pop rbp; ret
        let code = [0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xc3];
        assert_eq!(
            instruction_starts(0x1000, &code),
            vec![0x1000, 0x1001, 0x1004, 0x1005, 0x1006]
        );
    }
}
