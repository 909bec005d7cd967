//! Reading processes from `/proc`: the seed's initialization step (52), done after the
//! events are enabled so that no process falls between the scan and the events.

use std::path::Path;

pub use tansa_proc::maps::ExecMapping;

/// A process as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcProcess {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// `comm`.
    pub comm: String,
    /// Executable (empty for kernel threads).
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Threads: `(tid, comm)`.
    pub threads: Vec<(u32, String)>,
    /// Executable mappings.
    pub mappings: Vec<ExecMapping>,
}

impl ProcProcess {
    /// Whether it is a kernel thread (no executable, no mappings).
    pub fn is_kernel_thread(&self) -> bool {
        self.exe.is_empty() && self.mappings.is_empty()
    }
}

/// Parses the executable mappings of a `/proc/PID/maps` text.
pub fn parse_maps(text: &str) -> Vec<ExecMapping> {
    tansa_proc::maps::parse_exec_maps(text)
}

fn read_trimmed(p: &Path) -> Option<String> {
    Some(std::fs::read_to_string(p).ok()?.trim_end().to_string())
}

/// Reads one process; `None` if it does not exist (any more).
pub fn read_process(pid: u32) -> Option<ProcProcess> {
    let dir = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let comm = read_trimmed(&dir.join("comm")).unwrap_or_default();
    let exe = std::fs::read_link(dir.join("exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cmdline = std::fs::read(dir.join("cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mappings = std::fs::read_to_string(dir.join("maps"))
        .map(|t| parse_maps(&t))
        .unwrap_or_default();
    let mut threads: Vec<(u32, String)> = std::fs::read_dir(dir.join("task"))
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                let tid: u32 = e.file_name().to_str()?.parse().ok()?;
                let name = read_trimmed(&e.path().join("comm")).unwrap_or_default();
                Some((tid, name))
            })
            .collect()
        })
        .unwrap_or_default();
    threads.sort();
    Some(ProcProcess {
        pid,
        ppid: tansa_proc::stat::parse_stat(&stat).map_or(0, |s| s.ppid),
        comm,
        exe,
        cmdline,
        threads,
        mappings,
    })
}

/// Every process id in `/proc`.
pub fn all_pids() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_executable_file_mappings() {
        let m = parse_maps(
            "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/my app\n\
             55d0c0001000-55d0c0002000 r-xp 00001000 08:01 123 /usr/bin/my app\n\
             7ffd1000-7ffd3000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, "/usr/bin/my app");
        assert_eq!((m[0].start, m[0].offset), (0x55d0c0001000, 0x1000));
        assert_eq!(m[1].path, "[vdso]");
    }

    #[test]
    fn stat_with_odd_comm() {
        let me = read_process(std::process::id()).unwrap();
        assert!(!me.exe.is_empty());
        assert!(me.threads.iter().any(|t| t.0 == std::process::id()));
        assert!(!me.mappings.is_empty());
    }
}
