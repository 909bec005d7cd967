//! tansa's analyses.
//!
//! Everything here is a pure function of recorded data: no file paths, no `/proc`, no
//! system calls. Recordings are read from any `Read + Seek`; online aggregation is fed the
//! same events by the collector.

pub mod cpu;
pub mod diff;
pub mod memory;
pub mod profile;
mod program;
