//! Building the test programs at test time.

use std::path::{Path, PathBuf};

/// The flags every test program is built with (also recorded in each source file).
pub const CFLAGS: &[&str] = &["-O1", "-g", "-fno-inline"];

/// Compiles `tests/programs/<name>.c` into `dir` and returns the executable.
pub fn build(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    tansa_testkit::build(&src, dir, CFLAGS)
}
