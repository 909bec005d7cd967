//! Naming JIT-compiled code: each process's anonymous executable memory is its own module,
//! `[jit PID]`, named at the end from the perf map its runtime wrote (`/tmp/perf-PID.map`;
//! see [`tansa_symbols::perfmap`]).
//!
//! The map is written by the profiled program, and tansa may run as root: a map is read
//! only if it is a regular file (opened without following a symbolic link, and without
//! blocking on a FIFO) owned by the process's own user, no larger than [`BUDGET`], and
//! last written after the process started (a map left in `/tmp` by an earlier process
//! with the same id names other code). A map refused is said, in the recording's list of
//! modules without names.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tansa_format::cpu::Module;
use tansa_format::symtab::SymbolTableBuilder;
use tansa_format::symtab::{AddrSymbols, ModuleStatus, ModuleSymbols, NO_STRING, SymFrame};
use tansa_symbols::perfmap::PerfMap;

use crate::sources::Reader;

/// Largest perf map read (a long-running V8 process writes tens of MiB).
pub const BUDGET: u64 = 512 << 20;

/// The module path of process `pid`'s anonymous executable memory.
pub fn module_path(pid: u32) -> String {
    format!("[jit {pid}]")
}

/// The process id a [`module_path`] names.
pub fn module_pid(path: &str) -> Option<u32> {
    path.strip_prefix("[jit ")?.strip_suffix(']')?.parse().ok()
}

/// What is known of a process whose JIT code may be named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitOwner {
    /// Its owner: the map must be this user's.
    pub reader: Reader,
    /// When it started (wall clock, ms since the Unix epoch), when known: its map must
    /// have been written since.
    pub started_unix_ms: Option<u64>,
}

/// Everything naming JIT code needs: the processes' owners and start times, and where maps
/// are (`/tmp` but in tests).
#[derive(Debug, Clone)]
pub struct JitSources {
    /// Per process id (the first image of each id declared).
    pub owners: HashMap<u32, JitOwner>,
    /// The directory holding the maps.
    pub dir: PathBuf,
}

impl Default for JitSources {
    /// No process yet; maps in `/tmp`.
    fn default() -> JitSources {
        JitSources {
            owners: HashMap::new(),
            dir: PathBuf::from("/tmp"),
        }
    }
}

/// Opens `path` for `owner` as the module doc says; `Ok(None)` when there is no map.
fn open_map(path: &Path, owner: &JitOwner) -> Result<Option<std::fs::File>, String> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("it is a symbolic link".into());
        }
        Err(e) => return Err(e.to_string()),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if owner.reader == Reader::anyone() {
        return Err("the process's user is not known (it ended before tansa saw it)".into());
    }
    if meta.uid() != owner.reader.uid() {
        return Err(format!(
            "it belongs to user {}, not to the process's user {}",
            meta.uid(),
            owner.reader.uid()
        ));
    }
    if meta.len() > BUDGET {
        return Err(format!("it is larger than {BUDGET} bytes"));
    }
    // The kernel stamps files with a coarse clock: a second of slack.
    let written_ms =
        (meta.mtime().max(0) as u64) * 1000 + meta.mtime_nsec().max(0) as u64 / 1_000_000;
    if owner
        .started_unix_ms
        .is_some_and(|started| written_ms + 1000 < started)
    {
        return Err(
            "it was last written before the process started (left by an earlier process \
             with the same id?)"
                .into(),
        );
    }
    Ok(Some(file))
}

