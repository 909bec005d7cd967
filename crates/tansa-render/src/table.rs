//! Plain-text tables with aligned columns.

use std::io::{self, Write};

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

    /// Adds a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
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
        let headers: Vec<String> = self.headers.iter().map(|(h, _)| h.clone()).collect();
        line(&headers, out)?;
        for r in &self.rows {
            line(r, out)?;
        }
        Ok(())
    }
}
