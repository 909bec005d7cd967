//! The module map: which executable or shared object covers which addresses, with the unwind
//! tables framehop needs, kept current across `dlopen` and `dlclose`.
//!
//! The map is built with `dl_iterate_phdr` at initialization and rebuilt (a) after the
//! program calls `dlclose` (we interpose it) and (b) when a new stack contains an address no
//! module covers and the loader's add/remove counters moved (a `dlopen` happened; we do not
//! interpose `dlopen`, because glibc resolves a library's search path from its caller's
//! address and interposing would break `$ORIGIN`/RUNPATH lookups of the program).
//!
//! Unwind tables of modules present at initialization are used in place: glibc never unloads
//! a program's startup dependencies. Modules that appear later are `dlopen`ed and may be
//! `dlclose`d at any moment, so their `.eh_frame_hdr` and `.eh_frame` are copied into agent
//! memory while the loader's lock is held (inside the `dl_iterate_phdr` callback); unwinding
//! never reads the memory of a module that could disappear.
//!
//! Every new module is announced on the meta ring (`ModuleLoad`) before it becomes visible
//! to unwinders, so any stack that mentions it is written after its announcement.

use core::ffi::c_void;
use core::ops::Range;

use framehop::x86_64::UnwinderX86_64;
use framehop::{MustNotAllocateDuringUnwind, Unwinder};
use tansa_wire::event::{
    CountingSink, LoadSegment, MODULE_AGENT, MODULE_MAIN, MODULE_VDSO, encode_module_load,
    encode_module_unload,
};

use crate::session::SESSION;
use crate::spin::RwSpin;
use crate::{clock, sys};

/// Unwind section bytes: borrowed from a module that never goes away, or owned by the agent.
#[derive(Debug)]
pub struct UnwindData {
    ptr: *const u8,
    len: usize,
    owned: bool,
}

// SAFETY: the bytes are immutable (read-only module memory, or our private copy).
unsafe impl Send for UnwindData {}
// SAFETY: as above.
unsafe impl Sync for UnwindData {}

impl core::ops::Deref for UnwindData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is readable for the life of `self` (see the type doc).
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for UnwindData {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: owned data was created from a `Box<[u8]>` of this length.
            drop(unsafe {
                Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                    self.ptr as *mut u8,
                    self.len,
                ))
            });
        }
    }
}

impl UnwindData {
    fn borrowed(addr: u64, len: u64) -> Self {
        UnwindData {
            ptr: addr as *const u8,
            len: len as usize,
            owned: false,
        }
    }

    /// Copies `len` bytes at `addr`.
    ///
    /// # Safety
    ///
    /// The range must be readable now.
    unsafe fn copied(addr: u64, len: u64) -> Self {
        // SAFETY: guaranteed by the caller.
        let src = unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) };
        let b: Box<[u8]> = src.into();
        let len = b.len();
        UnwindData {
            ptr: Box::into_raw(b) as *const u8,
            len,
            owned: true,
        }
    }
}

/// The unwinder type the agent uses.
pub type AgentUnwinder = UnwinderX86_64<UnwindData, MustNotAllocateDuringUnwind>;

/// One module in the map.
#[derive(Debug, Clone)]
pub struct ModuleEntry {
    /// Agent-assigned id (never 0).
    pub id: u32,
    /// First mapped address.
    pub start: u64,
    /// End of the mapped range.
    pub end: u64,
    /// Load bias.
    pub bias: u64,
    name: Vec<u8>,
    loads: Vec<LoadSegment>,
    build_id: Vec<u8>,
    flags: u32,
}

/// The module map.
pub struct ModuleMap {
    entries: Vec<ModuleEntry>,
    /// framehop's unwinder over the modules (created by the first scan).
    pub unwinder: Option<AgentUnwinder>,
    next_id: u32,
    adds: u64,
    subs: u64,
    scanned: bool,
    /// Incremented whenever a module goes away; part of every stack hash, so a stack seen
    /// before an unload is never confused with the same addresses after it.
    pub epoch: u64,
    /// Incremented whenever the map changes at all; per-thread stack caches are only valid
    /// for one generation.
    pub generation: u64,
}

/// The module map's generation, readable without its lock (the stack caches' fast path).
static GENERATION: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The current module-map generation.
#[inline]
pub fn generation() -> u64 {
    GENERATION.load(core::sync::atomic::Ordering::Acquire)
}

/// The process-wide module map.
pub static MODULES: RwSpin<ModuleMap> = RwSpin::new(ModuleMap {
    entries: Vec::new(),
    unwinder: None,
    next_id: 1,
    adds: 0,
    subs: 0,
    scanned: false,
    epoch: 0,
    generation: 0,
});

