//! Turning a CPU recording's counts into a report per unit: the seed's post-processing
//! steps 39/29 (process and space), 45/49/53 (routines), 63/69 (instructions, lines).
//!
//! Self counts come from the address table (the interrupted address of every sample);
//! total counts from the call-chain table, each unit counted once per chain however
//! often it appears in it (recursion).

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};
use tansa_format::cpu::{Loc, Mode, ModuleKind, NO_MODULE, Process};

use super::names::{Names, split_distinct_name};
use super::recording::CpuRecording;
use super::report::{By, CallerReport, CpuReport, CpuUnit, SCHEMA, SpaceSplit};

/// Report options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Unit of aggregation.
    pub by: By,
    /// Only this process id (all its images).
    pub pid: Option<u32>,
}

/// The class of an address space for a process: `user` (its executable), `shared`,
/// `kernel` or `other`.
pub fn space_class(names: &Names<'_>, process: Option<&Process>, module: u32) -> &'static str {
    match names.module_kind(module) {
        Some(ModuleKind::Kernel) => "kernel",
        Some(ModuleKind::Vdso) => "shared",
        Some(ModuleKind::Anonymous) | None => "other",
        Some(ModuleKind::Elf) => {
            let path = names.module_path(module);
            let is_exe = process.is_some_and(|p| {
                !p.exe.is_empty()
                    && (p.exe == path
                        || p.exe.rsplit('/').next() == path.rsplit('/').next()
                            && p.exe.trim_end_matches(" (deleted)") == path)
            });
            if is_exe { "user" } else { "shared" }
        }
    }
}

/// The name of a process unit: `comm [pid]`, `idle [0]`, `tansa [pid] (self)` for the
/// recorder.
pub fn process_label(p: &Process, recorder_pid: u32) -> String {
    format!(
        "{} [{}]{}",
        if p.pid == 0 { "idle" } else { &p.comm },
        p.pid,
        if p.pid != 0 && p.pid == recorder_pid {
            " (self)"
        } else {
            ""
        }
    )
}

#[derive(Default)]
struct Acc {
    self_: u64,
    total: u64,
}

/// Builds the report.
pub fn report(rec: &CpuRecording, options: Options) -> CpuReport {
    let names = Names::new(rec);
    let wanted = |process: u32| {
        options
            .pid
            .is_none_or(|pid| rec.process(process).is_some_and(|p| p.pid == pid))
    };
    let addresses: Vec<_> = rec.addresses.iter().filter(|a| wanted(a.process)).collect();
    let stack_counts = per_stack(rec.stack_counts.iter().filter(|s| wanted(s.process)));
    let total = addresses
        .iter()
        .fold(0u64, |sum, a| sum.saturating_add(a.count));
    let period = rec.info.period_ns;

    let mut interval_note = None;
    let mut units: Vec<CpuUnit> = match options.by {
        By::Process => by_process(rec, &names, &addresses),
        By::Program => by_program(by_process(rec, &names, &addresses)),
        By::Thread => by_thread(
            rec,
            &names,
            rec.stack_counts.iter().filter(|s| wanted(s.process)),
        ),
        By::Space => by_space(rec, &names, &addresses),
        By::Library => by_key(
            &addresses,
            &stack_counts,
            rec,
            |loc| Some(loc.module),
            |m| {
                let mut u = CpuUnit::new(names.module(m).to_string(), 0, 0);
                u.module = Some(names.module(m).to_string());
                u.path = Some(names.module_path(m).to_string());
                u
            },
        ),
        By::Function => by_function(rec, &names, &addresses, &stack_counts),
        By::Line => by_line(rec, &names, &addresses, &stack_counts),
        By::Instruction => by_instruction(&names, &addresses),
        By::Interval { width_ns } => {
            let (units, note) = by_interval(rec, &names, width_ns, &wanted);
            interval_note = note;
            units
        }
    };
    for u in &mut units {
        u.self_ns = u.self_samples.saturating_mul(period);
        u.total_ns = u.total_samples.saturating_mul(period);
        if total > 0 {
            u.self_percent = round2(u.self_samples as f64 * 100.0 / total as f64);
            u.total_percent = round2(u.total_samples as f64 * 100.0 / total as f64);
        }
    }
    // Intervals stay in time order.
    if !matches!(options.by, By::Interval { .. }) {
        units.sort_by(|a, b| {
            (b.self_samples, b.total_samples, &a.unit).cmp(&(
                a.self_samples,
                a.total_samples,
                &b.unit,
            ))
        });
    }
    let summary = rec.summary.unwrap_or_default();
    let mut warnings = rec.warnings.clone();
    warnings.extend(interval_note);
    if summary.lost_samples.saturating_add(summary.lost_records) > 0 {
        warnings.push(format!(
            "{} samples and {} records were lost (the reader fell behind): counts are a \
             lower bound",
            summary.lost_samples, summary.lost_records
        ));
    }
    if let Some(pid) = options.pid
        && !rec.processes.iter().any(|p| p.pid == pid)
    {
        warnings.push(format!("process {pid} is not in the recording"));
    }
    CpuReport {
        schema: SCHEMA,
        by: options.by.name(),
        period_ns: period,
        total_samples: total,
        event: rec.info.event.clone(),
        source: rec.info.source.name(),
        target: rec.info.target.clone(),
        kernel: rec.info.kernel,
        cpus: rec.info.cpus,
        duration_ns: summary.wall_ns,
        lost_samples: summary.lost_samples,
        lost_records: summary.lost_records,
        unsampled_ns: rec.unsampled.map_or(0, |u| u.cpu_ns),
        pid: options.pid,
        units,
        notes: rec.info.notes.clone(),
        warnings,
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Samples per call chain, whatever the thread: what total counts are computed from. Each
/// chain is then walked once however many threads had it (a recording can list one long
/// chain for very many threads).
fn per_stack<'a>(
    counts: impl Iterator<Item = &'a tansa_format::cpu::StackCount>,
) -> Vec<(u32, u64)> {
    let mut per: FxHashMap<u32, u64> = FxHashMap::default();
    for c in counts {
        let n = per.entry(c.stack).or_default();
        *n = n.saturating_add(c.count);
    }
    let mut out: Vec<(u32, u64)> = per.into_iter().collect();
    out.sort_unstable();
    out
}

/// Adds `n` to a count, saturating.
fn bump(count: &mut u64, n: u64) {
    *count = count.saturating_add(n);
}

/// Counts `n` samples of a space of `class` (see [`space_class`]).
fn count_class(s: &mut SpaceSplit, class: &str, n: u64) {
    match class {
        "user" => bump(&mut s.user_samples, n),
        "shared" => bump(&mut s.shared_samples, n),
        "kernel" => bump(&mut s.kernel_samples, n),
        _ => bump(&mut s.other_samples, n),
    }
}

/// A unit of process `id` (its image) with `split`, named `label(process name)`.
fn process_unit(
    rec: &CpuRecording,
    id: u32,
    split: SpaceSplit,
    label: impl FnOnce(String) -> String,
) -> CpuUnit {
    let n = split
        .user_samples
        .saturating_add(split.shared_samples)
        .saturating_add(split.kernel_samples)
        .saturating_add(split.other_samples);
    let p = rec.process(id);
    let name = p.map_or_else(
        || format!("[process {id}]"),
        |p| process_label(p, rec.info.recorder_pid),
    );
    let mut u = CpuUnit::new(label(name), n, n);
    u.pid = p.map(|p| p.pid);
    u.command = p.map(|p| p.comm.clone());
    u.exe = p.map(|p| p.exe.clone()).filter(|e| !e.is_empty());
    u.idle = Some(p.is_some_and(|p| p.pid == 0));
    u.spaces = Some(split);
    u
}

fn by_process(
    rec: &CpuRecording,
    names: &Names<'_>,
    addresses: &[&tansa_format::cpu::AddressCount],
) -> Vec<CpuUnit> {
    let mut per: FxHashMap<u32, SpaceSplit> = FxHashMap::default();
    for a in addresses {
        let class = if a.mode == Mode::Kernel {
            "kernel"
        } else {
            space_class(names, rec.process(a.process), a.pc.module)
        };
        count_class(per.entry(a.process).or_default(), class, a.count);
    }
    per.into_iter()
        .map(|(id, split)| process_unit(rec, id, split, |name| name))
        .collect()
}

/// Per program, from the units per process: the processes that ran one executable (by
/// path; by name when the path is not known) as one unit, named by the executable's file
/// name (by its path where two programs share a file name). The idle task stays apart.
fn by_program(processes: Vec<CpuUnit>) -> Vec<CpuUnit> {
    let key = |u: &CpuUnit| -> String {
        if u.idle == Some(true) {
            return String::new();
        }
        u.exe
            .clone()
            .unwrap_or_else(|| crate::program::unknown_executable(u.command.as_deref()))
    };
    let mut per: std::collections::BTreeMap<String, CpuUnit> = Default::default();
    for p in processes {
        let k = key(&p);
        match per.get_mut(&k) {
            Some(u) => {
                bump(&mut u.self_samples, p.self_samples);
                bump(&mut u.total_samples, p.total_samples);
                let (a, b) = (u.spaces.unwrap_or_default(), p.spaces.unwrap_or_default());
                u.spaces = Some(SpaceSplit {
                    user_samples: a.user_samples.saturating_add(b.user_samples),
                    shared_samples: a.shared_samples.saturating_add(b.shared_samples),
                    kernel_samples: a.kernel_samples.saturating_add(b.kernel_samples),
                    other_samples: a.other_samples.saturating_add(b.other_samples),
                });
                u.processes = u.processes.map(|n| n + 1);
            }
            None => {
                let mut u = CpuUnit::new(String::new(), p.self_samples, p.total_samples);
                u.command = p.command;
                u.exe = p.exe;
                u.idle = p.idle;
                u.spaces = p.spaces;
                u.processes = Some(1);
                per.insert(k, u);
            }
        }
    }
    let names = crate::program::ProgramNames::new(per.keys().map(String::as_str));
    per.into_iter()
        .map(|(k, mut u)| {
            u.unit = if k.is_empty() {
                "idle".to_string()
            } else {
                names.name(&k)
            };
            u
        })
        .collect()
}

/// Per thread, from the call-chain counts (the address counts carry no thread): each
/// chain's interrupted address gives the space, as per process.
fn by_thread<'a>(
    rec: &CpuRecording,
    names: &Names<'_>,
    counts: impl Iterator<Item = &'a tansa_format::cpu::StackCount>,
) -> Vec<CpuUnit> {
    let mut per: FxHashMap<(u32, u32), SpaceSplit> = FxHashMap::default();
    for c in counts {
        let class = match rec.stack(c.stack) {
            Some(st) if st.kernel_frames > 0 => "kernel",
            Some(st) => st.frames.first().map_or("other", |pc| {
                space_class(names, rec.process(c.process), pc.module)
            }),
            None => "other",
        };
        count_class(per.entry((c.process, c.tid)).or_default(), class, c.count);
    }
    per.into_iter()
        .map(|((id, tid), split)| {
            let thread = rec
                .process(id)
                .and_then(|p| p.threads.iter().find(|t| t.tid == tid))
                .map(|t| t.name.clone())
                .filter(|n| !n.is_empty());
            let label = format!("{} [{tid}] of ", thread.as_deref().unwrap_or("?"));
            let mut u = process_unit(rec, id, split, |name| label + &name);
            u.tid = Some(tid);
            u.thread = thread;
            u
        })
        .collect()
}

/// Most intervals a report makes: a shorter width is lengthened, with a note.
pub const MAX_INTERVALS: u64 = 10_000;

/// Per interval of `width_ns` (0: about 40 intervals, of a round length) from the first
/// sample, from the timeline: samples, and the function most often interrupted. Intervals
/// without samples are kept (the program was idle or off-CPU then). Also a note when the
/// width was lengthened to keep to [`MAX_INTERVALS`].
fn by_interval(
    rec: &CpuRecording,
    names: &Names<'_>,
    width_ns: u64,
    wanted: &dyn Fn(u32) -> bool,
) -> (Vec<CpuUnit>, Option<String>) {
    let entries: Vec<_> = rec.timeline.iter().filter(|e| wanted(e.process)).collect();
    let (Some(first), Some(last)) = (
        entries.iter().map(|e| e.time_ns).min(),
        entries.iter().map(|e| e.time_ns).max(),
    ) else {
        return (Vec::new(), None);
    };
    let span = last - first;
    let asked = if width_ns == 0 {
        round_width(span / 40)
    } else {
        width_ns
    };
    let width = asked.max(span / MAX_INTERVALS + 1);
    let note = (width > asked).then(|| {
        format!(
            "--interval {} s would make more than {MAX_INTERVALS} intervals: they are {} s long",
            seconds(asked, asked),
            seconds(width, width)
        )
    });
    let n = (span / width + 1) as usize;
    let mut counts = vec![0u64; n];
    let mut functions: Vec<FxHashMap<u32, u64>> = vec![FxHashMap::default(); n];
    let mut interner = Interner::default();
    let mut cache: FxHashMap<u32, Option<u32>> = FxHashMap::default();
    for e in entries {
        let k = ((e.time_ns - first) / width) as usize;
        bump(&mut counts[k], 1);
        let f = *cache.entry(e.stack).or_insert_with(|| {
            let pc = rec.stack(e.stack)?.frames.first().copied()?;
            // As `--by function` names it: the innermost (inlined) function.
            let name = match names.frames(pc).first() {
                Some(f) => format!("{}!{}", names.module(pc.module), f.name()),
                None => names.unit(pc),
            };
            Some(interner.id(name))
        });
        if let Some(f) = f {
            bump(functions[k].entry(f).or_default(), 1);
        }
    }
    let units = counts
        .iter()
        .zip(&functions)
        .enumerate()
        .map(|(k, (&count, fs))| {
            let start = k as u64 * width;
            let end = start.saturating_add(width);
            let mut u = CpuUnit::new(
                format!("{}-{} s", seconds(start, width), seconds(end, width)),
                count,
                count,
            );
            u.start_ns = Some(start);
            u.end_ns = Some(end);
            if let Some((&f, &c)) = fs
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            {
                u.top_function = Some(interner.names[f as usize].clone());
                u.top_samples = Some(c);
            }
            u
        })
        .collect();
    (units, note)
}

/// `ns` as a number of seconds: to the millisecond, or the microsecond for intervals shorter than
/// a millisecond.
fn seconds(ns: u64, width: u64) -> String {
    if width < 1_000_000 {
        format!("{:.6}", ns as f64 / 1e9)
    } else {
        format!("{:.3}", ns as f64 / 1e9)
    }
}

/// The round length (1, 2 or 5 times a power of ten, at least 1 ms) nearest above `ns`.
fn round_width(ns: u64) -> u64 {
    let mut unit = 1_000_000u64;
    loop {
        for m in [1, 2, 5] {
            let w = unit.saturating_mul(m);
            if w >= ns || w == u64::MAX {
                return w;
            }
        }
        unit = unit.saturating_mul(10);
    }
}

fn by_space(
    rec: &CpuRecording,
    names: &Names<'_>,
    addresses: &[&tansa_format::cpu::AddressCount],
) -> Vec<CpuUnit> {
    let mut per: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    for a in addresses {
        bump(per.entry((a.process, a.pc.module)).or_default(), a.count);
    }
    per.into_iter()
        .map(|((id, m), n)| {
            let p = rec.process(id);
            let label = p.map_or_else(
                || format!("[process {id}]"),
                |p| process_label(p, rec.info.recorder_pid),
            );
            let mut u = CpuUnit::new(format!("{label} {}", names.module(m)), n, n);
            u.pid = p.map(|p| p.pid);
            u.command = p.map(|p| p.comm.clone());
            u.module = Some(names.module(m).to_string());
            u.path = Some(names.module_path(m).to_string());
            u.class = Some(space_class(names, p, m));
            u
        })
        .collect()
}

/// Self and total per key of a frame (each key once per chain).
fn by_key<K: std::hash::Hash + Eq + Copy>(
    addresses: &[&tansa_format::cpu::AddressCount],
    stack_counts: &[(u32, u64)],
    rec: &CpuRecording,
    key: impl Fn(Loc) -> Option<K>,
    make: impl Fn(K) -> CpuUnit,
) -> Vec<CpuUnit> {
    let mut acc: HashMap<K, Acc> = HashMap::new();
    for a in addresses {
        if let Some(k) = key(a.pc) {
            bump(&mut acc.entry(k).or_default().self_, a.count);
        }
    }
    let mut seen = FxHashSet::default();
    for &(id, count) in stack_counts {
        let Some(stack) = rec.stack(id) else {
            continue;
        };
        seen.clear();
        for &f in &stack.frames {
            if let Some(k) = key(f)
                && seen.insert(k)
            {
                bump(&mut acc.entry(k).or_default().total, count);
            }
        }
    }
    acc.into_iter()
        .map(|(k, a)| {
            let mut u = make(k);
            u.self_samples = a.self_;
            u.total_samples = a.total;
            u
        })
        .collect()
}

/// Interns unit names, so chains are walked over integers.
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, name: String) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }
}

