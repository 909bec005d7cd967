//! Annotated listings of one function (seed reports 65 and 71): its disassembly with
//! per-instruction samples, interleaved with source lines, and its source files with
//! per-line samples. Everything comes from the recording: the function's machine code,
//! the line of every instruction and the source text were stored when it was written.

use std::collections::BTreeMap;

use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};
use rustc_hash::FxHashMap;
use tansa_format::cpu::{Loc, NewerSource};
use tansa_format::symtab::CodeBlock;

use super::names::{Names, split_distinct_name};
use super::recording::CpuRecording;

/// Why a function cannot be annotated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnnotateError {
    /// No function of that name has code in the recording.
    #[error("no function `{name}` with samples in the recording{}", hint(.candidates))]
    NotFound {
        /// What was asked for.
        name: String,
        /// The hottest functions that can be annotated.
        candidates: Vec<String>,
    },
    /// The function has no code of its own in the recording: it was inlined into others.
    #[error(
        "`{name}` has no code of its own: it was inlined into {}; annotate one of those (its \
         lines are marked there)",
        .into.join(", ")
    )]
    Inlined {
        /// What was asked for.
        name: String,
        /// The functions it was inlined into, as `module!function`, most samples first.
        into: Vec<String>,
    },
    /// The function is in the call chains but was never interrupted itself: only the code
    /// of interrupted functions is kept.
    #[error(
        "`{unit}` has no samples of its own (its time is in the functions it calls; only the \
         code of interrupted functions is kept){}",
        hint(.candidates)
    )]
    NoSelfSamples {
        /// The function, as `module!function`.
        unit: String,
        /// The hottest functions that can be annotated.
        candidates: Vec<String>,
    },
    /// The function is code generated at run time (JIT), named from its runtime's perf
    /// map: its machine code was in the process's memory, gone when it ended.
    #[error(
        "`{unit}` is code generated at run time (JIT): its instructions were not kept, so it \
         cannot be annotated; its samples are in `tansa report --by function`"
    )]
    Generated {
        /// The function, as `module!function`.
        unit: String,
    },
    /// The function was interrupted, but its machine code is not in the recording: kernel
    /// code (tansa keeps no kernel memory), or a module whose file could not be read when
    /// the recording was made.
    #[error(
        "`{unit}` has {samples} sample(s) of its own, but its instructions are not in the \
         recording ({why}), so it cannot be annotated; its samples are in `tansa report --by \
         function` and `--by instruction`"
    )]
    NoCode {
        /// The function, as `module!function`.
        unit: String,
        /// Its own samples.
        samples: u64,
        /// Why its code is not kept.
        why: &'static str,
    },
    /// Several functions match.
    #[error("`{name}` names several functions; pick one: {}", .candidates.join(", "))]
    Ambiguous {
        /// What was asked for.
        name: String,
        /// The matches, as `module!function`.
        candidates: Vec<String>,
    },
}

fn hint(candidates: &[String]) -> String {
    if candidates.is_empty() {
        String::new()
    } else {
        format!(
            " (functions with code, hottest first: {})",
            candidates.join(", ")
        )
    }
}

/// One instruction of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsmLine {
    /// Address in the module's file.
    pub address: u64,
    /// Offset from the function's start.
    pub offset: u64,
    /// Intel-syntax text.
    pub text: String,
    /// Samples that interrupted this instruction.
    pub samples: u64,
    /// Source file of the innermost (inlined) frame, if known.
    pub file: Option<String>,
    /// Its line (0 if unknown).
    pub line: u32,
    /// The function the line belongs to (differs from the annotated one when inlined).
    pub function: Option<String>,
}

/// One line of a source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    /// Line number.
    pub line: u32,
    /// Its text, if the source was stored.
    pub text: Option<String>,
    /// Samples in instructions of this line.
    pub samples: u64,
}

/// A source file's part of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceBlock {
    /// Path.
    pub file: String,
    /// Whether its text was stored in the recording.
    pub available: bool,
    /// Why the recorder did not store its text, when it said so.
    pub withheld: Option<String>,
    /// When the text stored was modified after the module naming it was built (its lines
    /// may not be the code's): by how much, and the module.
    pub newer: Option<NewerSource>,
    /// Lines from the first to the last line of the function in this file.
    pub lines: Vec<SourceLine>,
}

/// An annotated function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    /// `module!function`.
    pub unit: String,
    /// Module path.
    pub module_path: String,
    /// Start address in the module's file.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Samples in the function.
    pub samples: u64,
    /// All samples of the recording (or of the selected process).
    pub all_samples: u64,
    /// Sampling period in nanoseconds.
    pub period_ns: u64,
    /// The instructions.
    pub instructions: Vec<AsmLine>,
    /// Source files, the one with most samples first.
    pub sources: Vec<SourceBlock>,
    /// Samples at addresses inside the function that are not instruction starts (a
    /// listing mismatch; should be 0).
    pub misaligned_samples: u64,
}

