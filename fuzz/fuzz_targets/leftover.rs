//! libFuzzer target `leftover`: see `tansa_fuzz::targets`.
#![no_main]

use libfuzzer_sys::{fuzz_mutator, fuzz_target, fuzzer_mutate};
use tansa_fuzz::Target;
use tansa_fuzz::alloc::{self, Counting};

#[global_allocator]
static ALLOC: Counting = Counting;

const TARGET: Target = Target::Leftover;

fuzz_target!(|data: &[u8]| {
    alloc::bounded(TARGET.memory_limit(data), || TARGET.run(data));
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    tansa_fuzz::mutate::libfuzzer(TARGET, data, size, max_size, seed, |d, s, m| {
        fuzzer_mutate(d, s, m)
    })
});
