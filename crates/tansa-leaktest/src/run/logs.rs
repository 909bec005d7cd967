//! Error logs of the watched processes: text files read as they grow, and the journal.
//!
//! A file line is stamped with the time tansa read it. The target reads every file just
//! before a run starts and just after it ends, so a line written during a run is stamped
//! within that run's window; no timestamp format has to be understood.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use regex::Regex;

use crate::plan::{LogKind, LogSource};
use crate::report::LogRecord;

/// Longest log ID made from a message.
const MAX_ID: usize = 120;

/// Masks numbers (and hex) so that messages differing only in them share an ID.
static NUMBERS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"0[xX][0-9a-fA-F]+|[0-9]+").ok());

/// The log ID of an error line: the first capture group (or whole match) of `id`, else
/// the message with its numbers masked as `#`.
pub fn log_id(line: &str, id: &Regex) -> String {
    if let Some(c) = id.captures(line) {
        let m = c.get(1).or_else(|| c.get(0));
        if let Some(m) = m {
            return m.as_str().to_string();
        }
    }
    let masked = match &*NUMBERS {
        Some(re) => re.replace_all(line, "#").into_owned(),
        None => line.to_string(),
    };
    let words: Vec<&str> = masked.split_whitespace().collect();
    words.join(" ").chars().take(MAX_ID).collect()
}

/// A text file read as it grows.
#[derive(Debug)]
struct Tail {
    path: PathBuf,
    source: String,
    process: String,
    error: Regex,
    id: Regex,
    offset: u64,
    partial: Vec<u8>,
}

impl Tail {
    /// Reads what was added since the last time; returns the error records.
    fn poll(&mut self, t_ms: u64) -> Vec<LogRecord> {
        let Ok(mut f) = File::open(&self.path) else {
            return Vec::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Truncated or replaced: start over.
            self.offset = 0;
            self.partial.clear();
        }
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let Ok(n) = f.read_to_end(&mut buf) else {
            return Vec::new();
        };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        let mut out = Vec::new();
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            if self.error.is_match(text) {
                out.push(LogRecord {
                    t_ms,
                    process: self.process.clone(),
                    pid: None,
                    source: self.source.clone(),
                    id: log_id(text, &self.id),
                    message: text.to_string(),
                });
            }
        }
        out
    }
}

/// The journal, queried for time windows.
#[derive(Debug)]
struct Journal {
    process: Option<String>,
    id: Regex,
}

/// All log sources of a plan.
#[derive(Debug)]
pub struct Logs {
    tails: Vec<Tail>,
    journals: Vec<Journal>,
    records: Vec<LogRecord>,
    /// The wall-clock time of session time 0, for journal queries.
    epoch: SystemTime,
    /// Set when a journal source was asked for but the journal is not there.
    pub journal_missing: bool,
}

impl Logs {
    /// Sources of `plan_logs`; paths are relative to `base`; `outputs` maps a started
    /// process to the file its output goes to. Files are read from their current end.
    pub fn new(
        plan_logs: &[LogSource],
        base: &Path,
        outputs: &BTreeMap<String, PathBuf>,
        epoch: SystemTime,
    ) -> Logs {
        let mut tails = Vec::new();
        let mut journals = Vec::new();
        let mut journal_missing = false;
        for l in plan_logs {
            let (path, source) = match &l.kind {
                LogKind::File(p) => (base.join(p), p.display().to_string()),
                LogKind::Output(name) => match outputs.get(name) {
                    Some(p) => (p.clone(), format!("output:{name}")),
                    None => continue,
                },
                LogKind::Journal => {
                    if journal_present() {
                        journals.push(Journal {
                            process: l.process.clone(),
                            id: l.id.clone(),
                        });
                    } else {
                        journal_missing = true;
                    }
                    continue;
                }
            };
            let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            tails.push(Tail {
                path,
                source,
                process: l.process.clone().unwrap_or_default(),
                error: l.error.clone(),
                id: l.id.clone(),
                offset,
                partial: Vec::new(),
            });
        }
        Logs {
            tails,
            journals,
            records: Vec::new(),
            epoch,
            journal_missing,
        }
    }

    /// Reads what the files gained; stamps it `t_ms`.
    pub fn poll(&mut self, t_ms: u64) {
        for t in &mut self.tails {
            let new = t.poll(t_ms);
            self.records.extend(new);
        }
    }

    /// Error records from `from_ms` to `to_ms`. `pids` maps the pids of watched processes
    /// (all they had) to their names, for the journal.
    pub fn between(
        &mut self,
        from_ms: u64,
        to_ms: u64,
        pids: &BTreeMap<u32, String>,
    ) -> Vec<LogRecord> {
        let mut out: Vec<LogRecord> = self
            .records
            .iter()
            .filter(|r| (from_ms..=to_ms).contains(&r.t_ms))
            .cloned()
            .collect();
        for j in &self.journals {
            let wanted: BTreeMap<u32, String> = pids
                .iter()
                .filter(|(_, name)| j.process.as_ref().is_none_or(|p| p == *name))
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            out.extend(query_journal(self.epoch, from_ms, to_ms, &wanted, &j.id));
        }
        out.sort_by_key(|r| r.t_ms);
        out
    }
}

/// Whether systemd-journald runs here.
fn journal_present() -> bool {
    Path::new("/run/systemd/journal/socket").exists()
}