/// Whether `function` (demangled, as symbols name it) is what `name` asks for: the name
/// itself, or, for a C++ or Rust name, the name without its parameters and qualifiers
/// (`Foo::bar` for `Foo::bar(int) const`), or its last components (`bar`, `Foo::bar` for
/// `ns::Foo::bar(int)`), each also as a table shortens it (`Foo::bar(…)`).
pub fn names_function(function: &str, name: &str) -> bool {
    if function == name {
        return true;
    }
    // As a table shows it: `bar(…) const` for `bar(int) const`.
    let name = if name.contains("(…)") {
        base_name(name)
    } else {
        name.strip_suffix("()").unwrap_or(name)
    };
    let base = base_name(function);
    base == name
        || base
            .strip_suffix(name)
            .is_some_and(|rest| rest.ends_with("::"))
}

/// `function` without its parameter list and what follows it (`const`, `&&`, a Rust
/// hash), at the outermost level: `ns::Foo<int>::bar` for `ns::Foo<int>::bar(int) const`.
fn base_name(function: &str) -> &str {
    let mut depth = 0i32;
    for (i, ch) in function.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 => return &function[..i],
            _ => {}
        }
    }
    function
        .rsplit_once("::h")
        .filter(|(_, hash)| hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()))
        .map_or(function, |(base, _)| base)
}

struct Candidate<'a> {
    module: u32,
    /// `module!function`, the function told apart from others of its name in the module
    /// by its start (`module!helper@0x1180`) where it needs to be.
    unit: String,
    function: &'a str,
    /// Where the function starts (its symbol's address), if known.
    start: Option<u64>,
    block: &'a CodeBlock,
}

fn candidates<'a>(rec: &'a CpuRecording, names: &Names<'a>) -> Vec<Candidate<'a>> {
    let mut out = Vec::new();
    for m in &rec.symbols.modules {
        let module = m.key as u32;
        for block in &m.code {
            let loc = Loc {
                module,
                offset: block.start,
            };
            if let Some(function) = names.function(loc) {
                out.push(Candidate {
                    module,
                    unit: names.unit(loc),
                    function,
                    start: names.function_start(loc),
                    block,
                });
            }
        }
    }
    out
}

/// Annotates the function named `name` (`function` or `module!function`, either followed by
/// `@0x` and the function's start to pick one of several functions of that name, as
/// reports name them), counting the samples of process `pid` only when given.
pub fn annotate(
    rec: &CpuRecording,
    name: &str,
    pid: Option<u32>,
) -> Result<Annotation, AnnotateError> {
    let names = Names::new(rec);
    let all = candidates(rec, &names);
    let wanted =
        |process: u32| pid.is_none_or(|pid| rec.process(process).is_some_and(|p| p.pid == pid));
    let mut counts: FxHashMap<Loc, u64> = FxHashMap::default();
    let mut all_samples = 0;
    for a in rec.addresses.iter().filter(|a| wanted(a.process)) {
        let n = counts.entry(a.pc).or_default();
        *n = n.saturating_add(a.count);
        all_samples = a.count.saturating_add(all_samples);
    }
    let in_block = |c: &Candidate<'_>| -> u64 {
        let end = c.block.start.saturating_add(c.block.bytes.len() as u64);
        counts
            .iter()
            .filter(|(l, _)| l.module == c.module && l.offset >= c.block.start && l.offset < end)
            .fold(0u64, |sum, (_, n)| sum.saturating_add(*n))
    };
    // `module!function` exactly, or the function by its name (see `names_function`).
    let (module_part, function_part) = match name.split_once('!') {
        Some((m, f)) => (Some(m), f),
        None => (None, name),
    };
    let asked = |module: &str, function: &str| {
        module_part.is_none_or(|m| m == module) && names_function(function, function_part)
    };
    // `helper@0x1180`: the function of that name that starts there.
    let at_start = split_distinct_name(function_part);
    let asked_at = |c: &Candidate<'_>| {
        at_start.is_some_and(|(function, start)| {
            c.start == Some(start)
                && module_part.is_none_or(|m| m == names.module(c.module))
                && names_function(c.function, function)
        })
    };
    let exact: Vec<&Candidate<'_>> = all.iter().filter(|c| c.unit == name).collect();
    let matches: Vec<&Candidate<'_>> = if exact.is_empty() {
        all.iter()
            .filter(|c| asked(names.module(c.module), c.function) || asked_at(c))
            .collect()
    } else {
        exact
    };
    let c = match matches.as_slice() {
        [one] => *one,
        [] => {
            let mut hot: Vec<(u64, &str)> =
                all.iter().map(|c| (in_block(c), c.unit.as_str())).collect();
            hot.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            let candidates = hot.iter().take(10).map(|h| h.1.to_string()).collect();
            return Err(not_annotated(
                rec, &names, &counts, name, &asked, candidates,
            ));
        }
        many => {
            return Err(AnnotateError::Ambiguous {
                name: name.to_string(),
                candidates: many.iter().map(|c| c.unit.clone()).collect(),
            });
        }
    };
    let start = c.block.start;
    let end = start.saturating_add(c.block.bytes.len() as u64);
    let mut decoder = Decoder::with_ip(64, &c.block.bytes, start, DecoderOptions::NONE);
    let mut formatter = IntelFormatter::new();
    let o = formatter.options_mut();
    o.set_branch_leading_zeros(false);
    o.set_leading_zeros(false);
    o.set_hex_prefix("0x");
    o.set_hex_suffix("");
    o.set_uppercase_hex(false);
    o.set_space_after_operand_separator(true);
    let mut instructions = Vec::new();
    let mut on_boundary = 0u64;
    while decoder.can_decode() {
        let instr = decoder.decode();
        let mut text = String::new();
        formatter.format(&instr, &mut text);
        let loc = Loc {
            module: c.module,
            offset: instr.ip(),
        };
        let frames = names.frames(loc);
        let inner = frames.first();
        let samples = counts.get(&loc).copied().unwrap_or(0);
        on_boundary = on_boundary.saturating_add(samples);
        instructions.push(AsmLine {
            address: instr.ip(),
            offset: instr.ip().wrapping_sub(start),
            text,
            samples,
            file: inner.and_then(|f| f.file).map(str::to_string),
            line: inner.map_or(0, |f| f.line),
            function: inner.and_then(|f| f.function).map(str::to_string),
        });
    }
    let samples = in_block(c);
    let sources = source_blocks(rec, &instructions, c.function);
    Ok(Annotation {
        unit: c.unit.clone(),
        module_path: names.module_path(c.module).to_string(),
        start,
        size: end - start,
        samples,
        all_samples,
        period_ns: rec.info.period_ns,
        instructions,
        sources,
        misaligned_samples: samples.saturating_sub(on_boundary),
    })
}

