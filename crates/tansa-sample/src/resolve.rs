//! One module's symbols, resolved in parts: the addresses seen while the target runs are
//! resolved then (by [`crate::warm`]), the rest when the recording is finished
//! ([`crate::finish`]). Each address resolves on its own, so the module's entry is the
//! same however its addresses were split.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use iced_x86::{Decoder, DecoderOptions};
use tansa_format::cpu::{Module, ModuleKind};
use tansa_format::symtab::{CodeBlock, ModuleStatus, ModuleSymbols, NO_STRING, SymbolTableBuilder};
use tansa_symbols::{ElfFile, FunctionExtents, ModuleResolution, Resolver};

/// Largest function whose code is kept for annotation.
const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// A module's resolution under way: the offsets its entry will hold, resolved as they are
/// added, and the code of the functions that samples interrupted.
#[derive(Debug)]
pub(crate) struct ModuleWork {
    id: u32,
    resolution: ModuleResolution,
    /// The file as it was mapped, whose code is kept (ELF modules only).
    elf: Option<Arc<ElfFile>>,
    /// Where its functions lie, read on first need.
    extents: FunctionExtents,
    /// Every offset the entry will hold: those looked up, and every instruction of the
    /// functions whose code is kept.
    offsets: BTreeSet<u64>,
    /// Exact offsets already placed in their functions.
    placed: BTreeSet<u64>,
    /// The code kept, by function (start, size).
    code: BTreeMap<(u64, u64), Vec<u8>>,
}

impl ModuleWork {
    /// Starts resolving `module`, whose file as mapped is `elf`.
    pub fn new(module: &Module, elf: Option<Arc<ElfFile>>) -> ModuleWork {
        ModuleWork {
            id: module.id,
            // The file as it was mapped, when it was opened then: a file deleted or rebuilt
            // at its path since is still the one resolved.
            resolution: match elf.as_ref().filter(|_| module.kind == ModuleKind::Elf) {
                Some(elf) => {
                    ModuleResolution::with_file(&module.path, &module.build_id, elf.clone())
                }
                None => ModuleResolution::open(&module.path, &module.build_id),
            },
            elf: elf.filter(|_| module.kind == ModuleKind::Elf),
            extents: FunctionExtents::new(),
            offsets: BTreeSet::new(),
            placed: BTreeSet::new(),
            code: BTreeMap::new(),
        }
    }

    /// Adds offsets to look up and exact (interrupted) offsets, whose functions' code is
    /// kept, and resolves those not resolved yet.
    pub fn add(
        &mut self,
        resolver: &Resolver,
        lookups: impl IntoIterator<Item = u64>,
        exact: impl IntoIterator<Item = u64>,
    ) {
        let mut new: Vec<u64> = lookups
            .into_iter()
            .filter(|&o| self.offsets.insert(o))
            .collect();
        if let Some(elf) = self.elf.clone() {
            for o in exact {
                if !self.placed.insert(o) {
                    continue;
                }
                if let Some((start, size)) = self.function_at(&elf, o)
                    && !self.code.contains_key(&(start, size))
                    && let Some(bytes) = elf.read_at(start, size)
                {
                    new.extend(
                        instruction_starts(start, bytes)
                            .into_iter()
                            .filter(|&i| self.offsets.insert(i)),
                    );
                    self.code.insert((start, size), bytes.to_vec());
                }
            }
        }
        self.resolution.resolve(resolver, new);
    }

    /// The function of the file containing `offset` (by the one rule,
    /// [`FunctionExtents`]): `(start, size)`, if its code is small enough to keep.
    fn function_at(&mut self, elf: &ElfFile, offset: u64) -> Option<(u64, u64)> {
        self.extents
            .containing(elf, offset)
            .map(|e| (e.start, e.end - e.start))
            .filter(|&(_, size)| size <= MAX_FUNCTION_BYTES)
    }

    /// The module's entry in `symtab`, with the ids (in `symtab`) of the source files of
    /// the code kept.
    pub fn finish(
        self,
        resolver: &Resolver,
        symtab: &mut SymbolTableBuilder,
    ) -> (ModuleSymbols, BTreeSet<u32>) {
        let pairs: Vec<(u64, u64)> = self.offsets.iter().map(|&o| (o, o)).collect();
        let mut m = self
            .resolution
            .symbols(resolver, symtab, u64::from(self.id), &pairs);
        let mut sources = BTreeSet::new();
        if m.status == ModuleStatus::Resolved {
            for (&(start, _), bytes) in &self.code {
                let end = start + bytes.len() as u64;
                let lo = m.addrs.partition_point(|a| a.offset < start);
                for a in m.addrs[lo..].iter().take_while(|a| a.offset < end) {
                    sources.extend(a.frames.iter().map(|f| f.file).filter(|&f| f != NO_STRING));
                }
            }
            m.code = self
                .code
                .into_iter()
                .map(|((start, _), bytes)| CodeBlock { start, bytes })
                .collect();
        }
        (m, sources)
    }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tansa_format::symtab::SymbolTable;

    /// `module`'s entry after adding `batches` of (lookups, exact offsets) in turn, finished
    /// as `finish()` finishes the modules begun ahead.
    fn finished(
        module: &Module,
        elf: &Arc<ElfFile>,
        batches: &[(Vec<u64>, Vec<u64>)],
    ) -> (SymbolTable, BTreeMap<String, BTreeSet<u32>>) {
        let resolver = Resolver::new();
        let mut work = ModuleWork::new(module, Some(elf.clone()));
        for (lookups, exact) in batches {
            work.add(&resolver, lookups.iter().copied(), exact.iter().copied());
        }
        let nothing_more = BTreeMap::new();
        let inputs = crate::finish::Inputs {
            lookups: &nothing_more,
            exact: &nothing_more,
            elfs: &std::collections::HashMap::new(),
            kernel: None,
            jit: None,
            withheld: &std::collections::HashMap::new(),
        };
        let mut started = std::collections::HashMap::from([(module.id, work)]);
        crate::finish::resolve_modules(
            &resolver,
            &mut started,
            std::slice::from_ref(module),
            &inputs,
        )
    }

