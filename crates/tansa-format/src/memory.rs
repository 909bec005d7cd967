//! Frames of a memory (heap) recording.
//!
//! ```text
//! META CALIBRATION? (SESSION | META_CHUNK | THREAD_CHUNK | SESSION_END | SESSION_LOSSES
//!                    | UNRECORDED)* (LEAK_CAUSE FREED_ELSEWHERE?)? CALIBRATION SYMBOLS END
//! ```
//!
//! A *session* is one process image (fork and exec start new sessions). `META_CHUNK` and
//! `THREAD_CHUNK` payloads are a small binary prefix followed by raw `tansa-wire` records,
//! exactly as the agent wrote them into its rings; a record may span two consecutive
//! chunks of the same stream. Chunks of one stream appear in stream order.

use serde::{Deserialize, Serialize};

use crate::container::FrameType;
use crate::meta::ExitStatus;

/// [`SessionInfo`] (postcard).
pub const SESSION: FrameType = FrameType(0x0100);
/// `session:u32le` + meta-stream bytes.
pub const META_CHUNK: FrameType = FrameType(0x0101);
/// `session:u32le stream:u32le` + thread-stream bytes. Written keyed (the prefix is the
/// frame's key), so that a reader indexes the chunks of a file without decompressing them.
pub const THREAD_CHUNK: FrameType = FrameType(0x0102);
/// [`SessionEnd`] (postcard).
pub const SESSION_END: FrameType = FrameType(0x0103);
/// [`SessionLosses`] (postcard): what a session's agent could not record, by cause. Written
/// right after the session's `SESSION_END` (readers that predate it skip it).
pub const SESSION_LOSSES: FrameType = FrameType(0x0104);
/// [`Unrecorded`] (postcard): a process of the recorded tree that ran without being
/// recorded, and why.
pub const UNRECORDED: FrameType = FrameType(0x0105);
/// [`LeakCause`] (postcard): what `tansa record --leak-cause` traced (seed 001), written
/// once at the end.
pub const LEAK_CAUSE: FrameType = FrameType(0x0106);
/// `Vec<`[`FreedElsewhere`]`>` (postcard): the traced sites of the `LEAK_CAUSE` before it
/// whose traced blocks were released by another thread than the one followed, written
/// right after it when there are any (readers that predate it skip it).
pub const FREED_ELSEWHERE: FrameType = FrameType(0x0113);
/// [`SessionPlace`] (postcard): the session's rank in a parallel job, written right after
/// its `SESSION` frame when the process's launcher named one (readers that predate it skip
/// it).
pub const SESSION_PLACE: FrameType = FrameType(0x0107);

/// A process image that ran under the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Session number, unique in the recording, in order of appearance.
    pub session: u32,
    /// Process id.
    pub pid: u32,
    /// Parent process id when the session started.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Session start timestamp (recording clock).
    pub start_ticks: u64,
    /// Whether free events carry stacks.
    pub free_stacks: bool,
    /// Whether the session ran in online mode.
    pub online: bool,
}

/// Where a session's process ran in a parallel job (an MPI or Slurm rank), as its launcher
/// told it through the environment (`tansa_wire::place`). The host is the recording's
/// (`RecordingMeta::hostname`): one recorder runs on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPlace {
    /// Session number.
    pub session: u32,
    /// The rank.
    pub rank: u32,
    /// The number of ranks of the job, when the launcher said.
    pub size: Option<u32>,
    /// The job's id, when the launcher gave one (Slurm job id, PMIx namespace, Open MPI
    /// job id).
    pub job: Option<String>,
    /// The environment variable the rank came from, e.g. `OMPI_COMM_WORLD_RANK`.
    pub source: String,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// Session number.
    pub session: u32,
    /// How the process (image) ended.
    pub exit: ExitStatus,
    /// Events the agent reported as lost.
    pub lost_events: u64,
    /// Last timestamp seen in the session.
    pub end_ticks: u64,
}

