//! Which unit a stack is charged to (seed 000 §4, Fig. 8, and the policies).
//!
//! The *root* of a stack is `main`, or a thread's start routine (the program's function
//! that a library's trampoline runs, for `std::thread` or OpenMP workers); frames outside
//! the root (process start-up and thread start-up, all in the C library or the dynamic
//! loader, and such a trampoline) are never units, nor are the allocator entry points
//! (C++ `operator new`, the standard allocator templates, Rust's allocator shims and
//! `Box`'s allocation) at the inner end. Among the remaining frames:
//!
//! * `first`: the outermost frame that lies in a shared library;
//! * `last`: the innermost such frame;
//! * `all`: every distinct shared library (or function in one);
//! * no frame in a shared library: the main executable (by library) or the allocating
//!   function, the innermost remaining frame (by function).
//!
//! A signal handler's stack runs through a signal frame ([`SIGNAL_HANDLER_FRAME`]) into
//! the code the signal interrupted. Those frames made no call to the handler: the handler
//! is the root, as a thread's start routine is, so neither the signal frame (the C
//! library's signal-return trampoline) nor the interrupted code is ever charged for what
//! the handler allocates.

use std::sync::Arc;

#[cfg(doc)]
use super::model::SIGNAL_HANDLER_FRAME;
use super::model::{LogicalFrame, ModuleInfo, Registry, Stack};

/// The unit of aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum By {
    /// Per shared library (default).
    Library,
    /// Per function, named `module!function`.
    Function,
    /// Per thread.
    Thread,
    /// Per call of a library: a maximal run of consecutive events charged to the same
    /// library.
    Call,
    /// Per library per fixed time interval.
    Interval,
    /// Per MPI rank (every process image of the rank), the processes without a rank
    /// together as one unit.
    Rank,
    /// Per program: every process image that ran one executable, together.
    Program,
}

impl By {
    /// Name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            By::Library => "library",
            By::Function => "function",
            By::Thread => "thread",
            By::Call => "call",
            By::Interval => "interval",
            By::Rank => "rank",
            By::Program => "program",
        }
    }
}

/// Which frame of a stack is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Charge {
    /// The outermost frame below the root that lies in a shared library (default).
    First,
    /// The innermost such frame.
    Last,
    /// Every distinct shared library (or function) on the path, once each.
    All,
}

impl Charge {
    /// Name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Charge::First => "first",
            Charge::Last => "last",
            Charge::All => "all",
        }
    }
}

/// Who a release is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FreeTo {
    /// The unit charged for the block's allocation: net bytes are live bytes (default).
    Owner,
    /// The unit found from the release's own stack, as seed 000 does literally.
    Caller,
}

impl FreeTo {
    /// Name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            FreeTo::Owner => "owner",
            FreeTo::Caller => "caller",
        }
    }
}

/// What a stack is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A module, by file name.
    Library(Arc<str>),
    /// A function, as `module!function`.
    Function(Arc<str>),
    /// Nothing is known about the stack.
    Unknown,
}

impl Target {
    /// The unit's name.
    pub fn name(&self) -> &str {
        match self {
            Target::Library(n) | Target::Function(n) => n,
            Target::Unknown => "[unknown]",
        }
    }
}

const STARTUP: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "_dl_start_user",
    "_dl_start",
    "_dl_init",
    "call_init",
    "__libc_csu_init",
    "_init",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "__GI___clone",
    "__GI___clone3",
    "exit",
    "__run_exit_handlers",
    "_dl_fini",
    "__libc_init_first",
];

/// Prefixes of allocator entry points and allocator plumbing, skipped at the inner end.
const ALLOCATOR: &[&str] = &[
    "operator new",
    "operator delete",
    "__rust_alloc",
    "__rust_realloc",
    "__rust_dealloc",
    "__rdl_",
    "__rg_",
    "alloc::alloc::",
    "alloc::boxed::",
    "<alloc::boxed::Box",
    "std::alloc::",
    "<std::alloc::System",
    "std::sys::alloc::",
    "__gnu_cxx::new_allocator",
    "__gnu_cxx::__new_allocator",
    "std::__new_allocator",
    "std::allocator<",
    "std::allocator_traits",
    "__gnu_cxx::__alloc_traits",
];

