//! JSON, schema `tansa.leaktest-report.v1` (documented in `docs/json/leaktest-report.v1.md`).

use std::io::{self, Write};

use crate::report::Report;

pub(super) fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::other)?;
    writeln!(out)
}
