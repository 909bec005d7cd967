//! `tansa leaktest` against a real, well-known server from Debian: memcached with a memory
//! cap (`-m 8`). Filling it grows its memory up to the cap and no further, which the flow
//! must not report as a fault. Needs `memcached` (run `.ci/install-deps`).

#[path = "leaktest/common.rs"]
mod common;

use std::net::TcpListener;
use std::path::Path;

use common::{report, runs, write_plan};

/// A free loopback port (there is a small window for another process to take it).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("address").port()
}

fn memcached() -> &'static str {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        if Path::new(dir).join("memcached").exists() {
            return "memcached";
        }
    }
    panic!("memcached is not installed: run `.ci/install-deps` (it installs Debian's memcached)");
}

#[test]
fn memcached_with_a_memory_cap_is_not_a_fault() {
    let bin = memcached();
    let port = free_port();
    let client = common::server().display().to_string();
    let item = |name: &str, prefix: &str| {
        format!(
            r#"
[[item]]
name = "{name}"
command = ["{client}", "mc", "127.0.0.1", "{port}", "{{count}}", "1000", "{prefix}"]
timeout = "30s"
[[item.param]]
name = "count"
default = 2000
min = 1000
max = 64000
"#
        )
    };
    // Two items store 2000 values of 1000 bytes each; storing the same keys again reuses
    // the slab memory, so the re-tests do not grow: type-3 suspects. The sweep of `count`
    // (1000..64000 values, up to 64 MB) runs into the 8 MiB cap.
    let text = format!(
        r#"
[settings]
retest_limit = 5
readings = 3
reading_interval = "20ms"
settle = "100ms"

[thresholds]
memory = "256KiB"

[[process]]
name = "memcached"
command = ["{bin}", "-l", "127.0.0.1", "-p", "{port}", "-U", "0", "-m", "8", "-t", "2", "-u", "root"]
ready_tcp = "127.0.0.1:{port}"
start_settle = "100ms"
{}{}"#,
        item("fill", "a"),
        item("fill-other", "b")
    );
    let (_dir, p) = write_plan(&text);
    let (code, r) = report(&p);
    let proc_ = &r["processes"][0];
    let verdict = proc_["verdict"].as_str().unwrap_or_default();
    eprintln!("memcached: {verdict}: {}", proc_["reason"]);
    assert_eq!(r["summary"]["fault"], false, "{:#}", r["findings"]);
    assert!(
        ["1-b", "3-b", "not-fault", "no-growth"].contains(&verdict),
        "{verdict}"
    );
    // It did grow (the first fill allocates slab pages), so the flow had to look closer.
    assert!(runs(&r) >= 4, "{}", runs(&r));
    assert!(r["findings"].as_array().is_some_and(|f| !f.is_empty()));
    assert_eq!(code, 0);
}
