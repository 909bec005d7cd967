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

/// The text symbol on the line `text[start..end]` (`ADDRESS TYPE NAME [MODULE]`, fields
/// apart by spaces or tabs), if it is one. By hand over bytes: `/proc/kallsyms` has some
/// 120,000 lines, which `str::split_whitespace` and `u64::from_str_radix` took 21 ms to
/// parse, and this takes 10 (the kernel takes 25-50 ms to write them; `examples/kallsyms`
/// measures both).
fn parse_line(text: &[u8], start: usize, end: usize) -> Option<Symbol> {
    let blank = |b: u8| b == b' ' || b == b'\t';
    let mut at = start;
    // The byte range (start, length) of the next field.
    let mut field = || {
        while at < end && blank(text[at]) {
            at += 1;
        }
        let from = at;
        while at < end && !blank(text[at]) {
            at += 1;
        }
        (at > from).then_some((from as u32, (at - from) as u32))
    };
    let addr = field()?;
    let ty = field()?;
    let name = field()?;
    // `[module]`, without its brackets; none, or `[` alone, is the empty range.
    let module = field().map_or((0, 0), |(from, len)| {
        let m = &text[from as usize..(from + len) as usize];
        let skip = u32::from(m.first() == Some(&b'['));
        let cut = u32::from(m.len() > 1 && m.last() == Some(&b']'));
        match len - skip - cut {
            0 => (0, 0),
            n => (from + skip, n),
        }
    });
    if addr.1 > 16 || ty.1 != 1 || !matches!(text[ty.0 as usize], b't' | b'T' | b'w' | b'W') {
        return None;
    }
    let mut value = 0u64;
    for &c in &text[addr.0 as usize..(addr.0 + addr.1) as usize] {
        value = value << 4 | u64::from((c as char).to_digit(16)?);
    }
    Some(Symbol {
        addr: value,
        name,
        module,
    })
}

impl KernelSymbols {
    /// Parses the text of `/proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]` lines), keeping
    /// text symbols. Returns `None` when every address is zero (`kernel.kptr_restrict`
    /// hides them), nothing parses, or the text is over 4 GiB.
    pub fn parse(text: impl Into<String>) -> Option<KernelSymbols> {
        let text: String = text.into();
        u32::try_from(text.len()).ok()?;
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len() / 40);
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
            if let Some(s) = parse_line(bytes, at, end) {
                symbols.push(s);
            }
            at = end + 1;
        }
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

    /// Every text symbol as `(address, name, module)`, in order.
    fn listed(k: &KernelSymbols) -> Vec<(u64, &str, &str)> {
        k.symbols
            .iter()
            .map(|s| (s.addr, slice(&k.text, s.name), slice(&k.text, s.module)))
            .collect()
    }

    #[test]
    fn odd_lines_parse_as_fields_apart_by_blanks_or_not_at_all() {
        let k = KernelSymbols::parse(
            "FFFFFFFF81000000  T\t_stext\n\
             ffffffff81000100 W weak_one [\n\
             1ffffffff81000200 t too_long_an_address\n\
             ffffffff8100030g t not_hex\n\
             ffffffff81000400 tt two_letter_type\n\
             ffffffff81000500 t\n\
             ffffffff81000600 t mod_fn\t[m]\n\
             \n\
             ffffffff81000700 t last_without_newline",
        )
        .unwrap();
        assert_eq!(
            listed(&k),
            vec![
                (0xffffffff81000000, "_stext", ""),
                (0xffffffff81000100, "weak_one", ""),
                (0xffffffff81000600, "mod_fn", "m"),
                (0xffffffff81000700, "last_without_newline", ""),
            ]
        );
    }

    /// The running kernel's symbols (when they can be read and are not hidden) come out as
    /// a plain reading of the lines, field by field, gives them.
    #[test]
    fn the_running_kernels_symbols_parse_as_a_plain_reading_gives_them() {
        let text = std::fs::read_to_string("/proc/kallsyms").expect("/proc/kallsyms");
        let mut plain: Vec<(u64, &str, &str)> = text
            .lines()
            .filter_map(|line| {
                let mut it = line.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let ty = it.next()?;
                let name = it.next()?;
                let module = it
                    .next()
                    .map_or("", |m| m.trim_start_matches('[').trim_end_matches(']'));
                matches!(ty, "t" | "T" | "w" | "W").then_some((addr, name, module))
            })
            .collect();
        plain.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        plain.dedup_by_key(|s| s.0);
        let parsed = KernelSymbols::parse(text.clone());
        if plain.iter().all(|s| s.0 == 0) {
            assert_eq!(parsed, None, "addresses hidden");
            return;
        }
        let k = parsed.unwrap();
        assert!(k.len() > 1000, "{} symbols", k.len());
        assert_eq!(listed(&k), plain);
    }
}