/// Why `name`, which no function with code answers to, cannot be annotated: it was inlined
/// into functions that can be, or it is known but was never interrupted, or it is not in
/// the recording at all.
fn not_annotated(
    rec: &CpuRecording,
    names: &Names<'_>,
    counts: &FxHashMap<Loc, u64>,
    name: &str,
    asked: &dyn Fn(&str, &str) -> bool,
    candidates: Vec<String>,
) -> AnnotateError {
    // Where it appears among the resolved addresses: inlined into a function (samples of
    // that address, per function), or as a function of its own.
    let mut into: FxHashMap<String, u64> = FxHashMap::default();
    let mut own: Option<String> = None;
    // Its own samples per function of that name, and whether it is kernel code.
    let mut own_samples: FxHashMap<String, (u64, bool)> = FxHashMap::default();
    for m in &rec.symbols.modules {
        let module = m.key as u32;
        let module_name = names.module(module);
        for a in &m.addrs {
            let Some((outer, inner)) = a.frames.split_last() else {
                continue;
            };
            let function = |f: &tansa_format::symtab::SymFrame| rec.symbols.string(f.function);
            if let Some(f) = function(outer).filter(|f| asked(module_name, f)) {
                let unit = format!("{module_name}!{f}");
                if names.module_kind(module) == Some(tansa_format::cpu::ModuleKind::Anonymous) {
                    return AnnotateError::Generated { unit };
                }
                let loc = Loc {
                    module,
                    offset: a.offset,
                };
                let kernel =
                    names.module_kind(module) == Some(tansa_format::cpu::ModuleKind::Kernel);
                let e = own_samples.entry(unit.clone()).or_insert((0, kernel));
                e.0 += counts.get(&loc).copied().unwrap_or(0);
                own.get_or_insert(unit);
            }
            if inner
                .iter()
                .any(|f| function(f).is_some_and(|f| asked(module_name, f)))
                && function(outer).is_some()
            {
                let loc = Loc {
                    module,
                    offset: a.offset,
                };
                let samples = counts.get(&loc).copied().unwrap_or(0);
                let n = into.entry(names.unit(loc)).or_default();
                *n = n.saturating_add(samples);
            }
        }
    }
    if !into.is_empty() {
        let mut into: Vec<(String, u64)> = into.into_iter().collect();
        into.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        return AnnotateError::Inlined {
            name: name.to_string(),
            into: into.into_iter().take(10).map(|i| i.0).collect(),
        };
    }
    // Interrupted, but without code: say why rather than that it was never interrupted.
    if let Some((unit, (samples, kernel))) = own_samples.into_iter().find(|(_, n)| n.0 > 0) {
        let why = if kernel {
            "kernel code is not kept: tansa reads no kernel memory"
        } else {
            "its module's code could not be read when the recording was made"
        };
        return AnnotateError::NoCode { unit, samples, why };
    }
    match own {
        Some(unit) => AnnotateError::NoSelfSamples { unit, candidates },
        None => AnnotateError::NotFound {
            name: name.to_string(),
            candidates,
        },
    }
}