/// What the agent of a session could not record, by cause. Every count is also in
/// [`SessionEnd::lost_events`] (their total), except `stackless`, which counts events that
/// were recorded, only without their call stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Losses {
    /// Events of threads that found no ring to write to (online mode: with the releases of
    /// their blocks by other threads, which the agent passes on unrecorded).
    pub no_ring: u64,
    /// Signal-handler events beyond the queue of a hook they interrupted (and the leak
    /// check's records, when a handler called `exit` while the agent was busy).
    pub signal_queue: u64,
    /// Events after the collector was gone.
    pub collector_gone: u64,
    /// CPU samples dropped (they interrupted the agent, or had no usable stack).
    pub samples: u64,
    /// Events recorded without their call stack.
    pub stackless: u64,
}

impl Losses {
    /// Events not recorded, all causes together.
    pub fn lost(&self) -> u64 {
        [
            self.no_ring,
            self.signal_queue,
            self.collector_gone,
            self.samples,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Adds another session's counts.
    pub fn add(&mut self, other: &Losses) {
        self.no_ring = self.no_ring.saturating_add(other.no_ring);
        self.signal_queue = self.signal_queue.saturating_add(other.signal_queue);
        self.collector_gone = self.collector_gone.saturating_add(other.collector_gone);
        self.samples = self.samples.saturating_add(other.samples);
        self.stackless = self.stackless.saturating_add(other.stackless);
    }

    /// One sentence per non-zero count, for a report's warnings.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.no_ring > 0 {
            out.push(format!(
                "{} event(s) not recorded: their thread found no free ring buffer (too many \
                 threads alive at once, or no memory for more)",
                self.no_ring
            ));
        }
        if self.signal_queue > 0 {
            out.push(format!(
                "{} event(s) not recorded: signal handlers allocated more than the agent can \
                 queue while it was busy (or called exit then, and the leak check's findings \
                 could not be written)",
                self.signal_queue
            ));
        }
        if self.collector_gone > 0 {
            out.push(format!(
                "{} event(s) not recorded: the recorder was gone",
                self.collector_gone
            ));
        }
        if self.samples > 0 {
            out.push(format!(
                "{} CPU sample(s) dropped: they interrupted the agent itself or had no usable stack",
                self.samples
            ));
        }
        if self.stackless > 0 {
            out.push(format!(
                "{} event(s) recorded without their call stack (charged to [unknown])",
                self.stackless
            ));
        }
        out
    }
}

/// [`Losses`] of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLosses {
    /// Session number.
    pub session: u32,
    /// The counts.
    pub losses: Losses,
}

/// A process of the recorded tree that ran without being recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unrecorded {
    /// Process id.
    pub pid: u32,
    /// Parent process id, when known (0 otherwise).
    pub ppid: u32,
    /// Executable path, when known.
    pub exe: String,
    /// Why it was not recorded.
    pub reason: String,
}

/// A function named by leak-cause data, symbolized when the recording ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeFunction {
    /// The module (file path).
    pub module: String,
    /// The function's name (demangled), empty when unknown.
    pub name: String,
    /// Its entry's address in the module file.
    pub offset: u64,
    /// Its source file and line (of its entry), when known.
    pub file: String,
    /// See `file`; 0 when unknown.
    pub line: u32,
}

/// A conditional branch instruction named by leak-cause data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeBranch {
    /// The function holding it (index into [`LeakCause::functions`]).
    pub function: u32,
    /// Its address in the module file.
    pub offset: u64,
    /// Its source file and line, when known.
    pub file: String,
    /// See `file`; 0 when unknown.
    pub line: u32,
    /// The instruction (Intel syntax).
    pub instruction: String,
}

/// One step of a traced path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PathStep {
    /// A function was entered (index into [`LeakCause::functions`]).
    Enter(u32),
    /// A function returned.
    Exit(u32),
    /// A conditional branch ran (index into [`LeakCause::branches`]), jumping or not.
    Branch {
        /// The branch.
        branch: u32,
        /// Whether it jumped.
        taken: bool,
    },
}

