//! Renderers of the leak report ([`LeaksReport`], `tansa leaks`): a diagnosis to read,
//! and JSON (schema `tansa.leaks.v1`, docs/json/leaks.v1.md).

use std::io::{self, Write};

use tansa_analysis::memory::leaks::{
    CodePlace, FREED_BY_ANOTHER_THREAD, GROWING_SCANS, LeakCheckSummary, LeaksReport, SiteReport,
    fold_repeats,
};

/// The report as JSON (schema `tansa.leaks.v1`).
pub fn json(report: &LeaksReport, out: &mut dyn Write) -> io::Result<()> {
    crate::json(report, out)
}

fn place(p: &CodePlace) -> String {
    if p.file.is_empty() {
        p.function.clone()
    } else {
        format!("{} ({}:{})", p.function, p.file, p.line)
    }
}

/// The diagnosis to read: each leaking site (every site with `all`) with its stack, the
/// judgement, and for leak-cause recordings the range end, the cause functions and branches
/// (with the branch's source line from `source_line(file, line)`, when it gives one) and a
/// leaking path. A site that repeats one shown before, in another image of the same program
/// or through a call path of the same image that looks the same, is folded into a line
/// under it.
pub fn text(
    report: &LeaksReport,
    all: bool,
    source_line: &mut dyn FnMut(&str, u32) -> Option<String>,
    out: &mut dyn Write,
) -> io::Result<()> {
    // Names and source text are the recorded programs': never raw to a terminal.
    let out: &mut dyn Write = &mut crate::table::Printable::new(out);
    let leaking = report
        .sites
        .iter()
        .filter(|s| s.judgement == "leaking")
        .count();
    let shown: Vec<&SiteReport> = report
        .sites
        .iter()
        .filter(|s| all || s.worth_showing())
        .collect();
    let groups = fold_repeats(&shown);
    let image = |i: usize| (shown[i].pid, shown[i].session);
    let (mut in_other_images, mut in_same_image) = (false, false);
    for (first, same) in &groups {
        for &i in same {
            if image(i) == image(*first) {
                in_same_image = true;
            } else {
                in_other_images = true;
            }
        }
    }
    let folded = match (in_other_images, in_same_image) {
        (false, false) => String::new(),
        (true, false) => format!(
            "; {} shown below, the others repeating them in other runs of the same program",
            groups.len()
        ),
        (false, true) => format!(
            "; {} shown below, the others repeating them through call paths that look the same",
            groups.len()
        ),
        (true, true) => format!(
            "; {} shown below, the others repeating them in other runs of the same program or \
             through call paths that look the same",
            groups.len()
        ),
    };
    writeln!(
        out,
        "{leaking} leaking allocation site(s) of {}{folded}{}",
        report.sites.len(),
        if report.leak_cause {
            ""
        } else {
            " (record with --leak-cause to find why they leak)"
        }
    )?;
    if let Some(check) = &report.leak_check {
        let lost = report.sites.iter().filter(|s| s.lost_at_exit()).count();
        leak_check(check, lost, out)?;
    }
    for (first, same) in groups {
        let s = shown[first];
        site(s, source_line, out)?;
        if s.tracing.is_none()
            && s.judgement == "leaking"
            && let Some(ms) = report.scan_interval_ms
        {
            // Judged offline over the whole run; the recorder judges while it runs, and
            // traces only what it judged leaking then.
            writeln!(
                out,
                "   not traced: the recorder did not judge it leaking while the program ran (it \
                 judges every {ms} ms the events read so far, and a site leaks once its blocks \
                 outstanding grew at {GROWING_SCANS} scans in a row, so a run shorter than {} ms \
                 is never traced, nor one whose events were read only at its end; \
                 --scan-interval judges more often)",
                u64::from(ms) * (GROWING_SCANS as u64 + 1)
            )?;
        }
        if same.is_empty() {
            continue;
        }
        // Repeats in this very image: stacks that differ only where the frames above do
        // not show it (return addresses in functions without line numbers, say).
        let (here, elsewhere): (Vec<usize>, Vec<usize>) =
            same.iter().partition(|&&i| image(i) == image(first));
        let repeats = if s.judgement == "leaking" {
            "is leaking".to_string()
        } else {
            format!("({}) repeats", s.judgement)
        };
        if !here.is_empty() {
            writeln!(
                out,
                "   the same site {repeats} through {} more call path(s) of this process that \
                 look the same ({}): {}",
                here.len(),
                site_numbers(&shown, &here),
                still_allocated(&shown, &here)
            )?;
        }
        if !elsewhere.is_empty() {
            writeln!(
                out,
                "   the same site {repeats} in {} more process image(s) of {} ({}): {}",
                elsewhere.len(),
                program_name(&s.exe),
                site_numbers(&shown, &elsewhere),
                still_allocated(&shown, &elsewhere)
            )?;
        }
    }
    for f in &report.trace_failures {
        writeln!(out, "\nnote: a trace could not be taken: {f}")?;
    }
    Ok(())
}

