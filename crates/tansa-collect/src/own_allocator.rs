//! Executables that allocate past the agent's hooks. An executable comes before
//! `LD_PRELOAD` in the dynamic linker's search order, so the allocation functions it defines
//! itself (a statically linked jemalloc, mimalloc or tcmalloc) take the calls the agent
//! would record; both sinks read each recorded executable's symbols when the recording ends
//! and say so, rather than show a heap that is silently missing.

use std::collections::BTreeSet;

use tansa_format::memory::OwnAllocator;

/// The executables of `exes` with allocation functions of their own, from their symbols
/// (an executable that cannot be read any more is passed over).
pub fn of_executables(exes: &BTreeSet<String>) -> Vec<OwnAllocator> {
    exes.iter()
        .filter_map(|exe| tansa_symbols::ElfFile::open(exe).ok()?.own_allocator())
        .collect()
}