/// The symbols of the anonymous module `module` at `offsets` (absolute addresses), named
/// from its process's perf map when there is one that may be read.
pub(crate) fn module_symbols(
    module: &Module,
    offsets: &BTreeSet<u64>,
    sources: Option<&JitSources>,
    symtab: &mut SymbolTableBuilder,
) -> ModuleSymbols {
    let unnamed = |status| ModuleSymbols {
        key: u64::from(module.id),
        path: module.path.clone(),
        build_id: Vec::new(),
        status,
        addrs: offsets
            .iter()
            .map(|&o| AddrSymbols {
                offset: o,
                frames: Vec::new(),
                function_start: None,
            })
            .collect(),
        code: Vec::new(),
    };
    let (Some(sources), Some(pid)) = (sources, module_pid(&module.path)) else {
        return unnamed(ModuleStatus::NoFile);
    };
    let Some(owner) = sources.owners.get(&pid) else {
        return unnamed(ModuleStatus::NoFile);
    };
    let path = sources.dir.join(format!("perf-{pid}.map"));
    let refused = |why: String| {
        ModuleStatus::Failed(format!(
            "its perf map {} was not read: {why}",
            path.display()
        ))
    };
    let map = match open_map(&path, owner) {
        Ok(None) => return unnamed(ModuleStatus::NoFile),
        Ok(Some(file)) => match PerfMap::read_covering(file, BUDGET, offsets) {
            Ok(map) => map,
            Err(e) => return unnamed(refused(e.to_string())),
        },
        Err(why) => return unnamed(refused(why)),
    };
    let found = map.lookup(offsets);
    let addrs = offsets
        .iter()
        .map(|&o| match found.get(&o) {
            Some(s) => AddrSymbols {
                offset: o,
                frames: vec![SymFrame {
                    function: symtab.intern(s.name),
                    file: NO_STRING,
                    line: 0,
                    column: 0,
                }],
                function_start: Some(s.start),
            },
            None => AddrSymbols {
                offset: o,
                frames: Vec::new(),
                function_start: None,
            },
        })
        .collect();
    ModuleSymbols {
        key: u64::from(module.id),
        path: module.path.clone(),
        build_id: Vec::new(),
        status: ModuleStatus::Resolved,
        addrs,
        code: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tansa_format::cpu::ModuleKind;

    fn owner(uid: u32, started_unix_ms: Option<u64>) -> JitOwner {
        JitOwner {
            reader: Reader::with_ids(uid, uid),
            started_unix_ms,
        }
    }

    fn names(m: &ModuleSymbols, symtab: SymbolTableBuilder) -> Vec<Option<String>> {
        let t = symtab.finish();
        m.addrs
            .iter()
            .map(|a| {
                a.frames
                    .first()
                    .and_then(|f| t.string(f.function))
                    .map(str::to_string)
            })
            .collect()
    }

    fn resolve(dir: &Path, pid: u32, who: JitOwner) -> (ModuleSymbols, Vec<Option<String>>) {
        let sources = JitSources {
            owners: HashMap::from([(pid, who)]),
            dir: dir.to_path_buf(),
        };
        let module = Module {
            id: 3,
            path: module_path(pid),
            build_id: Vec::new(),
            kind: ModuleKind::Anonymous,
        };
        let mut symtab = SymbolTableBuilder::default();
        let m = module_symbols(
            &module,
            &BTreeSet::from([0x1004, 0x9000]),
            Some(&sources),
            &mut symtab,
        );
        let n = names(&m, symtab);
        (m, n)
    }

    fn now_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    #[test]
    fn a_map_of_the_processs_user_names_its_code_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        std::fs::write(dir.path().join("perf-42.map"), "1000 10 jit_fn\n").unwrap();

        let (m, n) = resolve(dir.path(), 42, owner(me, Some(now_ms() - 5_000)));
        assert_eq!(m.status, ModuleStatus::Resolved);
        assert_eq!(n, vec![Some("jit_fn".to_string()), None]);
        assert_eq!(m.addrs[0].function_start, Some(0x1000));

        // Another user's process: the file is not its map.
        let (m, n) = resolve(dir.path(), 42, owner(me + 1, Some(now_ms() - 5_000)));
        assert!(
            matches!(&m.status, ModuleStatus::Failed(why) if why.contains("belongs to user")),
            "{:?}",
            m.status
        );
        assert_eq!(n, vec![None, None]);

        // A process that started after the map was last written: another process's.
        let (m, _) = resolve(dir.path(), 42, owner(me, Some(now_ms() + 60_000)));
        assert!(
            matches!(&m.status, ModuleStatus::Failed(why) if why.contains("before the process started")),
            "{:?}",
            m.status
        );
        // Its start unknown: read.
        let (m, _) = resolve(dir.path(), 42, owner(me, None));
        assert_eq!(m.status, ModuleStatus::Resolved);

        // A symbolic link to a file the process's user may not read.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "1000 10 the_secret\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("perf-43.map")).unwrap();
        let (m, n) = resolve(dir.path(), 43, owner(me, Some(now_ms() - 5_000)));
        assert!(
            matches!(&m.status, ModuleStatus::Failed(why) if why.contains("symbolic link")),
            "{:?}",
            m.status
        );
        assert_eq!(n, vec![None, None]);

        // A FIFO does not block the recorder.
        let fifo = dir.path().join("perf-44.map");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (m, _) = resolve(dir.path(), 44, owner(me, Some(now_ms() - 5_000)));
        assert!(
            matches!(&m.status, ModuleStatus::Failed(why) if why.contains("regular")),
            "{:?}",
            m.status
        );

        // No map: unnamed, and nothing to say.
        let (m, n) = resolve(dir.path(), 45, owner(me, Some(now_ms() - 5_000)));
        assert_eq!(m.status, ModuleStatus::NoFile);
        assert_eq!(n, vec![None, None]);
    }

    #[test]
    fn module_paths_carry_the_process_id() {
        assert_eq!(module_pid(&module_path(1234)), Some(1234));
        assert_eq!(module_pid("[anon]"), None);
        assert_eq!(module_pid("[jit x]"), None);
        assert_eq!(module_pid("/tmp/[jit 5]"), None);
    }
}
