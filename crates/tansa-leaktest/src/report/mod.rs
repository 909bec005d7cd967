//! The result of a leaktest session, as renderers see it: [`Report`], built from a
//! [`crate::flow::TestSession`], serialized as JSON schema [`SCHEMA`].

mod build;
mod model;

pub use build::{
    Instance, ItemReport, ItemResult, Lists, Noise, Pair, ProcessReport, Report, SCHEMA,
    SettingsReport, Summary,
};
pub use model::{
    Cause, Ended, Finding, LogOnIncrease, LogRecord, NonRecurring, Phase, Point, Restart,
    RunOutcome, RunRecord, Type3Entry, Verdict,
};
