//! Where each function of a file lies, whatever names it: the one rule by which the CPU
//! recorder keeps a sampled function's code for annotation and the retrace recorder keeps
//! the code of the functions a region ran.

use std::ops::Range;

use crate::elf::{ElfFile, FunctionSymbol};
use crate::resolve::Unnamed;

/// The extents of a file's functions, read on first need: its function symbols, its
/// procedure linkage table's stubs, then the extents of code no symbol covers
/// ([`Unnamed`]: MiniDebugInfo symbols, `.eh_frame` FDEs).
#[derive(Debug, Default)]
pub struct FunctionExtents {
    symbols: Option<Vec<FunctionSymbol>>,
    plt: Option<Vec<(Range<u64>, String)>>,
    unnamed: Option<Unnamed>,
}

impl FunctionExtents {
    /// Nothing read yet.
    pub fn new() -> FunctionExtents {
        FunctionExtents::default()
    }

    /// The extent of the function of `elf` containing file address `addr`, in order:
    /// a symbol with a size that covers it; a PLT stub (the stub alone, as reports name
    /// it `name@plt`); the extent of a function without a symbol ([`Unnamed::extent`]);
    /// a symbol without a size, up to the next symbol. `None` where none of these covers
    /// `addr` (code outside any function the file describes).
    pub fn containing(&mut self, elf: &ElfFile, addr: u64) -> Option<Range<u64>> {
        let symbols = self.symbols.get_or_insert_with(|| elf.functions());
        let i = symbols.partition_point(|f| f.address <= addr);
        let before = i.checked_sub(1).map(|i| &symbols[i]);
        if let Some(f) = before
            && f.size > 0
            && addr < f.address.saturating_add(f.size)
        {
            return Some(f.address..f.address + f.size);
        }
        // A symbol without a size, as far as the next symbol: the last resort.
        let to_next = before.filter(|f| f.size == 0).and_then(|f| {
            let next = symbols[i..].iter().find(|g| g.address > f.address)?;
            (addr < next.address).then_some(f.address..next.address)
        });
        let plt = self.plt.get_or_insert_with(|| elf.plt_entries());
        let j = plt.partition_point(|e| e.0.start <= addr);
        if let Some((range, _)) = j.checked_sub(1).map(|j| &plt[j])
            && range.contains(&addr)
        {
            return Some(range.clone());
        }
        self.unnamed
            .get_or_insert_with(|| Unnamed::new(elf))
            .extent(addr)
            .or(to_next)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::Command;

    /// Builds `src` as a shared library with `flags`, in a fresh directory (the other
    /// modules' tests use it too).
    pub(crate) fn build(src: &str, flags: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("f.c");
        std::fs::write(&c, src).unwrap();
        let lib = dir.path().join("libf.so");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(&c)
            .args(flags)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (dir, lib)
    }

    const SRC: &str = r#"
        #include <string.h>
        __attribute__((noinline)) static int inner(const char *s) { return (int)strlen(s) * 3; }
        __attribute__((noinline)) static int other(const char *s) { return inner(s) + 1; }
        int outer(const char *s) { return other(s) + inner(s); }
    "#;

    #[test]
    fn symbols_plt_stubs_and_unnamed_functions_each_have_their_own_extent() {
        let (_dir, lib) = build(SRC, &["-Wl,-s"]);
        let elf = ElfFile::open(&lib).unwrap();
        let mut extents = FunctionExtents::new();
        let outer = elf.function_by_name("outer").unwrap();
        assert!(outer.size > 0);
        let at = outer.address + 1;
        assert_eq!(
            extents.containing(&elf, at),
            Some(outer.address..outer.address + outer.size)
        );
        // The stub through which the library calls strlen: its 16 bytes alone.
        let (stub, name) = elf
            .plt_entries()
            .into_iter()
            .find(|(_, n)| n == "strlen@plt")
            .unwrap();
        assert_eq!(
            extents.containing(&elf, stub.start + 2),
            Some(stub.clone()),
            "{name}"
        );
        // `inner` and `other` have no symbol left: each is one FDE's extent, and the two
        // differ.
        let unnamed: Vec<Range<u64>> = elf
            .unwind_extents()
            .into_iter()
            .filter(|e| {
                !e.contains(&outer.address)
                    && !elf.plt_entries().iter().any(|p| e.contains(&p.0.start))
            })
            .collect();
        assert!(unnamed.len() >= 2, "{unnamed:?}");
        for e in &unnamed {
            assert_eq!(extents.containing(&elf, e.end - 1), Some(e.clone()));
        }
    }

    /// A function chosen at load time (a local IFUNC, as the C library calls its own
    /// `strlen`): its PLT stub's slot has an `IRELATIVE` relocation, which names no
    /// symbol; the stub is named after the IFUNC symbol its addend points at.
    #[test]
    fn a_stub_of_a_local_ifunc_is_named_after_it() {
        let src = r#"
            static int impl_a(void) { return 1; }
            static int (*resolve_pick(void))(void) { return impl_a; }
            static int pick(void) __attribute__((ifunc("resolve_pick")));
            int use_pick(void) { return pick() + 1; }
        "#;
        let (_dir, lib) = build(src, &[]);
        let elf = ElfFile::open(&lib).unwrap();
        let stubs = elf.plt_entries();
        let (stub, _) = stubs
            .iter()
            .find(|(_, n)| n == "pick@plt")
            .unwrap_or_else(|| panic!("no pick@plt in {stubs:?}"));
        let mut extents = FunctionExtents::new();
        assert_eq!(extents.containing(&elf, stub.start), Some(stub.clone()));
    }
}