fn by_function(
    rec: &CpuRecording,
    names: &Names<'_>,
    addresses: &[&tansa_format::cpu::AddressCount],
    stack_counts: &[(u32, u64)],
) -> Vec<CpuUnit> {
    let mut interner = Interner::default();
    // Functions of a frame, innermost inlined first. A function is told apart from
    // others of its name in its module by its start (`SourceFrame::name`), so two C
    // `static` functions of one name are two units, not one.
    let expand = |loc: Loc, interner: &mut Interner| -> Vec<u32> {
        let frames = names.frames(loc);
        if frames.is_empty() {
            return vec![interner.id(names.unit(loc))];
        }
        let module = names.module(loc.module);
        frames
            .iter()
            .map(|f| interner.id(format!("{module}!{}", f.name())))
            .collect()
    };
    let mut cache: FxHashMap<Loc, Vec<u32>> = FxHashMap::default();
    let mut self_: FxHashMap<u32, u64> = FxHashMap::default();
    // Self samples go to the innermost function of the sampled instruction (an inlined
    // function's own code counts as its self, as in its total and in `--by line`).
    for a in addresses {
        let ids = cache
            .entry(a.pc)
            .or_insert_with(|| expand(a.pc, &mut interner));
        bump(self_.entry(ids[0]).or_default(), a.count);
    }
    // Per chain: its functions once each, with the caller of the innermost occurrence.
    const ROOT: u32 = u32::MAX;
    let mut total: FxHashMap<u32, u64> = FxHashMap::default();
    let mut callers: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut chain: Vec<u32> = Vec::new();
    for &(stack_id, count) in stack_counts {
        let Some(stack) = rec.stack(stack_id) else {
            continue;
        };
        chain.clear();
        for &f in &stack.frames {
            let ids = cache.entry(f).or_insert_with(|| expand(f, &mut interner));
            chain.extend_from_slice(ids);
        }
        seen.clear();
        for (i, &id) in chain.iter().enumerate() {
            if !seen.insert(id) {
                continue;
            }
            let caller = chain.get(i + 1).copied().unwrap_or(ROOT);
            bump(total.entry(id).or_default(), count);
            bump(callers.entry((id, caller)).or_default(), count);
        }
    }
    let mut per_callee: FxHashMap<u32, Vec<CallerReport>> = FxHashMap::default();
    for ((callee, caller), samples) in callers {
        let unit = if caller == ROOT {
            "[root]".to_string()
        } else {
            interner.names[caller as usize].clone()
        };
        per_callee
            .entry(callee)
            .or_default()
            .push(CallerReport { unit, samples });
    }
    let ids: FxHashSet<u32> = self_.keys().chain(total.keys()).copied().collect();
    ids.into_iter()
        .map(|id| {
            let name = &interner.names[id as usize];
            let mut u = CpuUnit::new(
                name.clone(),
                self_.get(&id).copied().unwrap_or(0),
                total.get(&id).copied().unwrap_or(0),
            );
            let (module, function) = name.split_once('!').unwrap_or(("", name));
            u.module = Some(module.to_string());
            u.function = Some(function.to_string());
            // A function told apart from others of its name: its start.
            u.address = split_distinct_name(function).map(|(_, start)| format!("{start:#x}"));
            let mut callers = per_callee.remove(&id).unwrap_or_default();
            callers.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.unit.cmp(&b.unit)));
            u.callers = Some(callers);
            u
        })
        .collect()
}

