//! Finishing a recording: resolve every address used, keep the code of every function
//! hit and the text of its source files, write the frames.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use tansa_format::container::FrameType;
use tansa_format::cpu::{
    self, CpuSummary, Loc, Mode, Module, ModuleKind, NO_MODULE, NewerSource, SourceFile,
    WithheldSource,
};
use tansa_format::symtab::{
    AddrSymbols, ModuleStatus, ModuleSymbols, NO_STRING, StrId, SymFrame, SymbolTable,
    SymbolTableBuilder,
};
use tansa_symbols::{ElfFile, ModuleResolution, Resolver, isolate};

use crate::SampleError;
use crate::builder::{CpuRecordingBuilder, split_stack};
use crate::checkpoint::RecordingOut;
use crate::kernel::KernelSymbols;
use crate::phases::Phases;
use crate::resolve::ModuleWork;
use crate::warm::Warmer;

/// Largest source file kept.
const MAX_SOURCE_BYTES: u64 = 4 << 20;
/// Most source text kept in one recording.
const MAX_SOURCES_TOTAL: u64 = 64 << 20;

impl CpuRecordingBuilder {
    /// Resolves symbols (function, source line, inlined frames) of every address used,
    /// keeps the machine code of every function hit and the text of its source files, and
    /// writes the recording to `out`. Returns the totals, and the files whose symbols
    /// could not be read.
    pub fn finish<W: Write>(self, out: W) -> Result<Finished, SampleError> {
        let out = RecordingOut::new(out, &self.meta, false).map_err(SampleError::Write)?;
        self.finish_timed(out, &mut Phases::new())
    }