/// The leak check's summary, as Valgrind's leak summary reads; `lost_sites` allocation sites
/// that lost blocks are listed below it.
fn leak_check(check: &LeakCheckSummary, lost_sites: usize, out: &mut dyn Write) -> io::Result<()> {
    leak_check_summary(check, out)?;
    if lost_sites > 0 {
        writeln!(
            out,
            "   {lost_sites} allocation site(s) lost blocks: shown below with the leaking ones"
        )?;
    }
    Ok(())
}

/// The leak check's summary lines (`tansa leaks` and the heap report).
pub(crate) fn leak_check_summary(check: &LeakCheckSummary, out: &mut dyn Write) -> io::Result<()> {
    let x = &check.at_exit;
    let not_checked = match check.images_not_checked {
        0 => String::new(),
        n => format!(
            "; {n} process image(s) not checked (they ended otherwise than by exit: a signal, \
             _exit or exec)"
        ),
    };
    writeln!(
        out,
        "leak check at exit of {} process image(s){not_checked}:",
        check.images_checked
    )?;
    writeln!(
        out,
        "   definitely lost: {} in {} block(s)\n   indirectly lost: {} in {} block(s)\n   \
         still reachable: {} in {} block(s)",
        bytes(x.definite_bytes),
        x.definite_blocks,
        bytes(x.indirect_bytes),
        x.indirect_blocks,
        bytes(x.reachable_bytes),
        x.reachable_blocks
    )?;
    if x.released_blocks > 0 {
        writeln!(
            out,
            "   freed by the C library unseen: {} in {} block(s) (not lost: glibc releases \
             some of its own blocks at exit with calls no hook sees)",
            bytes(x.released_bytes),
            x.released_blocks
        )?;
    }
    Ok(())
}

fn bytes(n: u64) -> String {
    format!("{n} byte(s)")
}

/// `#3, #5, ...` for the sites `which` of `shown`, the first 8 of them.
fn site_numbers(shown: &[&SiteReport], which: &[usize]) -> String {
    const LISTED: usize = 8;
    let mut numbers: Vec<String> = which
        .iter()
        .take(LISTED)
        .map(|&i| format!("#{}", shown[i].index))
        .collect();
    if which.len() > LISTED {
        numbers.push(format!("{} more", which.len() - LISTED));
    }
    numbers.join(", ")
}

/// What the sites `which` of `shown` still hold, together.
fn still_allocated(shown: &[&SiteReport], which: &[usize]) -> String {
    let (blocks, bytes) = which.iter().fold((0u64, 0u64), |(n, b), &i| {
        (
            n.saturating_add(shown[i].leaked_blocks),
            b.saturating_add(shown[i].leaked_bytes),
        )
    });
    format!("{blocks} block(s), {bytes} byte(s) still allocated there")
}

/// Callers shown after a site: 6, or as many more (up to 16 in all) as it takes to show
/// the first frame of the program's own code, when the site and those 6 are all in
/// libraries or in code compiled from the toolchain's headers and sources (a Rust `Vec`
/// grows some 7 frames below the function that pushed; a C++ container as deep).
fn shown_callers(stack: &[CodePlace], site_frame: usize, program: &str) -> std::ops::Range<usize> {
    const SHOWN: usize = 6;
    const MOST: usize = 16;
    let start = (site_frame + 1).min(stack.len());
    let end = (start + SHOWN).min(stack.len());
    let own = |f: &CodePlace| {
        let in_program = !program.is_empty()
            && f.function
                .split_once('!')
                .is_some_and(|(module, _)| module == program);
        in_program && !f.file.is_empty() && !is_toolchain_source(&f.file)
    };
    if stack.get(site_frame..end).is_none_or(|s| s.iter().any(own)) {
        return start..end;
    }
    match stack[end..(start + MOST).min(stack.len())]
        .iter()
        .position(own)
    {
        Some(i) => start..end + i + 1,
        None => start..end,
    }
}