/// C allocation wrappers, by exact name: as with `operator new`, an allocation made
/// through one is made where it is called (Valgrind's massif has the same idea as
/// `--alloc-fn`). The C library's copying functions; GNU's `x*alloc` family (gnulib, bash,
/// binutils, GCC's libiberty); GLib; CPython's allocator APIs (`PyObject_Malloc` takes
/// small objects from arenas the agent does not see: `PYTHONMALLOC=malloc` sends them to
/// `malloc`); OpenSSL; SQLite; FFmpeg; Lua.
const ALLOCATION_WRAPPERS: &[&str] = &[
    // The C library's.
    "strdup",
    "__strdup",
    "strndup",
    "__strndup",
    "wcsdup",
    // gnulib, libiberty and the programs that carry their own copy.
    "xmalloc",
    "xcalloc",
    "xzalloc",
    "xrealloc",
    "xreallocarray",
    "xnmalloc",
    "xnrealloc",
    "x2realloc",
    "x2nrealloc",
    "xcharalloc",
    "xmemdup",
    "xstrdup",
    "xstrndup",
    "ximalloc",
    "xicalloc",
    "xirealloc",
    "xizalloc",
    // GLib.
    "g_malloc",
    "g_malloc0",
    "g_malloc_n",
    "g_malloc0_n",
    "g_realloc",
    "g_realloc_n",
    "g_try_malloc",
    "g_try_malloc0",
    "g_try_malloc_n",
    "g_try_malloc0_n",
    "g_try_realloc",
    "g_try_realloc_n",
    "g_aligned_alloc",
    "g_aligned_alloc0",
    "g_slice_alloc",
    "g_slice_alloc0",
    "g_strdup",
    "g_strndup",
    "g_memdup",
    "g_memdup2",
    // CPython.
    "PyMem_Malloc",
    "PyMem_Calloc",
    "PyMem_Realloc",
    "PyMem_RawMalloc",
    "PyMem_RawCalloc",
    "PyMem_RawRealloc",
    "_PyMem_RawMalloc",
    "_PyMem_RawCalloc",
    "_PyMem_RawRealloc",
    "PyObject_Malloc",
    "PyObject_Calloc",
    "PyObject_Realloc",
    "_PyObject_Malloc",
    "_PyObject_Calloc",
    "_PyObject_Realloc",
    // OpenSSL.
    "CRYPTO_malloc",
    "CRYPTO_zalloc",
    "CRYPTO_realloc",
    "CRYPTO_clear_realloc",
    "CRYPTO_strdup",
    "CRYPTO_strndup",
    "CRYPTO_memdup",
    // SQLite.
    "sqlite3_malloc",
    "sqlite3_malloc64",
    "sqlite3_realloc",
    "sqlite3_realloc64",
    "sqlite3Malloc",
    "sqlite3MallocZero",
    "sqlite3Realloc",
    "sqlite3MemMalloc",
    "sqlite3MemRealloc",
    "sqlite3DbMallocRaw",
    "sqlite3DbMallocRawNN",
    "sqlite3DbMallocZero",
    "sqlite3DbRealloc",
    "sqlite3DbReallocOrFree",
    "sqlite3DbStrDup",
    "sqlite3DbStrNDup",
    // FFmpeg.
    "av_malloc",
    "av_mallocz",
    "av_calloc",
    "av_realloc",
    "av_strdup",
    "av_strndup",
    // Lua.
    "luaM_malloc_",
    "luaM_realloc_",
    "l_alloc",
];

fn is_c_library(m: &ModuleInfo) -> bool {
    m.name.starts_with("libc.so") || m.name.starts_with("libc-") || m.name.starts_with("libc.musl")
}

