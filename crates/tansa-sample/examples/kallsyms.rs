//! Benchmark: how long reading and parsing `/proc/kallsyms` takes (`KernelSymbols`),
//! against a plain reading of its lines (`str::split_whitespace` and
//! `u64::from_str_radix`, the parser before). Prints the medians of ROUNDS (default 9).
//!
//! Usage: cargo run --release -p tansa-sample --example kallsyms [ROUNDS]

use std::time::{Duration, Instant};

use tansa_sample::kernel::KernelSymbols;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(9);
    let (mut read, mut parse, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    let mut symbols = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let text = std::fs::read_to_string("/proc/kallsyms").expect("/proc/kallsyms");
        read.push(t.elapsed());
        let t = Instant::now();
        let mut lines: Vec<(u64, &str)> = text
            .lines()
            .filter_map(|line| {
                let mut it = line.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let (ty, name) = (it.next()?, it.next()?);
                matches!(ty, "t" | "T" | "w" | "W").then_some((addr, name))
            })
            .collect();
        lines.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        lines.dedup_by_key(|s| s.0);
        plain.push(t.elapsed());
        let plain_len = lines.len();
        drop(lines);
        let t = Instant::now();
        symbols = KernelSymbols::parse(text).map_or(0, |k| k.len());
        parse.push(t.elapsed());
        assert!(symbols == plain_len || symbols == 0);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    println!(
        "/proc/kallsyms, {symbols} text symbols, median of {rounds}: read {:.1} ms, parse {:.1} ms (a plain reading of the lines: {:.1} ms)",
        median(&mut read),
        median(&mut parse),
        median(&mut plain)
    );
}
