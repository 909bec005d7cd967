//! Turning module offsets into functions, source lines and inlined frames.

use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized, Symbolizer};
use tansa_format::symtab::{
    AddrSymbols, ModuleStatus, ModuleSymbols, NO_STRING, SymFrame, SymbolTableBuilder,
};

use crate::SymbolError;
use crate::elf::ElfFile;

/// One source-level frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResolvedFrame {
    /// Demangled function name.
    pub function: Option<String>,
    /// Source file path.
    pub file: Option<String>,
    /// Line, 0 if unknown.
    pub line: u32,
    /// Column, 0 if unknown.
    pub column: u32,
}

/// What an address resolves to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolved {
    /// Frames, innermost inlined function first; the last one is the function that
    /// physically contains the address. Empty when nothing is known.
    pub frames: Vec<ResolvedFrame>,
    /// Start address of the containing function.
    pub function_start: Option<u64>,
}

/// Resolves addresses of ELF files using their symbol tables and DWARF debug information,
/// including separate debug files: through a file's debug link, and by its build id under
/// the debug directories (`.build-id/ab/cdef....debug`, as distributions' debug packages
/// install them) even when the file has no debug link.
#[derive(Debug)]
pub struct Resolver {
    symbolizer: Symbolizer,
    debug_dirs: Vec<std::path::PathBuf>,
}

/// The debug directories searched when none are given: `/usr/lib/debug` and `/lib/debug`.
pub const DEFAULT_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

impl Default for Resolver {
    fn default() -> Self {
        Self::new()
    }
}

fn code_info_path(ci: &CodeInfo<'_>) -> String {
    let file = Path::new(&*ci.file);
    match &ci.dir {
        Some(dir) if !file.is_absolute() && !dir.as_os_str().is_empty() => {
            dir.join(file).display().to_string()
        }
        _ => file.display().to_string(),
    }
}

/// Whether each file that the symbolizer opens besides `path` to read its debugging
/// information ([`ElfFile::side_files`], here of `path`, which may be a copy of the file)
/// is absent or a regular file. These lie next to the profiled program's files, where it
/// may have put a FIFO, whose open would block for good. (Files under the debug
/// directories are the system's or the user's.) A file swapped between this check and
/// the open is the remaining window.
fn side_files_are_regular(path: &Path, elf: &ElfFile) -> bool {
    crate::elf::side_files_of(path, elf.debug_link())
        .iter()
        .all(|c| std::fs::metadata(c).map_or(true, |m| m.is_file()))
}

/// Most names [`demangled`] remembers per thread (then it starts afresh).
const DEMANGLED_CAPACITY: usize = 1 << 16;

