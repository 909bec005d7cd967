//! ELF inspection and symbolization for tansa.
//!
//! tansa splits address handling in two, as blazesym does: *normalization* happens while a
//! process lives (the agent or the perf reader turns an absolute address into a module and
//! an offset in that module's file), and *symbolization* happens afterwards, here, from the
//! file alone. [`elf`] reads what recorders need from a binary (build id, load segments,
//! functions by name, code bytes, unwind extents); [`resolve`] turns module offsets into
//! function, source file, line and inlined frames and fills the recording's symbol table;
//! code no symbol covers is named by [`Unnamed`] (its `.eh_frame` extent, `fn@0x...`);
//! [`perfmap`] names JIT-compiled code from the map its runtime wrote.

pub mod elf;
pub mod extent;
pub mod perfmap;
pub mod resolve;
pub mod vdso;

pub use elf::{ElfFile, FunctionSymbol};
pub use extent::FunctionExtents;
pub use resolve::{ModuleResolution, Resolved, ResolvedFrame, Resolver, Unnamed, isolate};

/// Errors reading binaries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymbolError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not an ELF file we can parse.
    #[error("{path} is not a readable ELF file: {reason}")]
    NotElf {
        /// The file.
        path: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The file was replaced at its path since it was opened, and no copy of its contents
    /// could be made for the symbolizer.
    #[error("{path} was replaced since it was mapped, and its old contents could not be kept")]
    Replaced {
        /// The file.
        path: String,
    },
    /// The symbolizer failed.
    #[error("symbolizing {path} failed: {reason}")]
    Symbolize {
        /// The file.
        path: String,
        /// The cause.
        reason: String,
    },
}
