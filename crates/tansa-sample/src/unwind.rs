//! Unwinding user stacks from a sample's registers and stack copy, with framehop over the
//! DWARF CFI (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`) of each mapped file, so code
//! built without frame pointers still gives whole call chains. Where a module has no CFI
//! for an address, framehop falls back to the frame pointer.

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use rustc_hash::FxHashMap;
use tansa_symbols::ElfFile;

/// Deepest user stack unwound.
pub const MAX_FRAMES: usize = 256;

/// Bytes of a section of a mapped ELF file.
#[derive(Debug, Clone)]
pub struct SectionBytes {
    elf: Arc<ElfFile>,
    range: Range<usize>,
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.elf.data().get(self.range.clone()).unwrap_or(&[])
    }
}

/// The registers a DWARF unwinder starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

/// How an unwind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwound {
    /// The outermost frame was reached.
    Complete,
    /// The unwinder stopped early (no unwind information, a corrupt frame).
    Truncated,
    /// The unwinder stopped at the end of the stack copy: a caller's frame lies beyond it.
    PastCopy,
}

/// The unwinder of one address space, and the ranges of its modules (framehop does not say
/// whether an address is in one).
#[derive(Clone, Default)]
struct Space {
    unwinder: UnwinderX86_64<SectionBytes>,
    code: Vec<Range<u64>>,
}

impl Space {
    fn in_module(&self, addr: u64) -> bool {
        self.code.iter().any(|r| r.contains(&addr))
    }
}

/// One unwinder per address space (process image), sharing a rule cache.
pub struct Unwinders {
    spaces: FxHashMap<u32, Space>,
    cache: CacheX86_64,
    files: HashMap<String, Option<Arc<ElfFile>>>,
}

impl std::fmt::Debug for Unwinders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinders")
            .field("spaces", &self.spaces.len())
            .finish_non_exhaustive()
    }
}

impl Default for Unwinders {
    fn default() -> Self {
        Unwinders {
            spaces: FxHashMap::default(),
            cache: CacheX86_64::new(),
            files: HashMap::new(),
        }
    }
}

fn section(elf: &Arc<ElfFile>, name: &str) -> (Option<Range<u64>>, Option<SectionBytes>) {
    match elf.section(name) {
        Some((addr, range)) => (
            Some(addr),
            (!range.is_empty()).then(|| SectionBytes {
                elf: elf.clone(),
                range,
            }),
        ),
        None => (None, None),
    }
}

impl Unwinders {
    /// Adds the executable mapping `start..end` of `path`, loaded with `bias`, to address
    /// space `space`: of `elf`, the file it maps, when the caller has it open, else of the
    /// file at `path` (opened once). Files that cannot be read are skipped (their frames
    /// are unwound with frame pointers).
    pub fn add_module(
        &mut self,
        space: u32,
        path: &str,
        elf: Option<Arc<ElfFile>>,
        (start, end, bias): (u64, u64, u64),
    ) {
        let elf = elf.or_else(|| {
            self.files
                .entry(path.to_string())
                .or_insert_with(|| ElfFile::open(path).ok().map(Arc::new))
                .clone()
        });
        let Some(elf) = elf else { return };
        let (text_svma, text) = section(&elf, ".text");
        let (eh_frame_svma, eh_frame) = section(&elf, ".eh_frame");
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(&elf, ".eh_frame_hdr");
        let (got_svma, _) = section(&elf, ".got");
        let (_, debug_frame) = section(&elf, ".debug_frame");
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            text,
            got_svma,
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            debug_frame,
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        let s = self.spaces.entry(space).or_default();
        s.unwinder.remove_module(start);
        s.unwinder
            .add_module(Module::new(path.to_string(), start..end, bias, info));
        s.code.retain(|r| r.start != start);
        s.code.push(start..end);
    }

    /// Gives address space `child` the modules of `parent` (after `fork`).
    pub fn fork(&mut self, parent: u32, child: u32) {
        if let Some(u) = self.spaces.get(&parent).cloned() {
            self.spaces.insert(child, u);
        }
    }

    /// Forgets an address space.
    pub fn remove(&mut self, space: u32) {
        self.spaces.remove(&space);
    }

    /// Unwinds the user stack of a sample of address space `space` into `out` (cleared
    /// first): the interrupted address, then return addresses. `stack` is the copy of the
    /// stack from `regs.sp` up.
    pub fn unwind(
        &mut self,
        space: u32,
        regs: UserRegs,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> Unwound {
        out.clear();
        // Whether a read fell past the end of the copy (a deeper stack than it holds).
        let past_copy = std::cell::Cell::new(false);
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(regs.sp).ok_or(())? as usize;
            let end = off.checked_add(8).ok_or(())?;
            let Some(bytes) = stack.get(off..end) else {
                past_copy.set(true);
                return Err(());
            };
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let empty;
        let s = match self.spaces.get(&space) {
            Some(s) => s,
            None => {
                empty = Space::default();
                &empty
            }
        };
        let mut frames = s.unwinder.iter_frames(
            regs.ip,
            UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
            &mut self.cache,
            &mut read_stack,
        );
        loop {
            past_copy.set(false);
            match frames.next() {
                Ok(Some(f)) => {
                    out.push(f.address());
                    if out.len() >= MAX_FRAMES {
                        return Unwound::Truncated;
                    }
                }
                // A chain that ends in code of no module (JIT code, which has no unwind
                // information) ended on a frame pointer that was not one: its callers
                // are unknown, not absent. Every program's outermost frame (`_start`, a
                // thread's start) is in a module.
                Ok(None) => {
                    return match out.last() {
                        Some(&a) if !s.in_module(a) => Unwound::Truncated,
                        _ => Unwound::Complete,
                    };
                }
                Err(_) if past_copy.get() => return Unwound::PastCopy,
                Err(_) => return Unwound::Truncated,
            }
        }
    }
}