thread_local! {
    /// Demangled names by symbol name, per thread (a resolver stays on its thread).
    static DEMANGLED: std::cell::RefCell<std::collections::HashMap<Box<str>, Option<Box<str>>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `name` demangled, or as it is when it is not mangled. Remembered: annotation resolves
/// every instruction of each function sampled, all under the same name, and demangling a
/// C++ name took a fifth of the recorder's CPU time when sampling a build of C files
/// (`cc1`'s names, demangled once per instruction).
fn demangled(name: &str) -> String {
    DEMANGLED.with_borrow_mut(|known| {
        if let Some(d) = known.get(name) {
            return d.as_deref().unwrap_or(name).to_string();
        }
        if known.len() >= DEMANGLED_CAPACITY {
            known.clear();
        }
        let d = demangle(name);
        let out = d.clone().unwrap_or_else(|| name.to_string());
        known.insert(name.into(), d.map(String::into_boxed_str));
        out
    })
}

fn frame(name: &str, ci: Option<&CodeInfo<'_>>) -> ResolvedFrame {
    ResolvedFrame {
        function: Some(demangled(name)),
        file: ci.map(code_info_path),
        line: ci.and_then(|c| c.line).unwrap_or(0),
        column: ci.and_then(|c| c.column).map_or(0, u32::from),
    }
}

impl Resolver {
    /// A resolver with line information, inlined frames and demangling, searching
    /// the directories of `TANSA_DEBUG_DIRS` (`:`-separated) and then the default ones for
    /// separate debug files.
    pub fn new() -> Self {
        let mut dirs: Vec<std::path::PathBuf> = std::env::var_os("TANSA_DEBUG_DIRS")
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        dirs.extend(DEFAULT_DEBUG_DIRS.iter().map(std::path::PathBuf::from));
        Self::with_debug_dirs(dirs)
    }

    /// A resolver searching `debug_dirs`, in order, for separate debug files.
    pub fn with_debug_dirs(debug_dirs: Vec<std::path::PathBuf>) -> Self {
        Resolver {
            symbolizer: Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                // Names are demangled by `demangle`, which takes only mangled names:
                // blazesym's demangler read C functions named `i` or `w` as the C++
                // types `int` and `wchar_t`.
                .enable_demangling(false)
                .set_debug_dirs(Some(&debug_dirs))
                .build(),
            debug_dirs,
        }
    }

    /// The separate debug file of a file with build id `build_id`, under the debug
    /// directories' `.build-id` trees.
    pub fn debug_file(&self, build_id: &[u8]) -> Option<std::path::PathBuf> {
        if build_id.len() < 2 {
            return None;
        }
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        self.debug_dirs
            .iter()
            .map(|d| {
                d.join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..]))
            })
            .find(|p| p.is_file())
    }

    /// Resolves file addresses of the ELF file at `path`. For return addresses, pass the
    /// address minus one so that the call instruction is looked up.
    pub fn resolve(&self, path: &Path, addresses: &[u64]) -> Result<Vec<Resolved>, SymbolError> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        self.resolve_in(&ElfFile::open(path)?, addresses)
    }

    /// [`Self::resolve`] in a file already open.
    fn resolve_in(&self, elf: &ElfFile, addresses: &[u64]) -> Result<Vec<Resolved>, SymbolError> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        // The symbolizer reads the file by path: the file as it was opened, not another
        // one built at its path since (it would name the addresses after the new code).
        let Some(source_path) = elf.source_path() else {
            return Err(SymbolError::Replaced {
                path: elf.path().display().to_string(),
            });
        };
        let mut source = Elf::new(&*source_path);
        // Debugging information comes from the file and from files next to it; if one of
        // those is not a regular file, only the file's own symbols are read. A copy of a
        // replaced file has no files next to it: only its own debugging information counts.
        // Nor are they read when the file's reader may not read them.
        source.debug_syms = elf.side_files_allowed() && side_files_are_regular(&source_path, elf);
        let src = Source::Elf(source);
        let syms = self
            .symbolizer
            .symbolize(&src, Input::VirtOffset(addresses))
            .map_err(|e| SymbolError::Symbolize {
                path: elf.path().display().to_string(),
                reason: e.to_string(),
            })?;
        // The file's function symbols, read once the first name needs them.
        let mut symbols = None;
        Ok(syms
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => {
                    // blazesym lists inlined functions outermost first and attaches to each
                    // the location inside it; `sym.code_info` is the location inside the
                    // physical function. We want innermost first.
                    let mut frames = Vec::with_capacity(sym.inlined.len() + 1);
                    frames.extend(
                        sym.inlined
                            .iter()
                            .rev()
                            .map(|f| frame(&f.name, f.code_info.as_ref())),
                    );
                    let at_start = |symbols: &mut Option<Vec<crate::elf::FunctionSymbol>>| {
                        let all = symbols.get_or_insert_with(|| elf.functions());
                        let from = all.partition_point(|f| f.address < sym.addr);
                        all[from..]
                            .iter()
                            .take_while(|f| f.address == sym.addr)
                            .map(|f| demangled(&f.name))
                            .collect::<Vec<_>>()
                    };
                    let physical = bare_identifier(&sym.name)
                        .is_some()
                        .then(|| at_start(&mut symbols))
                        .and_then(|names| qualified_name(&sym.name, &names))
                        .unwrap_or_else(|| sym.name.to_string());
                    frames.push(frame(&physical, sym.code_info.as_deref()));
                    Resolved {
                        frames,
                        function_start: Some(sym.addr),
                    }
                }
                Symbolized::Unknown(_) => Resolved::default(),
            })
            .collect())
    }

    /// Resolves the offsets a recording uses in one module and builds its symbol-table
    /// entry. `lookups` pairs each offset to store with the address to look up (the same
    /// address, or one less for a return address). A missing file or a build id that
    /// differs from `expected_build_id` is recorded in the entry's status, not returned as
    /// an error: the report still shows the module, just without function names.
    pub fn module_symbols(
        &self,
        builder: &mut SymbolTableBuilder,
        key: u64,
        path: &str,
        expected_build_id: &[u8],
        lookups: &[(u64, u64)],
    ) -> ModuleSymbols {
        ModuleResolution::open(path, expected_build_id).symbols(self, builder, key, lookups)
    }

    /// What the addresses `addrs` of the open module `elf` resolve to: from the file and
    /// the files its debug link names, then from its separate debug file found by build
    /// id, then by the extent of the function (see [`Unnamed`]); the outermost function is
    /// given its public (exported) name where it has one.
    fn resolve_module(
        &self,
        elf: &ElfFile,
        extra: &ModuleExtras,
        addrs: &[u64],
    ) -> Result<Vec<Resolved>, SymbolError> {
        let mut resolved = self.resolve_in(elf, addrs)?;
        // The stubs of the procedure linkage table, which symbol tables do not name.
        let plt = extra.plt.get_or_init(|| elf.plt_entries());
        for (r, &a) in resolved.iter_mut().zip(addrs) {
            let i = plt.partition_point(|e| e.0.start <= a);
            if let Some((range, name)) = i.checked_sub(1).map(|i| &plt[i])
                && range.contains(&a)
            {
                *r = Resolved {
                    frames: vec![ResolvedFrame {
                        function: Some(name.clone()),
                        file: None,
                        line: 0,
                        column: 0,
                    }],
                    function_start: Some(range.start),
                };
            }
        }
        // What the file itself does not name, its separate debug file found by build id
        // may (a distribution's debug package, without a debug link in the file).
        let missing: Vec<usize> = (0..resolved.len())
            .filter(|&i| resolved[i].frames.is_empty())
            .collect();
        if !missing.is_empty()
            && let Some(debug) = extra
                .debug_file
                .get_or_init(|| elf.build_id().and_then(|id| self.debug_file(&id)))
        {
            let want: Vec<u64> = missing.iter().map(|&i| addrs[i]).collect();
            if let Ok(found) = self.resolve(debug, &want) {
                for (&i, r) in missing.iter().zip(found) {
                    if !r.frames.is_empty() {
                        resolved[i] = r;
                    }
                }
            }
        }
        for (r, &a) in resolved.iter_mut().zip(addrs) {
            if r.frames.is_empty()
                && let Some((name, start)) = extra.unnamed.get_or_init(|| Unnamed::new(elf)).name(a)
            {
                r.frames = vec![ResolvedFrame {
                    function: Some(name),
                    file: None,
                    line: 0,
                    column: 0,
                }];
                r.function_start = r.function_start.or(start);
            }
        }
        let exported = extra.exported.get_or_init(|| elf.exported_names());
        for r in &mut resolved {
            if let (Some(start), Some(outer)) = (r.function_start, r.frames.last_mut())
                && let (Some(name), Some(aliases)) = (outer.function.as_ref(), exported.get(&start))
                && let Some(better) = public_alias(name, aliases)
            {
                outer.function = Some(better);
            }
        }
        Ok(resolved)
    }
}

/// What resolving a module reads once, on first need.
#[derive(Debug, Default)]
struct ModuleExtras {
    debug_file: std::cell::OnceCell<Option<std::path::PathBuf>>,
    unnamed: std::cell::OnceCell<Unnamed>,
    exported: std::cell::OnceCell<std::collections::HashMap<u64, Vec<String>>>,
    plt: std::cell::OnceCell<Vec<(std::ops::Range<u64>, String)>>,
}

