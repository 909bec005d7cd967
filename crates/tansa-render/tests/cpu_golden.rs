//! Golden files of every CPU output format (table, JSON, CSV for each `--by`; annotated
//! disassembly and source), from a recording built by hand so that nothing depends on the
//! compiler or the machine. Regenerate with `scripts/bless-golden` (never in CI).

mod common;

use common::check;

use tansa_analysis::cpu::{self, By, CpuRecording, annotate};
use tansa_format::cpu::{
    AddressCount, CpuInfo, CpuSummary, Loc, Mode, Module, ModuleKind, Process, SampleSource,
    SourceFile, Stack, StackCount, Thread,
};
use tansa_format::symtab::{
    AddrSymbols, CodeBlock, ModuleStatus, ModuleSymbols, SymFrame, SymbolTableBuilder,
};

const APP: u32 = 0;
const LIB: u32 = 1;
const KERNEL: u32 = 2;

/// `spin` at 0x1000 in app:
/// ```text
/// 1000: 48 31 c0   xor rax, rax      app.c:3
/// 1003: 48 ff c0   inc rax           app.c:4
/// 1006: 48 39 f8   cmp rax, rdi      app.c:4
/// 1009: 75 f8      jne 0x1003        app.c:4
/// 100b: c3         ret               app.c:5
/// ```
const SPIN: [u8; 12] = [
    0x48, 0x31, 0xc0, 0x48, 0xff, 0xc0, 0x48, 0x39, 0xf8, 0x75, 0xf8, 0xc3,
];

fn loc(module: u32, offset: u64) -> Loc {
    Loc { module, offset }
}

