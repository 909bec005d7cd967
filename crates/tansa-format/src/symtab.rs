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

/// How a function known only by its extent (the unwind information of a library stripped to
/// its exported symbols) is named: this prefix and its start address (`fn@0x15b40`).
pub const UNNAMED_FUNCTION_PREFIX: &str = "fn@0x";

/// The name of a function known only by its extent that starts at `start`.
pub fn unnamed_function(start: u64) -> String {
    format!("{UNNAMED_FUNCTION_PREFIX}{start:x}")
}

/// Whether `name` is one [`unnamed_function`] gives.
pub fn is_unnamed_function(name: &str) -> bool {
    name.starts_with(UNNAMED_FUNCTION_PREFIX)
}

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

/// Most files [`SymbolTable::unresolved_notes`] names one by one.
const MAX_UNRESOLVED_NOTES: usize = 8;

impl SymbolTable {
    /// Says which files' symbols could not be read when the recording was finished, and
    /// why, for a report's warnings: a library upgraded or deleted while the program ran
    /// leaves its code unnamed, and the reader should know that it is not the report's
    /// fault. One line per file and reason (a file is listed once however many processes
    /// mapped it); only files with addresses to name; at most a few, then a count. Paths
    /// are escaped: they come from the file.
    pub fn unresolved_notes(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        for m in &self.modules {
            if m.addrs.is_empty() {
                continue;
            }
            let why = match &m.status {
                ModuleStatus::Resolved | ModuleStatus::NoFile => continue,
                ModuleStatus::FileMissing => "the file was gone".to_string(),
                ModuleStatus::BuildIdMismatch => {
                    "the file on disk is another build than the one that ran (replaced while \
                     it ran?)"
                        .to_string()
                }
                ModuleStatus::Failed(why) => why.escape_debug().to_string(),
            };
            seen.insert((m.path.escape_debug().to_string(), why));
        }
        let mut out: Vec<String> = seen
            .iter()
            .take(MAX_UNRESOLVED_NOTES)
            .map(|(path, why)| {
                format!("no function names for {path} ({why}); its code is shown by address")
            })
            .collect();
        if seen.len() > MAX_UNRESOLVED_NOTES {
            out.push(format!(
                "and {} more file(s) without function names",
                seen.len() - MAX_UNRESOLVED_NOTES
            ));
        }
        out
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn module(key: u64, path: &str, status: ModuleStatus, addrs: usize) -> ModuleSymbols {
        ModuleSymbols {
            key,
            path: path.into(),
            build_id: Vec::new(),
            status,
            addrs: (0..addrs as u64)
                .map(|offset| AddrSymbols {
                    offset,
                    frames: Vec::new(),
                    function_start: None,
                })
                .collect(),
            code: Vec::new(),
        }
    }

    #[test]
    fn unresolved_files_are_named_once_each_with_why() {
        let table = SymbolTable {
            strings: Vec::new(),
            modules: vec![
                module(1, "/lib/ok.so", ModuleStatus::Resolved, 3),
                module(2, "[vdso]", ModuleStatus::NoFile, 1),
                module(3, "/lib/gone.so", ModuleStatus::FileMissing, 2),
                // The same file in another process image: one line.
                module(4 << 32 | 3, "/lib/gone.so", ModuleStatus::FileMissing, 1),
                module(5, "/lib/new.so", ModuleStatus::BuildIdMismatch, 1),
                module(
                    6,
                    "/tmp/x\u{1b}[2J.so",
                    ModuleStatus::Failed("not a regular file".into()),
                    1,
                ),
                // Nothing of it to name.
                module(7, "/lib/unused.so", ModuleStatus::FileMissing, 0),
            ],
        };
        let notes = table.unresolved_notes();
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("no function names for /lib/gone.so (the file was gone)"))
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("/lib/new.so (the file on disk is another build"))
        );
        // A terminal escape in a path is shown escaped.
        assert!(
            notes
                .iter()
                .any(|n| n.contains("/tmp/x\\u{1b}[2J.so (not a regular file)")),
            "{notes:?}"
        );
        assert!(
            !notes
                .iter()
                .any(|n| n.contains('\u{1b}') || n.contains("unused"))
        );
    }

    #[test]
    fn many_unresolved_files_end_in_a_count() {
        let table = SymbolTable {
            strings: Vec::new(),
            modules: (0..20)
                .map(|i| module(i, &format!("/lib/l{i:02}.so"), ModuleStatus::FileMissing, 1))
                .collect(),
        };
        let notes = table.unresolved_notes();
        assert_eq!(notes.len(), MAX_UNRESOLVED_NOTES + 1);
        assert_eq!(
            notes.last().unwrap(),
            &format!(
                "and {} more file(s) without function names",
                20 - MAX_UNRESOLVED_NOTES
            )
        );
    }
}
