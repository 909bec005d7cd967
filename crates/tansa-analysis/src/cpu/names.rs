//! Naming a recording's addresses from its own symbol table: module, function, source
//! line, inlined frames.

use tansa_format::cpu::{Loc, ModuleKind, NO_MODULE};
use tansa_format::symtab::{AddrSymbols, ModuleSymbols};

use super::recording::CpuRecording;

/// One source-level frame at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFrame<'a> {
    /// Function (demangled), if known.
    pub function: Option<&'a str>,
    /// Source file, if known.
    pub file: Option<&'a str>,
    /// Line, 0 if unknown.
    pub line: u32,
}

/// Names addresses of one recording.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    rec: &'a CpuRecording,
}

impl<'a> Names<'a> {
    /// Names for `rec`.
    pub fn new(rec: &'a CpuRecording) -> Self {
        Names { rec }
    }

    /// The module's short name: the file name of its path, or its bracketed name;
    /// `[unknown]` for addresses outside every module.
    pub fn module(&self, module: u32) -> &'a str {
        if module == NO_MODULE {
            return "[unknown]";
        }
        match self.rec.modules.get(module as usize) {
            Some(m) => m.path.rsplit('/').next().unwrap_or(&m.path),
            None => "[unknown]",
        }
    }

    /// The module's full path.
    pub fn module_path(&self, module: u32) -> &'a str {
        self.rec
            .modules
            .get(module as usize)
            .map_or("[unknown]", |m| m.path.as_str())
    }

    /// The module's kind.
    pub fn module_kind(&self, module: u32) -> Option<ModuleKind> {
        self.rec.modules.get(module as usize).map(|m| m.kind)
    }

    /// The module's symbols.
    pub fn symbols(&self, module: u32) -> Option<&'a ModuleSymbols> {
        if module == NO_MODULE {
            return None;
        }
        self.rec.symbols.module(u64::from(module))
    }

    fn lookup(&self, loc: Loc) -> Option<&'a AddrSymbols> {
        self.symbols(loc.module)?.lookup(loc.offset)
    }

    /// Source frames at `loc`, innermost inlined function first, the function that
    /// contains the address last. Empty when unknown.
    pub fn frames(&self, loc: Loc) -> Vec<SourceFrame<'a>> {
        let Some(a) = self.lookup(loc) else {
            return Vec::new();
        };
        // At most MAX_INLINED frames: the innermost ones and the physical function.
        let n = a.frames.len();
        a.frames
            .iter()
            .enumerate()
            .filter(|&(i, _)| i + 1 < crate::memory::model::MAX_INLINED || i + 1 == n)
            .map(|(_, f)| SourceFrame {
                function: self.rec.symbols.string(f.function),
                file: self.rec.symbols.string(f.file),
                line: f.line,
            })
            .collect()
    }

    /// The function that physically contains `loc`, if known.
    pub fn function(&self, loc: Loc) -> Option<&'a str> {
        let a = self.lookup(loc)?;
        self.rec.symbols.string(a.frames.last()?.function)
    }

    /// Start of the function containing `loc`, if known.
    pub fn function_start(&self, loc: Loc) -> Option<u64> {
        self.lookup(loc)?.function_start
    }

    /// `module!function` of the function containing `loc` (`module!??` if unknown).
    pub fn unit(&self, loc: Loc) -> String {
        format!(
            "{}!{}",
            self.module(loc.module),
            self.function(loc).unwrap_or("??")
        )
    }
}
