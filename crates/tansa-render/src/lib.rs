//! Renderers: each turns an analysed report into one output format. Adding a format never
//! touches the analysis.
//!
//! One module per report: [`memory`] (heap reports), [`leaks`] (leaking sites and their
//! causes), [`cpu`] (CPU reports and annotated listings), [`diff`] (two heap or two CPU
//! reports compared), [`retrace`] (rebuilt instruction traces), [`leaktest`] (leak-test
//! sessions).
//! Every text view starts with the same kind of header (a title line, context lines, a
//! blank line) and prints its rows through one table printer (aligned columns, the last one
//! unpadded); JSON goes through [`json`], CSV through the `csv` crate.

pub mod cpu;
pub mod diff;
mod header;
pub mod job;
pub mod leaks;
pub mod leaktest;
pub mod memory;
pub mod retrace;
mod table;

pub use table::printable;

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

/// The output formats of the unit reports (memory and CPU): adding one is a variant here
/// and an arm in [`memory::write`] and [`cpu::write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people (units shortened, bytes in KiB/MiB).
    Table,
    /// JSON: `tansa.memory-report.v1` or `tansa.cpu-report.v1`, exact figures.
    Json,
    /// CSV, one row per unit, exact figures (the report's warnings are not in it).
    Csv,
}

/// A CSV writer's error as an I/O error, keeping the writer's own (the csv crate's
/// conversion makes every error `Other`, and a closed pipe must stay one: a reader that went
/// away is not a failure).
pub(crate) fn csv_io(e: ::csv::Error) -> io::Error {
    match e.into_kind() {
        ::csv::ErrorKind::Io(io) => io,
        other => io::Error::other(format!("{other:?}")),
    }
}

/// Writes any serializable report as pretty JSON followed by a newline.
pub fn json<T: serde::Serialize>(value: &T, out: &mut dyn Write) -> io::Result<()> {
    // `io::Error::from` keeps the writer's own error (a closed pipe stays one).
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::from)?;
    writeln!(out)
}

/// Longest unit name shown in a table; longer ones lose their middle.
pub const MAX_TABLE_NAME: usize = 100;

/// A symbol name shortened for a table column (JSON and CSV keep the full name): template
/// arguments become `<…>`, parameter lists `(…)` (an empty one stays `()`), so a C++ `module!ns::Class<…>::method()`
/// stays readable; what is still longer than [`MAX_TABLE_NAME`] loses its middle.
pub fn short_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut angle = 0usize;
    let mut paren = 0usize;
    // Whether the parameter list being skipped has any.
    let mut params = false;
    let mut prev = ' ';
    for c in name.chars() {
        match c {
            // `operator<` and `operator<<` are names, not template arguments.
            // Template arguments follow a name: `<no line: ...>` and `operator<` are text.
            '<' if paren == 0
                && (angle > 0 || prev.is_alphanumeric() || prev == '_')
                && !out.ends_with("operator") =>
            {
                if angle == 0 {
                    out.push_str("<…>");
                }
                angle += 1;
            }
            '>' if angle > 0 && paren == 0 => angle -= 1,
            // A parameter list follows a name (or a template's `>`); "(anonymous
            // namespace)" and "file.c:4 (function)" do not.
            '(' if angle == 0
                && (paren > 0
                    || prev.is_alphanumeric()
                    || prev == '_'
                    || prev == '>'
                    || (out.contains("operator") && "<=!+-*/%&|^~[]".contains(prev))) =>
            {
                if paren == 0 {
                    out.push('(');
                    params = false;
                } else {
                    params = true;
                }
                paren += 1;
            }
            ')' if paren > 0 => {
                paren -= 1;
                if paren == 0 {
                    out.push_str(if params { "…)" } else { ")" });
                }
            }
            _ if paren > 0 => params = true,
            _ if angle > 0 => {}
            _ => out.push(c),
        }
        if angle == 0 && paren == 0 {
            prev = c;
        }
    }
    let n = out.chars().count();
    if n <= MAX_TABLE_NAME {
        return out;
    }
    let head_len = (MAX_TABLE_NAME - 1) / 2;
    let tail_len = MAX_TABLE_NAME - 1 - head_len;
    let head: String = out.chars().take(head_len).collect();
    let tail: String = out.chars().skip(n - tail_len).collect();
    format!("{head}…{tail}")
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

    #[test]
    fn names_for_tables() {
        use super::short_name;
        assert_eq!(
            short_name(
                "libstdc++.so.6!std::vector<std::pair<int, std::string>, std::allocator<std::pair<int, std::string> > >::_M_realloc_insert<int const&>(__gnu_cxx::__normal_iterator<int*, std::vector<int> >, int const&)"
            ),
            "libstdc++.so.6!std::vector<…>::_M_realloc_insert<…>(…)"
        );
        assert_eq!(
            short_name("containers!make_widgets()"),
            "containers!make_widgets()"
        );
        assert_eq!(short_name("app!spin"), "app!spin");
        assert_eq!(
            short_name("a!(anonymous namespace)::f(int)"),
            "a!(anonymous namespace)::f(…)"
        );
        assert_eq!(short_name("/src/app.c:4 (spin)"), "/src/app.c:4 (spin)");
        assert_eq!(
            short_name("<no line: [kernel.kallsyms]> (clear_page_erms)"),
            "<no line: [kernel.kallsyms]> (clear_page_erms)"
        );
        assert_eq!(
            short_name("a!operator<<(std::ostream&, X const&)"),
            "a!operator<<(…)"
        );
        let long = format!("m!{}", "x".repeat(300));
        assert_eq!(short_name(&long).chars().count(), super::MAX_TABLE_NAME);
    }
}