/// `r`'s frames as a symbol table stores them, their strings interned in `builder`.
fn sym_frames(builder: &mut SymbolTableBuilder, r: &Resolved) -> Vec<SymFrame> {
    r.frames
        .iter()
        .map(|f| SymFrame {
            function: f
                .function
                .as_deref()
                .map_or(NO_STRING, |s| builder.intern(s)),
            file: f.file.as_deref().map_or(NO_STRING, |s| builder.intern(s)),
            line: f.line,
            column: f.column,
        })
        .collect()
}

/// One module's symbols resolved in parts: the file is opened (and its build id checked)
/// once, each address is looked up once, whenever it is first given, and
/// [`ModuleResolution::symbols`] builds the entry. Since each address resolves on its own,
/// the entry is the one [`Resolver::module_symbols`] builds from all the addresses at once,
/// however they were split: a recorder resolves addresses as they appear, while the
/// target runs, and only the last ones after it ends.
#[derive(Debug)]
pub struct ModuleResolution {
    path: String,
    expected_build_id: Vec<u8>,
    /// The open file, or why it cannot be resolved (then every address stays unnamed).
    file: Result<(std::sync::Arc<ElfFile>, ModuleExtras), ModuleStatus>,
    // Ordered: addresses are looked up in order (a function's instructions one after
    // another), and the entries of neighbouring addresses share nodes. As a hash map of
    // 241,000 entries (`cc1`'s code sampled in a build) every lookup missed the cache.
    resolved: std::collections::BTreeMap<u64, Resolved>,
}

impl ModuleResolution {
    /// Opens the module's file at `path`; a missing, unreadable or different file (its
    /// build id is not `expected_build_id`, when one is given) is kept as the status of
    /// the entry to come.
    pub fn open(path: &str, expected_build_id: &[u8]) -> ModuleResolution {
        let vdso = crate::vdso::is_vdso(path);
        let opened = if vdso && let Some(image) = crate::vdso::file_for(expected_build_id) {
            // The kernel's vDSO, the same as this process's (same build id).
            ElfFile::open(image).map_err(|e| ModuleStatus::Failed(e.to_string()))
        } else if path.is_empty() || path.starts_with('[') || vdso {
            Err(ModuleStatus::NoFile)
        } else {
            isolate(|| {
                #[cfg(test)]
                tests::panic_if_marked(path, "opening");
                ElfFile::open(path)
            })
            .and_then(|opened| {
                opened.map_err(|e| match e {
                    SymbolError::Io { source, .. }
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        ModuleStatus::FileMissing
                    }
                    // The path is the module's: the reason alone says it.
                    SymbolError::Io { source, .. } => ModuleStatus::Failed(source.to_string()),
                    e => ModuleStatus::Failed(e.to_string()),
                })
            })
        };
        match opened {
            Ok(elf) => Self::with_file(path, expected_build_id, std::sync::Arc::new(elf)),
            Err(status) => Self::failed(path, expected_build_id, status),
        }
    }

    /// Resolves the module from `elf`, its file opened when it was mapped (so a file
    /// deleted or rebuilt at its path since is still the one resolved). A file whose build
    /// id is not `expected_build_id`, when one is given, is kept as the status instead.
    pub fn with_file(
        path: &str,
        expected_build_id: &[u8],
        elf: std::sync::Arc<ElfFile>,
    ) -> ModuleResolution {
        if !expected_build_id.is_empty()
            && elf
                .build_id()
                .as_deref()
                .is_some_and(|b| b != expected_build_id)
        {
            return Self::failed(path, expected_build_id, ModuleStatus::BuildIdMismatch);
        }
        ModuleResolution {
            path: path.to_string(),
            expected_build_id: expected_build_id.to_vec(),
            file: Ok((elf, ModuleExtras::default())),
            resolved: std::collections::BTreeMap::new(),
        }
    }

    /// A module that cannot be resolved, for `status` (its entry keeps every address,
    /// unnamed, and names the module among the unresolved ones).
    pub fn failed(path: &str, expected_build_id: &[u8], status: ModuleStatus) -> ModuleResolution {
        ModuleResolution {
            path: path.to_string(),
            expected_build_id: expected_build_id.to_vec(),
            file: Err(status),
            resolved: std::collections::BTreeMap::new(),
        }
    }

    /// Looks up the addresses of `addrs` not looked up yet. A failure of the symbolizer
    /// fails the whole module, as it would have all at once.
    pub fn resolve(&mut self, resolver: &Resolver, addrs: impl IntoIterator<Item = u64>) {
        let Ok((elf, extras)) = &self.file else {
            return;
        };
        let mut new: Vec<u64> = addrs
            .into_iter()
            .filter(|a| !self.resolved.contains_key(a))
            .collect();
        new.sort_unstable();
        new.dedup();
        // No file has code at such addresses: a damaged or hostile recording's (the
        // symbolizer's range arithmetic would overflow at the very top). They stay unnamed.
        let beyond = new.partition_point(|&a| a < MAX_FILE_ADDRESS);
        for a in new.drain(beyond..) {
            self.resolved.insert(a, Resolved::default());
        }
        if new.is_empty() {
            return;
        }
        let found = isolate(|| {
            #[cfg(test)]
            tests::panic_if_marked(&self.path, "resolving");
            resolver.resolve_module(elf, extras, &new)
        });
        match found {
            Ok(Ok(found)) => self.resolved.extend(new.into_iter().zip(found)),
            Ok(Err(e)) => {
                self.file = Err(ModuleStatus::Failed(e.to_string()));
                self.resolved.clear();
            }
            Err(status) => {
                self.file = Err(status);
                self.resolved.clear();
            }
        }
    }

    /// What file address `addr` resolves to, looked up now if it was not yet (`None`
    /// when the module cannot be resolved). The same names as in the module's entry:
    /// debug files, public aliases and functions without a symbol included.
    pub fn lookup(&mut self, resolver: &Resolver, addr: u64) -> Option<&Resolved> {
        self.resolve(resolver, [addr]);
        self.resolved.get(&addr)
    }

    /// The module's symbol-table entry for `lookups` (offset to store, address to look
    /// up), looking up the addresses not looked up yet.
    pub fn symbols(
        mut self,
        resolver: &Resolver,
        builder: &mut SymbolTableBuilder,
        key: u64,
        lookups: &[(u64, u64)],
    ) -> ModuleSymbols {
        self.resolve(resolver, lookups.iter().map(|&(_, a)| a));
        let (build_id, status) = match &self.file {
            Ok((elf, _)) => (elf.build_id().unwrap_or_default(), ModuleStatus::Resolved),
            Err(status) => (self.expected_build_id.clone(), status.clone()),
        };
        let addrs = lookups
            .iter()
            .map(|&(offset, address)| {
                let r = self.resolved.get(&address);
                AddrSymbols {
                    offset,
                    frames: r.map(|r| sym_frames(builder, r)).unwrap_or_default(),
                    function_start: r.and_then(|r| r.function_start),
                }
            })
            .collect();
        ModuleSymbols {
            key,
            path: self.path,
            build_id,
            status,
            addrs,
            code: Vec::new(),
        }
    }
}