/// A distinct traced path of an allocation site and how many traces followed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedPath {
    /// The steps from the allocation on.
    pub steps: Vec<PathStep>,
    /// F (the block was freed on this path) or E (the range end came first).
    pub freed: bool,
    /// Traces that followed exactly this path.
    pub count: u32,
}

/// The leak-cause tracing of one allocation site (one stack of one process image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedSite {
    /// Session number.
    pub session: u32,
    /// The allocation stack's id in that session.
    pub stack: u32,
    /// The function whose exit ends each trace (index into [`LeakCause::functions`]).
    pub range_end: Option<u32>,
    /// How often the range end moved one caller up because a block outlived it (spec
    /// §12.2); the paths are those collected over the last range.
    pub range_moves: u32,
    /// The allocating functions, root first (indices into [`LeakCause::functions`]): the
    /// caller chain the enclosing function of a path step falls back to.
    pub alloc_functions: Vec<u32>,
    /// The distinct paths.
    pub paths: Vec<TracedPath>,
    /// Traces taken in all (over every range).
    pub traces: u32,
    /// Nanoseconds the traced threads spent being followed, over all traces.
    pub tracing_ns: u64,
    /// Why tracing stopped (`"covered"`, `"limit"`, `"failed"`, `"ended"`; with no trace,
    /// `"busy"` or `"not-handed-over"`: see `tansa.leaks.v1`) or could not start.
    pub status: String,
    /// Traces whose block was released by another thread than the one followed (a queue's
    /// consumer freeing what a producer allocated): the followed path did not free it, it
    /// only ran meanwhile, so such a trace is no freeing path and is not in `paths` (it
    /// counts in `traces`). Not in the `LEAK_CAUSE` frame (whose layout older readers
    /// know): its own frame, [`FREED_ELSEWHERE`], carries it.
    #[serde(skip)]
    pub freed_elsewhere: u32,
}

/// A traced site's traces whose block another thread released (see
/// [`TracedSite::freed_elsewhere`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreedElsewhere {
    /// The site's session, as in its [`TracedSite`].
    pub session: u32,
    /// The site's allocation stack id, as in its [`TracedSite`].
    pub stack: u32,
    /// Its traces whose block was released by another thread.
    pub traces: u32,
}

impl LeakCause {
    /// The content of the [`FREED_ELSEWHERE`] frame: the sites with such traces.
    pub fn freed_elsewhere(&self) -> Vec<FreedElsewhere> {
        self.sites
            .iter()
            .filter(|s| s.freed_elsewhere > 0)
            .map(|s| FreedElsewhere {
                session: s.session,
                stack: s.stack,
                traces: s.freed_elsewhere,
            })
            .collect()
    }

    /// Adds what a [`FREED_ELSEWHERE`] frame says to the sites it names.
    pub fn add_freed_elsewhere(&mut self, frame: &[FreedElsewhere]) {
        for f in frame {
            if let Some(s) = self
                .sites
                .iter_mut()
                .find(|s| s.session == f.session && s.stack == f.stack)
            {
                s.freed_elsewhere = f.traces;
            }
        }
    }
}

/// Everything `tansa record --leak-cause` traced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakCause {
    /// The scan interval of the leak judgement, in milliseconds.
    pub scan_interval_ms: u32,
    /// Most traces per allocation site.
    pub traces_per_site: u32,
    /// Functions named by the sites.
    pub functions: Vec<CodeFunction>,
    /// Branches named by the sites.
    pub branches: Vec<CodeBranch>,
    /// The traced sites.
    pub sites: Vec<TracedSite>,
    /// Trace requests that could not be followed, and why (first few).
    pub failures: Vec<String>,
}

