//! The byte-level protocol between tansa's in-process agent and its collector.
//!
//! The agent (a preloaded library living inside the measured program) and the collector
//! (the `tansa record` process) share memory through `memfd` segments. This crate defines,
//! without any I/O and without allocation, everything both sides must agree on:
//!
//! * [`layout`]: the shape of a shared segment (session header, ring headers, ring data) and
//!   the single-producer byte-ring protocol;
//! * [`event`]: the compact, delta-encoded records that travel through the rings and are
//!   stored unchanged in recordings (so the collector never re-encodes events);
//! * [`control`]: the fixed-size messages sent over the Unix socket that announces new
//!   sessions and segments;
//! * [`varint`]: LEB128 and zig-zag helpers;
//! * [`place`]: a process's rank and job, as parallel launchers name them in the environment.
//!
//! The crate is `no_std` so that the agent can use it on its allocation-free hook path.
#![no_std]

pub mod control;
pub mod event;
pub mod layout;
pub mod place;
pub mod varint;

/// Version of the protocol described by this crate. Both sides refuse a mismatch.
pub const PROTOCOL_VERSION: u32 = 3;
