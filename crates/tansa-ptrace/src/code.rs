//! Collecting what a report needs instead of the binaries: the code of every function the
//! recording touched, and a source line for each of its instructions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tansa_format::retrace::{Addr, Function, Line, Module, RegionCode};
use tansa_retrace::{FunctionCode, Program};
use tansa_symbols::resolve::demangle;
use tansa_symbols::{ElfFile, Resolver};

/// Builds the [`RegionCode`] for `addrs` in the modules `paths` (by index). Addresses in
/// modules that cannot be read, or outside any sized function symbol, are left out: they
/// are reported as unknown code.
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
        let functions = elf.functions();
        let mut picked = BTreeSet::new();
        for a in addrs {
            let i = functions.partition_point(|f| f.address <= a);
            let Some(f) = i.checked_sub(1).map(|i| &functions[i]) else {
                continue;
            };
            if f.size > 0 && a < f.address + f.size {
                picked.insert((f.address, f.size, f.name.clone()));
            }
        }
        for (start, size, raw) in picked {
            let Some(bytes) = elf.read_at(start, size) else {
                continue;
            };
            let name = demangle(&raw).unwrap_or(raw);
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
            let resolved = resolver
                .resolve(std::path::Path::new(path), &insn_addrs)
                .unwrap_or_default();
            let lines = insn_addrs
                .iter()
                .zip(resolved)
                .filter_map(|(&addr, r)| {
                    let f = r.frames.first()?;
                    let file = f.file.clone()?;
                    let next = files.len() as u32;
                    let id = *files.entry(file.clone()).or_insert_with(|| {
                        code.files.push(file);
                        next
                    });
                    Some(Line {
                        addr,
                        file: id,
                        line: f.line,
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
