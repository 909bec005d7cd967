//! tansa's HTML reports: one self-contained file per recording (no network, no server),
//! for heap recordings ([`heap`]), CPU recordings ([`cpu`]) and leak-test reports
//! ([`leaktest`]).
//!
//! Sans-I/O: each builder takes analysed reports (from `tansa-analysis`, or the JSON of a
//! leak-test report) and returns a [`Page`], which writes itself to any [`std::io::Write`].
//! The page is a fixed shell (hand-written CSS and JavaScript, embedded with
//! `include_str!`) plus one JSON blob (`<script type="application/json" id="data">`) that
//! the script draws from: charts are inline SVG, tables sortable, and a heap page's time
//! range selection filters its tables. Everything large is aggregated here, on the Rust
//! side, into a bounded number of time buckets and units ([`Limits`]), so the file stays a
//! few MB whatever the length of the recording.
//!
//! Flame graphs are not drawn here: the caller passes finished SVG documents
//! ([`FlameGraph`], e.g. from inferno) and each is embedded in its own `<iframe srcdoc>`,
//! where its own script (zoom, search) runs.

mod cpu_page;
mod heap_page;
mod leaktest_page;

use std::io::{self, Write};

use serde::Serialize;

pub use cpu_page::{CpuInput, cpu};
pub use heap_page::{HeapInput, heap, heap_configs};
pub use leaktest_page::leaktest;

/// Errors of the page builders.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HtmlError {
    /// The JSON given as a leak-test report is not one.
    #[error("not a tansa leak-test report ({found}; expected the schema {expected})")]
    NotLeaktestReport {
        /// What was found: `schema NAME`, or that there is no `schema` field.
        found: String,
        /// The schema expected.
        expected: &'static str,
    },
    /// The page data could not be serialized.
    #[error("cannot serialize the page data: {0}")]
    Json(#[from] serde_json::Error),
}

/// A finished flame graph to embed: an SVG document (as inferno writes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlameGraph {
    /// Its heading in the page ("Allocated bytes", "CPU samples", ...).
    pub title: String,
    /// The SVG document, XML declaration and doctype included or not.
    pub svg: String,
}

/// Bounds on what a page holds, whatever the size of the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most time buckets of a heap page's time line (and of each unit's series).
    pub max_buckets: usize,
    /// Units of each kind (library, function, thread) listed with their series; the rest
    /// are summed into one `(others)` row.
    pub top_units: usize,
    /// Libraries drawn as their own band in the heap chart (the rest: one `(others)` band).
    pub chart_bands: usize,
    /// Calls listed (the largest by peak).
    pub top_calls: usize,
    /// Functions of a CPU page listed.
    pub cpu_functions: usize,
    /// Lines of each annotated function's disassembly and of its source.
    pub annotation_lines: usize,
    /// Leak sites listed (those with most bytes leaked).
    pub leak_sites: usize,
    /// Improper uses listed (the most frequent).
    pub improper: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_buckets: 400,
            top_units: 60,
            chart_bands: 12,
            top_calls: 200,
            cpu_functions: 300,
            annotation_lines: 400,
            leak_sites: 300,
            improper: 100,
        }
    }
}

/// Which page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A heap recording.
    Heap,
    /// A CPU recording.
    Cpu,
    /// A leak-test report.
    Leaktest,
}

/// A built page: write it with [`Page::write`].
#[derive(Debug, Clone)]
pub struct Page {
    kind: Kind,
    title: String,
    /// The data blob, JSON, already escaped for a `<script>` element.
    data: String,
}

const CSS: &str = include_str!("../assets/page.css");
const JS_COMMON: &str = include_str!("../assets/common.js");
const JS_HEAP: &str = include_str!("../assets/heap.js");
const JS_CPU: &str = include_str!("../assets/cpu.js");
const JS_LEAKTEST: &str = include_str!("../assets/leaktest.js");

impl Page {
    fn new<T: Serialize>(kind: Kind, title: String, data: &T) -> Result<Page, HtmlError> {
        let json = serde_json::to_string(data)?;
        Ok(Page {
            kind,
            title,
            data: script_safe_json(&json),
        })
    }

    /// Which page this is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Writes the whole HTML document.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let script = match self.kind {
            Kind::Heap => JS_HEAP,
            Kind::Cpu => JS_CPU,
            Kind::Leaktest => JS_LEAKTEST,
        };
        write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
             script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; \
             frame-src 'self' about:\">\n\
             <title>{title}</title>\n<style>\n{CSS}</style>\n</head>\n<body class=\"{kind}\">\n\
             <header><h1>{title}</h1><div id=\"summary\"></div></header>\n\
             <main id=\"main\"><p id=\"loading\">Loading… (this page needs JavaScript)</p></main>\n\
             <footer>Made by tansa. Script errors: <pre id=\"errors\"></pre>\
             Rendered in <span id=\"render-ms\"></span> ms.</footer>\n\
             <script type=\"application/json\" id=\"data\">",
            title = escape_text(&self.title),
            kind = kind_name(self.kind),
        )?;
        out.write_all(self.data.as_bytes())?;
        write!(
            out,
            "</script>\n<script>\n{JS_COMMON}</script>\n<script>\n{script}</script>\n</body>\n</html>\n"
        )
    }

    /// The whole HTML document as a string.
    pub fn to_html(&self) -> String {
        let mut v = Vec::with_capacity(self.data.len() + 64 * 1024);
        // Writing to a vector cannot fail.
        let _ = self.write(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Heap => "heap",
        Kind::Cpu => "cpu",
        Kind::Leaktest => "leaktest",
    }
}

/// JSON text made safe inside a `<script>` element: `<`, `>` and `&` (only ever found
/// inside strings in JSON) become `\u003c` etc., so no `</script>` or `<!--` can appear;
/// U+2028 and U+2029 are escaped too.
fn script_safe_json(json: &str) -> String {
    let mut s = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => s.push_str("\\u003c"),
            '>' => s.push_str("\\u003e"),
            '&' => s.push_str("\\u0026"),
            '\u{2028}' => s.push_str("\\u2028"),
            '\u{2029}' => s.push_str("\\u2029"),
            c => s.push(c),
        }
    }
    s
}

/// Text escaped for HTML element content and attribute values.
fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_cannot_close_the_script_element() {
        let json = serde_json::to_string(&["</script><b>x</b><!--", "a&b", "\u{2028}"]).unwrap();
        let safe = script_safe_json(&json);
        assert!(!safe.contains('<') && !safe.contains('>') && !safe.contains('&'));
        let back: Vec<String> = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, ["</script><b>x</b><!--", "a&b", "\u{2028}"]);
    }

    #[test]
    fn titles_are_escaped() {
        let page = Page::new(Kind::Leaktest, "a</title><b>".into(), &1).unwrap();
        let html = page.to_html();
        assert!(html.contains("<title>a&lt;/title&gt;&lt;b&gt;</title>"));
        assert_eq!(
            html.matches("</script>").count(),
            3,
            "the data and the code"
        );
    }
}