/// Addresses in a module's file at or above this are not looked up (no ELF file places code
/// there; user space ends far below).
pub const MAX_FILE_ADDRESS: u64 = 1 << 63;

/// Runs `f`, one step of reading one module, and turns a panic in it (a fault of tansa or
/// of a parser it uses, met on that file's contents) into the module's failed status: one
/// module's fault then costs that module's names, not the recording. The panic's message
/// was already printed by the panic hook.
pub fn isolate<T>(f: impl FnOnce() -> T) -> Result<T, ModuleStatus> {
    // Unwind safety: after a panic, the caller keeps the module's status and drops what the
    // step was building; a resolver's caches are per file, and the failed file is not read
    // again.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        ModuleStatus::Failed(format!(
            "tansa failed while reading it: {message}; please report this"
        ))
    })
}

/// The public spelling of a function known by an internal alias: among the exported names
/// at the function's address, the one with the fewest leading underscores (then the
/// shortest), if it is better than `name`.
pub fn public_alias(name: &str, exported: &[String]) -> Option<String> {
    let score = |n: &str| {
        (
            n.starts_with("__GI_"),
            n.len() - n.trim_start_matches('_').len(),
            n.len(),
        )
    };
    let best = exported.iter().min_by_key(|n| score(n))?;
    (score(best) < score(name) && !exported.iter().any(|n| n == name)).then(|| best.clone())
}

/// The identifier a function's debugging information names it by, when that is all it
/// names: `boxes`, `finish_grow` of `finish_grow<alloc::alloc::Global>`; `None` for a
/// mangled name or one with a path.
fn bare_identifier(name: &str) -> Option<&str> {
    let base = name.split(['<', '(']).next()?;
    (!base.is_empty()
        && !base.starts_with("_Z")
        && !base.starts_with("_R")
        && base.chars().all(|c| c.is_alphanumeric() || c == '_'))
    .then_some(base)
}

/// A function's name with its path, from a symbol at its start (`symbols`, demangled),
/// where its debugging information names it by its bare identifier (`name`). Code built
/// with line tables only (`-Cdebuginfo=line-tables-only`, a common Rust release profile,
/// or `-gmlt`) names its functions so (`boxes`, `area`); their symbols give the path
/// (`rustalloc::boxes`, `shapes::Square::area() const`). Only a symbol that ends its path
/// with that identifier qualifies (several symbols can share an address).
fn qualified_name(name: &str, symbols: &[String]) -> Option<String> {
    let base = bare_identifier(name)?;
    let needle = format!("::{base}");
    symbols
        .iter()
        .find(|s| {
            s.match_indices(&needle).any(|(i, m)| {
                let rest = &s[i + m.len()..];
                rest.is_empty() || rest.starts_with(['<', '(']) || rest.starts_with("::<")
            })
        })
        .cloned()
}

/// Demangles a C++ or Rust symbol name; `None` if it is not mangled.
pub fn demangle(name: &str) -> Option<String> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return Some(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        let sym = cpp_demangle::Symbol::new(name).ok()?;
        return sym.demangle().ok();
    }
    None
}

/// Farthest an address may be past a symbol to be named after it.
const MAX_SYMBOL_DISTANCE: u64 = 1 << 16;

/// Names for code that no symbol covers (a local function of a library stripped to its
/// exported symbols). Such code is still in a function: the one whose unwind information
/// (`.eh_frame`) covers it, named after its start (`fn@0x15b40`), so that each internal
/// function is a unit of its own. Where no unwind information covers it either, it is
/// named after the nearest function symbol before it, with the offset. What it reads from
/// the file is read once, on first use.
///
/// A MiniDebugInfo section (`.gnu_debugdata`), where the file has one, names such code
/// first.
#[derive(Debug)]
pub struct Unnamed {
    mini: Vec<crate::elf::FunctionSymbol>,
    extents: Vec<std::ops::Range<u64>>,
    functions: Vec<crate::elf::FunctionSymbol>,
}

impl Unnamed {
    /// The MiniDebugInfo symbols, unwind extents and function symbols of `elf`.
    pub fn new(elf: &ElfFile) -> Self {
        Unnamed {
            mini: elf.mini_debuginfo_functions(),
            extents: elf.unwind_extents(),
            functions: elf.functions(),
        }
    }

    /// The MiniDebugInfo function symbol covering `addr`.
    fn mini_at(&self, addr: u64) -> Option<&crate::elf::FunctionSymbol> {
        let i = self.mini.partition_point(|f| f.address <= addr);
        let f = &self.mini[i.checked_sub(1)?];
        (addr < f.address.saturating_add(f.size)).then_some(f)
    }

    /// The extent of the function without a symbol that contains `addr`: its MiniDebugInfo
    /// symbol's, else its unwind information's.
    pub fn extent(&self, addr: u64) -> Option<std::ops::Range<u64>> {
        match self.mini_at(addr) {
            Some(f) => Some(f.address..f.address.saturating_add(f.size)),
            None => extent_containing(&self.extents, addr),
        }
    }

    /// The name of the function containing file address `addr`, with its start when its
    /// extent is known.
    pub fn name(&self, addr: u64) -> Option<(String, Option<u64>)> {
        if let Some(f) = self.mini_at(addr) {
            let name = demangled(&f.name);
            return Some((name, Some(f.address)));
        }
        match extent_containing(&self.extents, addr) {
            Some(e) => Some((unnamed_function(e.start), Some(e.start))),
            None => nearest_symbol(&self.functions, addr).map(|n| (n, None)),
        }
    }
}

