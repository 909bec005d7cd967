//! The leak-test page: per watched process and resource, the measurement series with the
//! runs and their phases marked, and each verdict with the measurements that decided it.
//!
//! It is drawn from the JSON form of the report (`tansa.leaktest-report.v1`), so the same
//! page comes from `tansa leaktest PLAN --html` and from a saved `report.json`.

use serde::Serialize;

use crate::{HtmlError, Kind, Page};

/// The schema the page reads.
pub const SCHEMA: &str = "tansa.leaktest-report.v1";

#[derive(Debug, Serialize)]
struct LeaktestData<'a> {
    source: &'a str,
    report: &'a serde_json::Value,
}

/// Builds the leak-test page from the JSON form of a report; `source` names it (the plan
/// or the report's file).
pub fn leaktest(report: &serde_json::Value, source: &str) -> Result<Page, HtmlError> {
    let schema = report.get("schema").and_then(|s| s.as_str());
    if schema != Some(SCHEMA) {
        return Err(HtmlError::NotLeaktestReport {
            found: schema.map_or_else(|| "no schema field".to_string(), |s| format!("schema {s}")),
            expected: SCHEMA,
        });
    }
    Page::new(
        Kind::Leaktest,
        format!("tansa leak test: {source}"),
        &LeaktestData { source, report },
    )
}