impl core::fmt::Debug for ModuleMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ModuleMap")
            .field("entries", &self.entries)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl ModuleMap {
    /// The module covering `addr`.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<&ModuleEntry> {
        let i = self.entries.partition_point(|m| m.start <= addr);
        let m = self.entries.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// Whether the loader's counters moved since the last scan.
    pub fn loader_changed(&self) -> bool {
        let (adds, subs) = loader_counters();
        adds != self.adds || subs != self.subs
    }

    /// Announces every module again (to the new session of a forked child; module ids and
    /// unwind data carry over unchanged).
    pub fn announce_all(&self) {
        for e in &self.entries {
            announce(e.id, e.bias, e.flags, &e.build_id, &e.name, &e.loads);
        }
    }
}

/// What a scan learns about one module (all memory reads happen during the scan).
struct Scanned {
    name: Vec<u8>,
    bias: u64,
    start: u64,
    end: u64,
    loads: Vec<LoadSegment>,
    build_id: Vec<u8>,
    flags: u32,
    eh_hdr: Option<(u64, u64)>,
    eh_frame: Option<(u64, u64)>,
    text: Option<Range<u64>>,
    data: Option<(UnwindData, UnwindData)>,
}

struct ScanCtx {
    out: Vec<Scanned>,
    adds: u64,
    subs: u64,
    copy: bool,
    known: *const Vec<ModuleEntry>,
    first: bool,
}

