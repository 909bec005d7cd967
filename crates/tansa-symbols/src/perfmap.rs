//! Names of JIT-compiled code from a perf map (`/tmp/perf-PID.map`).
//!
//! Runtimes that compile code at run time (V8 with `--perf-basic-prof`, CPython 3.12 with
//! `-X perf`, the JVM with a perf-map agent, .NET with `DOTNET_PerfMapEnabled`, LuaJIT)
//! write one line per function they emit: `START SIZE NAME`, the start and size in
//! hexadecimal (with or without `0x`), the name the rest of the line. The code lives in
//! anonymous memory, so the map is its only name. A runtime may free code and put other
//! code at the same addresses: the later line describes what is there since, so an
//! address is named by the last line that covers it.
//!
//! blazesym reads perf maps only for a live process it symbolizes as a whole; tansa names
//! the addresses after the process ended, so this reader is its own. It is sans-I/O: it
//! reads from any [`std::io::Read`], and every byte of it is untrusted: the map is written
//! by the profiled program. It reads at most the budget it is given, bounds each line, and
//! keeps no more than the names of the lines that name a looked-up address.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};

/// Longest line kept (longer lines are skipped: no runtime writes names this long).
pub const MAX_LINE: usize = 64 << 10;

/// Why a perf map was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfMapError {
    /// It holds more than the budget.
    #[error("it is larger than {budget} bytes")]
    TooLarge {
        /// The budget.
        budget: u64,
    },
    /// Reading it failed.
    #[error("reading it failed: {0}")]
    Io(#[from] std::io::Error),
}

/// One line of a perf map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    start: u64,
    end: u64,
    /// The name's place in [`PerfMap::names`].
    name: (u32, u32),
}

/// The lines of one perf map, in the order written.
#[derive(Debug, Default, Clone)]
pub struct PerfMap {
    lines: Vec<Line>,
    names: String,
    malformed: u64,
}

/// A named address: the function's start and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitSymbol<'a> {
    /// First address of the function.
    pub start: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its name, as the runtime wrote it.
    pub name: &'a str,
}

