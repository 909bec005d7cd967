//! Reading files on behalf of the sampled processes' owners.
//!
//! `tansa sample` embeds the text of the source files of the code it sampled, so that
//! `tansa annotate --source` works after the sources are gone, and the names and code of
//! the modules the processes ran. When tansa runs with more privileges than the processes
//! it samples (root sampling another user's program, or the whole machine with `-a`), it
//! must read nothing on their behalf that they could not read. So a source file is
//! embedded only if *every* process whose sampled code names it (each process that mapped
//! the module whose line table names the file) runs as a user who could read it: checked
//! on the descriptor that is then read (`fstat` of the opened file, no check-then-open
//! race), from the owner, group and other permission bits against each owner's uid, gid
//! and supplementary groups, and each directory above it must be searchable by that
//! owner. A module's own file (its names and the code of the functions hit) is read under
//! the same rule ([`Owners::withheld_module`]): a program its user may run but not read
//! (mode `0711`) stays unnamed. A file must also be a regular file and no larger than the
//! budget given (4 MiB per file, 64 MiB in all).
//!
//! A process may have run as several users ([`Owners`]): as its parent's at its `fork`, as
//! its earlier image's before an `exec`, as `/proc` said when it was declared, and as
//! `/proc` says when it maps a file later (a root daemon that drops to a user and then
//! loads that user's library); a file must be readable by each of them. A process whose
//! owner cannot be read at all (gone before it was declared, and no parent known) is, for
//! a privileged recorder, someone who may read only what everyone may
//! ([`Reader::anyone`]); for an unprivileged one, its real user (the kernel checks its
//! reads anyway).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tansa_symbols::elf::Access;

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

    /// Someone whose ids are not known: may read only what every user may (the "other"
    /// permission bits), and owns no file.
    pub fn anyone() -> Reader {
        Reader {
            uid: u32::MAX,
            gid: u32::MAX,
            groups: Vec::new(),
        }
    }

    /// The owner assumed for a process whose owner could not be read and whose parent is
    /// not known: [`Reader::anyone`] when tansa is privileged, else the recorder's user.
    pub fn unknown() -> Reader {
        if privileged() {
            Reader::anyone()
        } else {
            Reader::recorder()
        }
    }

    /// The owner's effective user id ([`u32::MAX`] for [`Reader::anyone`]).
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Whether this owner could open the file of `access`, at `path`, for reading.
    fn may_read(&self, access: Access, path: &Path) -> bool {
        self.may(access.uid, access.gid, access.mode, 4) && self.may_reach(path)
    }

    fn describe(&self) -> String {
        if *self == Reader::anyone() {
            "a process whose user is not known".into()
        } else {
            format!("user {}", self.uid)
        }
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
pub(crate) fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Why a file is not read for `readers` when tansa is privileged, or `None` when it may
/// be read: each of them must be able to read it (and there must be one).
fn refused(access: Access, path: &Path, readers: &[&Reader]) -> Option<String> {
    if !privileged() {
        return None;
    }
    if readers.is_empty() {
        return Some("no sampled process is known to run the code that names it".into());
    }
    let denied: Vec<String> = readers
        .iter()
        .filter(|r| !r.may_read(access, path))
        .map(|r| r.describe())
        .collect();
    (!denied.is_empty()).then(|| {
        format!(
            "{} ran the code that names it and could not read it (tansa reads nothing for a \
             process that its user could not read)",
            denied.join(", ")
        )
    })
}

/// The text of the source file at `path` if each of `readers` (the owners of the processes
/// whose code names it) could read it, it is a regular file, and it holds at most `budget`
/// bytes of UTF-8 (lossily decoded otherwise), with its modification time. `Err` says why
/// not, when the file exists.
pub fn read(
    path: &Path,
    readers: &[&Reader],
    budget: u64,
) -> Result<(String, std::time::SystemTime), Option<String>> {
    // Non-blocking, regular files only: a FIFO or device planted at a source path must not
    // block the recorder.
    let file = tansa_symbols::elf::open_regular(path).map_err(|_| None)?;
    let meta = file.metadata().map_err(|_| None)?;
    let access = Access {
        uid: meta.uid(),
        gid: meta.gid(),
        mode: meta.mode(),
    };
    if let Some(why) = refused(access, path, readers) {
        return Err(Some(why));
    }
    if meta.len() > budget {
        return Err(None);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may have grown since fstat: never read past the budget.
    file.take(budget + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| None)?;
    if bytes.len() as u64 > budget {
        return Err(None);
    }
    let text = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Ok((text, meta.modified().unwrap_or(std::time::UNIX_EPOCH)))
}

/// Who each sampled process ran as, and which modules it mapped: whose reads a file named
/// by a module's code must be (see the [module documentation](self)).
#[derive(Debug, Default)]
pub(crate) struct Owners {
    /// The distinct owners.
    readers: Vec<Reader>,
    /// Per process (by index): the owners it ran as (indices into `readers`).
    of_process: Vec<Vec<u32>>,
    /// Per process (by index): the modules it mapped.
    modules: Vec<rustc_hash::FxHashSet<u32>>,
}

impl Owners {
    fn index(&mut self, r: Reader) -> u32 {
        match self.readers.iter().position(|x| *x == r) {
            Some(i) => i as u32,
            None => {
                self.readers.push(r);
                (self.readers.len() - 1) as u32
            }
        }
    }

    /// Declares process `p` (the next index), run by `readers`.
    pub(crate) fn declare(&mut self, p: u32, readers: impl IntoIterator<Item = Reader>) {
        let idx: Vec<u32> = readers.into_iter().map(|r| self.index(r)).collect();
        let p = p as usize;
        if self.of_process.len() <= p {
            self.of_process.resize_with(p + 1, Vec::new);
            self.modules.resize_with(p + 1, Default::default);
        }
        for i in idx {
            if !self.of_process[p].contains(&i) {
                self.of_process[p].push(i);
            }
        }
    }

    /// The owners process `p` ran as.
    pub(crate) fn of(&self, p: u32) -> Vec<Reader> {
        self.of_process
            .get(p as usize)
            .into_iter()
            .flatten()
            .map(|&i| self.readers[i as usize].clone())
            .collect()
    }

    /// Whether `p` ran as root (whose later owner may differ: it may drop to a user).
    pub(crate) fn root(&self, p: u32) -> bool {
        self.of_process
            .get(p as usize)
            .is_some_and(|v| v.iter().any(|&i| self.readers[i as usize].uid == 0))
    }

    /// Process `p` mapped `module`.
    pub(crate) fn mapped(&mut self, p: u32, module: u32) {
        if let Some(m) = self.modules.get_mut(p as usize) {
            m.insert(module);
        }
    }

    /// The modules `p` mapped.
    pub(crate) fn modules_of(&self, p: u32) -> Vec<u32> {
        self.modules
            .get(p as usize)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Per module, the owners of every process that mapped it.
    pub(crate) fn by_module(&self) -> rustc_hash::FxHashMap<u32, Vec<&Reader>> {
        let mut out: rustc_hash::FxHashMap<u32, Vec<u32>> = Default::default();
        for (readers, modules) in self.of_process.iter().zip(&self.modules) {
            for &m in modules {
                let v = out.entry(m).or_default();
                for r in readers {
                    if !v.contains(r) {
                        v.push(*r);
                    }
                }
            }
        }
        out.into_iter()
            .map(|(m, v)| (m, v.iter().map(|&i| &self.readers[i as usize]).collect()))
            .collect()
    }
}

/// Why the module file `elf` may not be read for `readers` (the owners of the processes
/// that mapped it), when tansa is privileged: one of them could not read it (a program
/// its user may run but not read).
pub(crate) fn withheld_module(elf: &tansa_symbols::ElfFile, readers: &[&Reader]) -> Option<String> {
    refused(elf.access(), elf.path(), readers)
}

/// Why the debugging information of the module file `elf` may not be read from the files
/// next to it ([`tansa_symbols::ElfFile::side_files`]) for `readers`, when tansa is
/// privileged: one of those files exists and one of them could not read it, through the
/// path the symbolizer opens or at the file it leads to (a link to a root-only file).
pub(crate) fn withheld_side_file(
    elf: &tansa_symbols::ElfFile,
    readers: &[&Reader],
) -> Option<String> {
    elf.side_files().into_iter().find_map(|path| {
        let meta = std::fs::metadata(&path).ok()?;
        let access = Access {
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        };
        let target = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let why = refused(access, &path, readers).or_else(|| refused(access, &target, readers))?;
        Some(format!("{}: {why}", path.display()))
    })
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
