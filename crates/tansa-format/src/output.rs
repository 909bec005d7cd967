//! Creating recordings safely: the one home of how tansa writes an output file.
//!
//! A recording is written to a temporary file created next to its destination with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600 (recordings hold command lines, paths,
//! source text: private unless the user widens them), and moved into place only when it is
//! complete:
//!
//! * a name the user gave (`-o FILE`) is replaced atomically by `rename(2)`, which replaces
//!   a symbolic link at that name rather than following it;
//! * a name tansa chose never replaces anything: if it exists (a file, or a symbolic link
//!   planted there), `.1`, `.2`, ... is added before the extension, and the file is linked
//!   into place with `link(2)`, which fails rather than overwrite;
//! * a recording that fails part-way is kept as `NAME.partial` (never removed: what was
//!   recorded stays readable, as far as it got);
//! * a name the user gave that is a stream rather than a file ([`is_stream`]: a character
//!   device such as `/dev/null`, a FIFO, a socket, or an open descriptor's name such as
//!   `/dev/stdout`) is written in place: replacing it would destroy a device node or a
//!   system link. The temporary file then goes to the temporary directory.
//!
//! The temporary file (`.NAME.PID.N.tmp`) is locked with `flock` while it is written. A
//! recorder killed outright (`SIGKILL`, the OOM killer) leaves it behind, unlocked:
//! [`leftovers`] finds such files for a name, so that readers can say where the recording
//! went, and complete it ([`settle_leftover`] then moves it into place).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The mode of new recordings.
pub const DEFAULT_MODE: u32 = 0o600;

/// Most numbered alternatives tried for a name tansa chose.
const MAX_SUFFIX: u32 = 10_000;

/// A recording being written: a temporary file next to its destination.
#[derive(Debug)]
pub struct OutputFile {
    temp: PathBuf,
    file: Option<File>,
    settled: bool,
}

/// How the final name is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// The user named the file: replace whatever is there (without following a link).
    Given,
    /// tansa chose the name: never replace anything; add a number if the name is taken.
    Chosen,
}

impl OutputFile {
    /// Creates a temporary file in the directory of `dest` (the current directory if it
    /// has none), readable and writable by its owner only (`mode`, normally
    /// [`DEFAULT_MODE`], further limited by the umask).
    pub fn create(dest: &Path, mode: u32) -> io::Result<OutputFile> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let dir = if is_stream(dest) {
            std::env::temp_dir()
        } else {
            dir_of(dest)
        };
        let stem = dest
            .file_name()
            .map_or_else(|| "tansa".into(), |n| n.to_string_lossy().into_owned());
        for _ in 0..100 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let temp = dir.join(format!(".{stem}.{}.{n}.tmp", std::process::id()));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&temp)
            {
                Ok(file) => {
                    // Held until the file is closed: tells readers that it is being written.
                    // A file system without locks still gets its recording.
                    // SAFETY: flock on a descriptor we own; no memory is passed.
                    let _ = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                    return Ok(OutputFile {
                        temp,
                        file: Some(file),
                        settled: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("no free temporary name in {}", dir.display()),
        ))
    }

    /// The open file, to write the recording into (once).
    pub fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }

    /// The temporary file's path.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Moves the complete recording to `dest`; returns the name it got.
    pub fn commit(mut self, dest: &Path, naming: Naming) -> io::Result<PathBuf> {
        self.file = None;
        let result = match naming {
            Naming::Given if is_stream(dest) => copy_into_stream(&self.temp, dest).map(|()| {
                let _ = std::fs::remove_file(&self.temp);
                dest.to_path_buf()
            }),
            Naming::Given if is_device(dest) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a block device: tansa does not write there",
                    dest.display()
                ),
            )),
            Naming::Given => std::fs::rename(&self.temp, dest).map(|()| dest.to_path_buf()),
            Naming::Chosen => link_unique(&self.temp, dest).inspect(|_| {
                let _ = std::fs::remove_file(&self.temp);
            }),
        };
        if result.is_ok() {
            self.settled = true;
        }
        result
    }

    /// Keeps what was written as `DEST.partial` (numbered if taken); returns its name.
    pub fn keep_partial(mut self, dest: &Path) -> io::Result<PathBuf> {
        self.file = None;
        let mut partial = dest.as_os_str().to_owned();
        partial.push(".partial");
        let got = link_unique(&self.temp, Path::new(&partial));
        if got.is_ok() {
            let _ = std::fs::remove_file(&self.temp);
            self.settled = true;
        }
        got
    }

    /// Removes the temporary file (nothing worth keeping was written).
    pub fn discard(mut self) {
        self.file = None;
        let _ = std::fs::remove_file(&self.temp);
        self.settled = true;
    }
}

