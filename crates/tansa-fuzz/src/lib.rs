//! Fuzzing tansa's readers of untrusted input: recordings (the container, every frame
//! decoder, the memory, CPU and instruction-trace readers, the memory and CPU aggregators)
//! and leak-test plans.
//!
//! * [`targets`]: the targets, plain functions over bytes; each must neither panic nor
//!   abort, and must stay within [`targets::Target::memory_limit`];
//! * [`mutate`]: a structure-aware mutator (bit flips, interesting integers in frame
//!   headers and in the varints of payloads, truncation, splicing, frame duplication and
//!   removal, compressing and uncompressing frames), which recomputes the frame checksums
//!   so that mutations reach the decoders;
//! * [`craft`]: reading and rewriting recordings frame by frame (checksums, compression,
//!   event-stream fields), for the mutator, the seed corpora and tests that craft files;
//! * [`alloc`]: a counting global allocator that enforces the memory bound.
//!
//! The same targets run in two ways: replaying the corpus and a bounded mutation loop in
//! `cargo test -p tansa-fuzz` (`TANSA_FUZZ_SECONDS` per target: 30 in CI, which is how CI
//! fuzzes, and 2 elsewhere); and under libFuzzer with `cargo fuzz` (`bash fuzz/run.sh`, on
//! the stable toolchain with `--sanitizer none`) for longer, coverage-guided runs.

pub mod alloc;
pub mod craft;
pub mod mutate;
pub mod targets;

pub use targets::Target;