    /// [`CpuRecordingBuilder::finish`] into a recording begun with its checkpoints (what
    /// changed since the last one follows them), marking its phases (resolving symbols,
    /// reading sources, writing) in `phases`.
    pub fn finish_timed<W: Write>(
        mut self,
        mut out: RecordingOut<W>,
        phases: &mut Phases,
    ) -> Result<Finished, SampleError> {
        // Whose reads each module's files are: the owners of the processes that mapped
        // it. A privileged recorder reads no module file one of them could not read.
        let owners = self.owners.by_module();
        let withheld: HashMap<u32, String> = self
            .modules
            .iter()
            .filter(|m| m.kind == ModuleKind::Elf && crate::sources::privileged())
            .filter_map(|m| {
                let readers = owners.get(&m.id).map_or(&[][..], Vec::as_slice);
                let why = match self.elf_cache.get(&m.id) {
                    Some(elf) => crate::sources::withheld_module(elf, readers)?,
                    // Whatever its path names now is not what was mapped (if nothing,
                    // resolving says the file was gone; a FIFO or a device left there
                    // is said to be what it is, as `tansa record` says it).
                    None if std::fs::metadata(&m.path).is_ok_and(|md| !md.is_file()) => {
                        "not a regular file".to_string()
                    }
                    None if std::fs::exists(&m.path).unwrap_or(false) => {
                        "its file could not be opened when it was mapped, and what its path \
                         names now is not read for the processes that mapped it"
                            .to_string()
                    }
                    None => return None,
                };
                Some((m.id, why))
            })
            .collect();
        // A module that may be read may still name debugging information in files next to
        // it that one of its readers could not read: its names then come from its own
        // symbol table alone.
        let mut side_withheld: Vec<String> = Vec::new();
        if crate::sources::privileged() {
            for m in self.modules.iter().filter(|m| m.kind == ModuleKind::Elf) {
                let Some(elf) = self.elf_cache.get(&m.id) else {
                    continue;
                };
                if withheld.contains_key(&m.id) {
                    continue;
                }
                let readers = owners.get(&m.id).map_or(&[][..], Vec::as_slice);
                if let Some(why) = crate::sources::withheld_side_file(elf, readers) {
                    elf.withhold_side_files();
                    side_withheld.push(why);
                }
            }
        }
        if !side_withheld.is_empty() {
            self.info.notes.push(format!(
                "the debugging information of {} module(s) was not read from the file(s) next \
                 to them, and their names come from their symbol tables alone: {}",
                side_withheld.len(),
                side_withheld.join("; ")
            ));
        }
        let (lookups, exact) = lookups_of(
            self.addresses
                .keys()
                .map(|&(_, pc, caller, mode)| (pc, caller, mode)),
            self.stacks.iter().map(|key| split_stack(key).0),
        );

        // Modules are resolved in parallel (large libraries take seconds each), each
        // worker with its own string table, merged afterwards. The modules begun while the
        // target ran are finished by the thread that began them, which holds their files;
        // modules without a file (the kernel's, the vDSO, anonymous code) on this thread.
        let mut warm = self.warm.take();
        let warm_modules = warm.as_mut().map(Warmer::finish).unwrap_or_default();
        let mut order: Vec<(usize, Module)> = self
            .modules
            .iter()
            .map(|m| (lookups.get(&m.id).map_or(0, BTreeSet::len), m.clone()))
            .collect();
        order.sort_by_key(|m| std::cmp::Reverse(m.0));
        let mut warm_share = Vec::new();
        let mut local = Vec::new();
        let mut files = Vec::new();
        for (_, m) in order {
            if warm_modules.contains(&m.id) {
                warm_share.push(m);
            } else if m.kind == ModuleKind::Elf {
                files.push(m);
            } else {
                local.push(m);
            }
        }
        let warm_part = warm.as_ref().map(|w| {
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
            let modules = warm_share.clone();
            let withheld_here = withheld.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            // Not run (the thread is gone) or not done (it panicked): `rx` says so.
            w.run(Box::new(move |resolver, started| {
                let inputs = Inputs {
                    lookups: &lookups,
                    exact: &exact,
                    elfs: &elfs,
                    kernel: None,
                    jit: None,
                    withheld: &withheld_here,
                };
                let _ = tx.send(resolve_modules(resolver, started, &modules, &inputs));
            }));
            rx
        });
        let inputs = Inputs {
            lookups: &lookups,
            exact: &exact,
            elfs: &self.elf_cache,
            kernel: self.kernel_symbols.as_ref(),
            jit: Some(&self.jit),
            withheld: &withheld,
        };
        let inputs = &inputs;
        let mut parts = resolve_on_workers(&files, &local, inputs, &mut |_| {});
        match warm_part.and_then(|rx| rx.recv().ok()) {
            Some(part) => parts.push(part),
            // What the thread was to finish is done here, from the start.
            None if !warm_share.is_empty() => parts.push(resolve_modules(
                &Resolver::new(),
                &mut HashMap::new(),
                &warm_share,
                inputs,
            )),
            None => {}
        }
        if let Some(w) = warm {
            w.detach();
        }
        let (symbols, source_paths) = merge_parts(parts);
        phases.mark("finish: symbols");
        let built: HashMap<u32, (String, std::time::SystemTime)> = self
            .modules
            .iter()
            .filter_map(|m| {
                let elf = self.elf_cache.get(&m.id)?;
                Some((m.id, (m.path.clone(), elf.modified())))
            })
            .collect();
        let (sources, withheld_sources, newer_sources) =
            read_sources(&source_paths, &owners, &built);
        drop(owners);
        if !withheld_sources.is_empty() {
            self.info.notes.push(withheld_note(&withheld_sources));
        }
        if !newer_sources.is_empty() {
            self.info.notes.push(newer_note(&newer_sources));
        }
        phases.mark("finish: sources");

        let summary = self.summary();
        out.write_changes(&self, true).map_err(SampleError::Write)?;
        let mut w = out.writer;
        w.value(cpu::SOURCES, &sources)
            .map_err(SampleError::Write)?;
        if !withheld_sources.is_empty() {
            w.value(cpu::WITHHELD_SOURCES, &withheld_sources)
                .map_err(SampleError::Write)?;
        }
        if !newer_sources.is_empty() {
            w.value(cpu::NEWER_SOURCES, &newer_sources)
                .map_err(SampleError::Write)?;
        }
        w.value(FrameType::SYMBOLS, &symbols)
            .map_err(SampleError::Write)?;
        w.value(cpu::SUMMARY, &summary)
            .map_err(SampleError::Write)?;
        w.finish().map_err(SampleError::Write)?;
        phases.mark("finish: write");
        Ok(Finished {
            summary,
            unresolved: symbols.unresolved_notes(),
            unsampled: self.unsampled,
            short_stack_copies: self.short_stack_copies,
        })
    }
}

