//! `/proc/<pid>/stat`: name, state, parent and start time of a process.

use crate::{ProcError, proc_path};

/// The fields of `/proc/<pid>/stat` that tansa uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Process id (field 1).
    pub pid: u32,
    /// Command name, at most 15 bytes, as the kernel keeps it (field 2, without parentheses).
    pub comm: String,
    /// State letter: `R`, `S`, `D`, `Z`, `T`, ... (field 3).
    pub state: char,
    /// Parent process id (field 4).
    pub ppid: u32,
    /// Start time in clock ticks after boot (field 22).
    pub start_ticks: u64,
    /// The raw wait status of a zombie, as its parent would collect it (field 52; `None`
    /// on kernels that do not show it, and meaningless unless `state` is `Z`).
    pub exit_code: Option<i32>,
}

/// Parses the text of `/proc/<pid>/stat`.
///
/// The name (field 2) is in parentheses and may itself hold spaces and parentheses, so it
/// runs from the first `(` to the **last** `)`.
pub fn parse_stat(text: &str) -> Result<Stat, &'static str> {
    let open = text.find('(').ok_or("no '(' before the command name")?;
    let close = text.rfind(')').ok_or("no ')' after the command name")?;
    if close < open {
        return Err("')' before '('");
    }
    let pid = text[..open]
        .trim()
        .parse()
        .map_err(|_| "pid is not a number")?;
    let comm = text[open + 1..close].to_string();
    // Fields 3 onwards, so index 0 here is field 3.
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).copied().ok_or("too few fields");
    let state = field(3)?.chars().next().ok_or("empty state")?;
    let ppid = field(4)?.parse().map_err(|_| "ppid is not a number")?;
    let start_ticks = field(22)?
        .parse()
        .map_err(|_| "start time is not a number")?;
    let exit_code = field(52).ok().and_then(|f| f.parse().ok());
    Ok(Stat {
        pid,
        comm,
        state,
        ppid,
        start_ticks,
        exit_code,
    })
}

/// Reads and parses `/proc/<pid>/stat`.
pub fn read_stat(pid: u32) -> Result<Stat, ProcError> {
    let path = proc_path(pid, "stat");
    let text =
        std::fs::read_to_string(&path).map_err(|e| ProcError::from_io(pid, path.clone(), e))?;
    parse_stat(&text).map_err(|reason| ProcError::Parse { path, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_carries_its_wait_status_in_field_52() {
        // Fields 5 to 51 as zeros, except the start time (22); field 52 is the exit code.
        let mut fields: Vec<String> = (5..=51).map(|_| "0".to_string()).collect();
        fields[22 - 5] = "777".into();
        let line = format!("9 (z) Z 1 {} 256", fields.join(" "));
        let s = parse_stat(&line).unwrap();
        assert_eq!((s.state, s.ppid, s.start_ticks), ('Z', 1, 777));
        assert_eq!(s.exit_code, Some(256));
        let short = "9 (z) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5";
        assert_eq!(parse_stat(short).unwrap().exit_code, None);
    }

    #[test]
    fn parses_a_name_with_spaces_and_parentheses() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "my (odd) name");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.start_ticks, 987654);
    }

    #[test]
    fn rejects_truncated_text() {
        assert!(parse_stat("12 (x) S 1 2 3").is_err());
        assert!(parse_stat("12 x S").is_err());
        assert!(parse_stat("").is_err());
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let s = read_stat(me).unwrap();
        assert_eq!(s.pid, me);
        assert_eq!(
            s.ppid,
            rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
        );
        assert!(s.start_ticks > 0);
    }
}
