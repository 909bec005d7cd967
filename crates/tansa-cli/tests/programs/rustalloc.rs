// Rust's allocation paths: `Box::new` (200 boxes of 100 bytes in `boxes`) and a growing
// `Vec` (`fill`). Built with `-C opt-level=2` and either `-g` or
// `-C debuginfo=line-tables-only`.

#[inline(never)]
fn boxes(n: usize) -> Vec<Box<[u8; 100]>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        v.push(Box::new([i as u8; 100]));
    }
    v
}

#[inline(never)]
fn fill(n: usize) -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..n as u64 {
        v.push(i);
    }
    v
}

fn main() {
    let b = boxes(std::hint::black_box(200));
    let v = fill(std::hint::black_box(1000));
    println!("{} {}", b.len(), v.len());
}
