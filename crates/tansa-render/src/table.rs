//! Plain-text tables with aligned columns.

use std::borrow::Cow;
use std::io::{self, Write};

/// `s` with its control characters (escape, carriage return, DEL, ...) shown as `\xHH` or
/// `\u{H}`: names come from the programs recorded (a thread or process may name itself
/// anything), and written raw to a terminal they could move the cursor, rewrite lines or
/// send it commands.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Left-aligned (text).
    Left,
    /// Right-aligned (numbers).
    Right,
}

/// A table being built.
#[derive(Debug)]
pub struct Table {
    headers: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(headers: &[(&str, Align)]) -> Self {
        Table {
            headers: headers.iter().map(|(h, a)| (h.to_string(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as columns). Control characters in a cell are shown
    /// escaped ([`printable`]).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| printable(&c).into_owned())
                .collect(),
        );
    }

    /// Writes the table; the last column is never padded.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .map(|(h, _)| h.chars().count())
            .collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut dyn Write| -> io::Result<()> {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = widths[i].saturating_sub(c.chars().count());
                match self.headers[i].1 {
                    Align::Right => {
                        s.extend(std::iter::repeat_n(' ', pad));
                        s.push_str(c);
                    }
                    Align::Left => {
                        s.push_str(c);
                        if i + 1 < n {
                            s.extend(std::iter::repeat_n(' ', pad));
                        }
                    }
                }
            }
            writeln!(out, "{}", s.trim_end())
        };
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(h, _)| printable(h).into_owned())
            .collect();
        line(&headers, out)?;
        for r in &self.rows {
            line(r, out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that names itself with terminal escapes gets them shown, not obeyed, in
    /// tables and header lines.
    #[test]
    fn control_characters_in_names_are_shown_escaped() {
        assert_eq!(printable("plain name"), "plain name");
        assert_eq!(
            printable("a\u{1b}[31mred\r\u{7f}"),
            "a\\x1b[31mred\\x0d\\x7f"
        );
        assert_eq!(printable("c1\u{9b}2J"), "c1\\x9b2J");
        let mut t = Table::new(&[("unit", Align::Left), ("n", Align::Right)]);
        t.row(vec!["\u{1b}]0;owned\u{7}x [42]".into(), "7".into()]);
        t.row(vec!["ok".into(), "12".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("\\x1b]0;owned\\x07x [42]"), "{text}");
        // Columns align on what is shown.
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1].len(), lines[2].len(), "{text}");
        let mut h = crate::header::Header::new("title");
        h.line("process 1 `\u{1b}[2J`");
        let mut out = Vec::new();
        h.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "title\nprocess 1 `\\x1b[2J`\n\n"
        );
    }
}
