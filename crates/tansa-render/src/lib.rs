//! Renderers: each turns an analysed report into one output format. Adding a format never
//! touches the analysis.

pub mod cpu;
pub mod memory;
mod table;

/// A byte count for people: `512 B`, `1.5 KiB`, `2.3 MiB`, ... (negative counts, as net
/// figures can be, keep their sign). Tables use it; JSON and CSV keep exact integers.
pub fn bytes(b: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let sign = if b < 0 { "-" } else { "" };
    let abs = b.unsigned_abs();
    let mut v = abs as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{sign}{abs} B")
    } else {
        format!("{sign}{v:.1} {}", UNITS[u])
    }
}

use std::io::{self, Write};

/// Writes any serializable report as pretty JSON followed by a newline.
pub fn json<T: serde::Serialize>(value: &T, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::other)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_counts_for_people() {
        assert_eq!(super::bytes(0), "0 B");
        assert_eq!(super::bytes(1023), "1023 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(-2 * 1024 * 1024), "-2.0 MiB");
        assert_eq!(super::bytes(i64::MIN), "-8388608.0 TiB");
    }
}