fn by_line(
    rec: &CpuRecording,
    names: &Names<'_>,
    addresses: &[&tansa_format::cpu::AddressCount],
    stack_counts: &[(u32, u64)],
) -> Vec<CpuUnit> {
    type LineKey = (String, u32, String);
    // The innermost frame's line (inlined code on its own line).
    let line_of = |loc: Loc| -> LineKey {
        let frames = names.frames(loc);
        match frames.first() {
            Some(f) if f.file.is_some() && f.line > 0 => (
                f.file.unwrap_or_default().to_string(),
                f.line,
                f.name().into_owned(),
            ),
            _ => (
                format!("<no line: {}>", names.module(loc.module)),
                0,
                names
                    .function_name(loc)
                    .map_or_else(|| "??".to_string(), |f| f.into_owned()),
            ),
        }
    };
    let all_lines = |loc: Loc| -> Vec<LineKey> {
        let frames = names.frames(loc);
        if frames.is_empty() {
            return vec![line_of(loc)];
        }
        frames
            .iter()
            .filter(|f| f.file.is_some() && f.line > 0)
            .map(|f| {
                (
                    f.file.unwrap_or_default().to_string(),
                    f.line,
                    f.name().into_owned(),
                )
            })
            .collect()
    };
    let mut acc: HashMap<LineKey, Acc> = HashMap::new();
    for a in addresses {
        bump(&mut acc.entry(line_of(a.pc)).or_default().self_, a.count);
    }
    let mut cache: FxHashMap<Loc, Vec<LineKey>> = FxHashMap::default();
    let mut seen: FxHashSet<LineKey> = FxHashSet::default();
    for &(id, count) in stack_counts {
        let Some(stack) = rec.stack(id) else {
            continue;
        };
        seen.clear();
        for &f in &stack.frames {
            for k in cache.entry(f).or_insert_with(|| all_lines(f)).iter() {
                if seen.insert(k.clone()) {
                    bump(&mut acc.entry(k.clone()).or_default().total, count);
                }
            }
        }
    }
    acc.into_iter()
        .map(|((file, line, function), a)| {
            let unit = if line == 0 {
                file.clone()
            } else {
                format!("{file}:{line}")
            };
            let mut u = CpuUnit::new(unit, a.self_, a.total.max(a.self_));
            u.file = (line > 0).then(|| file.clone());
            u.line = (line > 0).then_some(line);
            u.function = Some(function);
            u
        })
        .collect()
}