impl LeakCause {
    /// Adds the tracing of another recording of the same job (its sessions already
    /// numbered apart from this one's): its functions and branches go after this one's,
    /// and every index of its sites and paths is moved by as much. The scan settings stay
    /// this one's.
    pub fn absorb(&mut self, other: LeakCause) {
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let functions = to_u32(self.functions.len());
        let branches = to_u32(self.branches.len());
        let function = |i: u32| i.saturating_add(functions);
        self.functions.extend(other.functions);
        self.branches
            .extend(other.branches.into_iter().map(|b| CodeBranch {
                function: function(b.function),
                ..b
            }));
        self.sites.extend(other.sites.into_iter().map(|mut site| {
            site.range_end = site.range_end.map(function);
            for f in &mut site.alloc_functions {
                *f = function(*f);
            }
            for path in &mut site.paths {
                for step in &mut path.steps {
                    *step = match *step {
                        PathStep::Enter(f) => PathStep::Enter(function(f)),
                        PathStep::Exit(f) => PathStep::Exit(function(f)),
                        PathStep::Branch { branch, taken } => PathStep::Branch {
                            branch: branch.saturating_add(branches),
                            taken,
                        },
                    };
                }
            }
            site
        }));
        self.failures.extend(other.failures);
    }
}

/// Splits a `META_CHUNK` payload into its session and stream bytes.
pub fn split_meta_chunk(payload: &[u8]) -> Option<(u32, &[u8])> {
    let session = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    Some((session, &payload[4..]))
}

/// Splits a `THREAD_CHUNK` payload into session, stream and stream bytes.
pub fn split_thread_chunk(payload: &[u8]) -> Option<(u32, u32, &[u8])> {
    let session = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let stream = u32::from_le_bytes(payload.get(4..8)?.try_into().ok()?);
    Some((session, stream, &payload[8..]))
}

/// Builds a `META_CHUNK` payload prefix.
pub fn meta_chunk_prefix(session: u32) -> [u8; 4] {
    session.to_le_bytes()
}

/// Builds a `THREAD_CHUNK` payload prefix.
pub fn thread_chunk_prefix(session: u32, stream: u32) -> [u8; 8] {
    let mut p = [0u8; 8];
    p[..4].copy_from_slice(&session.to_le_bytes());
    p[4..].copy_from_slice(&stream.to_le_bytes());
    p
}

/// Frame type: a recording whose recorder was killed, completed afterwards by a salvage
/// ([`Salvage`]); readers warn about it.
pub const SALVAGED: FrameType = FrameType(0x0110);

/// Frame type: [`VolatileSegment`] (postcard): in a durable recording, a shared segment the
/// agent could not create as a file in the segment directory (no space, say) and made in
/// memory instead. Readers of a salvaged recording warn that what its rings held at the
/// kill is lost (readers that predate it skip it).
pub const VOLATILE_SEGMENT: FrameType = FrameType(0x0111);

/// Frame type: the recorded executables that allocate past the agent's hooks
/// (`Vec<OwnAllocator>`, postcard), written when the recording is finished; readers warn
/// about each (readers that predate it skip it).
pub const OWN_ALLOCATORS: FrameType = FrameType(0x0112);

/// [`OwnAllocator::allocators`]' name for CPython's object allocator: a Python interpreter
/// takes its objects of 512 bytes or less from arenas it maps itself, unless its
/// environment sends them to `malloc` (`PYTHONMALLOC=malloc`).
pub const PYMALLOC: &str = "pymalloc";
/// [`OwnAllocator::allocators`]' name for V8's garbage-collected heap (node, `libnode`).
pub const V8_HEAP: &str = "V8 heap";
/// [`OwnAllocator::allocators`]' name for the Go runtime's garbage-collected heap (a Go
/// program linked dynamically, as cgo makes it).
pub const GO_HEAP: &str = "Go heap";
/// [`OwnAllocator::allocators`]' name for a Java virtual machine's garbage-collected heap
/// (`libjvm.so`).
pub const JVM_HEAP: &str = "JVM heap";

