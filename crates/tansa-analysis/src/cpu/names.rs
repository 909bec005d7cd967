//! Naming a recording's addresses from its own symbol table: module, function, source
//! line, inlined frames.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use tansa_format::cpu::{Loc, ModuleKind, NO_MODULE};
use tansa_format::symtab::{AddrSymbols, ModuleSymbols, SymbolTable};

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
    /// The function's start address, when another function of the same name in the same
    /// module (a C `static` function of another file, a C++ function of another file's
    /// anonymous namespace) must be told apart from it: see [`SourceFrame::name`]. `None`
    /// when the name is the module's only function of that name (or, for an inlined
    /// frame, when its code's file does not tell which of them it is).
    pub start: Option<u64>,
}

impl<'a> SourceFrame<'a> {
    /// The function's name as reports show it and `tansa annotate` accepts it: its name,
    /// followed by `@0x` and its start address when another function of the module has
    /// the same name (`helper@0x1180`, as a function known only by its extent is named
    /// `fn@0x1180`); `??` when unknown.
    pub fn name(&self) -> Cow<'a, str> {
        distinct_name(self.function.unwrap_or("??"), self.start)
    }
}

/// `function`, told apart by `start` when given: `helper@0x1180`.
pub fn distinct_name(function: &str, start: Option<u64>) -> Cow<'_, str> {
    match start {
        Some(start) => Cow::Owned(format!("{function}@{start:#x}")),
        None => Cow::Borrowed(function),
    }
}

/// `name@0xSTART` split into the name and the start address, when `name` ends so and is
/// not itself a function known by its extent (`fn@0x1180`).
pub fn split_distinct_name(name: &str) -> Option<(&str, u64)> {
    let (function, start) = name.rsplit_once("@0x")?;
    if function.is_empty() || function == "fn" || function.ends_with("!fn") {
        return None;
    }
    let start = u64::from_str_radix(start, 16).ok()?;
    Some((function, start))
}

/// Per module, the function names that several functions (distinct start addresses) of
/// the module share: each start, with the source file of its code where known.
pub(crate) type Homonyms<'a> = FxHashMap<(u32, &'a str), BTreeMap<u64, Option<&'a str>>>;

/// The function names of `symbols` that several functions (distinct starts) of one module
/// share, by module key: a C `static` function of another file, a C++ function of another
/// file's anonymous namespace. The CPU and the heap reports name such a function with its
/// start ([`distinct_name`]).
pub(crate) fn homonyms(symbols: &SymbolTable) -> Homonyms<'_> {
    let mut homonyms: Homonyms<'_> = FxHashMap::default();
    for m in &symbols.modules {
        for a in &m.addrs {
            let (Some(outer), Some(start)) = (a.frames.last(), a.function_start) else {
                continue;
            };
            let Some(function) = symbols.string(outer.function) else {
                continue;
            };
            let file = symbols.string(outer.file);
            let starts = homonyms.entry((m.key as u32, function)).or_default();
            let known = starts.entry(start).or_insert(file);
            if known.is_none() {
                *known = file;
            }
        }
    }
    homonyms.retain(|_, starts| starts.len() > 1);
    homonyms
}

/// Names addresses of one recording.
#[derive(Debug, Clone)]
pub struct Names<'a> {
    rec: &'a CpuRecording,
    homonyms: Homonyms<'a>,
}

impl<'a> Names<'a> {
    /// Names for `rec`.
    pub fn new(rec: &'a CpuRecording) -> Self {
        Names {
            rec,
            homonyms: homonyms(&rec.symbols),
        }
    }

    /// The start address that tells the function `function` of `module` apart from the
    /// module's other functions of that name, if it has any: `start` for the function that
    /// physically contains an address; for an inlined one (`start` unknown), the start of
    /// the only one of them whose code is in `file`.
    fn distinct_start(
        &self,
        module: u32,
        function: Option<&str>,
        start: Option<u64>,
        file: Option<&str>,
    ) -> Option<u64> {
        let starts = self.homonyms.get(&(module, function?))?;
        if let Some(start) = start {
            return Some(start);
        }
        let file = file?;
        let mut in_file = starts.iter().filter(|(_, f)| **f == Some(file));
        match (in_file.next(), in_file.next()) {
            (Some((&start, _)), None) => Some(start),
            _ => None,
        }
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
            .map(|(i, f)| {
                let function = self.rec.symbols.string(f.function);
                let file = self.rec.symbols.string(f.file);
                let physical = (i + 1 == n).then_some(a.function_start).flatten();
                SourceFrame {
                    function,
                    file,
                    line: f.line,
                    start: self.distinct_start(loc.module, function, physical, file),
                }
            })
            .collect()
    }

    /// The name of the function that physically contains `loc` as reports show it (see
    /// [`SourceFrame::name`]), if known.
    pub fn function_name(&self, loc: Loc) -> Option<Cow<'a, str>> {
        let a = self.lookup(loc)?;
        let outer = a.frames.last()?;
        let function = self.rec.symbols.string(outer.function)?;
        let file = self.rec.symbols.string(outer.file);
        let start = self.distinct_start(loc.module, Some(function), a.function_start, file);
        Some(distinct_name(function, start))
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

    /// `module!function` of the function containing `loc` (`module!??` if unknown), the
    /// function told apart from others of its name as [`SourceFrame::name`] does.
    pub fn unit(&self, loc: Loc) -> String {
        format!(
            "{}!{}",
            self.module(loc.module),
            self.function_name(loc).as_deref().unwrap_or("??")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{distinct_name, split_distinct_name};

    #[test]
    fn functions_of_one_name_are_named_by_their_start_and_read_back() {
        assert_eq!(distinct_name("helper", None), "helper");
        assert_eq!(distinct_name("helper", Some(0x1180)), "helper@0x1180");
        assert_eq!(
            split_distinct_name("helper@0x1180"),
            Some(("helper", 0x1180))
        );
        assert_eq!(
            split_distinct_name("stm!helper@0x1180"),
            Some(("stm!helper", 0x1180))
        );
        // A function known only by its extent is named so already: no name to split off.
        assert_eq!(split_distinct_name("fn@0x1180"), None);
        assert_eq!(split_distinct_name("stm!fn@0x1180"), None);
        assert_eq!(split_distinct_name("helper"), None);
        assert_eq!(split_distinct_name("helper@0xzz"), None);
    }
}