/// What finishing a recording gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The totals written.
    pub summary: CpuSummary,
    /// The module files whose symbols could not be read, one line each, as reports warn
    /// ([`SymbolTable::unresolved_notes`]).
    pub unresolved: Vec<String>,
    /// CPU time no sample stands for (in-process sampling).
    pub unsampled: cpu::Unsampled,
    /// Samples whose unwinding stopped at the end of their stack copy.
    pub short_stack_copies: cpu::ShortStackCopies,
}

/// Every offset each module needs (addresses, their callers, the frames of `stacks`), and
/// the exact (interrupted user) ones, whose functions' code is kept.
pub(crate) type Lookups = BTreeMap<u32, BTreeSet<u64>>;

pub(crate) fn lookups_of<'a>(
    addresses: impl Iterator<Item = (Loc, Option<Loc>, Mode)>,
    stacks: impl Iterator<Item = &'a [Loc]>,
) -> (Lookups, Lookups) {
    let mut lookups: Lookups = BTreeMap::new();
    let mut exact: Lookups = BTreeMap::new();
    for (pc, caller, mode) in addresses {
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
    for frames in stacks {
        for f in frames.iter().filter(|f| f.module != NO_MODULE) {
            lookups.entry(f.module).or_default().insert(f.offset);
        }
    }
    (lookups, exact)
}

/// What resolving needs besides the resolver.
pub(crate) struct Inputs<'a> {
    pub lookups: &'a BTreeMap<u32, BTreeSet<u64>>,
    pub exact: &'a BTreeMap<u32, BTreeSet<u64>>,
    pub elfs: &'a HashMap<u32, Arc<ElfFile>>,
    pub kernel: Option<&'a KernelSymbols>,
    /// Where JIT code's names come from (none: JIT code stays unnamed).
    pub jit: Option<&'a crate::jit::JitSources>,
    /// Modules whose files are not read, and why (see [`crate::sources`]).
    pub withheld: &'a HashMap<u32, String>,
}

