//! What a process uses: resident and proportional set size, open file descriptors.

use crate::{ProcError, proc_path};

/// One reading of what a process uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Resident set size in bytes (`Rss:` of `smaps_rollup`).
    pub rss_bytes: u64,
    /// Proportional set size in bytes (`Pss:` of `smaps_rollup`): private pages count fully,
    /// shared pages divided by the number of processes sharing them.
    pub pss_bytes: u64,
    /// Number of open file descriptors (entries of `/proc/<pid>/fd`).
    pub fds: u64,
}

/// Parses `/proc/<pid>/smaps_rollup` and returns `(rss_bytes, pss_bytes)`.
///
/// The file holds `Name:   <n> kB` lines after a header line; only `Rss:` and `Pss:` are
/// used. Both must be present.
pub fn parse_smaps_rollup(text: &str) -> Result<(u64, u64), &'static str> {
    let mut rss = None;
    let mut pss = None;
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match name.trim() {
            "Rss" => &mut rss,
            "Pss" => &mut pss,
            _ => continue,
        };
        let mut words = rest.split_ascii_whitespace();
        let value: u64 = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or("a value is not a number")?;
        if words.next() != Some("kB") {
            return Err("a value is not in kB");
        }
        *slot = Some(value * 1024);
    }
    match (rss, pss) {
        (Some(r), Some(p)) => Ok((r, p)),
        _ => Err("no Rss or no Pss line (the process may be a zombie)"),
    }
}

/// Counts the open file descriptors of `pid`.
pub fn count_fds(pid: u32) -> Result<u64, ProcError> {
    let path = proc_path(pid, "fd");
    let dir = std::fs::read_dir(&path).map_err(|e| ProcError::from_io(pid, path.clone(), e))?;
    let mut n = 0;
    for entry in dir {
        entry.map_err(|e| ProcError::from_io(pid, path.clone(), e))?;
        n += 1;
    }
    Ok(n)
}

/// Reads what `pid` uses now.
pub fn read_usage(pid: u32) -> Result<Usage, ProcError> {
    let path = proc_path(pid, "smaps_rollup");
    let text =
        std::fs::read_to_string(&path).map_err(|e| ProcError::from_io(pid, path.clone(), e))?;
    if text.is_empty() {
        // A zombie (or a kernel thread) has no memory map.
        return Err(ProcError::Gone { pid });
    }
    let (rss_bytes, pss_bytes) =
        parse_smaps_rollup(&text).map_err(|reason| ProcError::Parse { path, reason })?;
    let fds = count_fds(pid)?;
    Ok(Usage {
        rss_bytes,
        pss_bytes,
        fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c0000000-7ffc00000000 ---p 00000000 00:00 0                          [rollup]
Rss:                1876 kB
Pss:                 371 kB
Pss_Dirty:           104 kB
Shared_Clean:       1712 kB
Private_Dirty:       104 kB
Swap:                  0 kB
";

    #[test]
    fn parses_rss_and_pss_in_bytes() {
        assert_eq!(parse_smaps_rollup(SAMPLE), Ok((1876 * 1024, 371 * 1024)));
    }

    #[test]
    fn rejects_missing_or_bad_values() {
        assert!(parse_smaps_rollup("Rss: 12 kB\n").is_err());
        assert!(parse_smaps_rollup("Rss: x kB\nPss: 1 kB\n").is_err());
        assert!(parse_smaps_rollup("Rss: 1 MB\nPss: 1 kB\n").is_err());
        assert!(parse_smaps_rollup("").is_err());
    }

    #[test]
    fn counts_a_descriptor_this_process_opens() {
        let me = std::process::id();
        let before = count_fds(me).unwrap();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let during = count_fds(me).unwrap();
        drop(f);
        // Other test threads may open files too; ours is one of them.
        assert!(during >= 1 && before >= 1);
        let u = read_usage(me).unwrap();
        assert!(u.rss_bytes > 0 && u.pss_bytes > 0 && u.pss_bytes <= u.rss_bytes);
    }
}
