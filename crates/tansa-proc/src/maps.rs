//! The executable mappings of a process (`/proc/PID/maps`), for the samplers and the path
//! follower that turn runtime addresses into `(file, address in the file)`.

/// One executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecMapping {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// File offset.
    pub offset: u64,
    /// Path (a file path, which may contain spaces; `[vdso]` and the like for special
    /// mappings; empty for anonymous ones).
    pub path: String,
}

impl ExecMapping {
    /// Whether it maps a file (its path is absolute).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// The executable mappings of a `/proc/PID/maps` text, in its order (by address).
pub fn parse_exec_maps(text: &str) -> Vec<ExecMapping> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let range = it.next()?;
            let perms = it.next()?;
            let offset = u64::from_str_radix(it.next()?, 16).ok()?;
            let _dev = it.next()?;
            let _inode = it.next()?;
            let path = it.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            (perms.as_bytes().get(2) == Some(&b'x')).then_some(())?;
            Some(ExecMapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                offset,
                path,
            })
        })
        .collect()
}

/// The executable mappings of process `pid`.
pub fn read_exec_maps(pid: u32) -> std::io::Result<Vec<ExecMapping>> {
    Ok(parse_exec_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_mappings_only_with_whole_paths() {
        let text = "\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 123 /usr/bin/my prog
55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 123 /usr/bin/my prog
7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]
7f0000000000-7f0000001000 rwxp 00000000 00:00 0
garbage line
";
        let m = parse_exec_maps(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, "/usr/bin/my prog");
        assert_eq!(
            (m[0].start, m[0].end, m[0].offset),
            (0x55d0c0001000, 0x55d0c0002000, 0x1000)
        );
        assert!(m[0].is_file());
        assert_eq!(m[1].path, "[vdso]");
        assert!(!m[1].is_file());
        assert_eq!(m[2].path, "");
    }
}
