//! Symbols resolved at the end of recording, so that reports need no binaries.
//!
//! A [`SymbolTable`] lists modules; each module lists the addresses the recording uses,
//! each resolved to a chain of [`SymFrame`]s: the innermost inlined function first, the
//! function that physically contains the address last. Strings are interned.

use serde::{Deserialize, Serialize};

/// Index into [`SymbolTable::strings`]; [`NO_STRING`] for "unknown".
pub type StrId = u32;
/// The absent string.
pub const NO_STRING: StrId = u32::MAX;

/// One source-level frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SymFrame {
    /// Function name (demangled).
    pub function: StrId,
    /// Source file path.
    pub file: StrId,
    /// Source line, 0 if unknown.
    pub line: u32,
    /// Source column, 0 if unknown.
    pub column: u32,
}

/// Why a module's addresses could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModuleStatus {
    /// Symbols were read from the module's file.
    Resolved,
    /// The file was not found.
    FileMissing,
    /// The file on disk has a different build id than the mapped module.
    BuildIdMismatch,
    /// The module is not backed by a file (vDSO, anonymous code).
    NoFile,
    /// Reading the file failed.
    Failed(String),
}

/// One resolved address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddrSymbols {
    /// Address relative to the module's load bias, as it appears in the file.
    pub offset: u64,
    /// Frames at this address, innermost inlined function first. Empty if unresolved.
    pub frames: Vec<SymFrame>,
    /// Start of the containing function (for instruction offsets), if known.
    pub function_start: Option<u64>,
}

/// Code bytes kept for annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeBlock {
    /// Address of the first byte, relative to the load bias.
    pub start: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// One module's symbols.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleSymbols {
    /// Identifies the module within the recording; its meaning is defined by the recording
    /// kind (for memory recordings, `(session << 32) | module id`).
    pub key: u64,
    /// Path of the file.
    pub path: String,
    /// GNU build id, if any.
    pub build_id: Vec<u8>,
    /// Whether symbols could be read.
    pub status: ModuleStatus,
    /// Resolved addresses, sorted by offset.
    pub addrs: Vec<AddrSymbols>,
    /// Code kept for annotation (CPU recordings), sorted by start.
    pub code: Vec<CodeBlock>,
}

impl ModuleSymbols {
    /// The resolved frames at `offset`, if that address was resolved.
    pub fn lookup(&self, offset: u64) -> Option<&AddrSymbols> {
        self.addrs
            .binary_search_by_key(&offset, |a| a.offset)
            .ok()
            .map(|i| &self.addrs[i])
    }

    /// The file name part of the path (`liba.so` for `/tmp/x/liba.so`).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// All symbols of a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolTable {
    /// Interned strings.
    pub strings: Vec<String>,
    /// Modules, sorted by key.
    pub modules: Vec<ModuleSymbols>,
}

impl SymbolTable {
    /// The string for `id`, or `None` for [`NO_STRING`] or an out-of-range id.
    pub fn string(&self, id: StrId) -> Option<&str> {
        self.strings.get(id as usize).map(String::as_str)
    }

    /// The module with `key`.
    pub fn module(&self, key: u64) -> Option<&ModuleSymbols> {
        self.modules
            .binary_search_by_key(&key, |m| m.key)
            .ok()
            .map(|i| &self.modules[i])
    }
}

/// Builds a [`SymbolTable`], interning strings.
#[derive(Debug, Default)]
pub struct SymbolTableBuilder {
    table: SymbolTable,
    index: std::collections::HashMap<String, StrId>,
}

impl SymbolTableBuilder {
    /// Interns `s`.
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = self.table.strings.len() as StrId;
        self.table.strings.push(s.to_string());
        self.index.insert(s.to_string(), id);
        id
    }

    /// Adds a module (addresses are sorted here).
    pub fn add_module(&mut self, mut module: ModuleSymbols) {
        module.addrs.sort_by_key(|a| a.offset);
        module.addrs.dedup_by_key(|a| a.offset);
        module.code.sort_by_key(|c| c.start);
        self.table.modules.push(module);
    }

    /// The finished table.
    pub fn finish(mut self) -> SymbolTable {
        self.table.modules.sort_by_key(|m| m.key);
        self.table
    }
}