impl Drop for OutputFile {
    /// A recording abandoned without a decision (a panic) is kept under its temporary name,
    /// which starts with a dot; nothing recorded is removed.
    fn drop(&mut self) {
        if !self.settled {
            self.file = None;
        }
    }
}

/// The directory `dest` is in (the current directory for a bare name).
pub fn dir_of(dest: &Path) -> PathBuf {
    match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether `dest` names a stream rather than a file, to be written in place: a character
/// device (`/dev/null`, a terminal), a FIFO or a socket, named directly or through symbolic
/// links, or an open descriptor's name (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`),
/// whatever the descriptor is open on. Opening is not tried (a FIFO without a reader would
/// block).
pub fn is_stream(dest: &Path) -> bool {
    let Ok(md) = std::fs::symlink_metadata(dest) else {
        return false;
    };
    let ft = md.file_type();
    if ft.is_char_device() || ft.is_fifo() || ft.is_socket() {
        return true;
    }
    ft.is_symlink()
        && (is_descriptor_name(dest)
            || std::fs::metadata(dest).is_ok_and(|m| {
                let t = m.file_type();
                t.is_char_device() || t.is_fifo() || t.is_socket()
            }))
}

/// Whether `dest` is a block device (never written, nor replaced).
pub fn is_device(dest: &Path) -> bool {
    std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_block_device())
}

/// Whether `path`, or a symbolic link it leads through, is an entry of a `/proc/PID/fd`
/// directory (`/dev/fd` and `/dev/stdout` lead there).
fn is_descriptor_name(path: &Path) -> bool {
    let mut p = path.to_path_buf();
    for _ in 0..8 {
        let parent = dir_of(&p);
        if let Ok(c) = parent.canonicalize()
            && c.starts_with("/proc")
            && c.file_name().is_some_and(|n| n == "fd")
        {
            return true;
        }
        match std::fs::read_link(&p) {
            Ok(t) => p = parent.join(t),
            Err(_) => return false,
        }
    }
    false
}

/// Opens the stream `dest` ([`is_stream`]) for writing in place: never created, never
/// truncated; a descriptor's name is opened for appending (the descriptor may be open on
/// a regular file, which the shell has already truncated if it was to be). A name that
/// turned into another regular file meanwhile is refused.
pub fn open_stream(dest: &Path) -> io::Result<File> {
    let descriptor = is_descriptor_name(dest);
    let file = OpenOptions::new()
        .write(true)
        .append(descriptor)
        .custom_flags(libc::O_CLOEXEC)
        .open(dest)?;
    let ft = file.metadata()?.file_type();
    if ft.is_block_device() || (ft.is_file() && !descriptor) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a stream to write to", dest.display()),
        ));
    }
    Ok(file)
}

/// Copies the complete temporary file `temp` into the stream `dest`.
fn copy_into_stream(temp: &Path, dest: &Path) -> io::Result<()> {
    let mut from = File::open(temp)?;
    let mut to = open_stream(dest)?;
    io::copy(&mut from, &mut to)?;
    Ok(())
}

/// Creates a recording in place at its final name, for a recording that must be readable
/// however tansa ends (durable recordings): `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC`,
/// mode `mode` (normally [`DEFAULT_MODE`]), and an exclusive `flock` held as long as the
/// file stays open, which tells a reader that the recording is still being written. A name
/// the user gave ([`Naming::Given`]) is refused if it exists; for a name tansa chose,
/// `.1`, `.2`, ... is added before the extension. Returns the file and its name.
pub fn create_locked(dest: &Path, naming: Naming, mode: u32) -> io::Result<(File, PathBuf)> {
    let tries = match naming {
        Naming::Given => 1,
        Naming::Chosen => MAX_SUFFIX,
    };
    for n in 0..tries {
        let candidate = if n == 0 {
            dest.to_path_buf()
        } else {
            numbered(dest, n)
        };
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&candidate)
        {
            Ok(file) => {
                // SAFETY: flock on a descriptor we own; no memory is passed.
                if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                    let e = io::Error::last_os_error();
                    let _ = std::fs::remove_file(&candidate);
                    return Err(e);
                }
                return Ok((file, candidate));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n + 1 < tries => continue,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists (a recording is never written over: remove it or choose \
                         another name)",
                        candidate.display()
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} and {MAX_SUFFIX} numbered names after it exist",
            dest.display()
        ),
    ))
}

