//! The kernel's vDSO, named.
//!
//! The vDSO has no file: the kernel maps the same image into every process of an ABI
//! (`clock_gettime`, `gettimeofday`, `getcpu`, ... run there without a system call). tansa
//! reads the image of its own vDSO once, copies it into a sealed, unnamed memory file, and
//! opens that as the vDSO's ELF file (its path is `/proc/self/fd/N`), as perf reads its own
//! vDSO. The image is used for a sampled process only if that process's vDSO has the
//! same build id (recorded when its mapping was declared: [`build_id_for_size`]), so a
//! process of another ABI (a 32-bit program, whose vDSO differs) keeps its addresses
//! unnamed rather than misnamed.

use std::path::PathBuf;
use std::sync::OnceLock;

/// This process's vDSO image, copied into a memory file: (file kept open, its path, the
/// image's size, its build id).
struct Image {
    _file: std::fs::File,
    path: PathBuf,
    size: u64,
    build_id: Vec<u8>,
}

fn image() -> Option<&'static Image> {
    static IMAGE: OnceLock<Option<Image>> = OnceLock::new();
    IMAGE.get_or_init(read_image).as_ref()
}

/// The `[vdso]` mapping of this process, from `/proc/self/maps`: (start, end).
fn own_mapping() -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    (start < end && end - start <= 1 << 20).then_some((start, end))
}

fn read_image() -> Option<Image> {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let (start, end) = own_mapping()?;
    if base != start {
        return None;
    }
    // SAFETY: [start, end) is this process's vDSO mapping (the kernel's, never unmapped
    // while the process runs, readable: `r-xp`), at most 1 MiB (checked above).
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, (end - start) as usize) };
    let file = crate::elf::sealed_copy(c"tansa-vdso", bytes)?;
    let path = crate::elf::fd_path(&file);
    let build_id = crate::ElfFile::open(&path).ok()?.build_id()?;
    Some(Image {
        _file: file,
        path,
        size: end - start,
        build_id,
    })
}

/// The build id of the vDSO mapped in a process as `size` bytes, if it is this process's
/// vDSO (same size: same ABI); empty when it cannot be told.
pub fn build_id_for_size(size: u64) -> Vec<u8> {
    image()
        .filter(|i| i.size == size)
        .map_or_else(Vec::new, |i| i.build_id.clone())
}

/// Whether `path` names a vDSO (as `/proc/PID/maps` does, or as the dynamic linker does).
pub fn is_vdso(path: &str) -> bool {
    path == "[vdso]" || path == "linux-vdso.so.1"
}

/// A file holding the image of the vDSO whose build id is `build_id`, if it is this
/// process's.
pub fn file_for(build_id: &[u8]) -> Option<&'static std::path::Path> {
    image()
        .filter(|i| !build_id.is_empty() && i.build_id == build_id)
        .map(|i| i.path.as_path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModuleResolution, Resolver};

    #[test]
    fn the_own_vdso_is_read_and_its_functions_named() {
        let (start, end) = own_mapping().expect("a vDSO mapping");
        let id = build_id_for_size(end - start);
        assert!(!id.is_empty(), "the vDSO has a build id");
        assert!(build_id_for_size(end - start + 4096).is_empty());
        let path = file_for(&id).expect("the image");
        assert!(file_for(&[1, 2, 3]).is_none());
        let elf = crate::ElfFile::open(path).expect("an ELF file");
        let f = elf
            .function_by_name("__vdso_clock_gettime")
            .expect("__vdso_clock_gettime");
        let len = f.size.max(1);
        // SAFETY: the function lies in this process's vDSO mapping (the image is linked at
        // 0, so its address is the offset from the mapping's start), readable.
        let mapped =
            unsafe { std::slice::from_raw_parts((start + f.address) as *const u8, len as usize) };
        assert_eq!(
            elf.read_at(f.address, len),
            Some(mapped),
            "the image is the mapping"
        );
        // Resolved as a module by that name and build id; another build id is not read.
        let resolver = Resolver::new();
        for name in ["[vdso]", "linux-vdso.so.1"] {
            let mut m = ModuleResolution::open(name, &id);
            let r = m.lookup(&resolver, f.address + 1).expect("resolved");
            let inner = r
                .frames
                .last()
                .and_then(|fr| fr.function.clone())
                .unwrap_or_default();
            assert!(inner.ends_with("clock_gettime"), "{name}: {inner}");
            // An address no file can have (from a damaged recording) stays unnamed; the
            // symbolizer's range arithmetic overflowed on it.
            let top = m.lookup(&resolver, u64::MAX).expect("looked up");
            assert!(top.frames.is_empty());
            let mut other = ModuleResolution::open(name, &[9; 20]);
            assert!(other.lookup(&resolver, f.address + 1).is_none());
            let mut unknown = ModuleResolution::open(name, &[]);
            assert!(unknown.lookup(&resolver, f.address + 1).is_none());
        }
    }
}
