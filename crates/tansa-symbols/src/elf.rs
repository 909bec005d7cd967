//! What recorders and annotators need to know about an ELF file.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use object::{
    Object, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationTarget,
    SymbolKind,
};

use tansa_format::memory::OwnAllocator;

use crate::SymbolError;

/// A function symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// Raw (possibly mangled) name.
    pub name: String,
    /// Address in the file's address space.
    pub address: u64,
    /// Size in bytes (0 if the symbol table does not say).
    pub size: u64,
}

/// The C allocation functions the agent interposes.
const C_ALLOCATION_FUNCTIONS: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "memalign",
    "posix_memalign",
    "aligned_alloc",
    "valloc",
    "pvalloc",
];

/// Entry points of allocators that programs link in statically under names of their own:
/// jemalloc (prefixed `je_`, or `_rjem_` as Rust's `tikv-jemallocator` builds it), mimalloc,
/// tcmalloc, rpmalloc, TBB's scalable allocator, snmalloc.
const ALLOCATOR_ENTRY_POINTS: &[&str] = &[
    "je_malloc",
    "je_mallocx",
    "_rjem_malloc",
    "_rjem_mallocx",
    "mi_malloc",
    "tc_malloc",
    "rpmalloc",
    "scalable_malloc",
    "sn_malloc",
];

/// A `PT_LOAD` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// `p_vaddr`
    pub address: u64,
    /// `p_memsz`
    pub size: u64,
    /// `p_offset`
    pub file_offset: u64,
    /// `p_filesz`
    pub file_size: u64,
}

/// Largest MiniDebugInfo decompressed (a file's claims are not trusted).
pub const MAX_DEBUGDATA: usize = 64 << 20;

/// A writer that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            return Err(std::io::Error::other("larger than the bound"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The defined function symbols of `obj` (`.symtab` and `.dynsym`), sorted by address,
/// without duplicates.
fn function_symbols(obj: &object::File<'_>) -> Vec<FunctionSymbol> {
    let mut out: Vec<FunctionSymbol> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| {
            Some(FunctionSymbol {
                name: s.name().ok()?.to_string(),
                address: s.address(),
                size: s.size(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.address, &a.name).cmp(&(b.address, &b.name)));
    out.dedup_by(|a, b| a.address == b.address && a.name == b.name);
    out
}

/// Opens `path` for reading if it is a regular file. The open does not block: a FIFO put
/// where a module was (the profiled program may rename its files and make one) would
/// otherwise hang the recorder in `open` for good. A directory, device or socket is
/// refused too.
///
/// # Errors
///
/// The open's error, or `InvalidInput` for a file that is not a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Copies `bytes` into a new memory file sealed against any change, named `name` (shown
/// only in `/proc`). Its path for opening is `/proc/self/fd/N` while the `File` is open.
/// The side files ([`ElfFile::side_files`]) of the ELF file at `path` with debug link
/// `link`.
pub(crate) fn side_files_of(path: &Path, link: Option<PathBuf>) -> Vec<PathBuf> {
    let mut dwp = path.as_os_str().to_owned();
    dwp.push(".dwp");
    let mut candidates = vec![PathBuf::from(dwp)];
    if let Some(link) = link {
        let dir = std::fs::canonicalize(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        candidates.push(dir.join(&link));
        candidates.push(dir.join(".debug").join(&link));
    }
    candidates
}

pub(crate) fn sealed_copy(name: &std::ffi::CStr, bytes: &[u8]) -> Option<File> {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: memfd_create with a valid NUL-terminated name and flags; the descriptor it
    // returns is owned by the `File` made from it.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).ok()?;
    // SAFETY: fcntl on a descriptor we own. Sealed: nothing can change the copy now.
    let sealed = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL,
        )
    };
    (sealed == 0).then_some(file)
}

/// The path that opens a file descriptor of this process (while it stays open).
pub(crate) fn fd_path(file: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Which file a path named when it was opened: device, inode, size and modification time.
/// A file rebuilt in place of another (a new inode at the same path, or the same inode
/// rewritten) differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    /// Owner, group and permission bits (not part of what makes the file another).
    access: Access,
}

/// A file's owner, group and mode, as it was opened (see [`ElfFile::access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Owner's user id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Mode (type and permission bits).
    pub mode: u32,
}