/// A temporary file that a recorder of some name left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Its path.
    pub path: PathBuf,
    /// The process that created it (from its name).
    pub pid: u32,
    /// Its size in bytes.
    pub len: u64,
    /// Whether a process may still write it: it holds the lock, or the process that
    /// created it still runs (between closing the file and moving it into place, a
    /// recorder holds no lock).
    pub in_use: bool,
}

/// The temporary files of recordings to be named `dest` (`.NAME.PID.N.tmp` next to it)
/// that are regular files owned by the calling user, newest first. Anything else at such
/// a name (a link, someone else's file) is not ours to read and is left out.
pub fn leftovers(dest: &Path) -> Vec<Leftover> {
    let Some(name) = dest.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let dir = dir_of(dest);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(i64, Leftover)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let path = dest.with_file_name(e.file_name());
            let (leftover, of) = leftover_at(&path)?;
            (of == name).then_some(leftover)
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.path.cmp(&b.1.path)));
    found.into_iter().map(|(_, l)| l).collect()
}

/// The leftover at `path` if its name is that of a temporary recording file
/// (`.NAME.PID.N.tmp`) and it is a regular file owned by the calling user (opened without
/// following a link or blocking on a FIFO): with its modification time, and `NAME`.
fn leftover_at(path: &Path) -> Option<((i64, Leftover), String)> {
    let file_name = path.file_name()?.to_string_lossy().into_owned();
    let (rest, n) = file_name
        .strip_prefix('.')?
        .strip_suffix(".tmp")?
        .rsplit_once('.')?;
    let (name, pid) = rest.rsplit_once('.')?;
    let pid: u32 = pid.parse().ok()?;
    n.parse::<u32>().ok()?;
    if name.is_empty() {
        return None;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    if !meta.is_file() || meta.uid() != unsafe { libc::geteuid() } {
        return None;
    }
    // SAFETY: flock on a descriptor we own; released when `file` closes.
    let in_use = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0
        || Path::new(&format!("/proc/{pid}")).exists();
    Some((
        (
            meta.mtime(),
            Leftover {
                path: path.to_path_buf(),
                pid,
                len: meta.len(),
                in_use,
            },
        ),
        name.to_string(),
    ))
}

/// Whether `path` is a temporary recording file that nobody writes any more (see
/// [`leftovers`]): what a recorder killed outright left. Returns it, and the name the
/// recording was to have.
pub fn abandoned(path: &Path) -> Option<(Leftover, String)> {
    let ((_, leftover), name) = leftover_at(path)?;
    (!leftover.in_use).then_some((leftover, name))
}

/// Moves a completed leftover into place at `dest`, which must not exist (`link(2)`:
/// nothing is replaced nor followed).
pub fn settle_leftover(temp: &Path, dest: &Path) -> io::Result<()> {
    std::fs::hard_link(temp, dest)?;
    std::fs::remove_file(temp)
}

/// Moves a completed leftover to `dest`, or `dest` with `.N` before its extension if that
/// exists (never over a file); returns the name it got.
pub fn settle_leftover_unique(temp: &Path, dest: &Path) -> io::Result<PathBuf> {
    let got = link_unique(temp, dest)?;
    std::fs::remove_file(temp)?;
    Ok(got)
}

/// `dest`, or `dest` with `.N` before its extension: the first that does not exist yet, to
/// which `src` is hard-linked (`link(2)` never replaces nor follows what is at the name).
fn link_unique(src: &Path, dest: &Path) -> io::Result<PathBuf> {
    for n in 0..MAX_SUFFIX {
        let candidate = if n == 0 {
            dest.to_path_buf()
        } else {
            numbered(dest, n)
        };
        match std::fs::hard_link(src, &candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} and {MAX_SUFFIX} numbered names after it exist",
            dest.display()
        ),
    ))
}

