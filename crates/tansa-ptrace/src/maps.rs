//! Address normalization: runtime addresses of the traced process to `(module, address in
//! the module's file)`, using `/proc/PID/maps` and each file's `PT_LOAD` segments.

use std::collections::HashMap;

use tansa_symbols::ElfFile;
use tansa_symbols::elf::Segment;

/// One file-backed executable mapping.
pub(crate) type Mapping = tansa_proc::maps::ExecMapping;

/// The executable, file-backed mappings of a `/proc/PID/maps` text, by address.
pub(crate) fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = tansa_proc::maps::parse_exec_maps(text)
        .into_iter()
        .filter(Mapping::is_file)
        .collect();
    out.sort_by_key(|m| m.start);
    out
}

/// Reads the executable, file-backed mappings of `pid`.
pub(crate) fn read_maps(pid: i32) -> std::io::Result<Vec<Mapping>> {
    Ok(parse_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

/// The module table of a recording, built as addresses are normalized.
#[derive(Debug, Default)]
pub(crate) struct Modules {
    /// Paths by module index.
    pub(crate) paths: Vec<String>,
    segments: HashMap<String, Option<Vec<Segment>>>,
}

impl Modules {
    /// The index of `path`, adding it if new.
    pub(crate) fn index(&mut self, path: &str) -> u32 {
        if let Some(i) = self.paths.iter().position(|p| p == path) {
            return i as u32;
        }
        self.paths.push(path.to_string());
        (self.paths.len() - 1) as u32
    }

    fn segments(&mut self, path: &str) -> Option<&[Segment]> {
        self.segments
            .entry(path.to_string())
            .or_insert_with(|| ElfFile::open(path).ok().map(|e| e.segments()))
            .as_deref()
    }

    /// Normalizes `addr`: `(module index, file address)`, or `None` when no file-backed
    /// executable mapping contains it (vDSO, JIT code).
    pub(crate) fn normalize(&mut self, maps: &[Mapping], addr: u64) -> Option<(u32, u64)> {
        let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
        let m = &maps[i];
        if addr >= m.end {
            return None;
        }
        let file_offset = m.offset + (addr - m.start);
        let path = m.path.clone();
        let seg =
            self.segments(&path)?.iter().copied().find(|s| {
                file_offset >= s.file_offset && file_offset < s.file_offset + s.file_size
            })?;
        let file_addr = seg.address + (file_offset - seg.file_offset);
        Some((self.index(&path), file_addr))
    }

    /// The runtime address of `file_addr` in `path`, given the current mappings.
    pub(crate) fn runtime(&mut self, maps: &[Mapping], path: &str, file_addr: u64) -> Option<u64> {
        let seg = self
            .segments(path)?
            .iter()
            .copied()
            .find(|s| file_addr >= s.address && file_addr < s.address + s.file_size)?;
        let file_offset = seg.file_offset + (file_addr - seg.address);
        maps.iter()
            .find(|m| {
                m.path == path
                    && file_offset >= m.offset
                    && file_offset < m.offset + (m.end - m.start)
            })
            .map(|m| m.start + (file_offset - m.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_executable_file_mappings_only() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 123 /usr/bin/x
55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 123 /usr/bin/x
7ffd1b5f0000-7ffd1b5f2000 r-xp 00000000 00:00 0 [vdso]
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
";
        let m = parse_maps(text);
        assert_eq!(
            m,
            vec![Mapping {
                start: 0x55d0c0a01000,
                end: 0x55d0c0a02000,
                offset: 0x1000,
                path: "/usr/bin/x".into()
            }]
        );
    }

    #[test]
    fn normalizes_this_process() {
        let maps = read_maps(std::process::id() as i32).unwrap();
        let here = normalizes_this_process as fn() as usize as u64;
        let mut modules = Modules::default();
        let (module, file_addr) = modules.normalize(&maps, here).unwrap();
        let path = modules.paths[module as usize].clone();
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(path, exe.display().to_string());
        assert_eq!(modules.runtime(&maps, &path, file_addr), Some(here));
        assert_eq!(modules.normalize(&maps, 8), None);
    }
}
