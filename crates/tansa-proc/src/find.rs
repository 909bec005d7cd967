//! Finding processes by name.

use std::path::Path;

use crate::{ProcError, ProcKey, read_stat};

/// The kernel keeps at most this many bytes of a command name (`TASK_COMM_LEN - 1`).
const COMM_MAX: usize = 15;

/// Whether a process with command name `comm` and executable `exe` (if readable) is called
/// `name`: the command name equals it, or equals its first 15 bytes when it is longer (the
/// kernel truncates), or the executable's file name equals it.
pub fn name_matches(name: &str, comm: &str, exe: Option<&Path>) -> bool {
    if comm == name {
        return true;
    }
    if name.len() > COMM_MAX && name.is_char_boundary(COMM_MAX) && comm == &name[..COMM_MAX] {
        return true;
    }
    exe.and_then(Path::file_name)
        .is_some_and(|f| f.to_str() == Some(name))
}

/// The live (not zombie) processes called `name`, in pid order. See [`name_matches`].
pub fn find_by_name(name: &str) -> Result<Vec<ProcKey>, ProcError> {
    let dir = Path::new("/proc");
    let entries = std::fs::read_dir(dir).map_err(|source| ProcError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes come and go while we scan: skip the ones that vanish.
        let Ok(stat) = read_stat(pid) else { continue };
        if stat.state == 'Z' || stat.state == 'X' {
            continue;
        }
        let exe = std::fs::read_link(entry.path().join("exe")).ok();
        if name_matches(name, &stat.comm, exe.as_deref()) {
            found.push(ProcKey {
                pid,
                start_ticks: stat.start_ticks,
            });
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_comm_truncated_comm_and_exe() {
        assert!(name_matches("memcached", "memcached", None));
        assert!(!name_matches("memcache", "memcached", None));
        assert!(name_matches(
            "a-very-long-server-name",
            "a-very-long-ser",
            None
        ));
        assert!(name_matches(
            "srv",
            "other",
            Some(Path::new("/usr/local/bin/srv"))
        ));
        assert!(!name_matches(
            "srv",
            "other",
            Some(Path::new("/usr/bin/srv2"))
        ));
    }
}