/// Resolves `modules` with a resolver and string table of its own, going on with the
/// work `started` on them (see [`crate::warm`]); returns the partial symbol table and the
/// source files named by the functions hit, each with the modules whose code names it.
pub(crate) fn resolve_modules(
    resolver: &Resolver,
    started: &mut HashMap<u32, ModuleWork>,
    modules: &[Module],
    inputs: &Inputs<'_>,
) -> Part {
    let mut symtab = SymbolTableBuilder::default();
    let mut source_files: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for module in modules {
        let offsets = inputs.lookups.get(&module.id);
        let begun = started.remove(&module.id);
        // Work begun with debugging information since withheld is begun again without it.
        let begun = begun.filter(|_| {
            inputs
                .elfs
                .get(&module.id)
                .is_none_or(|e| e.side_files_allowed())
        });
        if let Some(why) = inputs.withheld.get(&module.id) {
            // What was resolved ahead is dropped unused.
            drop(begun);
            let pairs: Vec<(u64, u64)> = offsets.into_iter().flatten().map(|&o| (o, o)).collect();
            let status = ModuleStatus::Failed(why.clone());
            let m = ModuleResolution::failed(&module.path, &module.build_id, status).symbols(
                resolver,
                &mut symtab,
                u64::from(module.id),
                &pairs,
            );
            symtab.add_module(m);
            continue;
        }
        // A panic while working one module costs that module's names only.
        let done = isolate(|| {
            #[cfg(test)]
            crate::resolve::tests::panic_if_marked(&module.path);
            if module.kind == ModuleKind::Kernel {
                let offsets = offsets.cloned().unwrap_or_default();
                let m = kernel_module_symbols(inputs.kernel, &mut symtab, module.id, &offsets);
                return (m, BTreeSet::new());
            }
            if module.kind == ModuleKind::Anonymous {
                let offsets = offsets.cloned().unwrap_or_default();
                let m = crate::jit::module_symbols(module, &offsets, inputs.jit, &mut symtab);
                return (m, BTreeSet::new());
            }
            let mut work = begun
                .unwrap_or_else(|| ModuleWork::new(module, inputs.elfs.get(&module.id).cloned()));
            work.add(
                resolver,
                offsets.into_iter().flatten().copied(),
                inputs.exact.get(&module.id).into_iter().flatten().copied(),
            );
            work.finish(resolver, &mut symtab)
        });
        let m = match done {
            Ok((m, sources)) => {
                for file in sources {
                    source_files.entry(file).or_default().insert(module.id);
                }
                m
            }
            Err(status) => {
                let pairs: Vec<(u64, u64)> =
                    offsets.into_iter().flatten().map(|&o| (o, o)).collect();
                ModuleResolution::failed(&module.path, &module.build_id, status).symbols(
                    resolver,
                    &mut symtab,
                    u64::from(module.id),
                    &pairs,
                )
            }
        };
        symtab.add_module(m);
    }
    let table = symtab.finish();
    let sources = source_files
        .into_iter()
        .filter_map(|(id, modules)| Some((table.string(id)?.to_string(), modules)))
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

/// A partial symbol table and the source files its functions name, each with the
/// modules whose code names it.
pub(crate) type Part = (SymbolTable, BTreeMap<String, BTreeSet<u32>>);

/// Resolves `files` on worker threads (at most 4, a share of the modules each, with a
/// resolver each) and `here` on this thread meanwhile; `done(path)` is called on this
/// thread as each module of `files` is resolved. Each module's work is isolated; should a
/// worker still have panicked, its share is done here rather than dropped.
pub(crate) fn resolve_on_workers(
    files: &[Module],
    here: &[Module],
    inputs: &Inputs<'_>,
    done: &mut dyn FnMut(&str),
) -> Vec<Part> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(files.len());
    let shares: Vec<Vec<&Module>> = (0..workers)
        .map(|w| files.iter().skip(w).step_by(workers).collect())
        .collect();
    let (resolved, arrivals) = std::sync::mpsc::channel::<&str>();
    std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .map(|share| {
                let resolved = resolved.clone();
                scope.spawn(move || {
                    let resolver = Resolver::new();
                    share
                        .iter()
                        .map(|m| {
                            let part = resolve_modules(
                                &resolver,
                                &mut HashMap::new(),
                                std::slice::from_ref(*m),
                                inputs,
                            );
                            let _ = resolved.send(m.path.as_str());
                            part
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        drop(resolved);
        let mut parts = vec![resolve_modules(
            &Resolver::new(),
            &mut HashMap::new(),
            here,
            inputs,
        )];
        for path in arrivals {
            done(path);
        }
        for (h, share) in handles.into_iter().zip(&shares) {
            match h.join() {
                Ok(done) => parts.extend(done),
                Err(_) => {
                    let share: Vec<Module> = share.iter().map(|m| (*m).clone()).collect();
                    parts.push(resolve_modules(
                        &Resolver::new(),
                        &mut HashMap::new(),
                        &share,
                        inputs,
                    ));
                }
            }
        }
        parts
    })
}

/// One symbol table of the partial ones resolved apart, and the source files they name.
pub(crate) fn merge_parts(parts: Vec<Part>) -> Part {
    let mut symtab = SymbolTableBuilder::default();
    let mut source_paths: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for (part, sources) in parts {
        for (path, modules) in sources {
            source_paths.entry(path).or_default().extend(modules);
        }
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
    (symtab.finish(), source_paths)
}

/// The id in `symtab` of string `id` of `strings`.
fn remap(symtab: &mut SymbolTableBuilder, strings: &[String], id: StrId) -> StrId {
    match strings.get(id as usize) {
        Some(s) if id != NO_STRING => symtab.intern(s),
        _ => NO_STRING,
    }
}

/// Reads the source files at `paths` that every owner of a process that mapped a module
/// naming them could read (`owners`, per module), within the size limits; and says which
/// were not read for that reason, and why, and which of those read were modified after a
/// module naming them was built (`built`: each module's path and modification time).
fn read_sources(
    paths: &BTreeMap<String, BTreeSet<u32>>,
    owners: &rustc_hash::FxHashMap<u32, Vec<&crate::sources::Reader>>,
    built: &HashMap<u32, (String, std::time::SystemTime)>,
) -> (Vec<SourceFile>, Vec<WithheldSource>, Vec<NewerSource>) {
    let mut total = 0u64;
    let mut out = Vec::new();
    let mut withheld = Vec::new();
    let mut newer = Vec::new();
    for (path, modules) in paths {
        let mut readers: Vec<&crate::sources::Reader> = Vec::new();
        for r in modules.iter().flat_map(|m| owners.get(m)).flatten() {
            if !readers.contains(r) {
                readers.push(r);
            }
        }
        let budget = MAX_SOURCE_BYTES.min(MAX_SOURCES_TOTAL.saturating_sub(total));
        match crate::sources::read(Path::new(path), &readers, budget) {
            Ok((text, modified)) => {
                // The module built longest before the source was modified (whole seconds:
                // a build writes the module after reading its sources).
                let stale = modules
                    .iter()
                    .filter_map(|m| built.get(m))
                    .filter_map(|(module, at)| {
                        let after = modified.duration_since(*at).ok()?.as_secs();
                        (after > 0).then_some((after, module))
                    })
                    .max();
                if let Some((seconds, module)) = stale {
                    newer.push(NewerSource {
                        path: path.to_string(),
                        module: module.clone(),
                        seconds,
                    });
                }
                total += text.len() as u64;
                out.push(SourceFile {
                    path: path.to_string(),
                    text,
                });
            }
            Err(Some(reason)) => withheld.push(WithheldSource {
                path: path.to_string(),
                reason,
            }),
            Err(None) => {}
        }
    }
    (out, withheld, newer)
}

/// The recording's note on the source files modified after the modules naming them were
/// built.
fn newer_note(newer: &[NewerSource]) -> String {
    const NAMED: usize = 3;
    let names: Vec<String> = newer
        .iter()
        .take(NAMED)
        .map(|n| format!("{} ({} s after {})", n.path, n.seconds, n.module))
        .collect();
    let more = newer.len().saturating_sub(NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "{} source file(s) were modified after the module naming them was built ({}{more}): \
         their text as embedded may not be the code's, and `tansa annotate --source` may put \
         samples on the wrong lines (rebuild, then record again)",
        newer.len(),
        names.join(", ")
    )
}

/// The recording's note on the source files not embedded for their users' sake.
fn withheld_note(withheld: &[WithheldSource]) -> String {
    const NAMED: usize = 3;
    let mut names: Vec<&str> = withheld
        .iter()
        .take(NAMED)
        .map(|w| w.path.as_str())
        .collect();
    let more = withheld.len().saturating_sub(NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    names.sort_unstable();
    format!(
        "the text of {} source file(s) is not in the recording ({}{more}): a process that ran \
         code naming them belongs to a user who could not read them, and tansa, running \
         with more privileges, reads nothing on a process's behalf that its user could not \
         read (`tansa annotate --source` says who)",
        withheld.len(),
        names.join(", ")
    )
}
