//! Programs that allocate past the agent's hooks. An executable comes before `LD_PRELOAD`
//! in the dynamic linker's search order, so the allocation functions it defines itself (a
//! statically linked jemalloc, mimalloc or tcmalloc) take the calls the agent would
//! record. And a CPython interpreter (its executable or its `libpython`) takes small
//! objects from arenas of its own (pymalloc) unless its environment sends them to `malloc`.
//! Both sinks gather the recorded executables and modules in a [`Watch`], read their
//! symbols when the recording ends and say so, rather than show a heap that is silently
//! missing.

use std::collections::BTreeSet;

use rustc_hash::FxHashSet;
use tansa_format::memory::{OwnAllocator, PYMALLOC, SessionInfo};

/// What a sink gathers, as sessions start and load modules, to find the programs that
/// allocate past the agent's hooks.
#[derive(Debug, Default)]
pub struct Watch {
    /// Every recorded executable.
    exes: BTreeSet<String>,
    /// Sessions whose environment sends CPython's object allocator to `malloc`.
    python_malloc: FxHashSet<u32>,
    /// Modules, loaded by a session that does not, whose name may be a CPython
    /// interpreter's (read when the recording ends).
    pythons: BTreeSet<String>,
}

impl Watch {
    /// A session started.
    pub fn session(&mut self, info: &SessionInfo) {
        if !self.exes.contains(&info.exe) {
            self.exes.insert(info.exe.clone());
        }
    }

    /// Session `session`'s environment sends CPython's object allocator to `malloc`.
    pub fn python_malloc(&mut self, session: u32) {
        self.python_malloc.insert(session);
    }

    /// Session `session` loaded the module at `path`.
    pub fn module(&mut self, session: u32, path: &[u8]) {
        if self.python_malloc.contains(&session) || !may_be_cpython(path) {
            return;
        }
        let path = String::from_utf8_lossy(path);
        if !self.pythons.contains(path.as_ref()) {
            self.pythons.insert(path.into_owned());
        }
    }

    /// The executables with allocation functions of their own and the CPython interpreters
    /// that used pymalloc, from their symbols (a file that cannot be read any more is
    /// passed over), in the order of their paths.
    pub fn own_allocators(&self) -> Vec<OwnAllocator> {
        let mut out: Vec<OwnAllocator> = self
            .exes
            .iter()
            .filter_map(|exe| tansa_symbols::ElfFile::open(exe).ok()?.own_allocator())
            .collect();
        for path in &self.pythons {
            if !tansa_symbols::ElfFile::open(path).is_ok_and(|f| f.is_cpython()) {
                continue;
            }
            match out.iter_mut().find(|o| &o.exe == path) {
                Some(o) => o.allocators.push(PYMALLOC.to_string()),
                None => out.push(OwnAllocator {
                    exe: path.clone(),
                    allocators: vec![PYMALLOC.to_string()],
                    ..OwnAllocator::default()
                }),
            }
        }
        out.sort_by(|a, b| a.exe.cmp(&b.exe));
        out
    }
}

/// Whether a module's file name may be a CPython interpreter's (`python3.11`, `python3`,
/// `libpython3.11.so.1.0`, `libpython3.7m.so.1.0`): only those files are read, when the
/// recording ends.
fn may_be_cpython(path: &[u8]) -> bool {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    name.starts_with(b"python") || name.starts_with(b"libpython")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_python_names_are_read() {
        for p in [
            "/usr/bin/python3.11",
            "/usr/bin/python3",
            "/opt/py/lib/libpython3.11.so.1.0",
            "libpython3.7m.so.1.0",
        ] {
            assert!(may_be_cpython(p.as_bytes()), "{p}");
        }
        for p in [
            "/usr/lib/python3.11/lib-dynload/x.so",
            "/usr/bin/ipython",
            "/bin/sh",
        ] {
            assert!(!may_be_cpython(p.as_bytes()), "{p}");
        }
    }

    #[test]
    fn modules_of_sessions_that_send_python_to_malloc_are_not_read() {
        let mut w = Watch::default();
        w.python_malloc(1);
        w.module(1, b"/usr/bin/python3.11");
        w.module(2, b"/usr/lib/libc.so.6");
        assert!(w.pythons.is_empty());
        w.module(2, b"/usr/bin/python3.11");
        w.module(3, b"/usr/bin/python3.11");
        assert_eq!(w.pythons.len(), 1);
    }
}