fn recording() -> CpuRecording {
    let mut b = SymbolTableBuilder::default();
    let spin = b.intern("spin");
    let main = b.intern("main");
    let app_c = b.intern("/src/app.c");
    let copy = b.intern("copy_bytes");
    let fill = b.intern("fill");
    let lib_c = b.intern("/src/lib.c");
    let sys = b.intern("clear_page_erms");
    let f = |function, file, line| SymFrame {
        function,
        file,
        line,
        column: 0,
    };
    let addr = |offset, frames: Vec<SymFrame>, start| AddrSymbols {
        offset,
        frames,
        function_start: Some(start),
    };
    b.add_module(ModuleSymbols {
        key: u64::from(APP),
        path: "/opt/app/bin/app".into(),
        build_id: vec![0xab],
        status: ModuleStatus::Resolved,
        addrs: vec![
            addr(0x1000, vec![f(spin, app_c, 3)], 0x1000),
            addr(0x1003, vec![f(spin, app_c, 4)], 0x1000),
            addr(0x1006, vec![f(spin, app_c, 4)], 0x1000),
            addr(0x1009, vec![f(spin, app_c, 4)], 0x1000),
            addr(0x100b, vec![f(spin, app_c, 5)], 0x1000),
            addr(0x2003, vec![f(main, app_c, 10)], 0x2000),
            addr(0x2007, vec![f(main, app_c, 11)], 0x2000),
        ],
        code: vec![CodeBlock {
            start: 0x1000,
            bytes: SPIN.to_vec(),
        }],
    });
    b.add_module(ModuleSymbols {
        key: u64::from(LIB),
        path: "/usr/lib/libcopy.so".into(),
        build_id: vec![0xcd],
        status: ModuleStatus::Resolved,
        // fill() inlined into copy_bytes().
        addrs: vec![addr(
            0x500,
            vec![f(fill, lib_c, 20), f(copy, lib_c, 31)],
            0x4f0,
        )],
        code: Vec::new(),
    });
    b.add_module(ModuleSymbols {
        key: u64::from(KERNEL),
        path: "[kernel.kallsyms]".into(),
        build_id: Vec::new(),
        status: ModuleStatus::Resolved,
        addrs: vec![addr(
            0xffff_ffff_8100_0010,
            vec![f(sys, u32::MAX, 0)],
            0xffff_ffff_8100_0000,
        )],
        code: Vec::new(),
    });
    let symbols = b.finish();
    let proc_ = |id: u32, pid: u32, comm: &str, exe: &str| Process {
        id,
        pid,
        ppid: 1,
        comm: comm.into(),
        exe: exe.into(),
        cmdline: vec![comm.into()],
        kernel_thread: pid == 0,
        start_ns: 0,
        end_ns: None,
        exit: None,
        threads: vec![Thread {
            tid: pid,
            name: comm.into(),
        }],
    };
    let count = |process, pc, caller, mode, count| AddressCount {
        process,
        pc,
        caller,
        mode,
        count,
    };
    let user = Mode::User;
    let main_ret = Some(loc(APP, 0x2003));
    CpuRecording {
        meta: None,
        info: CpuInfo {
            source: SampleSource::Perf,
            event: "cpu-clock".into(),
            period_ns: 1_000_000,
            frequency_hz: 1000,
            target: "system".into(),
            unwinding: "dwarf+fp".into(),
            kernel: true,
            cpus: 2,
            timeline: false,
            notes: vec!["no hardware PMU".into()],
            recorder_pid: 77,
        },
        processes: vec![
            proc_(0, 100, "app", "/opt/app/bin/app"),
            proc_(1, 0, "idle", ""),
            proc_(2, 77, "tansa", "/usr/bin/tansa"),
        ],
        modules: vec![
            Module {
                id: APP,
                path: "/opt/app/bin/app".into(),
                build_id: vec![0xab],
                kind: ModuleKind::Elf,
            },
            Module {
                id: LIB,
                path: "/usr/lib/libcopy.so".into(),
                build_id: vec![0xcd],
                kind: ModuleKind::Elf,
            },
            Module {
                id: KERNEL,
                path: "[kernel.kallsyms]".into(),
                build_id: Vec::new(),
                kind: ModuleKind::Kernel,
            },
        ],
        addresses: vec![
            count(0, loc(APP, 0x1003), main_ret, user, 40),
            count(0, loc(APP, 0x1009), main_ret, user, 20),
            count(0, loc(LIB, 0x500), Some(loc(APP, 0x2007)), user, 25),
            count(
                0,
                loc(KERNEL, 0xffff_ffff_8100_0010),
                None,
                Mode::Kernel,
                5,
            ),
            count(
                1,
                loc(KERNEL, 0xffff_ffff_8100_0010),
                None,
                Mode::Kernel,
                8,
            ),
            count(2, loc(APP, 0x1003), None, user, 2),
        ],
        stacks: vec![
            Stack {
                id: 0,
                frames: vec![loc(APP, 0x1003), loc(APP, 0x2003)],
                kernel_frames: 0,
                truncated: false,
            },
            Stack {
                id: 1,
                frames: vec![loc(APP, 0x1009), loc(APP, 0x2003)],
                kernel_frames: 0,
                truncated: false,
            },
            Stack {
                id: 2,
                frames: vec![loc(LIB, 0x500), loc(APP, 0x2007)],
                kernel_frames: 0,
                truncated: false,
            },
            Stack {
                id: 3,
                frames: vec![
                    loc(KERNEL, 0xffff_ffff_8100_0010),
                    loc(APP, 0x1003),
                    loc(APP, 0x2003),
                ],
                kernel_frames: 1,
                truncated: false,
            },
            Stack {
                id: 4,
                frames: vec![loc(KERNEL, 0xffff_ffff_8100_0010)],
                kernel_frames: 1,
                truncated: false,
            },
            Stack {
                id: 5,
                frames: vec![loc(APP, 0x1003)],
                kernel_frames: 0,
                truncated: true,
            },
        ],
        stack_counts: vec![
            StackCount {
                process: 0,
                tid: 100,
                stack: 0,
                count: 40,
            },
            StackCount {
                process: 0,
                tid: 100,
                stack: 1,
                count: 20,
            },
            StackCount {
                process: 0,
                tid: 100,
                stack: 2,
                count: 25,
            },
            StackCount {
                process: 0,
                tid: 100,
                stack: 3,
                count: 5,
            },
            StackCount {
                process: 1,
                tid: 0,
                stack: 4,
                count: 8,
            },
            StackCount {
                process: 2,
                tid: 77,
                stack: 5,
                count: 2,
            },
        ],
        timeline: Vec::new(),
        sources: vec![SourceFile {
            path: "/src/app.c".into(),
            text: "#include <stdio.h>\n\
                   long spin(long n) {\n    long i = 0;\n    while (++i != n) {}\n    return i;\n}\n"
                .into(),
        }],
        withheld_sources: Vec::new(),
        newer_sources: Vec::new(),
        symbols,
        summary: Some(CpuSummary {
            samples: 100,
            wall_ns: 50_000_000,
            ..CpuSummary::default()
        }),
        unsampled: None,
        short_stack_copies: None,
        checkpoints: 0,
        checkpoint_end: None,
        last_checkpoint: None,
        read_to_checkpoint: false,
        completed: None,
        warnings: Vec::new(),
        damaged: false,
    }
}

fn render(f: impl Fn(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    f(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    // Twice the same: rendering is deterministic.
    let mut again = Vec::new();
    f(&mut again).unwrap();
    assert_eq!(text.as_bytes(), &again[..]);
    text
}

#[test]
fn every_cpu_format_matches_its_golden_file() {
    let rec = recording();
    for by in [
        By::Process,
        By::Space,
        By::Library,
        By::Function,
        By::Line,
        By::Instruction,
    ] {
        let r = cpu::report(&rec, cpu::Options { by, pid: None });
        assert_eq!(r.total_samples, 100);
        let name = by.name();
        check(
            &format!("{name}.txt"),
            &render(|o| tansa_render::cpu::table(&r, o)),
        );
        check(
            &format!("{name}.json"),
            &render(|o| tansa_render::cpu::json(&r, o)),
        );
        check(
            &format!("{name}.csv"),
            &render(|o| tansa_render::cpu::csv(&r, o)),
        );
    }
    let a = annotate::annotate(&rec, "app!spin", None).unwrap();
    assert_eq!(a.samples, 62);
    check(
        "annotate-asm.txt",
        &render(|o| tansa_render::cpu::annotate_asm(&a, o)),
    );
    check(
        "annotate-source.txt",
        &render(|o| tansa_render::cpu::annotate_source(&a, o)),
    );
    let one = cpu::report(
        &rec,
        cpu::Options {
            by: By::Function,
            pid: Some(100),
        },
    );
    assert_eq!(one.total_samples, 90);
}
