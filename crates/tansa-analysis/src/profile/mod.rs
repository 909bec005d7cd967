//! Stack profiles: a recording reduced to call stacks with values, the model every
//! interchange format (pprof, collapsed stacks, speedscope) and flame graph is drawn from.
//!
//! The model follows pprof's, which the others are simpler views of:
//! * a [`Mapping`] per module (path, build id);
//! * a [`Function`] per distinct (name, file);
//! * a [`Location`] per distinct code address: its mapping, its module-relative address
//!   and its source-level lines, innermost inlined function first and the function that
//!   physically holds the address last;
//! * a [`Sample`] per distinct (stack, process, thread): its locations, innermost first,
//!   and one value per [`ValueType`].
//!
//! Heap profiles ([`heap`]) carry, per allocation stack, the blocks and bytes allocated
//! (`alloc_objects`, `alloc_space`), still live at the end (`inuse_objects`,
//! `inuse_space`, as Go heap profiles name them), and live when the heap peaked
//! (`peak_objects`, `peak_space`). CPU profiles ([`cpu`]) carry samples and CPU time.

pub mod cpu;
pub mod heap;

use std::sync::Arc;

use rustc_hash::FxHashMap;

/// What a profile was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    /// A heap recording.
    Heap,
    /// A CPU recording.
    Cpu,
}

/// A kind of value and its unit, e.g. `alloc_space`/`bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueType {
    /// Name (`alloc_space`, `samples`, ...).
    pub name: &'static str,
    /// Unit (`bytes`, `count`, `nanoseconds`).
    pub unit: &'static str,
}

/// A module the profile's code comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Path, or a bracketed name (`[kernel.kallsyms]`, `[vdso]`).
    pub path: String,
    /// Short name: the file name of the path (the seed-000 unit, `libc.so.6`).
    pub name: String,
    /// GNU build id, lowercase hex (empty if none).
    pub build_id: String,
    /// Whether addresses in it are kernel addresses.
    pub kernel: bool,
}

/// A function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Function {
    /// Name (demangled); `??` when unknown.
    pub name: Arc<str>,
    /// Source file, if known.
    pub file: Option<Arc<str>>,
}

/// One source-level frame at a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Line {
    /// Index in [`Profile::functions`].
    pub function: u32,
    /// Line, 0 when unknown.
    pub line: u32,
}

/// A code address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Index in [`Profile::mappings`], if the address is in a known module.
    pub mapping: Option<u32>,
    /// The address relative to the module (the raw address without one).
    pub address: u64,
    /// Its source-level frames: innermost inlined function first, the function that
    /// physically holds the address last. Never empty.
    pub lines: Vec<Line>,
}

/// A stack and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Indexes in [`Profile::locations`], innermost first.
    pub locations: Vec<u32>,
    /// One per [`Profile::value_types`].
    pub values: Vec<i64>,
    /// Index in [`Profile::processes`].
    pub process: u32,
    /// Thread id, when values are per thread.
    pub tid: Option<u32>,
}

/// A process the samples come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Short name (executable file name or `comm`).
    pub name: String,
    /// Path of its executable (empty when unknown). A process that calls `exec` has one
    /// entry per program it runs, each with the same pid.
    pub exe: String,
    /// Its MPI rank (heap profiles of a job).
    pub rank: Option<u32>,
    /// The host it ran on (profiles over several recordings or of a job).
    pub host: Option<String>,
}

impl ProcessInfo {
    /// The frame that stands for the process at the root of its stacks: `name [pid]`,
    /// with its rank and host when known (`mpi_prog [1234] rank 2 on node7`).
    pub fn frame_name(&self) -> String {
        let mut s = format!("{} [{}]", self.name, self.pid);
        if let Some(r) = self.rank {
            s.push_str(&format!(" rank {r}"));
        }
        if let Some(h) = self.host.as_deref().filter(|h| !h.is_empty()) {
            s.push_str(&format!(" on {h}"));
        }
        s
    }

    /// The frame that stands for its rank (`rank 2`, or `(no rank)`), for stacks grouped
    /// by rank.
    pub fn rank_frame(&self) -> String {
        self.rank
            .map_or_else(|| "(no rank)".to_string(), |r| format!("rank {r}"))
    }
}

/// A stack profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// What it was made from.
    pub kind: ProfileKind,
    /// The values of each sample.
    pub value_types: Vec<ValueType>,
    /// The value shown by default (index in `value_types`).
    pub default_value: usize,
    /// What one sampling event stands for (CPU: the period in nanoseconds).
    pub period: Option<(ValueType, i64)>,
    /// Modules.
    pub mappings: Vec<Mapping>,
    /// Functions.
    pub functions: Vec<Function>,
    /// Code addresses.
    pub locations: Vec<Location>,
    /// Samples.
    pub samples: Vec<Sample>,
    /// Processes.
    pub processes: Vec<ProcessInfo>,
    /// Length of the recording, in nanoseconds.
    pub duration_ns: u64,
    /// Heap: when the heap peaked, from the start, in nanoseconds.
    pub peak_ns: Option<u64>,
    /// Things a reader must know: losses, damage, estimates.
    pub comments: Vec<String>,
}

