//! Finding the region's function in the program before it runs.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use tansa_analysis::cpu::annotate::names_function;
use tansa_analysis::cpu::names::{distinct_name, split_distinct_name};
use tansa_retrace::accuracy::edit_distance;
use tansa_symbols::resolve::demangle;
use tansa_symbols::{ElfFile, FunctionSymbol};

use crate::TraceError;

/// The region's function in the executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionTarget {
    /// Canonical path of the executable.
    pub exe: PathBuf,
    /// The function's name as written in the symbol table (demangled).
    pub name: String,
    /// Its address in the file.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// Resolves `program` like `execvp` does: a name without `/` is looked up in `PATH`.
pub fn resolve_program(program: &str) -> Result<PathBuf, TraceError> {
    let not_found = || TraceError::CommandNotFound(program.to_string());
    let candidate = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
        })
    };
    let p = candidate.ok_or_else(not_found)?;
    std::fs::canonicalize(&p).map_err(|_| not_found())
}

/// Up to five function names of `names` close to `wanted` (edit distance or substring).
pub fn close_matches<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let lower = wanted.to_lowercase();
    let limit = (wanted.len() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = names
        .filter_map(|n| {
            let d = edit_distance(n.as_bytes(), wanted.as_bytes());
            let contains = n.to_lowercase().contains(&lower) || lower.contains(&n.to_lowercase());
            (d <= limit || (contains && n.len() >= 3)).then_some((d, n))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(5)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// Finds function `name` in the executable `exe`: its raw or demangled spelling, else a
/// short name as `tansa annotate` takes it (`Acc::step` or `step` for
/// `calc::Acc::step(int)`; [`names_function`]), when exactly one function answers to it.
/// A name several functions answer to (two C files' `static` functions, two namespaces'
/// `step`) is refused with the candidates, each named as CPU reports name it: a name other
/// functions of the executable share is followed by its start (`dup@0x1149`,
/// [`distinct_name`]), and that form picks one ([`split_distinct_name`]).
pub fn find_region(exe: &Path, name: &str) -> Result<RegionTarget, TraceError> {
    let elf = ElfFile::open(exe)?;
    let functions: Vec<_> = elf.functions().into_iter().filter(|f| f.size > 0).collect();
    let display = |raw: &str| demangle(raw).unwrap_or_else(|| raw.to_string());
    // The starts of every name, to tell apart functions of one name.
    let mut starts: HashMap<String, BTreeSet<u64>> = HashMap::new();
    for f in &functions {
        starts
            .entry(display(&f.name))
            .or_default()
            .insert(f.address);
    }
    let distinct = |f: &FunctionSymbol| {
        let shown = display(&f.name);
        let shared = starts.get(&shown).is_some_and(|s| s.len() > 1);
        distinct_name(&shown, shared.then_some(f.address)).into_owned()
    };
    let target = |f: &FunctionSymbol| RegionTarget {
        exe: exe.to_path_buf(),
        name: distinct(f),
        address: f.address,
        size: f.size,
    };
    // The functions `wanted` names: by its exact spelling, else by a short name (aliases
    // at one address are one function).
    let named = |wanted: &str| {
        let mut found: Vec<&FunctionSymbol> = functions
            .iter()
            .filter(|f| f.name == wanted || display(&f.name) == wanted)
            .collect();
        if found.is_empty() {
            found = functions
                .iter()
                .filter(|f| names_function(&display(&f.name), wanted))
                .collect();
        }
        found.sort_by_key(|f| f.address);
        found.dedup_by_key(|f| f.address);
        found
    };
    let unknown = |suggestions: Vec<String>| TraceError::UnknownRegion {
        name: name.to_string(),
        exe: exe.display().to_string(),
        suggestions,
    };
    if let Some((function, start)) = split_distinct_name(name) {
        let found = named(function);
        return match found.iter().find(|f| f.address == start) {
            Some(f) => Ok(target(f)),
            None => Err(unknown(found.iter().map(|f| distinct(f)).collect())),
        };
    }
    match named(name).as_slice() {
        [one] => Ok(target(one)),
        [] => {
            let imported = elf.imported_names().into_iter().any(|raw| {
                let shown = display(&raw);
                raw == name || shown == name || names_function(&shown, name)
            });
            if imported {
                return Err(TraceError::RegionInLibrary {
                    name: name.to_string(),
                    exe: exe.display().to_string(),
                });
            }
            let names: Vec<String> = functions.iter().map(|f| display(&f.name)).collect();
            Err(unknown(close_matches(
                name,
                names.iter().map(String::as_str),
            )))
        }
        many => Err(TraceError::AmbiguousRegion {
            name: name.to_string(),
            exe: exe.display().to_string(),
            candidates: many.iter().map(|f| distinct(f)).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let names = ["work", "worker_loop", "main", "mix", "_start", "frobnicate"];
        assert_eq!(close_matches("wrok", names.into_iter()), vec!["work"]);
        assert_eq!(
            close_matches("worker", names.into_iter()),
            vec!["work", "worker_loop"]
        );
        assert!(close_matches("zzzzzzzz", names.into_iter()).is_empty());
    }

    #[test]
    fn regions_are_found_by_short_names_that_name_one_function() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("names.cpp");
        std::fs::write(
            &src,
            "namespace a { __attribute__((noinline)) int step(int i) { return i * 3; } }\n\
             namespace b { __attribute__((noinline)) int step(int i) { return i * 5; } }\n\
             namespace calc { struct Acc { long v = 0;\n\
               __attribute__((noinline)) long add(int i) { v += i; return v; } }; }\n\
             int main(int n, char **) { calc::Acc acc; return a::step(n) + b::step(n) + (int)acc.add(n); }\n",
        )
        .unwrap();
        let exe = dir.path().join("names");
        let ok = std::process::Command::new("c++")
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let found = |name: &str| find_region(&exe, name).map(|r| r.name);
        assert_eq!(found("calc::Acc::add(int)").unwrap(), "calc::Acc::add(int)");
        assert_eq!(found("calc::Acc::add").unwrap(), "calc::Acc::add(int)");
        assert_eq!(found("add").unwrap(), "calc::Acc::add(int)");
        assert_eq!(found("Acc::add(…)").unwrap(), "calc::Acc::add(int)");
        assert_eq!(found("b::step").unwrap(), "b::step(int)");
        match found("step") {
            Err(TraceError::AmbiguousRegion { candidates, .. }) => {
                assert_eq!(candidates, ["a::step(int)", "b::step(int)"])
            }
            other => panic!("{other:?}"),
        }
        // Not a name's last components.
        assert!(matches!(
            found("cc::Acc::add"),
            Err(TraceError::UnknownRegion { .. })
        ));
    }

    #[test]
    fn program_lookup() {
        assert!(resolve_program("sh").is_ok());
        assert!(matches!(
            resolve_program("no-such-program-tansa"),
            Err(TraceError::CommandNotFound(_))
        ));
    }
}
