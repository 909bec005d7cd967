//! Resolving, at the end of a recording, every address it uses.
//!
//! The meta streams name the modules of each session (`ModuleLoad`) and the frames of each
//! stack (`StackDef`, as module id and offset). Addresses are grouped by file (path and
//! build id), so a library shared by many processes is read once, and each file is resolved
//! by `tansa-symbols`. Return addresses are looked up one byte back, inside the call
//! instruction.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tansa_format::symtab::{SymbolTable, SymbolTableBuilder};
use tansa_symbols::Resolver;
use tansa_wire::event::{Decoder, Record};

/// A module as announced by the agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleFile {
    /// Path as the loader knows it.
    pub path: String,
    /// GNU build id.
    pub build_id: Vec<u8>,
}

/// The addresses a recording uses, by file.
#[derive(Debug, Default)]
pub struct AddressSet {
    modules: HashMap<(u32, u32), ModuleFile>,
    used: BTreeMap<ModuleFile, BTreeSet<u64>>,
    pending: Vec<(u32, u32, u64)>,
}

impl AddressSet {
    /// Adds the records of a session's complete meta stream.
    pub fn add_meta_stream(&mut self, session: u32, bytes: &[u8]) {
        for rec in Decoder::new(bytes) {
            match rec {
                Ok(Record::ModuleLoad(m)) => {
                    self.modules.insert(
                        (session, m.id),
                        ModuleFile {
                            path: String::from_utf8_lossy(m.path).into_owned(),
                            build_id: m.build_id.to_vec(),
                        },
                    );
                }
                Ok(Record::StackDef { frames, .. }) => {
                    for f in frames.filter(|f| f.module != 0) {
                        self.pending.push((session, f.module, f.offset));
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        for (session, module, offset) in std::mem::take(&mut self.pending) {
            if let Some(file) = self.modules.get(&(session, module)) {
                self.used.entry(file.clone()).or_default().insert(offset);
            }
        }
    }

    /// Number of files and addresses to resolve.
    pub fn size(&self) -> (usize, usize) {
        (self.used.len(), self.used.values().map(BTreeSet::len).sum())
    }

    /// Resolves everything. `progress` is called before each file with (index, count, path).
    pub fn resolve(&self, progress: &mut dyn FnMut(usize, usize, &str)) -> SymbolTable {
        let resolver = Resolver::new();
        let mut builder = SymbolTableBuilder::default();
        let total = self.used.len();
        for (i, (file, offsets)) in self.used.iter().enumerate() {
            progress(i, total, &file.path);
            let lookups: Vec<(u64, u64)> =
                offsets.iter().map(|&o| (o, o.saturating_sub(1))).collect();
            let m = resolver.module_symbols(
                &mut builder,
                i as u64,
                &file.path,
                &file.build_id,
                &lookups,
            );
            builder.add_module(m);
        }
        progress(total, total, "");
        builder.finish()
    }
}
