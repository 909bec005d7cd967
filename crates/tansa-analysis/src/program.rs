//! How reports by program (`--by program`, heap and CPU) name a program: by its
//! executable's file name, by its path where two executables share that file name.

use std::collections::HashSet;

/// The file name of `path`; a program without a path ([`unknown_executable`]) whole.
fn file_name(path: &str) -> &str {
    if is_unknown_executable(path) {
        return path;
    }
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether `key` is a program without a known path, as [`unknown_executable`] names it.
pub(crate) fn is_unknown_executable(key: &str) -> bool {
    key.starts_with('[')
}

/// The key, and name, of a program whose executable's path is not known: its command's
/// name in brackets (`[worker]`, `[kworker/0:1]`, as `ps` shows a process without a
/// command line), `[?]` when that is not known either. Heap and CPU reports name such a
/// program alike.
pub(crate) fn unknown_executable(command: Option<&str>) -> String {
    format!("[{}]", command.filter(|c| !c.is_empty()).unwrap_or("?"))
}

/// The program key of a process image whose executable is `exe` (`?` or empty when not
/// known) and whose command line is `command`: the executable's path, or, without one,
/// the command's file name in brackets ([`unknown_executable`]).
pub(crate) fn image_program(exe: &str, command: &[String]) -> String {
    if exe.is_empty() || exe == "?" {
        let command = command.first().map(|c| c.rsplit('/').next().unwrap_or(c));
        return unknown_executable(command);
    }
    exe.to_string()
}

/// The short name of a process image ([`image_program`]): its executable's file name, or
/// its command's in brackets.
pub(crate) fn image_name(exe: &str, command: &[String]) -> String {
    file_name(&image_program(exe, command)).to_string()
}

/// The names of programs: one per distinct executable path of `paths`.
#[derive(Debug, Default)]
pub(crate) struct ProgramNames {
    /// File names that two or more paths share.
    shared: HashSet<String>,
}

impl ProgramNames {
    /// For the programs whose executables are `paths` (each distinct path once).
    pub(crate) fn new<'a>(paths: impl IntoIterator<Item = &'a str>) -> Self {
        let mut seen = HashSet::new();
        let mut shared = HashSet::new();
        for path in paths {
            let name = file_name(path);
            if !seen.insert(name) {
                shared.insert(name.to_string());
            }
        }
        ProgramNames { shared }
    }

    /// The name of the program whose executable is `path`.
    pub(crate) fn name(&self, path: &str) -> String {
        let name = file_name(path);
        if self.shared.contains(name) {
            path.to_string()
        } else {
            name.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ProgramNames, unknown_executable};

    #[test]
    fn a_program_without_a_path_is_named_by_its_command() {
        assert_eq!(unknown_executable(Some("worker")), "[worker]");
        assert_eq!(unknown_executable(Some("")), "[?]");
        assert_eq!(unknown_executable(None), "[?]");
        // A bracketed name is kept whole, a kernel thread's slash included (it was named
        // `0:1]`).
        let kworker = unknown_executable(Some("kworker/0:1"));
        let names = ProgramNames::new([kworker.as_str(), "[worker]", "/usr/bin/worker"]);
        assert_eq!(names.name(&kworker), "[kworker/0:1]");
        assert_eq!(names.name("[worker]"), "[worker]");
        assert_eq!(names.name("/usr/bin/worker"), "worker");
    }

    #[test]
    fn a_shared_file_name_gives_paths() {
        let paths = [
            "/usr/bin/gzip",
            "/usr/bin/python3",
            "/opt/bin/python3",
            "sh",
        ];
        let names = ProgramNames::new(paths);
        let got: Vec<String> = paths.iter().map(|p| names.name(p)).collect();
        assert_eq!(got, ["gzip", "/usr/bin/python3", "/opt/bin/python3", "sh"]);
    }
}