fn is_loader(m: &ModuleInfo) -> bool {
    m.name.starts_with("ld-linux") || m.name.starts_with("ld.so") || m.name.starts_with("ld-musl")
}

/// Whether `f`'s function has no name of its own: none at all, or only its extent's
/// (`fn@0x15b40`, as the recorder names a function of a stripped binary from its unwind
/// information: `tansa_format::symtab::unnamed_function`).
fn is_unnamed(f: &LogicalFrame) -> bool {
    f.function
        .as_deref()
        .is_none_or(tansa_format::symtab::is_unnamed_function)
}

fn function_is(f: &LogicalFrame, names: &[&str]) -> bool {
    f.function.as_deref().is_some_and(|n| names.contains(&n))
}

/// Source files of the Rust standard library's allocator plumbing and of `Box`'s
/// allocation (Rust's `new`). Code built with line tables only (`debug =
/// "line-tables-only"`, a common release profile) names the functions inlined from them
/// without their path (`realloc`, `grow_impl`: `alloc::alloc::realloc` in full), so their
/// file is what tells them.
const RUST_ALLOCATOR_FILES: &[&str] = &[
    "/library/alloc/src/alloc.rs",
    "/library/alloc/src/boxed.rs",
    "/library/std/src/alloc.rs",
    "/library/std/src/sys/alloc/",
    "/library/core/src/alloc/",
];

/// Whether `f` is an allocator's entry point or its plumbing (C++ `operator new` and
/// `std::allocator`, Rust's allocation shims and `Box`'s allocation, the C allocation
/// wrappers of [`ALLOCATION_WRAPPERS`], and those `reg` was given by the user): never a
/// unit, and never the place an allocation is said to be made.
pub(crate) fn is_allocator_entry(f: &LogicalFrame, reg: &Registry) -> bool {
    let named = f.function.as_deref().is_some_and(|n| {
        // Rust 1.88 and later put the allocator shims in a `__rustc` namespace
        // (`__rustc::__rdl_alloc`).
        let n = n.strip_prefix("__rustc::").unwrap_or(n);
        // A wrapper of one name among several in its module (two C files' `static
        // xmalloc`) is named with its start: `xmalloc@0x1180`.
        let n = crate::cpu::names::split_distinct_name(n).map_or(n, |(f, _)| f);
        ALLOCATOR.iter().any(|p| n.starts_with(p))
            || ALLOCATION_WRAPPERS.contains(&n)
            || reg
                .allocation_functions()
                .iter()
                .any(|asked| crate::cpu::annotate::names_function(n, asked))
    });
    named
        || f.file
            .as_deref()
            .is_some_and(|file| RUST_ALLOCATOR_FILES.iter().any(|p| file.contains(p)))
}