/// `dir/stem.N.ext` for `dir/stem.ext` (`dir/name.N` without an extension).
fn numbered(dest: &Path, n: u32) -> PathBuf {
    let name = dest
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match name.split_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{n}.{ext}"),
        _ => format!("{name}.{n}"),
    };
    dest.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, symlink};

    fn write(dest: &Path, naming: Naming, text: &str) -> PathBuf {
        let mut out = OutputFile::create(dest, DEFAULT_MODE).unwrap();
        out.take_file().unwrap().write_all(text.as_bytes()).unwrap();
        out.commit(dest, naming).unwrap()
    }

    #[test]
    fn chosen_names_never_replace_and_never_follow() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("rec.tansa");
        assert_eq!(write(&dest, Naming::Chosen, "one"), dest);
        let second = write(&dest, Naming::Chosen, "two");
        assert_eq!(second, dir.path().join("rec.1.tansa"));
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "one");
        // A link planted at the next name is neither followed nor replaced.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        symlink(&victim, dir.path().join("rec.2.tansa")).unwrap();
        let third = write(&dest, Naming::Chosen, "three");
        assert_eq!(third, dir.path().join("rec.3.tansa"));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::metadata(&third).unwrap().mode() & 0o777, 0o600);
        // No temporary file is left.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn given_names_replace_a_link_without_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let dest = dir.path().join("out.tansa");
        symlink(&victim, &dest).unwrap();
        assert_eq!(write(&dest, Naming::Given, "new"), dest);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert!(!std::fs::symlink_metadata(&dest).unwrap().is_symlink());
    }

    #[test]
    fn locked_outputs_never_replace_and_hold_a_lock() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("rec.tansa");
        let (file, got) = create_locked(&dest, Naming::Given, DEFAULT_MODE).unwrap();
        assert_eq!(got, dest);
        assert_eq!(std::fs::metadata(&dest).unwrap().mode() & 0o777, 0o600);
        // Another open file description cannot take the lock while `file` is open.
        let other = File::open(&dest).unwrap();
        // SAFETY: flock on an open descriptor.
        let r = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_ne!(r, 0);
        let err = create_locked(&dest, Naming::Given, DEFAULT_MODE).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("never written over"), "{err}");
        let (_, second) = create_locked(&dest, Naming::Chosen, DEFAULT_MODE).unwrap();
        assert_eq!(second, dir.path().join("rec.1.tansa"));
        drop(file);
        // SAFETY: as above.
        let r = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(r, 0);
        // A link planted at the name is neither followed nor replaced.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let link = dir.path().join("link.tansa");
        symlink(&victim, &link).unwrap();
        assert!(create_locked(&link, Naming::Given, DEFAULT_MODE).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[test]
    fn leftovers_are_found_and_told_apart_from_files_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("rec.tansa");
        let mut writing = OutputFile::create(&dest, DEFAULT_MODE).unwrap();
        let _file = writing.take_file().unwrap();
        // What a killed recorder leaves: the same name pattern, nobody holding the lock.
        let left = dir.path().join(".rec.tansa.99999999.0.tmp");
        std::fs::write(&left, b"events").unwrap();
        // Not leftovers of this name: another name, a link, a FIFO, a bad pattern.
        std::fs::write(dir.path().join(".other.tansa.1.0.tmp"), b"x").unwrap();
        std::fs::write(dir.path().join(".rec.tansa.x.0.tmp"), b"x").unwrap();
        symlink(&left, dir.path().join(".rec.tansa.77.0.tmp")).unwrap();
        let fifo = std::ffi::CString::new(
            dir.path()
                .join(".rec.tansa.78.0.tmp")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let found = leftovers(&dest);
        assert_eq!(found.len(), 2, "{found:?}");
        let killed = found.iter().find(|l| l.pid == 99999999).unwrap();
        assert_eq!((killed.len, killed.in_use), (6, false));
        let ours = found.iter().find(|l| l.pid == std::process::id()).unwrap();
        assert!(ours.in_use, "a file being written");
        let (found_left, name) = abandoned(&killed.path).unwrap();
        assert_eq!((found_left.pid, name.as_str()), (99999999, "rec.tansa"));
        assert!(abandoned(&ours.path).is_none());
        assert!(abandoned(&dest).is_none());
        // Once complete, a leftover moves into place, and never over a file.
        settle_leftover(&left, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"events");
        assert!(!left.exists());
        std::fs::write(&left, b"again").unwrap();
        assert!(settle_leftover(&left, &dest).is_err());
        assert_eq!(std::fs::read(&dest).unwrap(), b"events");
        // Or next to it, under a free name.
        let got = settle_leftover_unique(&left, &dest).unwrap();
        assert_eq!(got, dir.path().join("rec.1.tansa"));
        assert_eq!(std::fs::read(&got).unwrap(), b"again");
        assert!(!left.exists());
        writing.discard();
    }

    #[test]
    fn a_failed_recording_is_kept_as_partial() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("rec.tansa");
        let mut out = OutputFile::create(&dest, DEFAULT_MODE).unwrap();
        out.take_file().unwrap().write_all(b"half").unwrap();
        let kept = out.keep_partial(&dest).unwrap();
        assert_eq!(kept, dir.path().join("rec.tansa.partial"));
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "half");
        assert!(!dest.exists());
    }
}
