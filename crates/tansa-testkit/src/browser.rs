//! Loading a page in headless Chromium (Debian package `chromium`, installed by
//! `.ci/install-deps`): the rendered DOM after the page's scripts ran, the console errors,
//! a screenshot.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium's path, if installed.
pub fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// What a page load gave.
#[derive(Debug)]
pub struct Loaded {
    /// The DOM after the page's scripts ran (`--dump-dom`).
    pub dom: String,
    /// Console messages at error level and uncaught exceptions Chromium logged.
    pub console_errors: Vec<String>,
}

/// Runs headless Chromium (as root too: no sandbox) on `url` with `args`, in a fresh
/// profile, killing it after `deadline`.
fn run(chromium: &Path, url: &str, args: &[String], deadline: Duration) -> (String, String) {
    let profile = std::env::temp_dir().join(format!(
        "tansa-chromium-{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).expect("chromium profile directory");
    // Output goes to files, not pipes: a page's DOM is larger than a pipe holds, and a
    // browser blocked on a full pipe never exits.
    let stdout_path = profile.join("stdout.txt");
    let stderr_path = profile.join("stderr.txt");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.join("data").display()
        ))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("chromium stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("chromium stderr file"))
        .spawn()
        .expect("start chromium");
    let started = Instant::now();
    loop {
        match child.try_wait().expect("wait for chromium") {
            Some(_) => break,
            None if started.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish loading {url} within {deadline:?}");
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let out = (read(&stdout_path), read(&stderr_path));
    let _ = std::fs::remove_dir_all(&profile);
    out
}

static PROFILES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Console errors in Chromium's log: `CONSOLE` lines at error level and uncaught
/// exceptions.
fn console_errors(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            (l.contains(":CONSOLE") && (l.contains("ERROR:") || l.contains("Uncaught")))
                || l.contains("Uncaught")
        })
        .map(str::to_string)
        .collect()
}

/// The `file://` URL of `path` (absolute), with `fragment` (`#...`) if given.
pub fn file_url(path: &Path, fragment: Option<&str>) -> String {
    let abs = path.canonicalize().expect("page exists");
    let mut url = String::from("file://");
    for b in abs.to_string_lossy().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                url.push(b as char)
            }
            _ => url.push_str(&format!("%{b:02X}")),
        }
    }
    if let Some(f) = fragment {
        url.push('#');
        url.push_str(f);
    }
    url
}

/// Loads `page` (with `#fragment`) and returns the DOM after its scripts ran.
pub fn load(chromium: &Path, page: &Path, fragment: Option<&str>) -> Loaded {
    let (dom, log) = run(
        chromium,
        &file_url(page, fragment),
        &["--dump-dom".to_string()],
        Duration::from_secs(120),
    );
    Loaded {
        dom,
        console_errors: console_errors(&log),
    }
}

/// Takes a 1400x1800 screenshot of `page` into `png`.
pub fn screenshot(chromium: &Path, page: &Path, png: &Path) {
    run(
        chromium,
        &file_url(page, None),
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1400,1800".to_string(),
            "--hide-scrollbars".to_string(),
        ],
        Duration::from_secs(120),
    );
    assert!(png.is_file(), "no screenshot at {}", png.display());
}

/// The text of the element with `id="errors"` (where tansa's pages write the script errors
/// they caught), `None` when there is no such element.
pub fn errors_element(dom: &str) -> Option<&str> {
    let start = dom.find("id=\"errors\"")?;
    let open_end = start + dom[start..].find('>')? + 1;
    let close = open_end + dom[open_end..].find("</pre>")?;
    Some(&dom[open_end..close])
}

/// The rows of the first table inside the element with `id="ID"`, each as its cells'
/// text (tags removed, entities `&lt;`, `&gt;`, `&amp;`, `&quot;` decoded).
pub fn table_rows(dom: &str, id: &str) -> Vec<Vec<String>> {
    let Some(start) = dom.find(&format!("id=\"{id}\"")) else {
        return Vec::new();
    };
    let rest = &dom[start..];
    let Some(t) = rest.find("<tbody") else {
        return Vec::new();
    };
    let end = rest[t..].find("</tbody>").map_or(rest.len(), |e| t + e);
    let body = &rest[t..end];
    body.split("<tr")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let inner = cell.split_once('>').map_or("", |(_, c)| c);
                    let inner = inner.split("</td>").next().unwrap_or("");
                    text_of(inner)
                })
                .collect()
        })
        .collect()
}

/// Text of an HTML fragment: tags removed, the common entities decoded.
pub fn text_of(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// `n` as the pages print exact figures: digits grouped by three with commas.
pub fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_grouped_like_the_pages() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(-1234567), "-1,234,567");
    }

    #[test]
    fn rows_and_errors_are_read_from_the_dom() {
        let dom = "<section id=\"x\"><table><tbody><tr><td class=\" name\">a&lt;b&gt;</td>\
                   <td class=\"num\">1,000</td></tr></tbody></table></section>\
                   <pre id=\"errors\"></pre>";
        assert_eq!(table_rows(dom, "x"), vec![vec!["a<b>", "1,000"]]);
        assert_eq!(errors_element(dom), Some(""));
    }
}
