//! Collecting what a report needs instead of the binaries: the code of every function the
//! recording touched, and a source line for each of its instructions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tansa_format::retrace::{Addr, Function, Line, Module, RegionCode};
use tansa_retrace::{FunctionCode, Program};
use tansa_symbols::{ElfFile, FunctionExtents, ModuleResolution, Resolver};

/// Builds the [`RegionCode`] for `addrs` in the modules `paths` (by index): the code of
/// each function they fall in ([`FunctionExtents`]: a symbol's, a PLT stub's, or the
/// extent of a function without a symbol), named as reports name it. Addresses in modules
/// that cannot be read, or in no function the file describes, are left out: they are
/// reported as unknown code.
pub(crate) fn collect(paths: &[String], addrs: impl IntoIterator<Item = Addr>) -> RegionCode {
    let mut by_module: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    for (m, a) in addrs {
        by_module.entry(m).or_default().insert(a);
    }
    let resolver = Resolver::new();
    let mut code = RegionCode {
        modules: paths
            .iter()
            .map(|p| Module {
                path: p.clone(),
                build_id: ElfFile::open(p)
                    .ok()
                    .and_then(|e| e.build_id())
                    .unwrap_or_default(),
            })
            .collect(),
        ..RegionCode::default()
    };
    let mut files: HashMap<String, u32> = HashMap::new();
    for (module, addrs) in by_module {
        let Some(path) = paths.get(module as usize) else {
            continue;
        };
        let Ok(elf) = ElfFile::open(path) else {
            continue;
        };
        let elf = Arc::new(elf);
        // Names and lines as every report gives them (debug files, PLT stubs, functions
        // without a symbol), from the file opened here.
        let mut names = ModuleResolution::with_file(path, &[], elf.clone());
        let mut extents = FunctionExtents::new();
        let mut picked = BTreeSet::new();
        for a in addrs {
            if let Some(e) = extents.containing(&elf, a) {
                picked.insert((e.start, e.end - e.start));
            }
        }
        for (start, size) in picked {
            let Some(bytes) = elf.read_at(start, size) else {
                continue;
            };
            let name = names
                .lookup(&resolver, start)
                .and_then(|r| r.frames.last())
                .and_then(|f| f.function.clone())
                .unwrap_or_else(|| tansa_format::symtab::unnamed_function(start));
            let fc = FunctionCode {
                module,
                name: name.clone(),
                start,
                bytes: bytes.to_vec(),
            };
            let insn_addrs: Vec<u64> = Program::new(std::slice::from_ref(&fc))
                .insns()
                .iter()
                .map(|i| i.at.addr)
                .collect();
            names.resolve(&resolver, insn_addrs.iter().copied());
            let lines = insn_addrs
                .iter()
                .filter_map(|&addr| {
                    let f = names.lookup(&resolver, addr)?.frames.first()?;
                    let file = f.file.clone()?;
                    let line = f.line;
                    let next = files.len() as u32;
                    let id = *files.entry(file.clone()).or_insert_with(|| {
                        code.files.push(file);
                        next
                    });
                    Some(Line {
                        addr,
                        file: id,
                        line,
                    })
                })
                .collect();
            code.functions.push(Function {
                module,
                name,
                start,
                bytes: fc.bytes,
                lines,
            });
        }
    }
    code
}