/// The frames that may be charged: inside the root, without the allocator entry points
/// (a range of frame indices, innermost first).
pub fn eligible(stack: &Stack, reg: &Registry) -> std::ops::Range<usize> {
    let len = stack.len();
    let frame = |i: usize| stack.get(i).expect("index below the stack's length");
    let module = |f: &LogicalFrame| f.module.map(|m| reg.module(m));
    let start = stack
        .frames()
        .position(|f| !is_allocator_entry(f, reg))
        .unwrap_or(len);
    // A signal handler's allocation: the handler is the root; the signal frame and the
    // interrupted code outside it are not its callers.
    if let Some(signal) = stack.frames().position(LogicalFrame::is_signal_boundary) {
        // (Nothing but allocator entry points inside: charge those rather than nobody.)
        return if start < signal {
            start..signal
        } else {
            0..signal
        };
    }
    // The root: `main` of the main executable, if the stack reaches it.
    let mut end = stack
        .frames()
        .rposition(|f| f.function.as_deref() == Some("main") && module(f).is_some_and(|m| m.main))
        .map_or(len, |r| r + 1);
    // Without `main` (a thread, an exit handler, a stripped executable): drop the run of
    // start-up frames at the outer end (C library, dynamic loader, named start-up code).
    if end == len {
        // A thread's stack ends in the C library (`clone`); a process's main thread's, in
        // the executable (`_start`).
        let thread = stack
            .frames()
            .next_back()
            .and_then(module)
            .is_some_and(is_c_library);
        while end > 0 {
            let f = frame(end - 1);
            let startup = function_is(f, STARTUP)
                || module(f).is_some_and(|m| is_c_library(m) || is_loader(m));
            let unnamed_entry = end == len
                && is_unnamed(f)
                && module(f).is_some_and(|m| m.main)
                && end >= 2
                && module(frame(end - 2)).is_some_and(is_c_library);
            if startup || unnamed_entry {
                end -= 1;
            } else {
                break;
            }
        }
        // A start routine in a shared library that calls back into the program is that
        // library's trampoline (C++ `std::thread` in libstdc++, OpenMP's workers in
        // libgomp, GLib's thread proxy): the thread is the program's, rooted at the
        // function it runs, as `main` is. Otherwise every allocation of such a thread
        // would be charged to the trampoline's library. Only where the start-up frames
        // show that the stack reaches the thread's start (a truncated stack's outermost
        // frame is no root), on a thread's stack: below a stripped executable's `main`, a
        // library that calls the program back is the first library `main` called.
        if thread
            && end < len
            && end >= start + 2
            && module(frame(end - 1)).is_some_and(ModuleInfo::is_shared_library)
            && module(frame(end - 2)).is_some_and(|m| m.main)
        {
            end -= 1;
        }
    }
    if start >= end {
        // Nothing but start-up or tear-down code (a C library releasing a thread's buffers
        // at exit, say): charge the frames themselves rather than nobody.
        return start.min(len)..len;
    }
    start..end
}

fn function_name(f: &LogicalFrame, m: Option<&ModuleInfo>) -> String {
    let module = m.map_or("[unknown]", |m| m.name.as_str());
    match f.function.as_deref() {
        Some(func) => format!("{module}!{func}"),
        None => format!("{module}!0x{:x}", f.function_start.unwrap_or(f.offset)),
    }
}

