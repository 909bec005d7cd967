//! libFuzzer target `perf-map`: see `tansa_fuzz::targets`.
#![no_main]

#[macro_use]
mod common;

tansa_fuzz_target!(tansa_fuzz::Target::PerfMap);