/// Whether `file` is a source of the compiler's or the language's library (C++ headers,
/// Rust's standard library and the crates it is built with, as `hashbrown` for
/// `HashMap`), or of a Rust dependency from a registry: compiled into the program, but not
/// its own code.
fn is_toolchain_source(file: &str) -> bool {
    file.starts_with("/usr/include/")
        || file.starts_with("/usr/lib/gcc/")
        || file.starts_with("/rustc/")
        || file.starts_with("/rust/deps/")
        || file.contains("/.rustup/toolchains/")
        || file.contains("/.cargo/registry/")
        || file.contains("/.cargo/git/")
}

/// The file name of a program's path (empty when unknown).
fn program_name(exe: &str) -> &str {
    exe.rsplit('/').next().unwrap_or(exe)
}

fn site(
    s: &SiteReport,
    source_line: &mut dyn FnMut(&str, u32) -> Option<String>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let rank = s.rank.map(|r| format!(", rank {r}")).unwrap_or_default();
    // The program too: one process runs several when it calls `exec`, and a script's
    // processes run the same programs over and over.
    let program = match program_name(&s.exe) {
        "" => String::new(),
        name => format!(" {name}"),
    };
    writeln!(
        out,
        "\n#{} {}: {} (process {}{program}{rank})",
        s.index,
        s.judgement,
        place(&s.site),
        s.pid
    )?;
    match s.inherited_from {
        Some(parent) => writeln!(
            out,
            "   allocated by process {} before it forked this one; {} inherited block(s), {} \
             byte(s) lost at the end",
            parent.pid, s.leaked_blocks, s.leaked_bytes
        )?,
        None => writeln!(
            out,
            "   {} allocation(s), {} free(s); {} block(s), {} byte(s) still allocated at the \
             end",
            s.allocations, s.frees, s.leaked_blocks, s.leaked_bytes
        )?,
    }
    if let Some(x) = s.at_exit.filter(|_| s.lost_at_exit()) {
        let parts: Vec<String> = [
            (x.definite_blocks, x.definite_bytes, "definitely lost"),
            (x.indirect_blocks, x.indirect_bytes, "indirectly lost"),
            (x.reachable_blocks, x.reachable_bytes, "still reachable"),
        ]
        .iter()
        .filter(|p| p.0 > 0)
        .map(|(n, b, how)| format!("{n} block(s), {b} byte(s) {how}"))
        .collect();
        writeln!(out, "   at exit: {}", parts.join("; "))?;
    }
    // The allocator's own frames (C++ `operator new`, Rust's shims) come before the site:
    // named by the innermost, they would leave out the site's callers.
    if let Some(entry) = s.stack.first().filter(|_| s.site_frame > 0) {
        let more = match s.site_frame - 1 {
            0 => String::new(),
            n => format!(" and {n} more allocator frame(s)"),
        };
        writeln!(out, "     through {}{more}", place(entry))?;
    }
    let callers = shown_callers(&s.stack, s.site_frame, program_name(&s.exe));
    for f in &s.stack[callers] {
        writeln!(out, "     called from {}", place(f))?;
    }
    let Some(status) = &s.tracing else {
        return Ok(());
    };
    let traced = s.traces.freed + s.traces.not_freed + s.traces.freed_elsewhere;
    if status == "failed" && traced == 0 {
        return writeln!(
            out,
            "   not traced: every trace of it failed (the notes below say why)"
        );
    }
    if status == "busy" && traced == 0 {
        return writeln!(
            out,
            "   not traced: each allocation here after the recorder asked for traces came while \
             another trace of the process was in flight (one at a time), or when none was left \
             to take (a longer run of the same work gives it more chances)"
        );
    }
    if status == "not-handed-over" && traced == 0 {
        return writeln!(
            out,
            "   not traced: allocations here after the recorder asked for traces never reached \
             the agent's hand-over to the tracer (allocations a signal handler makes while it \
             interrupts an allocator call cannot be traced); a longer run does not change that"
        );
    }
    if status == "ended" && traced == 0 {
        // Judged leaking from events read after its last allocation (the recorder read a
        // short, busy run's events at its end), or its traces failed (the report's
        // warnings say why).
        return writeln!(
            out,
            "   not traced: judged leaking only as the program ended, and no later allocation \
             here was traced (a longer run of the same work traces it)"
        );
    }
    if traced == 0 && !matches!(status.as_str(), "covered" | "limit") {
        // Why tracing could not start, as the recorder said.
        return writeln!(out, "   not traced: {status}");
    }
    let elsewhere = match s.traces.freed_elsewhere {
        0 => String::new(),
        n => format!(", {n} freed by another thread"),
    };
    writeln!(
        out,
        "   traced {traced} allocation(s) ({} freed, {} not freed{elsewhere}; {status}) up to the \
         return of {}{}",
        s.traces.freed,
        s.traces.not_freed,
        s.range_end.as_deref().unwrap_or("?"),
        if s.range_moves > 0 {
            format!(" (moved up {} time(s): blocks outlived it)", s.range_moves)
        } else {
            String::new()
        }
    )?;
    if s.cause_not_found == Some(FREED_BY_ANOTHER_THREAD) {
        writeln!(
            out,
            "   no cause found: every traced block that was freed was freed by another thread \
             than the one that allocated it, so the allocating thread's paths cannot show where \
             freeing and leaking part; look where the other thread drops blocks without freeing \
             them"
        )?;
    } else if s.traces.freed_elsewhere > 0 {
        writeln!(
            out,
            "   {} traced block(s) were freed by another thread: left out of the comparison, \
             which holds the allocating thread's own freeing paths only",
            s.traces.freed_elsewhere
        )?;
    }
    if s.cause_functions.is_empty() {
        if s.traces.not_freed == 0 {
            writeln!(out, "   no traced allocation leaked: no cause found yet")?;
        }
        return Ok(());
    }
    for f in &s.cause_functions {
        writeln!(
            out,
            "   cause: the leaking path leaves the freeing ones in {}",
            place(f)
        )?;
    }
    for b in &s.cause_branches {
        writeln!(
            out,
            "   at the branch {}+{:#x} `{}`{}, {} on the leaking path",
            b.function,
            b.offset,
            b.instruction,
            if b.file.is_empty() {
                String::new()
            } else {
                format!(" ({}:{})", b.file, b.line)
            },
            if b.taken_on_leak {
                "taken"
            } else {
                "not taken"
            }
        )?;
        if let Some(line) = source_line(&b.file, b.line) {
            writeln!(out, "       {:>5} | {line}", b.line)?;
        }
    }
    if let Some(freed) = s
        .paths
        .iter()
        .filter(|p| p.end == "F")
        .max_by_key(|p| p.count)
    {
        write_path(out, "   the most common freeing path: ", &freed.steps, "F")?;
    }
    if let Some(leak) = s.paths.iter().find(|p| p.end == "E") {
        write_path(out, "   a leaking path:              ", &leak.steps, "E")?;
    }
    Ok(())
}