fn hex(s: &str) -> Option<u64> {
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// `START SIZE NAME` (start and size in hexadecimal), or `None`.
fn parse_line(line: &str) -> Option<(u64, u64, &str)> {
    let line = line.trim_end_matches(['\n', '\r']);
    let (start, rest) = line.split_once(' ')?;
    let (size, name) = rest.split_once(' ')?;
    let (start, size) = (hex(start)?, hex(size)?);
    let name = name.trim();
    (!name.is_empty() && size > 0).then_some((start, size, name))
}

impl PerfMap {
    /// Reads a perf map from `input`, at most `budget` bytes of it.
    ///
    /// # Errors
    ///
    /// [`PerfMapError::TooLarge`] if `input` holds more than `budget` bytes,
    /// [`PerfMapError::Io`] if reading fails.
    pub fn read(input: impl Read, budget: u64) -> Result<PerfMap, PerfMapError> {
        PerfMap::read_lines(input, budget, |_, _| true)
    }

    /// [`PerfMap::read`], keeping only the lines that cover one of `addresses`: what
    /// [`PerfMap::lookup`] of those addresses needs, in the memory of those lines only.
    ///
    /// # Errors
    ///
    /// As [`PerfMap::read`].
    pub fn read_covering(
        input: impl Read,
        budget: u64,
        addresses: &BTreeSet<u64>,
    ) -> Result<PerfMap, PerfMapError> {
        PerfMap::read_lines(input, budget, |start, end| {
            addresses.range(start..end).next().is_some()
        })
    }

    fn read_lines(
        input: impl Read,
        budget: u64,
        keep: impl Fn(u64, u64) -> bool,
    ) -> Result<PerfMap, PerfMapError> {
        let mut reader = BufReader::new(input.take(budget.saturating_add(1)));
        let mut map = PerfMap::default();
        let mut buf = Vec::new();
        let mut total = 0u64;
        loop {
            buf.clear();
            let n = (&mut reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > budget {
                return Err(PerfMapError::TooLarge { budget });
            }
            if buf.len() > MAX_LINE {
                // The rest of an overlong line: skipped with it.
                if buf.last() != Some(&b'\n') {
                    let mut skipped = Vec::new();
                    total += reader.read_until(b'\n', &mut skipped)? as u64;
                    if total > budget {
                        return Err(PerfMapError::TooLarge { budget });
                    }
                }
                map.malformed += 1;
                continue;
            }
            let text = String::from_utf8_lossy(&buf);
            match parse_line(&text) {
                Some((start, size, name)) => match start.checked_add(size) {
                    Some(end) if !keep(start, end) => {}
                    _ => map.push(start, size, name),
                },
                None if text.trim().is_empty() => {}
                None => map.malformed += 1,
            }
        }
        Ok(map)
    }

    fn push(&mut self, start: u64, size: u64, name: &str) {
        let Some(end) = start.checked_add(size) else {
            self.malformed += 1;
            return;
        };
        // Names are at most MAX_LINE bytes each and the whole map is bounded by its
        // budget, which the caller keeps far below 4 GiB.
        let Ok(from) = u32::try_from(self.names.len()) else {
            self.malformed += 1;
            return;
        };
        self.names.push_str(name);
        let to = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.lines.push(Line {
            start,
            end,
            name: (from, to),
        });
    }

    /// Lines read.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether no line was read.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Lines that were not `START SIZE NAME` (or were overlong) and were skipped.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    fn symbol(&self, line: &Line) -> JitSymbol<'_> {
        JitSymbol {
            start: line.start,
            size: line.end - line.start,
            name: self
                .names
                .get(line.name.0 as usize..line.name.1 as usize)
                .unwrap_or(""),
        }
    }

    /// The function at each of `addresses` that a line covers: the last such line.
    /// Each line and each address is looked at once, whatever the overlaps.
    pub fn lookup(&self, addresses: &BTreeSet<u64>) -> BTreeMap<u64, JitSymbol<'_>> {
        let mut pending = addresses.clone();
        let mut found = BTreeMap::new();
        for line in self.lines.iter().rev() {
            if pending.is_empty() {
                break;
            }
            let hit: Vec<u64> = pending.range(line.start..line.end).copied().collect();
            for a in hit {
                pending.remove(&a);
                found.insert(a, self.symbol(line));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> PerfMap {
        PerfMap::read(text.as_bytes(), 1 << 20).unwrap()
    }

    #[test]
    fn lines_name_the_addresses_they_cover_and_the_last_line_wins() {
        let map = read(
            "1000 10 first\n\
             0x2000 0x20 JS:*fib /tmp/a.js:1:13\r\n\
             \n\
             not a line\n\
             1008 8 later at the same place\n",
        );
        assert_eq!(map.len(), 3);
        assert_eq!(map.malformed(), 1);
        let at = |a: u64| -> Option<(u64, String)> {
            map.lookup(&BTreeSet::from([a]))
                .get(&a)
                .map(|s| (s.start, s.name.to_string()))
        };
        assert_eq!(at(0x1000), Some((0x1000, "first".into())));
        assert_eq!(at(0x1007), Some((0x1000, "first".into())));
        assert_eq!(at(0x1008), Some((0x1008, "later at the same place".into())));
        assert_eq!(at(0x100f), Some((0x1008, "later at the same place".into())));
        assert_eq!(at(0x1010), None, "the end is exclusive");
        assert_eq!(at(0x201f), Some((0x2000, "JS:*fib /tmp/a.js:1:13".into())));
        assert_eq!(at(0xfff), None);
        let wanted = BTreeSet::from([0x1000, 0x1009, 0x2000, 0x5000]);
        let all = map.lookup(&wanted);
        assert_eq!(all.len(), 3);
        assert_eq!(all[&0x1009].size, 8);

        // Keeping only the lines that cover a wanted address names them alike.
        let text = "1000 10 first\n1008 8 later\n3000 10 unwanted\n";
        let covering = PerfMap::read_covering(text.as_bytes(), 1 << 20, &wanted).unwrap();
        assert_eq!(covering.len(), 2);
        assert_eq!(covering.lookup(&wanted), read(text).lookup(&wanted));
    }

    #[test]
    fn hostile_lines_are_skipped_and_the_budget_holds() {
        let map = read(
            "ffffffffffffffff 2 wraps around\n\
             1000 0 empty\n\
             10000000000000000 1 too wide\n\
             1000 10\n\
             zz 10 not hex\n\
             1000 10 ok\n",
        );
        assert_eq!(map.len(), 1);
        assert_eq!(map.malformed(), 5);

        let long = format!("1000 10 {}\n2000 10 after\n", "x".repeat(MAX_LINE * 2));
        let map = read(&long);
        assert_eq!(
            map.len(),
            1,
            "the overlong line is skipped, the next one kept"
        );
        assert_eq!(map.malformed(), 1);
        assert_eq!(map.lookup(&BTreeSet::from([0x2000]))[&0x2000].name, "after");

        let text = "1000 10 a\n".repeat(100);
        assert!(matches!(
            PerfMap::read(text.as_bytes(), 999),
            Err(PerfMapError::TooLarge { budget: 999 })
        ));
        assert_eq!(PerfMap::read(text.as_bytes(), 1000).unwrap().len(), 100);
        // Not UTF-8: named lossily, not refused.
        let map = PerfMap::read(&b"1000 10 caf\xe9\n"[..], 100).unwrap();
        assert_eq!(
            map.lookup(&BTreeSet::from([0x1000]))[&0x1000].name,
            "caf\u{fffd}"
        );
    }
}
