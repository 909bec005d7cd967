//! The lines above a report's body, shared by every text report (memory, CPU, retrace, leak
//! test): a title line saying what the report is and how it was made, lines of context
//! (the process, losses, notes, warnings), then one blank line before the body.

use std::io::{self, Write};

/// A report header being built.
#[derive(Debug, Default)]
pub(crate) struct Header {
    lines: Vec<String>,
}

impl Header {
    /// A header whose first line is `title`.
    pub(crate) fn new(title: impl Into<String>) -> Self {
        Header {
            lines: vec![title.into()],
        }
    }

    /// Adds a line of context.
    pub(crate) fn line(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    /// Writes the lines and the blank line that ends the header.
    pub(crate) fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        for l in &self.lines {
            // Process and thread names are the programs' own: never raw to a terminal.
            writeln!(out, "{}", crate::table::printable(l))?;
        }
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn title_context_then_one_blank_line() {
        let mut h = super::Header::new("report by x");
        h.line("process 1");
        let mut out = Vec::new();
        h.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "report by x\nprocess 1\n\n"
        );
    }
}