/// Chooses what a stack is charged to. `main_name` names the main executable of the
/// stack's process, for stacks with no frame in any module.
pub fn targets(
    stack: Option<&Stack>,
    reg: &Registry,
    by_function: bool,
    charge: Charge,
    main_name: &str,
    intern: &mut dyn FnMut(String) -> Arc<str>,
) -> Vec<Target> {
    let Some(stack) = stack else {
        return vec![Target::Unknown];
    };
    let range = eligible(stack, reg);
    if range.is_empty() {
        return vec![Target::Unknown];
    }
    let frames = || stack.range(range.start, range.end);
    let module = |f: &LogicalFrame| f.module.map(|m| reg.module(m));
    let in_shared = |f: &&LogicalFrame| module(f).is_some_and(ModuleInfo::is_shared_library);
    let to_target = |f: &LogicalFrame, intern: &mut dyn FnMut(String) -> Arc<str>| {
        let m = module(f);
        if by_function {
            Target::Function(intern(function_name(f, m)))
        } else {
            Target::Library(intern(
                m.map_or_else(|| "[unknown]".to_string(), |m| m.name.clone()),
            ))
        }
    };
    let chosen: Vec<&LogicalFrame> = match charge {
        Charge::First => frames().rev().find(in_shared).into_iter().collect(),
        Charge::Last => frames().find(in_shared).into_iter().collect(),
        Charge::All => frames().rev().filter(in_shared).collect(),
    };
    if chosen.is_empty() {
        let innermost = frames().next().expect("a non-empty range");
        return vec![if by_function {
            Target::Function(intern(function_name(innermost, module(innermost))))
        } else {
            let name = frames()
                .find_map(|f| module(f).filter(|m| m.main))
                .map_or(main_name, |m| m.name.as_str());
            Target::Library(intern(name.to_string()))
        }];
    }
    let mut out: Vec<Target> = Vec::with_capacity(chosen.len().min(16));
    let mut seen = std::collections::HashSet::new();
    for f in chosen {
        let t = to_target(f, intern);
        if seen.insert(t.clone()) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::ids::{SessionId, StackId};
    use crate::memory::testkit::{APP, Kit, LIBA, LIBB, LIBC, LIBSTDCXX, VDSO};

    /// What `stack` of session 0 is charged to, as unit names.
    fn charged(
        reg: &Registry,
        stack: Option<u32>,
        by_function: bool,
        charge: Charge,
    ) -> Vec<String> {
        let st = stack.map(|id| {
            reg.stack(SessionId(0), StackId(id))
                .expect("a defined stack")
        });
        targets(
            st.map(|s| &**s),
            reg,
            by_function,
            charge,
            "app-from-session",
            &mut |s| Arc::from(s),
        )
        .iter()
        .map(|t| t.name().to_string())
        .collect()
    }

    /// Every policy, by library and by function: `[first, last, all]`.
    fn all_policies(reg: &Registry, stack: u32, by_function: bool) -> [Vec<String>; 3] {
        [Charge::First, Charge::Last, Charge::All]
            .map(|c| charged(reg, Some(stack), by_function, c))
    }

    fn s(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn first_is_the_outermost_library_last_the_innermost_all_every_one() {
        let mut kit = Kit::new();
        let nested = kit.stack(&[
            (LIBA, "a_alloc"),
            (LIBB, "b_work"),
            (APP, "main"),
            (LIBC, "__libc_start_call_main"),
            (LIBC, "__libc_start_main_impl"),
            (APP, "_start"),
        ]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            all_policies(&reg, nested, false),
            [s(&["libb.so"]), s(&["liba.so"]), s(&["libb.so", "liba.so"])]
        );
        assert_eq!(
            all_policies(&reg, nested, true),
            [
                s(&["libb.so!b_work"]),
                s(&["liba.so!a_alloc"]),
                s(&["libb.so!b_work", "liba.so!a_alloc"])
            ]
        );
    }

    #[test]
    fn all_charges_a_library_met_twice_once_and_a_function_per_frame() {
        let mut kit = Kit::new();
        let repeat = kit.stack(&[
            (LIBA, "a_inner"),
            (LIBB, "b_callback"),
            (LIBA, "a_outer"),
            (APP, "main"),
        ]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            all_policies(&reg, repeat, false),
            [s(&["liba.so"]), s(&["liba.so"]), s(&["liba.so", "libb.so"])]
        );
        assert_eq!(
            all_policies(&reg, repeat, true),
            [
                s(&["liba.so!a_outer"]),
                s(&["liba.so!a_inner"]),
                s(&["liba.so!a_outer", "libb.so!b_callback", "liba.so!a_inner"])
            ]
        );
    }

    #[test]
    fn the_c_library_outside_main_is_never_charged() {
        let mut kit = Kit::new();
        let own = kit.stack(&[
            (APP, "helper"),
            (APP, "main"),
            (LIBC, "__libc_start_main"),
            (APP, "_start"),
        ]);
        let reg = kit.registry(&[0]);
        // No library inside `main`: the executable by library, the allocating function by
        // function, whatever the policy.
        for charge in [Charge::First, Charge::Last, Charge::All] {
            assert_eq!(charged(&reg, Some(own), false, charge), s(&["app"]));
            assert_eq!(charged(&reg, Some(own), true, charge), s(&["app!helper"]));
        }
    }

    #[test]
    fn allocator_entry_points_are_skipped_at_the_inner_end() {
        let mut kit = Kit::new();
        let vector = kit.stack(&[
            (LIBSTDCXX, "operator new(unsigned long)"),
            (
                LIBSTDCXX,
                "std::__new_allocator<int>::allocate(unsigned long, void const*)",
            ),
            (LIBA, "a_vector"),
            (APP, "main"),
        ]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            all_policies(&reg, vector, false),
            [s(&["liba.so"]), s(&["liba.so"]), s(&["liba.so"])]
        );
        assert_eq!(
            charged(&reg, Some(vector), true, Charge::Last),
            s(&["liba.so!a_vector"])
        );
        assert_eq!(
            eligible(reg.stack(SessionId(0), StackId(vector)).unwrap(), &reg),
            2..4
        );
    }

    #[test]
    fn c_allocation_wrappers_are_skipped_at_the_inner_end() {
        let mut kit = Kit::new();
        let copied = kit.stack(&[
            (LIBB, "g_malloc"),
            (LIBB, "g_strdup"),
            (LIBA, "a_name"),
            (APP, "xstrdup_user"),
            (APP, "main"),
        ]);
        let wrapped = kit.stack(&[(APP, "xmalloc"), (APP, "parse"), (APP, "main")]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            charged(&reg, Some(copied), true, Charge::Last),
            s(&["liba.so!a_name"])
        );
        assert_eq!(
            charged(&reg, Some(copied), false, Charge::Last),
            s(&["liba.so"])
        );
        assert_eq!(
            charged(&reg, Some(wrapped), true, Charge::Last),
            s(&["app!parse"])
        );
        // Only the run at the inner end, and only exact names: a wrapper called from
        // further out, or a function whose name merely starts like one, is a unit.
        let inner = kit.stack(&[(APP, "xmalloc_stats"), (APP, "g_malloc"), (APP, "main")]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            eligible(reg.stack(SessionId(0), StackId(inner)).unwrap(), &reg),
            0..3
        );
    }

    #[test]
    fn a_thread_is_rooted_at_its_start_routine() {
        let mut kit = Kit::new();
        let thread = kit.stack(&[
            (LIBB, "b_worker"),
            (LIBC, "start_thread"),
            (LIBC, "__clone3"),
        ]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            eligible(reg.stack(SessionId(0), StackId(thread)).unwrap(), &reg),
            0..1
        );
        assert_eq!(
            all_policies(&reg, thread, false),
            [s(&["libb.so"]), s(&["libb.so"]), s(&["libb.so"])]
        );
    }

    /// `std::thread` (and OpenMP, GLib) start a thread in a library function that calls the
    /// program's: that trampoline is no unit, or every allocation of such threads would be
    /// charged to libstdc++. A library's own thread, calling another library, is still
    /// charged to the library whose thread it is; a stack that does not reach its thread's
    /// start (truncated) keeps its outermost frame; a stripped `main` is no trampoline.
    #[test]
    fn a_library_trampoline_that_runs_the_programs_function_is_no_unit() {
        let mut kit = Kit::new();
        let std_thread = kit.stack(&[
            (LIBSTDCXX, "operator new(unsigned long)"),
            (APP, "work"),
            (LIBSTDCXX, ""),
            (LIBC, "start_thread"),
            (LIBC, "__clone3"),
        ]);
        let calls_lib = kit.stack(&[
            (LIBA, "a_alloc"),
            (APP, "work"),
            (LIBSTDCXX, ""),
            (LIBC, "start_thread"),
        ]);
        let own_thread = kit.stack(&[
            (LIBA, "a_alloc"),
            (LIBB, "b_worker"),
            (LIBC, "start_thread"),
        ]);
        let truncated = kit.stack(&[(APP, "work"), (LIBB, "b_callback_runner")]);
        let stripped_main = kit.stack(&[
            (APP, "on_item"),
            (LIBB, "b_each"),
            (APP, ""),
            (LIBC, "__libc_start_call_main"),
            (LIBC, "__libc_start_main"),
            (APP, ""),
        ]);
        let reg = kit.registry(&[0]);
        let range = |id| eligible(reg.stack(SessionId(0), StackId(id)).unwrap(), &reg);
        assert_eq!(range(std_thread), 1..2);
        assert_eq!(
            all_policies(&reg, std_thread, false),
            [s(&["app"]), s(&["app"]), s(&["app"])]
        );
        assert_eq!(
            charged(&reg, Some(std_thread), true, Charge::First),
            s(&["app!work"])
        );
        assert_eq!(
            all_policies(&reg, calls_lib, false),
            [s(&["liba.so"]), s(&["liba.so"]), s(&["liba.so"])]
        );
        assert_eq!(
            all_policies(&reg, own_thread, false),
            [s(&["libb.so"]), s(&["liba.so"]), s(&["libb.so", "liba.so"])]
        );
        assert_eq!(range(truncated), 0..2);
        assert_eq!(
            charged(&reg, Some(truncated), false, Charge::First),
            s(&["libb.so"])
        );
        assert_eq!(
            charged(&reg, Some(stripped_main), false, Charge::First),
            s(&["libb.so"])
        );
    }

    /// A stripped executable's `main` and `_start` have no names, or only their extents'
    /// (`fn@0x...`): the stack is still rooted at `main`, not taken for one without a root
    /// (whose first library would be the C library's `__libc_start_main`).
    #[test]
    fn a_stripped_executable_is_rooted_at_its_unnamed_main() {
        let mut kit = Kit::new();
        let named_by_extent = kit.stack(&[
            (LIBA, "a_alloc"),
            (APP, "fn@0x1200"),
            (LIBB, "b_each"),
            (APP, "fn@0x1100"),
            (LIBC, "__libc_start_call_main"),
            (LIBC, "__libc_start_main"),
            (APP, "fn@0x1040"),
        ]);
        let nameless = kit.stack(&[
            (LIBA, "a_alloc"),
            (APP, ""),
            (LIBC, "__libc_start_call_main"),
            (LIBC, "__libc_start_main"),
            (APP, ""),
        ]);
        let reg = kit.registry(&[0]);
        let range = |id| eligible(reg.stack(SessionId(0), StackId(id)).unwrap(), &reg);
        assert_eq!(range(named_by_extent), 0..4);
        assert_eq!(
            all_policies(&reg, named_by_extent, false),
            [s(&["libb.so"]), s(&["liba.so"]), s(&["libb.so", "liba.so"])]
        );
        assert_eq!(range(nameless), 0..2);
        assert_eq!(
            charged(&reg, Some(nameless), true, Charge::First),
            s(&["liba.so!a_alloc"])
        );
    }

    #[test]
    fn tear_down_code_alone_is_charged_to_itself() {
        let mut kit = Kit::new();
        let exit = kit.stack(&[
            (LIBC, "_IO_cleanup"),
            (LIBC, "__run_exit_handlers"),
            (LIBC, "exit"),
        ]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            eligible(reg.stack(SessionId(0), StackId(exit)).unwrap(), &reg),
            0..3
        );
        assert_eq!(
            all_policies(&reg, exit, true),
            [
                s(&["libc.so.6!exit"]),
                s(&["libc.so.6!_IO_cleanup"]),
                s(&[
                    "libc.so.6!exit",
                    "libc.so.6!__run_exit_handlers",
                    "libc.so.6!_IO_cleanup"
                ])
            ]
        );
    }

    #[test]
    fn frames_in_no_library_charge_the_executable_or_the_address() {
        let mut kit = Kit::new();
        let jit = kit.stack(&[(0, ""), (VDSO, ""), (APP, "main")]);
        let reg = kit.registry(&[0]);
        let address = kit.offset(0, "");
        // The vDSO is no shared library, nor is code outside every module.
        for charge in [Charge::First, Charge::Last, Charge::All] {
            assert_eq!(charged(&reg, Some(jit), false, charge), s(&["app"]));
            assert_eq!(
                charged(&reg, Some(jit), true, charge),
                vec![format!("[unknown]!0x{address:x}")]
            );
        }
        // Nothing known: the unknown unit.
        assert_eq!(charged(&reg, None, false, Charge::First), s(&["[unknown]"]));
        // A stack in no module at all is charged to the session's executable.
        let mut kit = Kit::new();
        let nowhere = kit.stack(&[(0, "")]);
        let reg = kit.registry(&[0]);
        assert_eq!(
            charged(&reg, Some(nowhere), false, Charge::First),
            s(&["app-from-session"])
        );
    }
}
