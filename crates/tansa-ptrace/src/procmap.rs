//! The code of a live process for the path follower: which function an address belongs
//! to (from `/proc/PID/maps` and the ELF symbols of each mapped file), and whether the
//! follower steps through it.

use std::collections::HashMap;

use tansa_symbols::ElfFile;
use tansa_symbols::elf::FunctionSymbol;

use crate::follow::{CodeMap, FunctionInfo};
use crate::maps::{Mapping, Modules, read_maps};

/// A function of a mapped file: the file and the function's address in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionId {
    /// Path of the mapped file.
    pub module: String,
    /// The function's address in the file (its symbol value).
    pub address: u64,
    /// Its symbol name, as in the file (not demangled).
    pub name: String,
}

/// The code of a live process; see the module documentation.
pub struct ProcessCode {
    pid: i32,
    maps: Vec<Mapping>,
    modules: Modules,
    /// Sized function symbols and PLT stubs of each module.
    functions: HashMap<u32, ModuleCode>,
    /// Whether to step through the functions of a file (by path).
    step: Box<dyn Fn(&str) -> bool + Send>,
    /// Runtime entry address -> function, for naming events.
    entries: HashMap<u64, FunctionId>,
}

/// What names the code of one mapped file.
#[derive(Debug, Default)]
struct ModuleCode {
    /// Sized function symbols, sorted by address.
    symbols: Vec<FunctionSymbol>,
    /// The stubs of its procedure linkage table, with the name of the function each calls
    /// (`memcpy@plt`), sorted by address.
    plt: Vec<(std::ops::Range<u64>, String)>,
}

impl std::fmt::Debug for ProcessCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessCode")
            .field("pid", &self.pid)
            .field("mappings", &self.maps.len())
            .finish_non_exhaustive()
    }
}

/// The files whose functions the follower runs at full speed by default: the C and C++
/// runtimes, the dynamic loader, and tansa's own agent. Their calls are recorded as one
/// entry and one exit.
pub fn is_runtime_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    const PREFIXES: [&str; 10] = [
        "libc.so",
        "libc-",
        "ld-linux",
        "libm.so",
        "libpthread",
        "libdl.so",
        "libstdc++",
        "libgcc_s",
        "libtansa_agent",
        "librt.so",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

impl ProcessCode {
    /// The code of process `pid`; `step` says, by file path, which functions the follower
    /// steps through.
    pub fn new(pid: i32, step: Box<dyn Fn(&str) -> bool + Send>) -> std::io::Result<ProcessCode> {
        Ok(ProcessCode {
            pid,
            maps: read_maps(pid)?,
            modules: Modules::default(),
            functions: HashMap::new(),
            step,
            entries: HashMap::new(),
        })
    }

    /// Reads the mappings again (after a `dlopen`).
    pub fn refresh(&mut self) {
        // A process that exited (a zombie) shows no mappings: keep the last ones known.
        if let Ok(maps) = read_maps(self.pid)
            && !maps.is_empty()
        {
            self.maps = maps;
        }
    }

    /// `(file path, address in the file)` of a runtime address.
    pub fn normalize(&mut self, addr: u64) -> Option<(String, u64)> {
        let (m, a) = self.modules.normalize(&self.maps, addr)?;
        Some((self.modules.paths[m as usize].clone(), a))
    }

    /// The function whose entry is the runtime address `entry` (as given in path events).
    pub fn function_at(&self, entry: u64) -> Option<&FunctionId> {
        self.entries.get(&entry)
    }

    fn lookup(&mut self, addr: u64) -> Option<(FunctionInfo, FunctionId)> {
        let (module, file_addr) = self.modules.normalize(&self.maps, addr)?;
        let path = self.modules.paths[module as usize].clone();
        let step = (self.step)(&path);
        let code = self.functions.entry(module).or_insert_with(|| {
            ElfFile::open(&path)
                .map(|e| ModuleCode {
                    symbols: e.functions().into_iter().filter(|f| f.size > 0).collect(),
                    plt: e.plt_entries(),
                })
                .unwrap_or_default()
        });
        let functions = &code.symbols;
        let i = functions.partition_point(|f| f.address <= file_addr);
        let found = i
            .checked_sub(1)
            .map(|i| &functions[i])
            .filter(|f| file_addr < f.address + f.size);
        match found {
            Some(f) => {
                let entry = addr - (file_addr - f.address);
                Some((
                    FunctionInfo { entry, step },
                    FunctionId {
                        module: path,
                        address: f.address,
                        name: f.name.clone(),
                    },
                ))
            }
            // Code without a symbol: in a file run at full speed, the landing address is the
            // function, named as reports name such code (a PLT stub after the function it
            // calls, other code by its address); elsewhere (a PLT stub) it is no function.
            None if !step => {
                let name = code
                    .plt
                    .iter()
                    .find(|(range, _)| range.contains(&file_addr))
                    .map_or_else(
                        || tansa_format::symtab::unnamed_function(file_addr),
                        |(_, name)| name.clone(),
                    );
                Some((
                    FunctionInfo { entry: addr, step },
                    FunctionId {
                        module: path,
                        address: file_addr,
                        name,
                    },
                ))
            }
            None => None,
        }
    }
}

impl CodeMap for ProcessCode {
    fn function(&mut self, addr: u64) -> Option<FunctionInfo> {
        let found = match self.lookup(addr) {
            Some(f) => Some(f),
            None if self.modules.normalize(&self.maps, addr).is_none() => {
                // Code mapped since the last reading (a dlopen): read the mappings again.
                self.refresh();
                self.lookup(addr)
            }
            None => None,
        };
        let (info, id) = found?;
        self.entries.entry(info.entry).or_insert(id);
        Some(info)
    }
}
