//! Renderers: each turns a [`Report`] into one format, and knows nothing of the flow.

mod json;
mod junit;
mod table;

use std::io::{self, Write};

use crate::report::Report;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A table for people.
    Table,
    /// JSON, schema `tansa.leaktest-report.v1`.
    Json,
    /// JUnit XML for CI systems.
    Junit,
}

/// Writes `report` in `format` to `out`.
pub fn write(report: &Report, format: Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        Format::Table => table::write(report, out),
        Format::Json => json::write(report, out),
        Format::Junit => junit::write(report, out),
    }
}

#[cfg(test)]
mod tests;