/// The calls of a path shown in the text view at most: a trace whose range ends in `main`
/// runs on through every later iteration of the program (one such leaking path was 9,000
/// calls, a line of 143 KB). The JSON view keeps them all.
const PATH_CALLS_SHOWN: usize = 40;
/// Width the text view wraps a path's calls at.
const PATH_WIDTH: usize = 100;

/// Writes a path's calls after `label`, wrapped at [`PATH_WIDTH`] columns under the first
/// call, at most [`PATH_CALLS_SHOWN`] of them, then `end`.
fn write_path(
    out: &mut dyn std::io::Write,
    label: &str,
    steps: &[String],
    end: &str,
) -> std::io::Result<()> {
    let all = calls(steps);
    let mut words: Vec<String> = all.iter().take(PATH_CALLS_SHOWN).cloned().collect();
    if all.len() > PATH_CALLS_SHOWN {
        words.push(format!(
            "… {} more calls (--format json lists them)",
            all.len() - PATH_CALLS_SHOWN
        ));
    }
    words.push(end.to_string());
    let indent = " ".repeat(label.chars().count());
    let mut line = label.to_string();
    let mut used = 0;
    for w in words {
        let width = w.chars().count();
        if used > 0 && label.len() + used + 1 + width > PATH_WIDTH {
            writeln!(out, "{line}")?;
            line = indent.clone();
            used = 0;
        }
        if used > 0 {
            line.push(' ');
            used += 1;
        }
        line.push_str(&w);
        used += width;
    }
    writeln!(out, "{line}")
}