/// How far above its first line a function's declaration is looked for.
const HEADER_SEARCH: u32 = 10;

/// Most lines listed between the first and the last line of a function beyond its source
/// text (when the text is missing, or shorter than the line numbers say): more is damage,
/// and then only the lines with instructions are listed.
const MAX_BLIND_SPAN: u32 = 10_000;

fn source_blocks(rec: &CpuRecording, instructions: &[AsmLine], function: &str) -> Vec<SourceBlock> {
    let mut per_file: BTreeMap<&str, BTreeMap<u32, u64>> = BTreeMap::new();
    for i in instructions {
        if let Some(f) = &i.file
            && i.line > 0
        {
            let n = per_file.entry(f).or_default().entry(i.line).or_default();
            *n = n.saturating_add(i.samples);
        }
    }
    let mut blocks: Vec<(u64, SourceBlock)> = per_file
        .into_iter()
        .map(|(file, lines)| {
            let text = rec.sources.iter().find(|s| s.path == file).map(|s| &s.text);
            let mut first = *lines.keys().next().unwrap_or(&1);
            let last = *lines.keys().last().unwrap_or(&first);
            let text_lines: Vec<&str> = text.map(|t| t.lines().collect()).unwrap_or_default();
            // Start at the function's declaration when it is just above.
            let bare = function.split('(').next().unwrap_or(function);
            if let Some(decl) = (first.saturating_sub(HEADER_SEARCH).max(1)..first)
                .rev()
                .find(|&n| {
                    text_lines
                        .get(n as usize - 1)
                        .is_some_and(|l| l.contains(bare))
                })
            {
                first = decl;
            }
            let total = lines.values().fold(0u64, |sum, n| sum.saturating_add(*n));
            // Every line of the span, as far as the text or a plausible span goes; beyond,
            // the lines with instructions.
            let known = u32::try_from(text_lines.len()).unwrap_or(u32::MAX);
            let listed = known.max(first.saturating_add(MAX_BLIND_SPAN)).min(last);
            let beyond = lines.range(listed.saturating_add(1)..).map(|(&n, _)| n);
            let lines = (first..=listed)
                .chain(beyond)
                .map(|n| SourceLine {
                    line: n,
                    text: text_lines.get(n as usize - 1).map(|s| s.to_string()),
                    samples: lines.get(&n).copied().unwrap_or(0),
                })
                .collect();
            (
                total,
                SourceBlock {
                    file: file.to_string(),
                    available: text.is_some(),
                    withheld: rec
                        .withheld_sources
                        .iter()
                        .find(|w| w.path == file)
                        .map(|w| w.reason.clone()),
                    newer: rec.newer_sources.iter().find(|n| n.path == file).cloned(),
                    lines,
                },
            )
        })
        .collect();
    blocks.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.file.cmp(&b.1.file)));
    blocks.into_iter().map(|b| b.1).collect()
}

#[cfg(test)]
mod name_tests {
    use super::names_function;

    #[test]
    fn functions_answer_to_their_short_names() {
        assert!(names_function("work", "work"));
        assert!(!names_function("work", "wor"));
        let cpp = "shapes::Square::area(long) const";
        assert!(names_function(cpp, cpp));
        assert!(names_function(cpp, "shapes::Square::area"));
        assert!(names_function(cpp, "Square::area"));
        assert!(names_function(cpp, "area"));
        assert!(!names_function(cpp, "rea"));
        assert!(!names_function(cpp, "e::area"));
        // As tables shorten it.
        assert!(names_function(cpp, "shapes::Square::area(…)"));
        assert!(names_function(cpp, "shapes::Square::area(…) const"));
        assert!(names_function(cpp, "area()"));
        assert!(!names_function(cpp, "rea(…)"));
        // Parentheses inside template arguments are not the parameter list.
        let t = "std::vector<void (*)(int)>::push_back(void (* const&)(int))";
        assert!(names_function(t, "push_back"));
        assert!(names_function(t, "std::vector<void (*)(int)>::push_back"));
        // A Rust symbol's hash.
        assert!(names_function("app::parse::h0123456789abcdef", "parse"));
        assert!(names_function(
            "app::parse::h0123456789abcdef",
            "app::parse"
        ));
        assert!(!names_function("app::parse::hello", "parse"));
    }
}
