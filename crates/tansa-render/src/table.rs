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

/// A writer that shows control characters as [`printable`] does, for text written line by
/// line with names and source text in it (leak reports, annotated listings, traces): every
/// control character but newline and tab, including the C1 controls (`U+0080..U+009F`, two
/// bytes in UTF-8, which may arrive in two writes).
pub struct Printable<'a> {
    out: &'a mut dyn Write,
    /// A `0xC2` lead byte held back until the next byte says whether it starts a C1 control.
    held: bool,
}

impl<'a> Printable<'a> {
    /// Escapes what is written to `out`.
    pub fn new(out: &'a mut dyn Write) -> Self {
        Printable { out, held: false }
    }
}

impl Write for Printable<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut escaped = Vec::with_capacity(buf.len());
        for &b in buf {
            if self.held {
                self.held = false;
                if (0x80..0xa0).contains(&b) {
                    escaped.extend(format!("\\x{b:02x}").bytes());
                    continue;
                }
                escaped.push(0xc2);
            }
            match b {
                b'\n' | b'\t' => escaped.push(b),
                0..0x20 | 0x7f => escaped.extend(format!("\\x{b:02x}").bytes()),
                0xc2 => self.held = true,
                _ => escaped.push(b),
            }
        }
        self.out.write_all(&escaped)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.held) {
            self.out.write_all(&[0xc2])?;
        }
        self.out.flush()
    }
}

impl Drop for Printable<'_> {
    fn drop(&mut self) {
        if self.held {
            let _ = self.out.write_all(&[0xc2]);
        }
    }
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

    /// Text written line by line through [`Printable`] keeps newlines, tabs and other
    /// characters (`é` starts with 0xC3, `€` with 0xE2) and shows controls escaped, a C1
    /// control split across two writes included.
    #[test]
    fn printable_writer_escapes_controls_across_writes() {
        let mut buf = Vec::new();
        {
            let mut w = Printable::new(&mut buf);
            w.write_all("fn \u{1b}[2Jx\tcafé €\n".as_bytes()).unwrap();
            let csi = "\u{9b}".as_bytes();
            w.write_all(&csi[..1]).unwrap();
            w.write_all(&csi[1..]).unwrap();
            w.write_all("K \u{a0}end\u{7f}".as_bytes()).unwrap();
            w.write_all(&[0xc2]).unwrap();
        }
        // A lead byte left at the end is written as it came.
        let mut expected = "fn \\x1b[2Jx\tcafé €\n\\x9bK \u{a0}end\\x7f"
            .as_bytes()
            .to_vec();
        expected.push(0xc2);
        assert_eq!(buf, expected, "{}", String::from_utf8_lossy(&buf));
    }

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