/// The heaps of language runtimes, which no C allocation function reaches, with what a
/// report says of each: where the objects are, and how to see them.
const RUNTIME_HEAPS: [(&str, &str); 4] = [
    (
        PYMALLOC,
        "it is a CPython interpreter, which takes its objects of 512 bytes or less (most of a \
         Python program's) from its own allocator, pymalloc, in arenas it maps itself: none \
         of them is recorded, only the arenas' bookkeeping and larger objects; run the \
         program with PYTHONMALLOC=malloc to record every object",
    ),
    (
        V8_HEAP,
        "it runs JavaScript on V8, whose objects live in V8's own garbage-collected heap: \
         none of them is recorded, only the engine's native allocations; a V8 heap snapshot \
         shows them (node --heapsnapshot-signal=SIGUSR2, or the inspector)",
    ),
    (
        GO_HEAP,
        "it is a Go program, whose values live in the Go runtime's own garbage-collected \
         heap: none of them is recorded, only the C allocations of its cgo code and \
         libraries; a Go heap profile shows them (runtime/pprof, read with go tool pprof)",
    ),
    (
        JVM_HEAP,
        "it runs a Java virtual machine, whose objects live in its own garbage-collected \
         heap: none of them is recorded, only the JVM's native allocations; a Java heap dump \
         shows them (jcmd PID GC.heap_dump)",
    ),
];

/// A recorded executable with allocation functions of its own: an executable comes before
/// `LD_PRELOAD` in the dynamic linker's search order, so the agent's hooks never see the
/// calls that go to them. Or a module (executable or library) with an allocator of its own
/// that the program calls directly ([`PYMALLOC`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnAllocator {
    /// The executable's (or module's) path.
    pub exe: String,
    /// C allocation functions it defines and exports (every call to them in the process
    /// goes there, its libraries' too).
    pub exported: Vec<String>,
    /// C allocation functions it defines without exporting them (its own calls go there).
    pub internal: Vec<String>,
    /// Entry points of an allocator linked into it (`je_malloc`, `mi_malloc`, ...).
    pub allocators: Vec<String>,
}

impl OwnAllocator {
    /// The warning a report gives (the path escaped: it comes from the file).
    pub fn note(&self) -> String {
        let exe = self.exe.escape_debug();
        let mut parts = Vec::new();
        if !self.exported.is_empty() {
            parts.push(format!(
                "it defines {} itself, and every call to them in its processes (its \
                 libraries' too) goes there, not to the C library's, so none is recorded",
                self.exported.join(", ")
            ));
        }
        if !self.internal.is_empty() {
            parts.push(format!(
                "it defines {} itself (not exported): its own calls to them are not recorded, \
                 only its libraries'",
                self.internal.join(", ")
            ));
        }
        let runtime = |a: &str| RUNTIME_HEAPS.iter().find(|(name, _)| *name == a);
        let linked: Vec<&str> = self
            .allocators
            .iter()
            .map(String::as_str)
            .filter(|a| runtime(a).is_none())
            .collect();
        if !linked.is_empty() {
            parts.push(format!(
                "it contains an allocator of its own ({}): what it allocates through that is \
                 not recorded",
                linked.join(", ")
            ));
        }
        let mut said = Vec::new();
        if !parts.is_empty() {
            said.push(format!(
                "{}; link it with the C library's allocator to record those allocations",
                parts.join("; ")
            ));
        }
        said.extend(
            self.allocators
                .iter()
                .filter_map(|a| runtime(a))
                .map(|(_, note)| note.to_string()),
        );
        format!("{exe} allocates past tansa's hooks: {}", said.join("; "))
    }
}

/// A shared segment of a durable recording that is not in a file (see [`VOLATILE_SEGMENT`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolatileSegment {
    /// The process image (session number).
    pub session: u32,
    /// The segment's index among the session's segments (0: the first, with the header).
    pub segment: u32,
}