impl Profile {
    /// The index of the value type called `name`.
    pub fn value_index(&self, name: &str) -> Option<usize> {
        self.value_types.iter().position(|v| v.name == name)
    }

    /// The sum of value `index` over every sample.
    pub fn total(&self, index: usize) -> i64 {
        self.samples
            .iter()
            .map(|s| s.values.get(index).copied().unwrap_or(0))
            .fold(0i64, i64::saturating_add)
    }

    /// The name of a frame as tansa's units name functions: `module!function`
    /// (`module!??` when the function is unknown, `??` for an address outside every
    /// module).
    pub fn frame_name(&self, location: &Location, line: &Line) -> String {
        let function = self
            .functions
            .get(line.function as usize)
            .map_or("??", |f| &f.name);
        match location.mapping.and_then(|m| self.mappings.get(m as usize)) {
            Some(m) => format!("{}!{}", m.name, function),
            None if function == "??" => format!("[unknown]!{:#x}", location.address),
            // A signal delivery (the handler's frames are inside it).
            None if function == crate::memory::model::SIGNAL_HANDLER_FRAME => function.to_string(),
            None => format!("[unknown]!{function}"),
        }
    }

    /// The frames of a sample as names, outermost first (inlined functions after the
    /// function they were inlined into), as flame graphs stack them.
    pub fn frame_names(&self, sample: &Sample) -> Vec<String> {
        let mut names = Vec::new();
        for &l in sample.locations.iter().rev() {
            let Some(loc) = self.locations.get(l as usize) else {
                continue;
            };
            for line in loc.lines.iter().rev() {
                names.push(self.frame_name(loc, line));
            }
        }
        names
    }

    /// The module (seed-000 unit) of a frame name made by [`Profile::frame_name`].
    pub fn module_of(frame: &str) -> &str {
        frame.split_once('!').map_or(frame, |(m, _)| m)
    }
}

/// Builds a profile, interning functions, locations and samples.
#[derive(Debug)]
pub(crate) struct Builder {
    profile: Profile,
    functions: FxHashMap<Function, u32>,
    locations: FxHashMap<(Option<u32>, u64, Vec<Line>), u32>,
    samples: FxHashMap<(Vec<u32>, u32, Option<u32>), u32>,
}

impl Builder {
    pub(crate) fn new(
        kind: ProfileKind,
        value_types: Vec<ValueType>,
        default_value: usize,
    ) -> Self {
        Builder {
            profile: Profile {
                kind,
                value_types,
                default_value,
                period: None,
                mappings: Vec::new(),
                functions: Vec::new(),
                locations: Vec::new(),
                samples: Vec::new(),
                processes: Vec::new(),
                duration_ns: 0,
                peak_ns: None,
                comments: Vec::new(),
            },
            functions: FxHashMap::default(),
            locations: FxHashMap::default(),
            samples: FxHashMap::default(),
        }
    }

    pub(crate) fn profile_mut(&mut self) -> &mut Profile {
        &mut self.profile
    }

    pub(crate) fn function(&mut self, name: Option<&str>, file: Option<&str>) -> u32 {
        let f = Function {
            name: Arc::from(name.unwrap_or("??")),
            file: file.map(Arc::from),
        };
        if let Some(&i) = self.functions.get(&f) {
            return i;
        }
        let i = self.profile.functions.len() as u32;
        self.profile.functions.push(f.clone());
        self.functions.insert(f, i);
        i
    }

    pub(crate) fn location(&mut self, mapping: Option<u32>, address: u64, lines: Vec<Line>) -> u32 {
        let key = (mapping, address, lines);
        if let Some(&i) = self.locations.get(&key) {
            return i;
        }
        let i = self.profile.locations.len() as u32;
        self.profile.locations.push(Location {
            mapping,
            address,
            lines: key.2.clone(),
        });
        self.locations.insert(key, i);
        i
    }

    /// Adds `values` to the sample of this stack, process and thread.
    pub(crate) fn add(
        &mut self,
        locations: Vec<u32>,
        process: u32,
        tid: Option<u32>,
        values: &[i64],
    ) {
        let key = (locations, process, tid);
        if let Some(&i) = self.samples.get(&key) {
            let s = &mut self.profile.samples[i as usize];
            for (v, add) in s.values.iter_mut().zip(values) {
                *v = v.saturating_add(*add);
            }
            return;
        }
        let i = self.profile.samples.len() as u32;
        self.profile.samples.push(Sample {
            locations: key.0.clone(),
            values: values.to_vec(),
            process,
            tid,
        });
        self.samples.insert(key, i);
    }

    pub(crate) fn finish(self) -> Profile {
        self.profile
    }
}

/// Lowercase hex of a build id.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
