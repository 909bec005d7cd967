//! JUnit XML for CI systems: one test suite per item (and one for the idle test), one test
//! case per watched process. A fault verdict is a failure, an undeterminable one is
//! skipped, the others pass (with the verdict in `system-out`).

use std::borrow::Cow;
use std::io::{self, Write};

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};

use tansa_leaktest::flow::IDLE_ITEM;
use tansa_leaktest::report::{Finding, Report, Verdict};

/// One test case: a process under one item.
struct Case<'a> {
    process: &'a str,
    verdict: Verdict,
    findings: Vec<&'a Finding>,
}

struct Suite<'a> {
    name: &'a str,
    seconds: f64,
    cases: Vec<Case<'a>>,
}

pub(super) fn write(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let mut suites: Vec<Suite<'_>> = Vec::new();
    for it in &r.items {
        let seconds = r
            .runs
            .iter()
            .filter(|x| x.item == it.name)
            .map(|x| x.end_ms.saturating_sub(x.start_ms) as f64 / 1000.0)
            .sum();
        let cases = it
            .results
            .iter()
            .map(|res| Case {
                process: &res.process,
                verdict: res.verdict,
                findings: res.findings.iter().map(|&i| &r.findings[i]).collect(),
            })
            .collect();
        suites.push(Suite {
            name: &it.name,
            seconds,
            cases,
        });
    }
    if !r.idle.is_empty() {
        let cases = r
            .processes
            .iter()
            .map(|p| {
                let findings: Vec<&Finding> = r
                    .findings
                    .iter()
                    .filter(|f| f.process == p.name && f.item == IDLE_ITEM)
                    .collect();
                let verdict = findings
                    .iter()
                    .map(|f| f.verdict)
                    .max_by_key(|v| v.severity())
                    .unwrap_or(Verdict::NoGrowth);
                Case {
                    process: &p.name,
                    verdict,
                    findings,
                }
            })
            .collect();
        let seconds = match (r.idle.first(), r.idle.last()) {
            (Some(a), Some(b)) => b.t_ms.saturating_sub(a.t_ms) as f64 / 1000.0,
            _ => 0.0,
        };
        suites.push(Suite {
            name: IDLE_ITEM,
            seconds,
            cases,
        });
    }

    let count = |f: &dyn Fn(&Case<'_>) -> bool| -> usize {
        suites
            .iter()
            .flat_map(|s| &s.cases)
            .filter(|c| f(c))
            .count()
    };
    let tests = count(&|_| true);
    let failures = count(&|c| c.verdict.is_fault());
    let skipped = count(&|c| c.verdict == Verdict::Undeterminable);

    let mut w = Writer::new_with_indent(out, b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    w.create_element("testsuites")
        .with_attribute(("name", "tansa leaktest"))
        .with_attribute(("tests", tests.to_string().as_str()))
        .with_attribute(("failures", failures.to_string().as_str()))
        .with_attribute(("skipped", skipped.to_string().as_str()))
        .with_attribute(("time", secs(r.duration_ms as f64 / 1000.0).as_str()))
        .write_inner_content(|w| {
            for s in &suites {
                let fails = s.cases.iter().filter(|c| c.verdict.is_fault()).count();
                let skips = s
                    .cases
                    .iter()
                    .filter(|c| c.verdict == Verdict::Undeterminable)
                    .count();
                w.create_element("testsuite")
                    .with_attribute(("name", xml_safe(s.name).as_ref()))
                    .with_attribute(("tests", s.cases.len().to_string().as_str()))
                    .with_attribute(("failures", fails.to_string().as_str()))
                    .with_attribute(("errors", "0"))
                    .with_attribute(("skipped", skips.to_string().as_str()))
                    .with_attribute(("time", secs(s.seconds).as_str()))
                    .write_inner_content(|w| {
                        for c in &s.cases {
                            case(w, s.name, c)?;
                        }
                        Ok(())
                    })?;
            }
            Ok(())
        })?;
    let out = w.into_inner();
    writeln!(out)
}

fn case<W: Write>(w: &mut Writer<W>, suite: &str, c: &Case<'_>) -> io::Result<()> {
    let classname = xml_safe(&format!("leaktest.{suite}")).into_owned();
    let el = w
        .create_element("testcase")
        .with_attribute(("classname", classname.as_str()))
        .with_attribute(("name", xml_safe(c.process).as_ref()));
    if c.verdict == Verdict::NoGrowth {
        el.write_empty()?;
        return Ok(());
    }
    let worst = c
        .findings
        .iter()
        .copied()
        .find(|f| f.verdict == c.verdict)
        .or(c.findings.first().copied());
    let message = match worst {
        Some(f) => format!(
            "{} ({}): {}",
            f.verdict.code(),
            f.verdict.meaning(),
            f.reason
        ),
        None => c.verdict.meaning().to_string(),
    };
    let details = xml_safe(&details(&c.findings)).into_owned();
    let message = xml_safe(&message).into_owned();
    el.write_inner_content(|w| {
        if c.verdict.is_fault() {
            w.create_element("failure")
                .with_attribute(("type", c.verdict.code()))
                .with_attribute(("message", message.as_str()))
                .write_text_content(BytesText::new(&details))?;
            return Ok(());
        }
        if c.verdict == Verdict::Undeterminable {
            w.create_element("skipped")
                .with_attribute(("message", message.as_str()))
                .write_empty()?;
        }
        w.create_element("system-out")
            .write_text_content(BytesText::new(&details))?;
        Ok(())
    })?;
    Ok(())
}

/// The findings and their series, one line a point.
fn details(findings: &[&Finding]) -> String {
    let mut s = String::new();
    for f in findings {
        s.push_str(&format!(
            "{} ({}), {}: {}\n",
            f.verdict.code(),
            f.verdict.meaning(),
            f.resource.map_or("process", |r| r.name()),
            f.reason
        ));
        for p in &f.series {
            let Some(res) = f.resource else { continue };
            let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let run = p
                .run
                .map_or_else(|| "idle".to_string(), |r| format!("run {r}"));
            s.push_str(&format!(
                "  {run} ({}{}{}): {} -> {} ({}{})\n",
                p.phase.name(),
                if params.is_empty() { "" } else { ", " },
                params.join(" "),
                res.format(p.before.try_into().unwrap_or(i64::MAX)),
                res.format(p.after.try_into().unwrap_or(i64::MAX)),
                if p.growth >= 0 { "+" } else { "" },
                res.format(p.growth),
            ));
        }
    }
    s
}

/// `s` with the characters XML 1.0 forbids (every control character but tab, line feed
/// and carriage return) shown as `\xHH`, as the table shows them: an item's standard error
/// (colour codes, a stray NUL) and the plan's names are the report's text, and one such
/// byte makes the whole file unreadable to a JUnit reader.
fn xml_safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(forbidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut rest = s;
    while let Some(at) = rest.find(forbidden) {
        out.push_str(&rest[..at]);
        let c = rest[at..].chars().next().unwrap_or_default();
        out.push_str(&crate::table::printable(c.encode_utf8(&mut [0; 4])));
        rest = &rest[at + c.len_utf8()..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Whether XML 1.0 forbids `c` in a document (or, as DEL and the C1 controls, only
/// discourages it: a reader may refuse those too).
fn forbidden(c: char) -> bool {
    c.is_control() && !matches!(c, '\t' | '\n' | '\r')
}

fn secs(s: f64) -> String {
    format!("{s:.3}")
}
