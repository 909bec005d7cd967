//! Links the unwinder the Rust standard library refers to (`_Unwind_*`) into the agent
//! from the C compiler's static `libgcc_eh.a`, so that the agent does not depend on
//! `libgcc_s.so.1`. Every preloaded process loads the agent's dependencies, and
//! libgcc_s costs each one an extra library to map and relocate plus its constructor,
//! which runs `cpuid` many times (slow in a virtual machine): about 90 microseconds per
//! `exec` on the development VM. The copy is private to the agent: the version script
//! of a cdylib exports only the agent's own symbols.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
}