/// The function entries and exits of a path (`f-S`, `f-E`), without its branches, each
/// function's name shortened as in report tables ([`crate::short_name`]: a C++ path
/// through the standard library is otherwise thousands of characters); the JSON view keeps
/// the full names.
fn calls(steps: &[String]) -> Vec<String> {
    steps
        .iter()
        .filter(|t| !t.starts_with('@'))
        .map(|t| {
            ["-S", "-E"]
                .iter()
                .find_map(|end| {
                    t.strip_suffix(end)
                        .map(|function| format!("{}{end}", crate::short_name(function)))
                })
                .unwrap_or_else(|| t.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use tansa_analysis::memory::leaks::CodePlace;

    fn frame(function: &str, file: &str) -> CodePlace {
        CodePlace {
            function: function.into(),
            file: file.into(),
            line: 1,
        }
    }

    /// A Rust `vec!` leaked in `handle`: the site and the next 6 frames are the standard
    /// library's; the callers shown go on to `handle`, and no further.
    #[test]
    fn callers_are_shown_down_to_the_programs_own_code() {
        let std = "/rustc/abc/library/alloc/src/raw_vec/mod.rs";
        let mut stack = vec![frame("app!alloc::alloc::alloc", std)];
        for i in 0..4 {
            stack.push(frame(&format!("app!alloc::vec::f{i}"), std));
        }
        // `HashMap` is the `hashbrown` crate, built with the standard library.
        for i in 0..4 {
            let file = "/rust/deps/hashbrown-0.16.1/src/raw/mod.rs";
            stack.push(frame(&format!("app!hashbrown::raw::f{i}"), file));
        }
        stack.push(frame("app!app::handle", "/src/app.rs"));
        stack.push(frame("app!app::main", "/src/app.rs"));
        stack.push(frame("libc.so.6!__libc_start_main", "../csu/libc-start.c"));
        assert_eq!(super::shown_callers(&stack, 1, "app"), 2..10);
        // Within the first 6 already: 6 shown.
        assert_eq!(super::shown_callers(&stack, 4, "app"), 5..11);
        // Another program's name: no frame is its own, 6 shown.
        assert_eq!(super::shown_callers(&stack, 1, "other"), 2..8);
        // C: the site is the program's own.
        let c = [
            frame("app!funcA", "/src/app.c"),
            frame("app!main", "/src/app.c"),
        ];
        assert_eq!(super::shown_callers(&c, 0, "app"), 1..2);
        assert_eq!(super::shown_callers(&[], 0, "app"), 0..0);
    }

    #[test]
    fn path_calls_are_shortened_and_branches_left_out() {
        let steps: Vec<String> = [
            "libstdc++.so.6!operator new(unsigned long)-E",
            "@app!request(long)+0x31 taken",
            "app!std::_Rb_tree<int, std::pair<int const, S*> >::erase(int const&)-S",
            "app!funcB-E",
            "odd step",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            super::calls(&steps).join(" "),
            "libstdc++.so.6!operator new(…)-E app!std::_Rb_tree<…>::erase(…)-S app!funcB-E \
             odd step"
        );
    }

    /// A path of thousands of calls (a trace to the end of `main`) is cut after
    /// [`super::PATH_CALLS_SHOWN`] calls and wrapped, each line within the width.
    #[test]
    fn long_paths_are_cut_and_wrapped() {
        let steps: Vec<String> = (0..9000)
            .map(|i| format!("app!handle{}", i % 7) + if i % 2 == 0 { "-S" } else { "-E" })
            .collect();
        let label = "   a leaking path:              ";
        let mut out = Vec::new();
        super::write_path(&mut out, label, &steps, "E").unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 1 && lines.len() < 12, "{text}");
        assert!(lines[0].starts_with(label), "{text}");
        assert!(
            lines.iter().all(|l| l.chars().count() <= super::PATH_WIDTH),
            "{text}"
        );
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.starts_with(&" ".repeat(label.len())))
        );
        let shown = text.matches("app!handle").count();
        assert_eq!(shown, super::PATH_CALLS_SHOWN, "{text}");
        assert!(
            text.contains("… 8960 more calls (--format json lists them) E"),
            "{text}"
        );
        // A short path stays on one line, whole.
        let mut out = Vec::new();
        super::write_path(&mut out, label, &steps[..4], "F").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{label}app!handle0-S app!handle1-E app!handle2-S app!handle3-E F\n")
        );
    }
}