/// `journalctl` for error records of `pids` between two session times.
fn query_journal(
    epoch: SystemTime,
    from_ms: u64,
    to_ms: u64,
    pids: &BTreeMap<u32, String>,
    id: &Regex,
) -> Vec<LogRecord> {
    if pids.is_empty() {
        return Vec::new();
    }
    let at = |ms: u64| {
        let t = epoch + Duration::from_millis(ms);
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        format!("@{}.{:06}", d.as_secs(), d.subsec_micros())
    };
    let mut cmd = Command::new("journalctl");
    cmd.args(["-o", "json", "-p", "err", "-q", "--no-pager", "--since"])
        .arg(at(from_ms))
        .arg("--until")
        .arg(at(to_ms + 1));
    for pid in pids.keys() {
        cmd.arg(format!("_PID={pid}"));
    }
    let Ok(out) = cmd.output() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|line| journal_record(line, epoch, pids, id))
        .collect()
}

/// One `journalctl -o json` line as a record of a watched process.
pub fn journal_record(
    line: &str,
    epoch: SystemTime,
    pids: &BTreeMap<u32, String>,
    id: &Regex,
) -> Option<LogRecord> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let field = |k: &str| v.get(k).and_then(|x| x.as_str());
    let pid: u32 = field("_PID")?.parse().ok()?;
    let process = pids.get(&pid)?.clone();
    let message = match v.get("MESSAGE")? {
        serde_json::Value::String(s) => s.clone(),
        // Non-UTF-8 messages come as arrays of bytes.
        serde_json::Value::Array(bytes) => {
            let b: Vec<u8> = bytes
                .iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u8)
                .collect();
            String::from_utf8_lossy(&b).into_owned()
        }
        _ => return None,
    };
    let micros: u64 = field("__REALTIME_TIMESTAMP")?.parse().ok()?;
    let epoch_us = epoch.duration_since(UNIX_EPOCH).ok()?.as_micros() as u64;
    let id = match field("MESSAGE_ID") {
        Some(m) => m.to_string(),
        None => log_id(&message, id),
    };
    Some(LogRecord {
        t_ms: micros.saturating_sub(epoch_us) / 1000,
        process,
        pid: Some(pid),
        source: "journal".into(),
        id,
        message,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn seed_id() -> Regex {
        Regex::new(r"\b[0-9]{4}-[0-9]{4}-[0-9]{4}\b").unwrap()
    }

    #[test]
    fn ids_come_from_the_pattern_or_the_masked_message() {
        let id = seed_id();
        assert_eq!(
            log_id("ERROR 2498-7766-0011 recovery", &id),
            "2498-7766-0011"
        );
        assert_eq!(
            log_id("12:00:01 error: timeout after 350 ms on 0x7ffe12", &id),
            "#:#:# error: timeout after # ms on #"
        );
        let grouped = Regex::new(r"code=(\w+)").unwrap();
        assert_eq!(log_id("ERR code=E42 x", &grouped), "E42");
    }

    #[test]
    fn a_file_is_read_from_its_end_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("srv.log");
        std::fs::write(&path, "ERROR 1111-1111-1111 old, before the session\n").unwrap();
        let source = LogSource {
            kind: LogKind::File(PathBuf::from("srv.log")),
            process: Some("srv".into()),
            error: Regex::new("ERROR").unwrap(),
            id: seed_id(),
        };
        let mut logs = Logs::new(&[source], dir.path(), &BTreeMap::new(), SystemTime::now());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        write!(
            f,
            "INFO fine\nERROR 2498-7766-0011 upstream reset\nERROR half"
        )
        .unwrap();
        logs.poll(10);
        writeln!(f, " a line").unwrap();
        logs.poll(20);
        let all = logs.between(0, 100, &BTreeMap::new());
        let got: Vec<(u64, &str, &str)> = all
            .iter()
            .map(|r| (r.t_ms, r.id.as_str(), r.process.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, "2498-7766-0011", "srv"),
                (20, "ERROR half a line", "srv")
            ]
        );
        assert_eq!(logs.between(15, 30, &BTreeMap::new()).len(), 1);
    }

    #[test]
    fn journal_lines_map_to_watched_processes() {
        let epoch = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let pids = BTreeMap::from([(42, "srv".to_string())]);
        let line = r#"{"_PID":"42","MESSAGE":"ERROR 2498-7766-0011 reset","__REALTIME_TIMESTAMP":"1700000001500000","PRIORITY":"3"}"#;
        let r = journal_record(line, epoch, &pids, &seed_id()).unwrap();
        assert_eq!(
            (r.t_ms, r.process.as_str(), r.id.as_str(), r.pid),
            (1500, "srv", "2498-7766-0011", Some(42))
        );
        let with_id = r#"{"_PID":"42","MESSAGE":[104,105],"MESSAGE_ID":"abc","__REALTIME_TIMESTAMP":"1700000002000000"}"#;
        let r = journal_record(with_id, epoch, &pids, &seed_id()).unwrap();
        assert_eq!((r.message.as_str(), r.id.as_str()), ("hi", "abc"));
        let other = r#"{"_PID":"7","MESSAGE":"x","__REALTIME_TIMESTAMP":"1700000002000000"}"#;
        assert!(journal_record(other, epoch, &pids, &seed_id()).is_none());
    }
}