/// The name of a function known only by its extent: `fn@0x` and its start address.
pub use tansa_format::symtab::unnamed_function;

/// The innermost extent of `extents` (sorted by start) containing `addr`.
fn extent_containing(extents: &[std::ops::Range<u64>], addr: u64) -> Option<std::ops::Range<u64>> {
    let i = extents.partition_point(|e| e.start <= addr);
    extents[..i]
        .iter()
        .rev()
        .take(64)
        .filter(|e| addr < e.end)
        .min_by_key(|e| e.end - e.start)
        .cloned()
}

/// `symbol+0xOFFSET` for `addr`, from the nearest function symbol at or before it in
/// `functions` (sorted by address), demangled; none within [`MAX_SYMBOL_DISTANCE`].
fn nearest_symbol(functions: &[crate::elf::FunctionSymbol], addr: u64) -> Option<String> {
    let i = functions
        .partition_point(|f| f.address <= addr)
        .checked_sub(1)?;
    let f = &functions[i];
    let off = addr - f.address;
    (off < MAX_SYMBOL_DISTANCE).then(|| {
        let name = demangled(&f.name);
        format!("{name}+{off:#x}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test builds panic while reading a module whose path contains
    /// `tansa-test-panics-STEP`, STEP being `opening` or `resolving`.
    pub(super) fn panic_if_marked(path: &str, step: &str) {
        if path.contains(&format!("tansa-test-panics-{step}")) {
            panic!("injected for a test while {step}");
        }
    }

    #[test]
    fn a_bare_name_takes_the_path_of_its_symbol() {
        let syms = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let q = |name: &str, names: &[&str]| qualified_name(name, &syms(names));
        assert_eq!(
            q("boxes", &["rustalloc::boxes"]).as_deref(),
            Some("rustalloc::boxes")
        );
        assert_eq!(
            q(
                "finish_grow<alloc::alloc::Global>",
                &["alloc::raw_vec::finish_grow::<alloc::alloc::Global>"]
            )
            .as_deref(),
            Some("alloc::raw_vec::finish_grow::<alloc::alloc::Global>")
        );
        assert_eq!(
            q("area", &["shapes::Square::area() const"]).as_deref(),
            Some("shapes::Square::area() const")
        );
        // An alias at the same address that names another function, a longer identifier,
        // or a module: not this function's path.
        assert_eq!(q("boxes", &["other::crates"]), None);
        assert_eq!(q("boxes", &["m::boxes_all"]), None);
        assert_eq!(q("boxes", &["m::boxes::inner"]), None);
        // The right one among several.
        assert_eq!(
            q("boxes", &["folded", "m::boxes"]).as_deref(),
            Some("m::boxes")
        );
        // Names that are not bare: C's own (no path to add), mangled, or with a path.
        assert_eq!(q("main", &["main"]), None);
        assert_eq!(bare_identifier("_ZN1m5boxesE"), None);
        assert_eq!(bare_identifier("m::boxes"), None);
        assert_eq!(bare_identifier("{closure#0}"), None);
        assert_eq!(bare_identifier("new<u8>"), Some("new"));
    }

    #[test]
    fn remembered_names_are_demangled_as_at_first() {
        let cpp = "_ZN3gcc4pass7executeEP8function";
        let rust = "_ZN4core3ptr13drop_in_place17h0123456789abcdefE";
        for _ in 0..2 {
            assert_eq!(demangled(cpp), "gcc::pass::execute(function*)");
            assert_eq!(demangled(rust), "core::ptr::drop_in_place");
            assert_eq!(demangled("main"), "main");
            assert_eq!(demangled("i"), "i");
        }
    }

    #[test]
    fn a_panic_while_reading_one_module_fails_that_module_only() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib.c");
        std::fs::write(&src, "int f(int x) { return x * 3 + 1; }\n").unwrap();
        let good = dir.path().join("good.so");
        let bad = dir.path().join("tansa-test-panics-resolving.so");
        for lib in [&good, &bad] {
            tansa_testkit::compile(lib, std::slice::from_ref(&src), &["-shared", "-fPIC", "-g"]);
        }
        let f = ElfFile::open(&good)
            .unwrap()
            .function_by_name("f")
            .unwrap()
            .address;
        let resolver = Resolver::new();
        let opening = dir.path().join("tansa-test-panics-opening.so");
        for (path, step) in [(&opening, "opening"), (&bad, "resolving")] {
            let path = path.to_str().unwrap();
            let mut b = SymbolTableBuilder::default();
            let m = ModuleResolution::open(path, &[]).symbols(&resolver, &mut b, 1, &[(f, f)]);
            match &m.status {
                ModuleStatus::Failed(why) => assert!(
                    why.contains(&format!("injected for a test while {step}"))
                        && why.contains("please report"),
                    "{why}"
                ),
                other => panic!("{step}: {other:?}"),
            }
            // Its addresses are kept, unnamed, and the module is named as unresolved.
            assert_eq!(m.addrs.len(), 1);
            assert!(m.addrs[0].frames.is_empty());
            b.add_module(m);
            let notes = b.finish().unresolved_notes();
            assert_eq!(notes.len(), 1, "{notes:?}");
            assert!(
                notes[0].contains(path) && notes[0].contains("injected"),
                "{notes:?}"
            );
        }
        // The same resolver goes on reading other modules.
        let mut b = SymbolTableBuilder::default();
        let m = ModuleResolution::open(good.to_str().unwrap(), &[]).symbols(
            &resolver,
            &mut b,
            2,
            &[(f, f)],
        );
        assert_eq!(m.status, ModuleStatus::Resolved);
        b.add_module(m);
        let table = b.finish();
        let frame = &table.modules[0].addrs[0].frames[0];
        assert_eq!(table.string(frame.function), Some("f"));
    }

    /// A library with two static functions, stripped to its exported symbols, built with
    /// `flags`: (path, addresses of `hidden` and `other` before stripping, of `exported`).
    fn stripped_library(dir: &Path, flags: &[&str]) -> (std::path::PathBuf, u64, u64, u64) {
        let src = dir.join("lib.c");
        std::fs::write(
            &src,
            "int exported(int x) { return x * 3 + 1; }\n\
             __attribute__((noinline)) static int hidden(int x) { return x * 7 + exported(x); }\n\
             __attribute__((noinline)) static int other(int x) { return hidden(x) * 5 + 2; }\n\
             int (*keep)(int) = hidden;\n\
             int (*keep2)(int) = other;\n",
        )
        .unwrap();
        let lib = dir.join("lib.so");
        let mut all = vec!["-shared", "-fPIC", "-O1"];
        all.extend(flags);
        tansa_testkit::compile(&lib, std::slice::from_ref(&src), &all);
        let elf = ElfFile::open(&lib).unwrap();
        let addr = |name| {
            elf.function_by_name(name)
                .expect("the local symbol before stripping")
                .address
        };
        let (hidden, other, exported) = (addr("hidden"), addr("other"), addr("exported"));
        drop(elf);
        // Strip the symbol table: only the exported (dynamic) symbols stay.
        let ok = std::process::Command::new("strip")
            .arg(&lib)
            .status()
            .unwrap();
        assert!(ok.success());
        assert!(
            ElfFile::open(&lib)
                .unwrap()
                .function_by_name("hidden")
                .is_none()
        );
        (lib, hidden, other, exported)
    }

    /// The outermost function name and the function start resolved for each address.
    fn names(lib: &Path, addrs: &[u64]) -> Vec<(String, Option<u64>)> {
        let mut b = SymbolTableBuilder::default();
        let lookups: Vec<(u64, u64)> = addrs.iter().map(|&a| (a, a)).collect();
        let m = Resolver::new().module_symbols(&mut b, 1, lib.to_str().unwrap(), &[], &lookups);
        let table = b.finish();
        m.addrs
            .iter()
            .map(|a| {
                let name = a
                    .frames
                    .last()
                    .and_then(|f| table.string(f.function).map(str::to_string))
                    .unwrap_or_default();
                (name, a.function_start)
            })
            .collect()
    }

    /// The stubs of the procedure linkage table are named `function@plt`, as objdump names
    /// them, with and without indirect-branch tracking (`.plt.sec`), lazily and eagerly
    /// bound (`.plt.got`): they were given to the symbol before them, `_init`.
    #[test]
    fn plt_stubs_are_named_after_the_function_they_call() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("plt.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\n#include <stdlib.h>\n\
             int main(int argc, char **argv) {\n\
               puts(argv[0]);\n\
               return abs(atoi(argc > 1 ? argv[1] : \"-3\"));\n}\n",
        )
        .unwrap();
        for (i, flags) in [
            &["-fcf-protection=full"][..],
            &["-fcf-protection=none"],
            &["-fcf-protection=none", "-Wl,-z,now"],
            &["-fcf-protection=full", "-fno-plt"],
        ]
        .iter()
        .enumerate()
        {
            let exe = dir.path().join(format!("plt{i}"));
            let mut all = vec!["-O1"];
            all.extend(*flags);
            tansa_testkit::compile(&exe, std::slice::from_ref(&src), &all);
            // objdump's names of the stubs: `0000000000001030 <puts@plt>:`.
            let out = std::process::Command::new("objdump")
                .arg("-d")
                .arg(&exe)
                .output()
                .expect("objdump (binutils, with the C compiler)");
            let text = String::from_utf8_lossy(&out.stdout);
            let stubs: Vec<(u64, String)> = text
                .lines()
                .filter_map(|l| {
                    let (addr, rest) = l.split_once(" <")?;
                    let name = rest.strip_suffix(">:")?;
                    name.ends_with("@plt").then(|| {
                        (
                            u64::from_str_radix(addr.trim(), 16).unwrap(),
                            name.to_string(),
                        )
                    })
                })
                .collect();
            // Without `-fno-plt`, calls to `puts` go through a stub; with it, only the
            // start-up code's `__cxa_finalize` keeps one, in `.plt.got`.
            assert!(
                !stubs.is_empty()
                    && (flags.contains(&"-fno-plt") || stubs.iter().any(|s| s.1 == "puts@plt")),
                "{flags:?}: {stubs:?}"
            );
            let addrs: Vec<u64> = stubs.iter().flat_map(|s| [s.0, s.0 + 4]).collect();
            let got = names(&exe, &addrs);
            for (j, (addr, name)) in stubs.iter().enumerate() {
                for k in 0..2 {
                    assert_eq!(
                        got[2 * j + k],
                        (name.clone(), Some(*addr)),
                        "{flags:?}: {:#x}",
                        addrs[2 * j + k]
                    );
                }
            }
        }
    }

    #[test]
    fn functions_without_a_symbol_are_told_apart_by_their_unwind_extents() {
        let dir = tempfile::tempdir().unwrap();
        let (lib, hidden, other, _) = stripped_library(dir.path(), &[]);
        let got = names(&lib, &[hidden + 2, hidden + 4, other + 2]);
        assert_eq!(got[0], (format!("fn@{hidden:#x}"), Some(hidden)), "{got:?}");
        assert_eq!(got[1], got[0], "one function, one name");
        assert_eq!(got[2], (format!("fn@{other:#x}"), Some(other)), "{got:?}");
    }

    #[test]
    fn without_unwind_information_an_address_is_named_after_the_nearest_symbol() {
        let dir = tempfile::tempdir().unwrap();
        let (lib, hidden, _, exported) = stripped_library(
            dir.path(),
            &["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"],
        );
        assert!(ElfFile::open(&lib).unwrap().unwind_extents().is_empty());
        let (name, _) = names(&lib, &[hidden + 2]).remove(0);
        let nearest = if exported < hidden {
            "exported"
        } else {
            "_init"
        };
        assert!(
            name.starts_with(&format!("{nearest}+0x")),
            "{name} (hidden at {hidden:#x}, exported at {exported:#x})"
        );
    }

    fn run(cmd: &str, args: &[&std::ffi::OsStr]) {
        let out = std::process::Command::new(cmd)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        assert!(
            out.status.success(),
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn mini_debuginfo_names_the_functions_of_a_stripped_library() {
        let dir = tempfile::tempdir().unwrap();
        let (lib, hidden, other, _) = stripped_library(dir.path(), &[]);
        // Rebuild the unstripped library, keep its symbol table without DWARF, compress it
        // with xz and add it as .gnu_debugdata, as distributions make MiniDebugInfo.
        let src = dir.path().join("lib.c");
        let full = dir.path().join("full.so");
        tansa_testkit::compile(
            &full,
            std::slice::from_ref(&src),
            &["-shared", "-fPIC", "-O1"],
        );
        let mini = dir.path().join("mini");
        run(
            "objcopy",
            &["--strip-debug".as_ref(), full.as_os_str(), mini.as_os_str()],
        );
        run("xz", &["-k".as_ref(), mini.as_os_str()]);
        let section = format!(".gnu_debugdata={}.xz", mini.display());
        run(
            "objcopy",
            &["--add-section".as_ref(), section.as_ref(), lib.as_os_str()],
        );
        let elf = ElfFile::open(&lib).unwrap();
        assert!(elf.function_by_name("hidden").is_none());
        assert!(
            elf.mini_debuginfo_functions()
                .iter()
                .any(|f| f.name == "hidden" && f.address == hidden)
        );
        let got = names(&lib, &[hidden + 2, other + 2]);
        assert_eq!(got[0], ("hidden".to_string(), Some(hidden)), "{got:?}");
        assert_eq!(got[1], ("other".to_string(), Some(other)), "{got:?}");
    }

    #[test]
    fn a_debug_file_found_by_build_id_names_functions_and_lines() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib.c");
        std::fs::write(
            &src,
            "__attribute__((noinline)) static int hidden(int x) { return x * 7 + 1; }\n\
             int (*keep)(int) = hidden;\n",
        )
        .unwrap();
        let lib = dir.path().join("lib.so");
        tansa_testkit::compile(
            &lib,
            std::slice::from_ref(&src),
            &["-shared", "-fPIC", "-O1", "-g", "-Wl,--build-id"],
        );
        let elf = ElfFile::open(&lib).unwrap();
        let hidden = elf.function_by_name("hidden").unwrap().address;
        let id = elf.build_id().expect("a build id");
        drop(elf);
        // The debug file goes where a debug package puts it; the library keeps no debug
        // link to it.
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let debug_dir = dir.path().join("debug");
        let target = debug_dir
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        run(
            "objcopy",
            &[
                "--only-keep-debug".as_ref(),
                lib.as_os_str(),
                target.as_os_str(),
            ],
        );
        run("strip", &[lib.as_os_str()]);
        let resolver = Resolver::with_debug_dirs(vec![debug_dir]);
        let mut b = SymbolTableBuilder::default();
        let m = resolver.module_symbols(&mut b, 1, lib.to_str().unwrap(), &[], &[(hidden, hidden)]);
        let table = b.finish();
        let frame = m.addrs[0].frames.last().expect("a frame");
        assert_eq!(table.string(frame.function), Some("hidden"));
        assert!(
            table
                .string(frame.file)
                .is_some_and(|f| f.ends_with("lib.c"))
        );
        assert_eq!(frame.line, 1);
        // Without the debug directory, the same address is only an unwind extent.
        let (name, _) = names(&lib, &[hidden]).remove(0);
        assert_eq!(name, format!("fn@{hidden:#x}"));
    }

    /// Runs `f` on a thread of its own; fails the test if it has not returned in 30 s.
    fn within_30s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .expect("blocked on a FIFO")
    }

    fn mkfifo(path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// The function name of `lib`'s `exported` resolved in a thread that must not block.
    fn exported_name(lib: &Path) -> (String, ModuleStatus) {
        let addr = ElfFile::open(lib)
            .ok()
            .and_then(|e| e.function_by_name("exported"))
            .map_or(0x1000, |f| f.address);
        let path = lib.to_str().unwrap().to_string();
        within_30s(move || {
            let mut b = SymbolTableBuilder::default();
            let m = Resolver::with_debug_dirs(Vec::new()).module_symbols(
                &mut b,
                1,
                &path,
                &[],
                &[(addr, addr)],
            );
            let table = b.finish();
            let name = m.addrs[0]
                .frames
                .last()
                .and_then(|f| table.string(f.function).map(str::to_string))
                .unwrap_or_default();
            (name, m.status)
        })
    }

    /// A profiled program can put a FIFO where a module was, or next to it where the
    /// symbolizer looks for debugging information (`PATH.dwp`, the debug link's target).
    /// Opening one would block the recorder for good; it is refused or passed over.
    #[test]
    fn fifos_planted_at_or_next_to_a_module_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib.c");
        std::fs::write(&src, "int exported(int x) { return x * 3 + 1; }\n").unwrap();
        let lib = dir.path().join("lib.so");
        tansa_testkit::compile(
            &lib,
            std::slice::from_ref(&src),
            &["-shared", "-fPIC", "-O1", "-g"],
        );
        // A DWARF package next to it.
        let dwp = dir.path().join("lib.so.dwp");
        mkfifo(&dwp);
        assert_eq!(exported_name(&lib).0, "exported");
        std::fs::remove_file(&dwp).unwrap();
        // The target of its debug link.
        let debug = dir.path().join("lib.debug");
        run(
            "objcopy",
            &[
                "--only-keep-debug".as_ref(),
                lib.as_os_str(),
                debug.as_os_str(),
            ],
        );
        let link = format!("--add-gnu-debuglink={}", debug.display());
        run(
            "objcopy",
            &["--strip-debug".as_ref(), link.as_ref(), lib.as_os_str()],
        );
        assert_eq!(
            ElfFile::open(&lib).unwrap().debug_link(),
            Some("lib.debug".into())
        );
        assert_eq!(exported_name(&lib).0, "exported", "with the debug file");
        std::fs::remove_file(&debug).unwrap();
        mkfifo(&debug);
        assert_eq!(exported_name(&lib).0, "exported", "with a FIFO for it");
        // The module itself.
        std::fs::rename(&lib, dir.path().join("moved.so")).unwrap();
        mkfifo(&lib);
        let (name, status) = exported_name(&lib);
        assert_eq!(name, "");
        assert!(
            matches!(&status, ModuleStatus::Failed(why) if why.contains("not a regular file")),
            "{status:?}"
        );
        assert!(ElfFile::open(&lib).is_err());
    }

    #[test]
    fn demangles_cpp_and_rust_and_leaves_c_alone() {
        assert_eq!(
            demangle("_Znwm").as_deref(),
            Some("operator new(unsigned long)")
        );
        assert_eq!(demangle("main"), None);
        assert!(demangle("_ZN4core3fmt5write17h0123456789abcdefE").is_some());
    }

    /// C functions whose names read as C++ type codes (`i` is `int`, `w` is `wchar_t`,
    /// `St` is `std`) keep their names, from DWARF and from the symbol table; a mangled
    /// name is still demangled.
    #[test]
    fn c_names_that_look_like_mangled_types_are_left_alone() {
        assert_eq!(demangle("w"), None);
        assert_eq!(demangle("i"), None);
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib.c");
        std::fs::write(
            &src,
            "__attribute__((noinline)) int i(int x) { return x * 3 + 1; }\n\
             __attribute__((noinline)) int w(int x) { return x * 5 + i(x); }\n\
             __attribute__((noinline)) int St(int x) { return x * 7 + w(x); }\n\
             __attribute__((noinline)) int _Z1fi(int x) { return x * 9 + St(x); }\n\
             __attribute__((visibility(\"default\"))) int entry(int x) { return _Z1fi(x); }\n",
        )
        .unwrap();
        for (flags, with) in [(&["-g"][..], "DWARF"), (&[][..], "symbols")] {
            let lib = dir.path().join(format!("lib-{with}.so"));
            // Not exported: an exported function would be named by its dynamic symbol.
            let mut all = vec!["-shared", "-fPIC", "-O1", "-fvisibility=hidden"];
            all.extend(flags);
            tansa_testkit::compile(&lib, std::slice::from_ref(&src), &all);
            let elf = ElfFile::open(&lib).unwrap();
            let at = |n: &str| elf.function_by_name(n).unwrap().address;
            let wanted = [
                ("i", at("i")),
                ("w", at("w")),
                ("St", at("St")),
                ("f(int)", at("_Z1fi")),
            ];
            drop(elf);
            let resolver = Resolver::with_debug_dirs(Vec::new());
            let mut b = SymbolTableBuilder::default();
            let lookups: Vec<(u64, u64)> = wanted.iter().map(|&(_, a)| (a, a)).collect();
            let m = resolver.module_symbols(&mut b, 1, lib.to_str().unwrap(), &[], &lookups);
            let table = b.finish();
            for (k, (name, _)) in wanted.iter().enumerate() {
                let frame = m.addrs[k].frames.last().expect("a frame");
                assert_eq!(table.string(frame.function), Some(*name), "{with}");
            }
        }
    }

    #[test]
    fn public_aliases_replace_internal_names_only() {
        let ex = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            public_alias("__GI___strdup", &ex(&["__strdup", "strdup"])).as_deref(),
            Some("strdup")
        );
        assert_eq!(
            public_alias("__GI__IO_file_doallocate", &ex(&["_IO_file_doallocate"])).as_deref(),
            Some("_IO_file_doallocate")
        );
        assert_eq!(
            public_alias("malloc", &ex(&["malloc", "__libc_malloc"])),
            None
        );
        assert_eq!(public_alias("func_a0", &ex(&[])), None);
    }

    /// Resolving a module's addresses in batches, in any order and with repeats, gives the
    /// entry resolving them all at once gives: functions, inlined frames, lines, starts.
    #[test]
    fn a_module_resolved_in_parts_is_resolved_as_at_once() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.to_str().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        let build_id = elf.build_id().unwrap_or_default();
        let mut lookups: Vec<(u64, u64)> = Vec::new();
        for f in elf.functions().iter().filter(|f| f.size > 8).take(150) {
            lookups.push((f.address, f.address));
            // A return address, looked up one byte back.
            lookups.push((f.address + f.size / 2, f.address + f.size / 2 - 1));
        }
        // An address no function covers.
        lookups.push((u64::MAX - 16, u64::MAX - 16));
        let resolver = Resolver::new();
        let at_once = {
            let mut b = SymbolTableBuilder::default();
            let m = resolver.module_symbols(&mut b, 7, path, &build_id, &lookups);
            b.add_module(m);
            b.finish()
        };
        let named = at_once.modules[0]
            .addrs
            .iter()
            .filter(|a| !a.frames.is_empty())
            .count();
        assert!(named > 250, "only {named} of {} named", lookups.len());
        let mut parts = ModuleResolution::open(path, &build_id);
        let addrs: Vec<u64> = lookups.iter().map(|&(_, a)| a).collect();
        parts.resolve(&resolver, addrs.iter().rev().step_by(3).copied());
        parts.resolve(&resolver, addrs[..addrs.len() / 2].iter().copied());
        parts.resolve(&resolver, addrs.iter().step_by(2).copied());
        let in_parts = {
            let mut b = SymbolTableBuilder::default();
            let m = parts.symbols(&resolver, &mut b, 7, &lookups);
            b.add_module(m);
            b.finish()
        };
        assert_eq!(in_parts, at_once);
    }

    #[test]
    fn resolves_a_function_of_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        let main = elf.function_by_name("main").unwrap();
        let r = Resolver::new().resolve(&exe, &[main.address]).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].function_start, Some(main.address));
        assert_eq!(
            r[0].frames.last().unwrap().function.as_deref(),
            Some("main")
        );
    }

    #[test]
    fn missing_file_is_a_status_not_an_error() {
        let mut b = SymbolTableBuilder::default();
        let m =
            Resolver::new().module_symbols(&mut b, 7, "/nonexistent/libx.so", &[1, 2], &[(10, 9)]);
        assert_eq!(m.status, ModuleStatus::FileMissing);
        assert_eq!(m.addrs.len(), 1);
        assert!(m.addrs[0].frames.is_empty());
    }
}
