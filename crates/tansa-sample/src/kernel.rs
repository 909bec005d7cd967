//! The kernel's symbols, from `/proc/kallsyms`.

/// Kernel text symbols sorted by address. The names point into the text of
/// `/proc/kallsyms`, kept whole: 120,000 symbols are two allocations, not 120,000, which
/// made freeing them cost some 13 ms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelSymbols {
    text: String,
    symbols: Vec<Symbol>,
}

/// A symbol: its address and the byte ranges of its name and module in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Symbol {
    addr: u64,
    name: (u32, u32),
    module: (u32, u32),
}

/// The part of `text` at byte range `r` (start, length), which `parse` made from it.
fn slice(text: &str, r: (u32, u32)) -> &str {
    &text[r.0 as usize..(r.0 + r.1) as usize]
}

impl KernelSymbols {
    /// Parses the text of `/proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]` lines), keeping
    /// text symbols. Returns `None` when every address is zero (`kernel.kptr_restrict`
    /// hides them), nothing parses, or the text is over 4 GiB.
    pub fn parse(text: impl Into<String>) -> Option<KernelSymbols> {
        let text: String = text.into();
        u32::try_from(text.len()).ok()?;
        let base = text.as_ptr() as usize;
        // The byte range of `part`, a slice of `text` (or empty).
        let range = |part: &str| {
            if part.is_empty() {
                (0, 0)
            } else {
                ((part.as_ptr() as usize - base) as u32, part.len() as u32)
            }
        };
        let mut symbols: Vec<Symbol> = text
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
                matches!(ty, "t" | "T" | "w" | "W").then(|| Symbol {
                    addr,
                    name: range(name),
                    module: range(module),
                })
            })
            .collect();
        if symbols.iter().all(|s| s.addr == 0) {
            return None;
        }
        symbols.sort_by(|a, b| {
            a.addr
                .cmp(&b.addr)
                .then_with(|| slice(&text, a.name).cmp(slice(&text, b.name)))
        });
        symbols.dedup_by_key(|s| s.addr);
        Some(KernelSymbols { text, symbols })
    }

    /// Reads `/proc/kallsyms`.
    pub fn read() -> Option<KernelSymbols> {
        Self::parse(std::fs::read_to_string("/proc/kallsyms").ok()?)
    }

    /// The symbol containing `addr`: its start, its name, and its kernel module (empty
    /// for the core kernel). The last symbol before a gap is taken to extend to the next.
    pub fn lookup(&self, addr: u64) -> Option<(u64, &str, &str)> {
        let i = self.symbols.partition_point(|s| s.addr <= addr);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        Some((
            s.addr,
            slice(&self.text, s.name),
            slice(&self.text, s.module),
        ))
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
