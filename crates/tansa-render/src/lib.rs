//! Renderers: each turns an analysed report into one output format. Adding a format never
//! touches the analysis.

pub mod cpu;
pub mod memory;
mod table;

use std::io::{self, Write};

/// Writes any serializable report as pretty JSON followed by a newline.
pub fn json<T: serde::Serialize>(value: &T, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::other)?;
    writeln!(out)
}
