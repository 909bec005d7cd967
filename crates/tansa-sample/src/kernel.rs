//! The kernel's symbols, from `/proc/kallsyms`.

/// Kernel text symbols sorted by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelSymbols {
    /// `(address, name, module)`; the module is empty for the core kernel.
    symbols: Vec<(u64, String, String)>,
}

impl KernelSymbols {
    /// Parses the text of `/proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]` lines), keeping
    /// text symbols. Returns `None` when every address is zero (`kernel.kptr_restrict`
    /// hides them) or nothing parses.
    pub fn parse(text: &str) -> Option<KernelSymbols> {
        let mut symbols: Vec<(u64, String, String)> = text
            .lines()
            .filter_map(|line| {
                let mut it = line.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let ty = it.next()?;
                let name = it.next()?;
                let module = it
                    .next()
                    .map(|m| m.trim_start_matches('[').trim_end_matches(']'))
                    .unwrap_or("");
                matches!(ty, "t" | "T" | "w" | "W")
                    .then(|| (addr, name.to_string(), module.to_string()))
            })
            .collect();
        if symbols.iter().all(|s| s.0 == 0) {
            return None;
        }
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        symbols.dedup_by_key(|s| s.0);
        Some(KernelSymbols { symbols })
    }

    /// Reads `/proc/kallsyms`.
    pub fn read() -> Option<KernelSymbols> {
        Self::parse(&std::fs::read_to_string("/proc/kallsyms").ok()?)
    }

    /// The symbol containing `addr`: its start, its name, and its kernel module (empty
    /// for the core kernel). The last symbol before a gap is taken to extend to the next.
    pub fn lookup(&self, addr: u64) -> Option<(u64, &str, &str)> {
        let i = self.symbols.partition_point(|s| s.0 <= addr);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        Some((s.0, &s.1, &s.2))
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_symbols_with_modules() {
        let k = KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81000100 t do_thing\n\
             ffffffff81000200 D some_data\n\
             ffffffffc0000000 t ext4_read\t[ext4]\n\
             garbage line\n",
        )
        .unwrap();
        assert_eq!(k.len(), 3);
        assert_eq!(
            k.lookup(0xffffffff81000150),
            Some((0xffffffff81000100, "do_thing", ""))
        );
        assert_eq!(
            k.lookup(0xffffffffc0000010),
            Some((0xffffffffc0000000, "ext4_read", "ext4"))
        );
        assert_eq!(k.lookup(0x1000), None);
        assert_eq!(
            KernelSymbols::parse("0000000000000000 T _stext\n0000000000000000 t x\n"),
            None
        );
    }
}
