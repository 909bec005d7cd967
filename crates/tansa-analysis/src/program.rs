//! How reports by program (`--by program`, heap and CPU) name a program: by its
//! executable's file name, by its path where two executables share that file name.

use std::collections::HashSet;

/// The file name of `path`.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
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
    use super::ProgramNames;

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
