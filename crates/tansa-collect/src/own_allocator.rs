//! Programs that allocate past the agent's hooks. An executable comes before `LD_PRELOAD`
//! in the dynamic linker's search order, so the allocation functions it defines itself (a
//! statically linked jemalloc, mimalloc or tcmalloc) take the calls the agent would
//! record. And language runtimes keep their objects in heaps of their own: a CPython
//! interpreter (its executable or its `libpython`) takes small objects from its own arenas
//! (pymalloc) unless its environment sends them to `malloc`; V8 (node), the Go runtime and
//! a Java virtual machine collect their garbage in heaps that no `malloc` reaches.
//! Both sinks gather the recorded executables and modules in a [`Watch`], read their
//! symbols when the recording ends and say so, rather than show a heap that is silently
//! missing.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashSet;
use tansa_format::memory::{JVM_HEAP, OwnAllocator, PYMALLOC, SessionInfo, V8_HEAP};

/// What a sink gathers, as sessions start and load modules, to find the programs that
/// allocate past the agent's hooks.
#[derive(Debug, Default)]
pub struct Watch {
    /// Every recorded executable.
    exes: BTreeSet<String>,
    /// Sessions whose environment sends CPython's object allocator to `malloc`.
    python_malloc: FxHashSet<u32>,
    /// Modules whose name may be a language runtime's with a heap of its own, with that
    /// heap (read when the recording ends: the symbols must say the same); a CPython
    /// interpreter's only when loaded by a session whose environment does not send its
    /// objects to `malloc`.
    runtimes: BTreeMap<String, &'static str>,
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
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let Some(heap) = runtime_by_name(name) else {
            return;
        };
        if heap == PYMALLOC && self.python_malloc.contains(&session) {
            return;
        }
        let path = String::from_utf8_lossy(path);
        if !self.runtimes.contains_key(path.as_ref()) {
            self.runtimes.insert(path.into_owned(), heap);
        }
    }

    /// The executables with allocation functions of their own and the modules of runtimes
    /// with heaps of their own, from their symbols (a file that cannot be read any more is
    /// passed over), in the order of their paths.
    pub fn own_allocators(&self) -> Vec<OwnAllocator> {
        let mut out: Vec<OwnAllocator> = self
            .exes
            .iter()
            .filter_map(|exe| tansa_symbols::ElfFile::open(exe).ok()?.own_allocator())
            .collect();
        for (path, &heap) in &self.runtimes {
            let runs = tansa_symbols::ElfFile::open(path)
                .ok()
                .and_then(|f| f.runtime_heap());
            if runs != Some(heap) {
                continue;
            }
            match out.iter_mut().find(|o| &o.exe == path) {
                Some(o) => o.allocators.push(heap.to_string()),
                None => out.push(OwnAllocator {
                    exe: path.clone(),
                    allocators: vec![heap.to_string()],
                    ..OwnAllocator::default()
                }),
            }
        }
        out.sort_by(|a, b| a.exe.cmp(&b.exe));
        out
    }
}

/// The runtime with a heap of its own whose module file `name` may be: `python3.11`,
/// `python3`, `libpython3.11.so.1.0` (CPython); `node`, `libnode.so.108` (V8);
/// `libjvm.so` (a JVM). Only those files are read, when the recording ends.
fn runtime_by_name(name: &[u8]) -> Option<&'static str> {
    if name.starts_with(b"python") || name.starts_with(b"libpython") {
        Some(PYMALLOC)
    } else if name == b"node" || name == b"nodejs" || name.starts_with(b"libnode.so") {
        Some(V8_HEAP)
    } else if name == b"libjvm.so" {
        Some(JVM_HEAP)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_of_runtimes_are_read() {
        for (name, heap) in [
            ("python3.11", PYMALLOC),
            ("python3", PYMALLOC),
            ("libpython3.11.so.1.0", PYMALLOC),
            ("libpython3.7m.so.1.0", PYMALLOC),
            ("node", V8_HEAP),
            ("libnode.so.108", V8_HEAP),
            ("libjvm.so", JVM_HEAP),
        ] {
            assert_eq!(runtime_by_name(name.as_bytes()), Some(heap), "{name}");
        }
        for name in ["x.so", "ipython", "sh", "nodemon", "libjvm.so.bak"] {
            assert_eq!(runtime_by_name(name.as_bytes()), None, "{name}");
        }
    }

    #[test]
    fn modules_of_sessions_that_send_python_to_malloc_are_not_read() {
        let mut w = Watch::default();
        w.python_malloc(1);
        w.module(1, b"/usr/bin/python3.11");
        w.module(2, b"/usr/lib/libc.so.6");
        w.module(1, b"/usr/lib/libnode.so.108");
        assert_eq!(
            w.runtimes.keys().collect::<Vec<_>>(),
            ["/usr/lib/libnode.so.108"]
        );
        w.module(2, b"/usr/bin/python3.11");
        w.module(3, b"/usr/bin/python3.11");
        assert_eq!(w.runtimes.len(), 2);
    }
}