    /// A module's work split into batches, in another order and with repeats, gives the
    /// entry it gives in one: the same addresses, names, lines, code kept and sources.
    #[test]
    fn a_module_worked_in_batches_is_worked_as_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("work.c");
        std::fs::write(
            &src,
            "static int sq(int x) { return x * x; }\n\
             int first(int x) { int s = 0; for (int i = 0; i < x; i++) s += sq(i); return s; }\n\
             int second(int x) { return first(x) + 7; }\n\
             int third(int x) { return second(x) * 3 + first(x); }\n",
        )
        .unwrap();
        let lib = dir.path().join("libwork.so");
        tansa_testkit::compile(
            &lib,
            std::slice::from_ref(&src),
            &["-shared", "-fPIC", "-O1", "-g"],
        );
        let elf = Arc::new(ElfFile::open(&lib).unwrap());
        let at = |name: &str| elf.function_by_name(name).unwrap().address;
        let (first, second, third) = (at("first"), at("second"), at("third"));
        let module = Module {
            id: 3,
            path: lib.to_str().unwrap().to_string(),
            build_id: elf.build_id().unwrap_or_default(),
            kind: ModuleKind::Elf,
        };
        // `third` is only looked up (a return address in it), its code not kept.
        let all = vec![(
            vec![first + 4, second + 2, second, third + 1],
            vec![first + 4, second + 2],
        )];
        let batches = vec![
            (vec![second + 2], vec![second + 2]),
            (vec![second, second + 2, third + 1], Vec::new()),
            (vec![first + 4, third + 1], vec![first + 4, second + 2]),
        ];
        let (at_once, sources) = finished(&module, &elf, &all);
        let m = &at_once.modules[0];
        assert_eq!(m.status, ModuleStatus::Resolved);
        assert_eq!(m.code.len(), 2, "the code of both functions is kept");
        assert!(
            m.addrs.len() > 6,
            "every instruction of both: {}",
            m.addrs.len()
        );
        assert!(sources.keys().any(|s| s.ends_with("work.c")), "{sources:?}");
        let named = |offset: u64| {
            let a = m.addrs.iter().find(|a| a.offset == offset).unwrap();
            at_once
                .string(a.frames.last().unwrap().function)
                .unwrap()
                .to_string()
        };
        assert_eq!(named(third + 1), "third");
        assert_eq!(finished(&module, &elf, &batches), (at_once, sources));
    }

    /// Test builds panic while working a module whose path contains
    /// `tansa-test-panics-working`.
    pub(crate) fn panic_if_marked(path: &str) {
        if path.contains("tansa-test-panics-working") {
            panic!("injected for a test while working the module");
        }
    }

    /// A panic while one module is worked fails that module (its addresses kept, unnamed,
    /// and it is named among the unresolved ones); the others are resolved.
    #[test]
    fn a_panic_while_working_one_module_fails_that_module_only() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("work.c");
        std::fs::write(&src, "int first(int x) { return x * x + 3; }\n").unwrap();
        let good = dir.path().join("libgood.so");
        let bad = dir.path().join("libtansa-test-panics-working.so");
        let mut modules = Vec::new();
        for (id, lib) in [(1, &good), (2, &bad)] {
            tansa_testkit::compile(
                lib,
                std::slice::from_ref(&src),
                &["-shared", "-fPIC", "-O1", "-g"],
            );
            let elf = ElfFile::open(lib).unwrap();
            modules.push(Module {
                id,
                path: lib.to_str().unwrap().to_string(),
                build_id: elf.build_id().unwrap_or_default(),
                kind: ModuleKind::Elf,
            });
        }
        let first = ElfFile::open(&good)
            .unwrap()
            .function_by_name("first")
            .unwrap()
            .address;
        let offsets = BTreeSet::from([first, first + 2]);
        let lookups = BTreeMap::from([(1, offsets.clone()), (2, offsets.clone())]);
        let inputs = crate::finish::Inputs {
            lookups: &lookups,
            exact: &lookups,
            elfs: &std::collections::HashMap::new(),
            kernel: None,
            jit: None,
            withheld: &std::collections::HashMap::new(),
        };
        let (table, _) = crate::finish::resolve_modules(
            &Resolver::new(),
            &mut std::collections::HashMap::new(),
            &modules,
            &inputs,
        );
        let [good_m, bad_m] = &table.modules[..] else {
            panic!("{:?}", table.modules);
        };
        assert_eq!(good_m.status, ModuleStatus::Resolved);
        let f = good_m
            .lookup(first)
            .unwrap()
            .frames
            .last()
            .unwrap()
            .function;
        assert_eq!(table.string(f), Some("first"));
        assert!(
            matches!(&bad_m.status, ModuleStatus::Failed(why) if why.contains("injected")),
            "{:?}",
            bad_m.status
        );
        let kept: BTreeSet<u64> = bad_m.addrs.iter().map(|a| a.offset).collect();
        assert_eq!(kept, offsets);
        assert!(bad_m.addrs.iter().all(|a| a.frames.is_empty()));
        let notes = table.unresolved_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains(&modules[1].path), "{notes:?}");
    }

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
