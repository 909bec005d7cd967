//! `tansa leaktest`: does an operation leak memory (or file descriptors) in the processes
//! of a system under test, found with as few runs as possible, and without being fooled by
//! caches that grow to a cap, warm-up, or the one-off side effects of errors.
//!
//! The method is that of Fujitsu's JP 2015-090683 A ("the seed"): measure every watched
//! process before and after each test item; re-test when it grew; repeat only what the type
//! of growth calls for. Each process that grew ends with one verdict:
//!
//! | verdict | meaning | fault |
//! |---|---|---|
//! | 1-a | steady leak: grows with every run | yes |
//! | 1-b | grows, then stops at a cap (a cache) | no |
//! | 2 | one-off growth caused by another event (an error it logs), repeatedly | yes |
//! | 3-a | grows when a condition is met (a parameter), without a cap | yes |
//! | 3-b | the same, with a cap | no |
//! | not-fault | one-off growth that did not recur (warm-up) | no |
//! | undeterminable | with the reason | no |
//!
//! Layout: [`plan`] reads the TOML plan; [`measure`] combines readings; [`judge`] holds the
//! decisions as pure functions over measurement series; [`flow`] drives the seed's flow
//! against a [`flow::Target`] (the only door to the outside world); [`report`] is the result
//! (`tansa_render::leaktest` turns it into a table, JSON or JUnit XML); [`run`] is the real
//! target, which starts processes, runs commands, reads `/proc` and tails logs.

pub mod flow;
pub mod judge;
pub mod measure;
pub mod plan;
pub mod report;
pub mod run;
