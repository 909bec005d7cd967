//! Leak-cause localization (seed 001, JP 2009-217617 A) as pure functions, without I/O.
//!
//! For an allocation site whose blocks are sometimes freed and sometimes not, the method
//! traces what runs after each allocation until the block is freed (an **F** path) or the
//! *range end* returns first (an **E** path), then names where the E paths part from the F
//! paths: first the function (spec §13, Fig. 11), then the conditional branch (spec §18).
//!
//! * [`judge`]: the periodic leak judgement of a site (spec §10, Fig. 5);
//! * [`range`]: the trace range end, the innermost common caller of the allocation stack
//!   and every free stack (spec §11), and its move one caller up (spec §12.2);
//! * [`sequitur`]: the path grammar (spec §12.5–12.6): identical paths merged, shared
//!   sub-paths as rules;
//! * [`identify`]: cause functions and cause branches from the F and E paths, including
//!   splitting branch traces into single executions of each cause function (spec §16).
//!
//! The live side (following threads, talking to the agent) is `tansa_ptrace::leaks`; the
//! report (`tansa leaks`) is `tansa_analysis::memory::leaks`.

pub mod identify;
pub mod judge;
pub mod range;
pub mod sequitur;