/// What a salvage did to a recording whose recorder was killed (`tansa report` completes
/// such a recording from the file and the agents' segment files next to it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Salvage {
    /// Event records recovered from the agents' shared rings (not yet in the file).
    pub events: u64,
    /// Their bytes (thread and meta streams).
    pub bytes: u64,
    /// Bytes of a torn last frame cut off (their contents were recovered from the rings).
    pub torn_bytes: u64,
    /// Process images whose end was not recorded.
    pub sessions_ended: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str) -> CodeFunction {
        CodeFunction {
            module: "m".into(),
            name: name.into(),
            offset: 0,
            file: String::new(),
            line: 0,
        }
    }

    /// One recording's tracing: functions `names`, a branch in its second function, and a
    /// site of `session` whose path enters the first function, takes the branch and ends in
    /// the second.
    fn tracing(session: u32, names: [&str; 2]) -> LeakCause {
        LeakCause {
            scan_interval_ms: 100,
            traces_per_site: 8,
            functions: names.iter().map(|n| function(n)).collect(),
            branches: vec![CodeBranch {
                function: 1,
                offset: 4,
                ..CodeBranch::default()
            }],
            sites: vec![TracedSite {
                session,
                stack: 3,
                range_end: Some(1),
                range_moves: 0,
                alloc_functions: vec![0, 1],
                paths: vec![TracedPath {
                    steps: vec![
                        PathStep::Enter(0),
                        PathStep::Branch {
                            branch: 0,
                            taken: true,
                        },
                        PathStep::Exit(1),
                    ],
                    freed: false,
                    count: 2,
                }],
                traces: 2,
                tracing_ns: 0,
                status: "covered".into(),
                freed_elsewhere: 0,
            }],
            failures: vec![format!("failure of {session}")],
        }
    }

    /// Names a site's steps by the functions and branches they index.
    fn named(lc: &LeakCause, site: &TracedSite) -> Vec<String> {
        let f = |i: u32| lc.functions[i as usize].name.clone();
        let mut out: Vec<String> = site.alloc_functions.iter().map(|&i| f(i)).collect();
        out.push(format!("end {}", f(site.range_end.unwrap())));
        for step in &site.paths[0].steps {
            out.push(match *step {
                PathStep::Enter(i) => format!("enter {}", f(i)),
                PathStep::Exit(i) => format!("exit {}", f(i)),
                PathStep::Branch { branch, .. } => {
                    format!("branch in {}", f(lc.branches[branch as usize].function))
                }
            });
        }
        out
    }

    #[test]
    fn absorbing_a_second_recordings_tracing_keeps_every_index_pointing_at_its_own() {
        let mut job = tracing(0, ["a0", "a1"]);
        job.absorb(tracing(7, ["b0", "b1"]));
        assert_eq!(job.functions.len(), 4);
        assert_eq!(job.branches.len(), 2);
        assert_eq!(job.sites.len(), 2);
        assert_eq!(
            named(&job, &job.sites[0]),
            ["a0", "a1", "end a1", "enter a0", "branch in a1", "exit a1"]
        );
        assert_eq!(job.sites[1].session, 7);
        assert_eq!(
            named(&job, &job.sites[1]),
            ["b0", "b1", "end b1", "enter b0", "branch in b1", "exit b1"]
        );
        assert_eq!(job.failures, ["failure of 0", "failure of 7"]);
    }

    #[test]
    fn pymalloc_is_told_with_its_own_remedy() {
        let python = OwnAllocator {
            exe: "/usr/bin/python3.11".into(),
            allocators: vec![PYMALLOC.into()],
            ..OwnAllocator::default()
        };
        let note = python.note();
        assert!(
            note.starts_with(
                "/usr/bin/python3.11 allocates past tansa's hooks: it is a CPython interpreter"
            ),
            "{note}"
        );
        assert!(note.ends_with("run the program with PYTHONMALLOC=malloc to record every object"));
        assert!(!note.contains("link it"), "{note}");
        // With an allocator linked in as well, each gets its remedy.
        let both = OwnAllocator {
            allocators: vec!["mi_malloc".into(), PYMALLOC.into()],
            ..python
        };
        let note = both.note();
        assert!(
            note.contains("an allocator of its own (mi_malloc)"),
            "{note}"
        );
        assert!(!note.contains("pymalloc)"), "{note}");
        assert!(
            note.contains("link it with the C library's allocator"),
            "{note}"
        );
        assert!(
            note.ends_with("PYTHONMALLOC=malloc to record every object"),
            "{note}"
        );
    }
}