fn loader_counters() -> (u64, u64) {
    unsafe extern "C" fn first_only(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> core::ffi::c_int {
        // SAFETY: `data` is the `(u64, u64)` passed below; `info` is valid in the callback.
        unsafe {
            let out = &mut *(data as *mut (u64, u64));
            *out = ((*info).dlpi_adds, (*info).dlpi_subs);
        }
        1
    }
    let mut counters = (0u64, 0u64);
    // SAFETY: the callback writes only into `counters`.
    unsafe { sys::iterate_phdr(first_only, &mut counters as *mut _ as *mut c_void) };
    counters
}

unsafe extern "C" fn scan_callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> core::ffi::c_int {
    // SAFETY: `data` is the ScanCtx passed by `scan`; `info` and the program headers it
    // points to are valid, and the module's memory mapped, for the duration of the callback.
    unsafe {
        let ctx = &mut *(data as *mut ScanCtx);
        let info = &*info;
        ctx.adds = info.dlpi_adds;
        ctx.subs = info.dlpi_subs;
        let first = core::mem::replace(&mut ctx.first, false);
        let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let bias = info.dlpi_addr;
        let raw_name = sys::c_bytes(info.dlpi_name);
        let mut flags = 0;
        let name: Vec<u8> = if first && raw_name.is_empty() {
            flags |= MODULE_MAIN;
            // The session read the path when it started: one `readlink` fewer per program.
            match crate::session::SESSION.exe() {
                Some(path) => path.to_vec(),
                None => {
                    let mut buf = [0u8; 1024];
                    let n = sys::readlink(c"/proc/self/exe", &mut buf);
                    buf[..n].to_vec()
                }
            }
        } else {
            if raw_name.starts_with(b"linux-vdso") || raw_name.starts_with(b"linux-gate") {
                flags |= MODULE_VDSO;
            }
            raw_name.to_vec()
        };
        let mut loads = Vec::new();
        let mut start = u64::MAX;
        let mut end = 0;
        let mut eh_hdr = None;
        let mut text = None;
        let mut build_id = Vec::new();
        for ph in phdrs {
            match ph.p_type {
                libc::PT_LOAD => {
                    loads.push(LoadSegment {
                        vaddr: ph.p_vaddr,
                        memsz: ph.p_memsz,
                        file_offset: ph.p_offset,
                        flags: ph.p_flags,
                    });
                    start = start.min(bias + ph.p_vaddr);
                    end = end.max(bias + ph.p_vaddr + ph.p_memsz);
                    if ph.p_flags & libc::PF_X != 0 && text.is_none() {
                        text = Some(ph.p_vaddr..ph.p_vaddr + ph.p_memsz);
                    }
                }
                libc::PT_GNU_EH_FRAME => eh_hdr = Some((ph.p_vaddr, ph.p_memsz)),
                libc::PT_NOTE if build_id.is_empty() => {
                    build_id = find_build_id(bias + ph.p_vaddr, ph.p_memsz);
                }
                _ => {}
            }
        }
        if loads.is_empty() {
            return 0;
        }
        let here = scan_callback as *const () as u64;
        if here >= start && here < end {
            flags |= MODULE_AGENT;
        }
        let known = &*ctx.known;
        let already = known
            .iter()
            .any(|e| e.start == start && e.bias == bias && e.name == name);
        let eh_frame = eh_hdr.and_then(|(v, len)| eh_frame_range(bias, v, len, &loads));
        let data = if already {
            None
        } else {
            match (eh_hdr, eh_frame) {
                (Some((hv, hl)), Some((ev, el))) if ctx.copy => Some((
                    UnwindData::copied(bias + hv, hl),
                    UnwindData::copied(bias + ev, el),
                )),
                (Some((hv, hl)), Some((ev, el))) => Some((
                    UnwindData::borrowed(bias + hv, hl),
                    UnwindData::borrowed(bias + ev, el),
                )),
                _ => None,
            }
        };
        ctx.out.push(Scanned {
            name,
            bias,
            start,
            end,
            loads,
            build_id,
            flags,
            eh_hdr,
            eh_frame,
            text,
            data,
        });
        0
    }
}

/// Reads the GNU build id from a `PT_NOTE` segment in memory.
///
/// # Safety
///
/// `addr..addr+len` must be readable.
unsafe fn find_build_id(addr: u64, len: u64) -> Vec<u8> {
    let mut off = 0u64;
    while off + 12 <= len {
        let p = (addr + off) as *const u32;
        // SAFETY: the note header lies inside the segment.
        let (namesz, descsz, ty) = unsafe { (*p, *p.add(1), *p.add(2)) };
        let name_len = u64::from(namesz).next_multiple_of(4);
        let desc_len = u64::from(descsz).next_multiple_of(4);
        let name_at = addr + off + 12;
        let desc_at = name_at + name_len;
        if off + 12 + name_len + desc_len > len {
            break;
        }
        if ty == 3 && namesz == 4 {
            // SAFETY: name and descriptor lie inside the segment.
            let name = unsafe { core::slice::from_raw_parts(name_at as *const u8, 4) };
            if name == b"GNU\0" {
                // SAFETY: as above.
                return unsafe {
                    core::slice::from_raw_parts(desc_at as *const u8, descsz as usize)
                }
                .to_vec();
            }
        }
        off += 12 + name_len + desc_len;
    }
    Vec::new()
}

/// Locates `.eh_frame` from `.eh_frame_hdr` and measures it by walking its entries up to the
/// zero terminator (bounded by the end of its segment). Returns `(svma, len)`.
///
/// # Safety
///
/// The header and the segment containing `.eh_frame` must be readable.
unsafe fn eh_frame_range(
    bias: u64,
    hdr: u64,
    hdr_len: u64,
    loads: &[LoadSegment],
) -> Option<(u64, u64)> {
    if hdr_len < 8 {
        return None;
    }
    let h = (bias + hdr) as *const u8;
    // SAFETY: at least 8 header bytes are readable.
    let (version, enc) = unsafe { (*h, *h.add(1)) };
    if version != 1 {
        return None;
    }
    let field = hdr + 4;
    let fp = (bias + field) as *const u8;
    // SAFETY: the encoded pointer follows the 4-byte header inside `.eh_frame_hdr`.
    let value: u64 = unsafe {
        match enc & 0x0f {
            0x00 | 0x04 | 0x0c => (fp as *const u64).read_unaligned(),
            0x03 => u64::from((fp as *const u32).read_unaligned()),
            0x0b => (fp as *const i32).read_unaligned() as i64 as u64,
            _ => return None,
        }
    };
    let eh = match enc & 0x70 {
        0x00 => value.wrapping_sub(bias),
        0x10 => field.wrapping_add(value),
        0x30 => hdr.wrapping_add(value),
        _ => return None,
    };
    let seg = loads
        .iter()
        .find(|s| eh >= s.vaddr && eh < s.vaddr + s.memsz)?;
    let seg_end = seg.vaddr + seg.memsz;
    let mut off = eh;
    while off + 4 <= seg_end {
        // SAFETY: inside the segment.
        let len = unsafe { ((bias + off) as *const u32).read_unaligned() };
        if len == 0 {
            off += 4;
            break;
        }
        let step = if len == u32::MAX {
            if off + 12 > seg_end {
                break;
            }
            // SAFETY: inside the segment.
            12 + unsafe { ((bias + off + 4) as *const u64).read_unaligned() }
        } else {
            4 + u64::from(len)
        };
        off = off.saturating_add(step);
    }
    Some((eh, off.min(seg_end) - eh))
}

fn scan(known: &Vec<ModuleEntry>, copy: bool) -> ScanCtx {
    let mut ctx = ScanCtx {
        out: Vec::new(),
        adds: 0,
        subs: 0,
        copy,
        known,
        first: true,
    };
    // SAFETY: the callback expects a ScanCtx.
    unsafe { sys::iterate_phdr(scan_callback, &mut ctx as *mut ScanCtx as *mut c_void) };
    ctx
}

struct SectionInfo {
    hdr: Option<(Range<u64>, Option<UnwindData>)>,
    eh: Option<(Range<u64>, Option<UnwindData>)>,
    text: Option<Range<u64>>,
}

impl framehop::ModuleSectionInfo<UnwindData> for SectionInfo {
    fn base_svma(&self) -> u64 {
        0
    }

    fn section_svma_range(&mut self, name: &[u8]) -> Option<Range<u64>> {
        match name {
            b".eh_frame_hdr" => self.hdr.as_ref().map(|h| h.0.clone()),
            b".eh_frame" => self.eh.as_ref().map(|h| h.0.clone()),
            b".text" => self.text.clone(),
            _ => None,
        }
    }

    fn section_data(&mut self, name: &[u8]) -> Option<UnwindData> {
        // framehop asks for the data first and the ranges afterwards: keep the ranges.
        match name {
            b".eh_frame_hdr" => self.hdr.as_mut().and_then(|h| h.1.take()),
            b".eh_frame" => self.eh.as_mut().and_then(|h| h.1.take()),
            _ => None,
        }
    }
}

fn announce(id: u32, bias: u64, flags: u32, build_id: &[u8], name: &[u8], loads: &[LoadSegment]) {
    let ts = clock::now();
    let write = |sink: &mut dyn tansa_wire::event::ByteSink| {
        encode_module_load(
            sink,
            id,
            ts,
            bias,
            flags,
            build_id,
            name,
            loads.iter().copied(),
        );
    };
    let mut count = CountingSink::default();
    write(&mut count);
    SESSION.write_meta(count.0, |sink| write(sink));
}

fn announce_unload(id: u32) {
    let ts = clock::now();
    let mut count = CountingSink::default();
    encode_module_unload(&mut count, id, ts);
    SESSION.write_meta(count.0, |sink| encode_module_unload(sink, id, ts));
}

/// Brings the map up to date with the loader. Takes the write lock.
pub fn rescan() {
    let mut map = MODULES.write();
    let map = &mut *map;
    let unwinder = map.unwinder.get_or_insert_with(AgentUnwinder::new);
    let copy = map.scanned;
    let result = scan(&map.entries, copy);
    map.adds = result.adds;
    map.subs = result.subs;
    // Removed modules.
    let mut removed = false;
    let mut i = 0;
    while i < map.entries.len() {
        let e = &map.entries[i];
        let present = result
            .out
            .iter()
            .any(|s| s.start == e.start && s.bias == e.bias && s.name == e.name);
        if present {
            i += 1;
        } else {
            let e = map.entries.remove(i);
            announce_unload(e.id);
            unwinder.remove_module(e.start);
            removed = true;
        }
    }
    if removed {
        map.epoch += 1;
    }
    // New modules: announce, then make them visible.
    for mut s in result.out {
        if s.data.is_none()
            && map
                .entries
                .iter()
                .any(|e| e.start == s.start && e.bias == s.bias && e.name == s.name)
        {
            continue;
        }
        let id = map.next_id;
        map.next_id += 1;
        announce(id, s.bias, s.flags, &s.build_id, &s.name, &s.loads);
        let (hdr, eh) = match s.data.take() {
            Some((h, e)) => (
                s.eh_hdr.map(|(v, l)| (v..v + l, Some(h))),
                s.eh_frame.map(|(v, l)| (v..v + l, Some(e))),
            ),
            None => (None, None),
        };
        let info = SectionInfo {
            hdr,
            eh,
            text: s.text.clone(),
        };
        let name = String::from_utf8_lossy(&s.name).into_owned();
        unwinder.add_module(framehop::Module::new(name, s.start..s.end, s.bias, info));
        let entry = ModuleEntry {
            id,
            start: s.start,
            end: s.end,
            bias: s.bias,
            name: s.name,
            loads: s.loads,
            build_id: s.build_id,
            flags: s.flags,
        };
        let at = map.entries.partition_point(|m| m.start < entry.start);
        map.entries.insert(at, entry);
    }
    map.scanned = true;
    map.generation += 1;
    GENERATION.store(map.generation, core::sync::atomic::Ordering::Release);
}
