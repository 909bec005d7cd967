//! Reading source files on behalf of the sampled processes' owners.
//!
//! `tansa sample` embeds the text of the source files of the code it sampled, so that
//! `tansa annotate --source` works after the sources are gone. When tansa runs with more
//! privileges than the processes it samples (root sampling another user's program), it
//! must not copy into the recording a file that user could not read. So a file is embedded
//! only if one of the sampled processes' owners could read it: checked on the descriptor
//! that is then read (`fstat` of the opened file, no check-then-open race), from the
//! owner, group and other permission bits against each owner's uid, gid and supplementary
//! groups, and each directory above it must be searchable by that owner. A file must also
//! be a regular file and no larger than the budget given (4 MiB per file, 64 MiB in all).
//! A process whose owner cannot be read (gone before it was declared) counts as the
//! recorder's real user's.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The credentials of a sampled process's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

impl Reader {
    /// The real owner of process `pid` (its `/proc` status), if it can be read.
    pub fn of_process(pid: u32) -> Option<Reader> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|rest| {
                    rest.split_whitespace()
                        .filter_map(|v| v.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        // The effective ids decide what the process can open.
        let uid = *field("Uid:").get(1)?;
        let gid = *field("Gid:").get(1)?;
        Some(Reader {
            uid,
            gid,
            groups: field("Groups:"),
        })
    }

    /// The recorder's own real user (who started tansa): the owner assumed for a process
    /// whose owner could not be read (gone before it was declared, or a recording built
    /// from elsewhere).
    pub fn recorder() -> Reader {
        // SAFETY: getuid and getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let groups = Reader::of_process(std::process::id()).map_or_else(Vec::new, |r| r.groups);
        Reader { uid, gid, groups }
    }

    /// The owner's effective user id.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// An owner with these ids and no other group.
    #[cfg(test)]
    pub fn with_ids(uid: u32, gid: u32) -> Reader {
        Reader {
            uid,
            gid,
            groups: vec![gid],
        }
    }

    /// Whether this owner may access a file of `uid`/`gid`/`mode` for `want` (4 read, 1
    /// search).
    fn may(&self, uid: u32, gid: u32, mode: u32, want: u32) -> bool {
        if self.uid == 0 {
            return true;
        }
        let bits = if uid == self.uid {
            mode >> 6
        } else if gid == self.gid || self.groups.contains(&gid) {
            mode >> 3
        } else {
            mode
        };
        bits & want == want
    }

    /// Whether every directory above `path` is searchable by this owner.
    fn may_reach(&self, path: &Path) -> bool {
        path.ancestors().skip(1).all(|dir| {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            std::fs::metadata(dir).is_ok_and(|m| self.may(m.uid(), m.gid(), m.mode(), 1))
        })
    }
}

/// Whether tansa runs with more privileges than a sampled process may have: as root.
fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The text of the source file at `path` if one of `readers` could read it, it is a regular
/// file, and it holds at most `budget` bytes of UTF-8 (lossily decoded otherwise).
pub fn read(path: &Path, readers: &[Reader], budget: u64) -> Option<String> {
    // Non-blocking, regular files only: a FIFO or device planted at a source path must not
    // block the recorder.
    let file = tansa_symbols::elf::open_regular(path).ok()?;
    let meta = file.metadata().ok()?;
    if meta.len() > budget {
        return None;
    }
    if privileged()
        && !readers
            .iter()
            .any(|r| r.may(meta.uid(), meta.gid(), meta.mode(), 4) && r.may_reach(path))
    {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may have grown since fstat: never read past the budget.
    file.take(budget + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > budget {
        return None;
    }
    Some(
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_bits_by_owner_group_and_others() {
        let user = Reader {
            uid: 1000,
            gid: 1000,
            groups: vec![1000, 27],
        };
        assert!(user.may(1000, 0, 0o600, 4), "own file");
        assert!(!user.may(0, 0, 0o600, 4), "root's private file");
        assert!(user.may(0, 27, 0o640, 4), "a group it belongs to");
        assert!(!user.may(0, 28, 0o640, 4), "another group");
        assert!(user.may(0, 0, 0o644, 4), "world-readable");
        assert!(
            !user.may(1000, 0, 0o044, 4),
            "its own file without the owner bit"
        );
        assert!(!user.may(0, 0, 0o750, 1), "a directory it cannot search");
        let root = Reader {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        assert!(root.may(5, 5, 0o000, 4));
    }
}