impl Identity {
    fn of(m: &std::fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt;
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            access: Access {
                uid: m.uid(),
                gid: m.gid(),
                mode: m.mode(),
            },
        }
    }

    /// The same file: device, inode, size and time alike.
    fn same(&self, other: &Identity) -> bool {
        (self.dev, self.ino, self.size, self.mtime)
            == (other.dev, other.ino, other.size, other.mtime)
    }
}

/// A memory-mapped ELF file.
///
/// The mapping keeps the file's contents as they were when it was opened even when the
/// file is deleted or replaced later (a program rebuilt while it is profiled). Whatever
/// reads the file again by its path ([`ElfFile::source_path`]) gets a sealed copy of the
/// mapped contents instead once the path names another file.
#[derive(Debug)]
pub struct ElfFile {
    path: PathBuf,
    map: Mmap,
    identity: Identity,
    /// The copy made once the path named another file (None: it could not be made).
    copy: std::sync::OnceLock<Option<File>>,
    /// Whether its debugging information may be read from the files next to it
    /// ([`ElfFile::side_files`]) besides the file itself.
    side_files: std::sync::atomic::AtomicBool,
}

impl ElfFile {
    /// Maps `path` and checks that it parses as ELF.
    pub fn open(path: impl AsRef<Path>) -> Result<ElfFile, SymbolError> {
        let path = path.as_ref().to_path_buf();
        let file = open_regular(&path).map_err(|source| SymbolError::Io {
            path: path.display().to_string(),
            source,
        })?;
        // SAFETY: the mapping is read-only and private; a concurrent truncation of the file
        // by another process could fault, which is the accepted risk of mapping binaries
        // (every symbolizer does it). We never hand out references past `self`.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| SymbolError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let identity = Identity::of(&file.metadata().map_err(|source| SymbolError::Io {
            path: path.display().to_string(),
            source,
        })?);
        let elf = ElfFile {
            path,
            map,
            identity,
            copy: std::sync::OnceLock::new(),
            side_files: std::sync::atomic::AtomicBool::new(true),
        };
        elf.parse()?;
        Ok(elf)
    }

    /// Whether the file's path still names the file that was opened.
    pub fn is_current(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|m| Identity::of(&m).same(&self.identity))
    }

    /// The file's modification time when it was opened: when it was built.
    pub fn modified(&self) -> std::time::SystemTime {
        let (secs, nanos) = self.identity.mtime;
        let since =
            std::time::Duration::new(secs.unsigned_abs(), nanos.clamp(0, 999_999_999) as u32);
        if secs >= 0 {
            std::time::UNIX_EPOCH + since
        } else {
            std::time::UNIX_EPOCH - since
        }
    }

    /// The file's owner, group and mode when it was opened: whom it may be read for.
    pub fn access(&self) -> Access {
        self.identity.access
    }

    /// A path that opens this file's contents as they were mapped: its own path while that
    /// still names the same file, else a sealed copy of the contents (made once; `None`
    /// when it cannot be made). For readers that take a path, such as the symbolizer.
    pub fn source_path(&self) -> Option<std::borrow::Cow<'_, Path>> {
        if self.is_current() {
            return Some(std::borrow::Cow::Borrowed(&self.path));
        }
        self.copy
            .get_or_init(|| sealed_copy(c"tansa-replaced-file", &self.map))
            .as_ref()
            .map(|f| std::borrow::Cow::Owned(fd_path(f)))
    }

    fn parse(&self) -> Result<object::File<'_>, SymbolError> {
        object::File::parse(&*self.map).map_err(|e| SymbolError::NotElf {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files besides this one that the symbolizer opens to read its debugging
    /// information, whether they exist or not: its DWARF package `PATH.dwp`, and the target
    /// of its debug link in its directory and in that directory's `.debug` (or wherever an
    /// absolute link points). They lie next to the program's files, where whoever owns
    /// those may put anything. (Its debug link is also looked for under the debug
    /// directories, which are the system's.)
    pub fn side_files(&self) -> Vec<PathBuf> {
        side_files_of(&self.path, self.debug_link())
    }

    /// Reads its debugging information from this file alone from now on, never from
    /// [`ElfFile::side_files`] (for a reader that may not read them).
    pub fn withhold_side_files(&self) {
        self.side_files
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether its debugging information may be read from [`ElfFile::side_files`].
    pub fn side_files_allowed(&self) -> bool {
        self.side_files.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The file name its `.gnu_debuglink` section names, if it has one.
    pub fn debug_link(&self) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let (name, _crc) = self.parse().ok()?.gnu_debuglink().ok().flatten()?;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
    }

    /// The GNU build id, if the file has one.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        self.parse()
            .ok()?
            .build_id()
            .ok()
            .flatten()
            .map(<[u8]>::to_vec)
    }

    /// The loadable segments.
    pub fn segments(&self) -> Vec<Segment> {
        let Ok(obj) = self.parse() else {
            return Vec::new();
        };
        obj.segments()
            .map(|s| {
                let (file_offset, file_size) = s.file_range();
                Segment {
                    address: s.address(),
                    size: s.size(),
                    file_offset,
                    file_size,
                }
            })
            .collect()
    }

    /// Function symbols (from `.symtab`, or `.dynsym` when stripped), sorted by address.
    pub fn functions(&self) -> Vec<FunctionSymbol> {
        let Ok(obj) = self.parse() else {
            return Vec::new();
        };
        function_symbols(&obj)
    }

    /// The names this file imports: its undefined dynamic symbols, which a shared library
    /// it loads defines (`shfn` for a program linked with `-lsh` that calls it).
    pub fn imported_names(&self) -> Vec<String> {
        let Ok(obj) = self.parse() else {
            return Vec::new();
        };
        obj.dynamic_symbols()
            .filter(|s| s.is_undefined())
            .filter_map(|s| s.name().ok().filter(|n| !n.is_empty()).map(str::to_string))
            .collect()
    }

    /// Exported (dynamic-symbol) function names by address, for choosing the public alias
    /// of a function that also has internal names (glibc's `__GI___strdup` is `strdup`).
    pub fn exported_names(&self) -> std::collections::HashMap<u64, Vec<String>> {
        let mut out: std::collections::HashMap<u64, Vec<String>> = std::collections::HashMap::new();
        if let Ok(obj) = self.parse() {
            for s in obj.dynamic_symbols() {
                if s.kind() == SymbolKind::Text
                    && s.is_definition()
                    && s.address() != 0
                    && let Ok(name) = s.name()
                {
                    out.entry(s.address()).or_default().push(name.to_string());
                }
            }
        }
        out
    }

    /// The allocation functions this file defines itself, which a program whose executable
    /// it is calls instead of the ones the agent interposes (an executable comes before
    /// `LD_PRELOAD` in the dynamic linker's search order); `None` when it defines none.
    /// C allocation functions go to `exported` or `internal` by whether the file exports
    /// them; entry points of a statically linked allocator ([`ALLOCATOR_ENTRY_POINTS`]) to
    /// `allocators`.
    pub fn own_allocator(&self) -> Option<OwnAllocator> {
        let obj = self.parse().ok()?;
        let mut out = OwnAllocator {
            exe: self.path.display().to_string(),
            ..OwnAllocator::default()
        };
        let defined = |s: &object::Symbol<'_, '_>| {
            s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0
        };
        let exported: std::collections::BTreeSet<&str> = obj
            .dynamic_symbols()
            .filter(defined)
            .filter_map(|s| s.name().ok())
            .collect();
        let all: std::collections::BTreeSet<&str> = obj
            .symbols()
            .filter(defined)
            .filter_map(|s| s.name().ok())
            .chain(exported.iter().copied())
            .collect();
        for &name in C_ALLOCATION_FUNCTIONS {
            if exported.contains(name) {
                out.exported.push(name.to_string());
            } else if all.contains(name) {
                out.internal.push(name.to_string());
            }
        }
        out.allocators = ALLOCATOR_ENTRY_POINTS
            .iter()
            .filter(|n| all.contains(**n))
            .map(|n| n.to_string())
            .collect();
        // A Go program (linked dynamically when it uses cgo): its values live in the Go
        // runtime's heap.
        if obj.section_by_name(".go.buildinfo").is_some() {
            out.allocators
                .push(tansa_format::memory::GO_HEAP.to_string());
        }
        let found =
            !(out.exported.is_empty() && out.internal.is_empty() && out.allocators.is_empty());
        found.then_some(out)
    }

    /// The language runtime with a heap of its own this file is, or is the library of, by
    /// what it exports: CPython's object allocator API, `PyObject_Malloc` (`python3.11`,
    /// `libpython3.11.so.1.0`: [`tansa_format::memory::PYMALLOC`]); V8's `v8::Isolate`
    /// (`node`, `libnode.so`: [`tansa_format::memory::V8_HEAP`]); a Java virtual machine's
    /// `JNI_CreateJavaVM` (`libjvm.so`: [`tansa_format::memory::JVM_HEAP`]). A Go
    /// executable is found by [`ElfFile::own_allocator`].
    pub fn runtime_heap(&self) -> Option<&'static str> {
        use tansa_format::memory::{JVM_HEAP, PYMALLOC, V8_HEAP};
        let obj = self.parse().ok()?;
        obj.dynamic_symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .find_map(|s| match s.name().ok()? {
                "PyObject_Malloc" => Some(PYMALLOC),
                "JNI_CreateJavaVM" => Some(JVM_HEAP),
                n if n.starts_with("_ZN2v87Isolate") => Some(V8_HEAP),
                _ => None,
            })
    }

    /// The function named `name` (raw or demangled spelling), if defined in this file.
    pub fn function_by_name(&self, name: &str) -> Option<FunctionSymbol> {
        self.functions()
            .into_iter()
            .find(|f| f.name == name || blazesym_demangle(&f.name).as_deref() == Some(name))
    }

    /// The function containing `address`, if any.
    pub fn function_containing(&self, address: u64) -> Option<FunctionSymbol> {
        let funcs = self.functions();
        let i = funcs.partition_point(|f| f.address <= address);
        let f = funcs.get(i.checked_sub(1)?)?;
        (f.size == 0 || address < f.address + f.size).then(|| f.clone())
    }

    /// Reads `len` bytes of file-backed memory at `address` (in the file's address space),
    /// or `None` if the range is not entirely inside one segment's file data.
    pub fn read_at(&self, address: u64, len: u64) -> Option<&[u8]> {
        let obj = self.parse().ok()?;
        // Sections first: they are exact. Then segments.
        for s in obj.sections() {
            let start = s.address();
            if address >= start && address + len <= start + s.size() {
                let (off, size) = s.file_range()?;
                let rel = address - start;
                if rel + len <= size {
                    return self
                        .map
                        .get((off + rel) as usize..(off + rel + len) as usize);
                }
            }
        }
        for seg in self.segments() {
            if address >= seg.address && address + len <= seg.address + seg.file_size {
                let off = seg.file_offset + (address - seg.address);
                return self.map.get(off as usize..(off + len) as usize);
            }
        }
        None
    }

    /// The whole file's bytes.
    pub fn data(&self) -> &[u8] {
        &self.map
    }

    /// The section named `name` (e.g. `.eh_frame`): its address range and the range of
    /// its bytes in [`ElfFile::data`] (empty for sections without file data).
    pub fn section(&self, name: &str) -> Option<(std::ops::Range<u64>, std::ops::Range<usize>)> {
        let obj = self.parse().ok()?;
        let s = obj.section_by_name(name)?;
        let (off, size) = s.file_range().unwrap_or((0, 0));
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        (end <= self.map.len()).then(|| (s.address()..s.address() + s.size(), start..end))
    }

    /// The entries of the procedure linkage table (`.plt`, `.plt.sec`, `.plt.got`), each
    /// with the name of the function it jumps to: the stubs through which code calls
    /// another module's functions. Symbol tables do not name them (a sample there would
    /// go to the symbol before, `_init`). Each entry jumps through a GOT slot
    /// (`jmp *slot(%rip)`), and the slot's dynamic relocation names the function; entries
    /// whose slot has none (the table's first, lazy-binding entry) are left out.
    pub fn plt_entries(&self) -> Vec<(std::ops::Range<u64>, String)> {
        let Ok(obj) = self.parse() else {
            return Vec::new();
        };
        let (Some(relocs), Some(dynsym)) = (obj.dynamic_relocations(), obj.dynamic_symbol_table())
        else {
            return Vec::new();
        };
        let mut slots: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
        // Slots of functions chosen at load time (`IRELATIVE`: a local IFUNC, as the C
        // library calls its own `strlen`) name no symbol; their addend is the IFUNC
        // symbol's address (its resolver), which the symbol tables name.
        let mut ifuncs: Option<std::collections::HashMap<u64, &str>> = None;
        for (slot, r) in relocs {
            if let RelocationTarget::Symbol(i) = r.target()
                && let Ok(sym) = dynsym.symbol_by_index(i)
                && let Ok(name) = sym.name()
                && !name.is_empty()
            {
                slots.insert(slot, name.to_string());
            } else if r.flags()
                == (object::RelocationFlags::Elf {
                    r_type: object::elf::R_X86_64_IRELATIVE,
                })
            {
                let names = ifuncs.get_or_insert_with(|| public_names_by_address(&obj));
                if let Ok(resolver) = u64::try_from(r.addend())
                    && let Some(name) = names.get(&resolver)
                {
                    slots.insert(slot, name.to_string());
                }
            }
        }
        let mut out = Vec::new();
        for (section, align) in [(".plt", 16u64), (".plt.sec", 16), (".plt.got", 8)] {
            let Some((range, bytes)) = self.section(section) else {
                continue;
            };
            let code = &self.map[bytes];
            let mut found: Vec<(u64, String)> = Vec::new();
            for at in 0..code.len().saturating_sub(5) {
                // `ff 25 disp32`: jmp *disp32(%rip), the next instruction's address plus
                // disp32 being the slot.
                if code[at] != 0xff || code[at + 1] != 0x25 {
                    continue;
                }
                let disp =
                    i32::from_le_bytes([code[at + 2], code[at + 3], code[at + 4], code[at + 5]]);
                let next = range.start.wrapping_add(at as u64 + 6);
                let slot = next.wrapping_add(disp as i64 as u64);
                if let Some(name) = slots.get(&slot) {
                    let start = range.start.wrapping_add(at as u64 - at as u64 % align);
                    if found.last().is_none_or(|(s, _)| *s != start) {
                        found.push((start, name.clone()));
                    }
                }
            }
            for (i, (start, name)) in found.iter().enumerate() {
                let end = found
                    .get(i + 1)
                    .map_or(range.end, |n| n.0)
                    .min(start.saturating_add(16));
                out.push((*start..end, format!("{name}@plt")));
            }
        }
        out.sort_by_key(|e| e.0.start);
        out
    }

    /// The file address of the byte at file offset `offset`, where `offset` is the file
    /// offset of a mapping the loader made (page-aligned, so it may lie before the start
    /// of the segment it maps): from the last `PT_LOAD` segment starting in or before that
    /// page. Segments whose address and offset differ by different amounts (as `lld`
    /// lays them out) are told apart this way, where containment alone would pick the
    /// previous segment.
    pub fn address_of_offset(&self, offset: u64) -> Option<u64> {
        const PAGE: u64 = 0x1000;
        self.segments()
            .into_iter()
            .filter(|s| {
                s.file_offset & !(PAGE - 1) <= offset && offset < s.file_offset + s.file_size.max(1)
            })
            .max_by_key(|s| s.file_offset)
            .map(|s| (offset + s.address).wrapping_sub(s.file_offset))
    }

    /// The extents of the functions `.eh_frame` describes (one FDE each, start..end, in the
    /// file's address space), sorted by start. Every function with unwind information has
    /// one, named or not: in a library stripped to its exported symbols, these still tell
    /// its internal functions apart. The count is bounded by what the section can hold
    /// (an FDE takes at least 16 bytes); a malformed entry ends the list.
    pub fn unwind_extents(&self) -> Vec<std::ops::Range<u64>> {
        use gimli::UnwindSection;
        let Some((addresses, bytes)) = self.section(".eh_frame") else {
            return Vec::new();
        };
        let data = &self.map[bytes];
        let eh_frame = gimli::EhFrame::new(data, gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(addresses.start);
        if let Some((text, _)) = self.section(".text") {
            bases = bases.set_text(text.start);
        }
        if let Some((got, _)) = self.section(".got") {
            bases = bases.set_got(got.start);
        }
        let mut out = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        let most = data.len() / 16 + 1;
        while out.len() < most {
            match entries.next() {
                Ok(Some(gimli::CieOrFde::Fde(partial))) => {
                    let Ok(fde) = partial
                        .parse(|section, bases, offset| section.cie_from_offset(bases, offset))
                    else {
                        break;
                    };
                    let start = fde.initial_address();
                    if fde.len() > 0
                        && let Some(end) = start.checked_add(fde.len())
                    {
                        out.push(start..end);
                    }
                }
                Ok(Some(gimli::CieOrFde::Cie(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        out.sort_by_key(|r| (r.start, r.end));
        out
    }

    /// The function symbols of the file's MiniDebugInfo (the xz-compressed ELF file in its
    /// `.gnu_debugdata` section, which some distributions add to stripped binaries so that
    /// their internal functions keep names), sorted by address; empty without one. The
    /// decompressed size is bounded ([`MAX_DEBUGDATA`]).
    pub fn mini_debuginfo_functions(&self) -> Vec<FunctionSymbol> {
        let Some((_, bytes)) = self.section(".gnu_debugdata") else {
            return Vec::new();
        };
        let mut out = Bounded {
            bytes: Vec::new(),
            limit: MAX_DEBUGDATA,
        };
        let mut input = &self.map[bytes];
        if lzma_rs::xz_decompress(&mut input, &mut out).is_err() {
            return Vec::new();
        }
        match object::File::parse(&*out.bytes) {
            Ok(obj) => function_symbols(&obj),
            Err(_) => Vec::new(),
        }
    }

    /// The bytes of the executable section containing `address`, with the section's start.
    pub fn code_section_containing(&self, address: u64) -> Option<(u64, &[u8])> {
        let obj = self.parse().ok()?;
        let s = obj.sections().find(|s| {
            s.kind() == object::SectionKind::Text
                && address >= s.address()
                && address < s.address() + s.size()
        })?;
        let (off, size) = s.file_range()?;
        Some((
            s.address(),
            self.map.get(off as usize..(off + size) as usize)?,
        ))
    }
}

fn blazesym_demangle(name: &str) -> Option<String> {
    crate::resolve::demangle(name)
}

/// The name of each address the symbol tables name, in its public spelling where several
/// do: fewest leading underscores, then the shortest (`strchrnul` over `__strchrnul`).
/// IFUNC symbols count, though `object` does not call them definitions.
fn public_names_by_address<'a>(obj: &object::File<'a>) -> std::collections::HashMap<u64, &'a str> {
    let key = |n: &str| (n.len() - n.trim_start_matches('_').len(), n.len());
    let mut by_address: std::collections::HashMap<u64, &str> = std::collections::HashMap::new();
    for sym in obj.dynamic_symbols().chain(obj.symbols()) {
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() || sym.address() == 0 {
            continue;
        }
        by_address
            .entry(sym.address())
            .and_modify(|n| {
                if key(name) < key(n) {
                    *n = name;
                }
            })
            .or_insert(name);
    }
    by_address
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_test_binary_itself() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        assert!(!elf.segments().is_empty());
        assert!(!elf.functions().is_empty());
        let main = elf
            .function_by_name("main")
            .expect("test binaries define main");
        assert!(elf.read_at(main.address, 4).is_some());
        assert_eq!(
            elf.function_containing(main.address).map(|f| f.name),
            Some("main".to_string())
        );
    }

    #[test]
    fn mappings_at_page_aligned_offsets_find_their_segment() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        let segs = elf.segments();
        for s in &segs {
            let page = s.file_offset & !0xfff;
            if s.file_size == 0
                || segs
                    .iter()
                    .any(|o| o.file_offset > s.file_offset && o.file_offset & !0xfff == page)
            {
                continue;
            }
            assert_eq!(
                elf.address_of_offset(page),
                Some(s.address - (s.file_offset - page)),
                "segment {s:?}"
            );
        }
    }

    /// A library that exports `PyObject_Malloc` is a CPython interpreter's (pyenv's
    /// `libpython3.11.so.1.0`), one that exports `JNI_CreateJavaVM` a JVM's, one that
    /// exports `v8::Isolate`'s members V8's; one that defines such a function without
    /// exporting it, or that only calls it (an extension module), is none.
    #[test]
    fn a_file_that_exports_a_runtimes_api_has_its_heap() {
        use tansa_format::memory::{JVM_HEAP, PYMALLOC, V8_HEAP};
        let cases = [
            (
                "libpython9.9.so",
                "void *PyObject_Malloc(unsigned long n) { return 0; }",
                Some(PYMALLOC),
            ),
            (
                "libjvm.so",
                "int JNI_CreateJavaVM(void **vm, void **env, void *args) { return 0; }",
                Some(JVM_HEAP),
            ),
            (
                "libnode.so",
                "int _ZN2v87Isolate10GetCurrentEv(void) { return 0; }",
                Some(V8_HEAP),
            ),
            (
                "libhidden.so",
                "__attribute__((visibility(\"hidden\"))) void *PyObject_Malloc(unsigned long n) \
                 { return 0; }\nvoid *f(void) { return PyObject_Malloc(1); }",
                None,
            ),
            (
                "ext.so",
                "void *PyObject_Malloc(unsigned long);\nvoid *f(void) { return PyObject_Malloc(1); }",
                None,
            ),
        ];
        for (name, src, heap) in cases {
            let (_dir, lib) = crate::extent::tests::build(src, &[]);
            assert_eq!(ElfFile::open(&lib).unwrap().runtime_heap(), heap, "{name}");
        }
    }

    #[test]
    fn not_elf_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, b"not an elf file at all").unwrap();
        assert!(matches!(ElfFile::open(&p), Err(SymbolError::NotElf { .. })));
        assert!(matches!(
            ElfFile::open(dir.path().join("missing")),
            Err(SymbolError::Io { .. })
        ));
    }
}
