//! The result of a leaktest session, as renderers see it.

mod model;

pub use model::{
    Cause, Ended, Finding, LogOnIncrease, LogRecord, NonRecurring, Phase, Point, Restart,
    RunOutcome, RunRecord, Type3Entry, Verdict,
};