fn by_instruction(
    names: &Names<'_>,
    addresses: &[&tansa_format::cpu::AddressCount],
) -> Vec<CpuUnit> {
    let mut acc: FxHashMap<Loc, u64> = FxHashMap::default();
    for a in addresses {
        bump(acc.entry(a.pc).or_default(), a.count);
    }
    acc.into_iter()
        .map(|(loc, n)| {
            let module = names.module(loc.module);
            let unit = match (names.function_name(loc), names.function_start(loc)) {
                (Some(f), Some(start)) if loc.offset >= start => {
                    format!("{module}!{f}+{:#x}", loc.offset - start)
                }
                _ if loc.module == NO_MODULE => format!("[unknown]!{:#x}", loc.offset),
                _ => format!("{module}!{:#x}", loc.offset),
            };
            let mut u = CpuUnit::new(unit, n, n);
            u.module = Some(module.to_string());
            u.function = names.function_name(loc).map(|f| f.into_owned());
            u.address = Some(format!("{:#x}", loc.offset));
            u
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_named_by_file_name_unless_two_share_it() {
        let process = |exe: &str, comm: &str, samples: u64, idle: bool| {
            let mut u = CpuUnit::new(format!("{comm} [1]"), samples, samples);
            u.exe = (!exe.is_empty()).then(|| exe.to_string());
            u.command = Some(comm.to_string());
            u.idle = Some(idle);
            u.spaces = Some(SpaceSplit {
                user_samples: samples,
                ..SpaceSplit::default()
            });
            u
        };
        let units = by_program(vec![
            process("/usr/bin/gzip", "gzip", 5, false),
            process("/usr/bin/gzip", "gzip", 7, false),
            process("/usr/bin/python3", "python3", 1, false),
            process("/opt/py/bin/python3", "python3", 2, false),
            process("", "kworker", 3, false),
            process("", "swapper", 4, true),
        ]);
        let got: Vec<(&str, u64, Option<u64>, u64)> = units
            .iter()
            .map(|u| {
                (
                    u.unit.as_str(),
                    u.self_samples,
                    u.processes,
                    u.spaces.unwrap().user_samples,
                )
            })
            .collect();
        let mut got = got;
        got.sort();
        assert_eq!(
            got,
            [
                ("/opt/py/bin/python3", 2, Some(1), 2),
                ("/usr/bin/python3", 1, Some(1), 1),
                ("[kworker]", 3, Some(1), 3),
                ("gzip", 12, Some(2), 12),
                ("idle", 4, Some(1), 4),
            ]
        );
    }

    #[test]
    fn process_labels_name_idle_and_the_recorder() {
        let p = |pid: u32, comm: &str| Process {
            id: 0,
            pid,
            ppid: 0,
            comm: comm.into(),
            exe: String::new(),
            cmdline: Vec::new(),
            kernel_thread: false,
            start_ns: 0,
            end_ns: None,
            exit: None,
            threads: Vec::new(),
        };
        assert_eq!(process_label(&p(0, "swapper"), 0), "idle [0]");
        assert_eq!(process_label(&p(42, "tansa"), 42), "tansa [42] (self)");
        assert_eq!(process_label(&p(43, "app"), 42), "app [43]");
    }
}
