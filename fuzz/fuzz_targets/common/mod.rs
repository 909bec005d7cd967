//! What every libFuzzer target of tansa is: one `tansa_fuzz::Target` run within its memory
//! bound (the counting allocator aborts beyond it), mutated by tansa's structure-aware
//! mutator, which falls back on libFuzzer's own.

/// The libFuzzer entry points (and the allocator) of the target `$target`.
macro_rules! tansa_fuzz_target {
    ($target:expr) => {
        #[global_allocator]
        static ALLOC: tansa_fuzz::alloc::Counting = tansa_fuzz::alloc::Counting;

        const TARGET: tansa_fuzz::Target = $target;

        libfuzzer_sys::fuzz_target!(|data: &[u8]| {
            tansa_fuzz::alloc::bounded(TARGET.memory_limit(data), || TARGET.run(data));
        });

        libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
            tansa_fuzz::mutate::libfuzzer(TARGET, data, size, max_size, seed, |d, s, m| {
                libfuzzer_sys::fuzzer_mutate(d, s, m)
            })
        });
    };
}
