//! Renderers of a leak-test [`Report`] (`tansa leaktest`): each turns it into one format,
//! and knows nothing of the flow.

mod junit;
mod table;

use std::io::{self, Write};

use tansa_leaktest::report::Report;

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
        // Schema `tansa.leaktest-report.v1` (docs/json/leaktest-report.v1.md).
        Format::Json => crate::json(report, out),
        Format::Junit => junit::write(report, out),
    }
}
