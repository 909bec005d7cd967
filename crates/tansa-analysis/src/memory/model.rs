//! Modules and resolved stacks.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tansa_wire::event::{Frame, MODULE_AGENT, MODULE_MAIN, MODULE_VDSO, ModuleLoad};

/// Index of a module in the [`Registry`].
pub type ModuleIdx = u32;

/// A module (executable or shared object) of the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Path as the loader knew it.
    pub path: String,
    /// File name (`liba.so`), used to name units.
    pub name: String,
    /// GNU build id.
    pub build_id: Vec<u8>,
    /// Main executable of its process.
    pub main: bool,
    /// The vDSO.
    pub vdso: bool,
    /// tansa's agent (its frames are dropped from stacks).
    pub agent: bool,
}

impl ModuleInfo {
    /// Whether this module counts as a shared library for charging.
    pub fn is_shared_library(&self) -> bool {
        !self.main && !self.vdso
    }
}

/// One source-level frame of a stack (inlined functions are frames of their own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalFrame {
    /// The module containing the code, if known.
    pub module: Option<ModuleIdx>,
    /// Function name (demangled), if known.
    pub function: Option<Arc<str>>,
    /// Source file, if known.
    pub file: Option<Arc<str>>,
    /// Source line (0 if unknown).
    pub line: u32,
    /// Whether this frame was inlined into the next (outer) one.
    pub inlined: bool,
    /// The return address, relative to the module (absolute when there is no module).
    pub offset: u64,
    /// Start of the containing function, relative to the module.
    pub function_start: Option<u64>,
}

/// A call stack, innermost frame (the allocator's caller) first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stack {
    /// The frames.
    pub frames: Vec<LogicalFrame>,
}

/// One resolved source frame, as an [`AddressResolver`] returns it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceFrame {
    /// Function name.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Line.
    pub line: u32,
}

/// What an address resolves to: frames innermost first (the last is the physical
/// function) and the start of the function.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolution {
    /// Frames, innermost inlined first.
    pub frames: Vec<SourceFrame>,
    /// Function start.
    pub function_start: Option<u64>,
}

/// Resolves return addresses of a module: from a recording's symbol table (reports) or
/// from the binaries themselves (online mode).
pub trait AddressResolver {
    /// Resolves the return address `offset` of `module`.
    fn resolve(&mut self, module: &ModuleInfo, offset: u64) -> Resolution;
}

/// Modules and stacks of every session, resolved.
#[derive(Debug, Default)]
pub struct Registry {
    modules: Vec<ModuleInfo>,
    by_file: FxHashMap<(String, Vec<u8>), ModuleIdx>,
    session_modules: FxHashMap<(u32, u32), ModuleIdx>,
    stacks: FxHashMap<(u32, u32), Arc<Stack>>,
    names: FxHashMap<String, Arc<str>>,
    frames_cache: FxHashMap<(ModuleIdx, u64), Arc<[LogicalFrame]>>,
    unresolved_stacks: Vec<(u32, u32, Vec<Frame>)>,
}

impl Registry {
    /// All modules.
    pub fn modules(&self) -> &[ModuleInfo] {
        &self.modules
    }

    /// A module.
    pub fn module(&self, idx: ModuleIdx) -> &ModuleInfo {
        &self.modules[idx as usize]
    }

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.names.get(s) {
            return Arc::clone(a);
        }
        let a: Arc<str> = Arc::from(s);
        self.names.insert(s.to_string(), Arc::clone(&a));
        a
    }

    /// Registers a module announced by session `session`.
    pub fn add_module(&mut self, session: u32, m: &ModuleLoad<'_>) {
        let path = String::from_utf8_lossy(m.path).into_owned();
        let key = (path.clone(), m.build_id.to_vec());
        let idx = match self.by_file.get(&key) {
            Some(&i) => i,
            None => {
                let name = if m.flags & MODULE_VDSO != 0 {
                    "[vdso]".to_string()
                } else {
                    path.rsplit('/').next().unwrap_or(&path).to_string()
                };
                let i = self.modules.len() as ModuleIdx;
                self.modules.push(ModuleInfo {
                    path,
                    name,
                    build_id: m.build_id.to_vec(),
                    main: m.flags & MODULE_MAIN != 0,
                    vdso: m.flags & MODULE_VDSO != 0,
                    agent: m.flags & MODULE_AGENT != 0,
                });
                self.by_file.insert(key, i);
                i
            }
        };
        if m.flags & MODULE_MAIN != 0 {
            self.modules[idx as usize].main = true;
        }
        self.session_modules.insert((session, m.id), idx);
    }

    /// The module a session calls `id`.
    pub fn session_module(&self, session: u32, id: u32) -> Option<ModuleIdx> {
        self.session_modules.get(&(session, id)).copied()
    }

    /// Registers a stack definition, resolving its frames now if every module is known,
    /// or later (see [`Registry::resolve_pending`]).
    pub fn add_stack(
        &mut self,
        session: u32,
        id: u32,
        frames: impl Iterator<Item = Frame>,
        resolver: &mut dyn AddressResolver,
    ) {
        let frames: Vec<Frame> = frames.collect();
        if frames
            .iter()
            .any(|f| f.module != 0 && self.session_module(session, f.module).is_none())
        {
            self.unresolved_stacks.push((session, id, frames));
            return;
        }
        let stack = self.build_stack(session, &frames, resolver);
        self.stacks.insert((session, id), Arc::new(stack));
    }

    /// Resolves stacks whose modules were announced after them. Returns how many stay
    /// unresolved (their unknown modules are treated as absent).
    pub fn resolve_pending(&mut self, resolver: &mut dyn AddressResolver, force: bool) -> usize {
        let pending = std::mem::take(&mut self.unresolved_stacks);
        for (session, id, frames) in pending {
            let ready = frames
                .iter()
                .all(|f| f.module == 0 || self.session_module(session, f.module).is_some());
            if ready || force {
                let stack = self.build_stack(session, &frames, resolver);
                self.stacks.insert((session, id), Arc::new(stack));
            } else {
                self.unresolved_stacks.push((session, id, frames));
            }
        }
        self.unresolved_stacks.len()
    }

    fn build_stack(
        &mut self,
        session: u32,
        frames: &[Frame],
        resolver: &mut dyn AddressResolver,
    ) -> Stack {
        let mut out = Vec::with_capacity(frames.len() + 4);
        for f in frames {
            let module = (f.module != 0)
                .then(|| self.session_module(session, f.module))
                .flatten();
            match module {
                // The agent's own frames (its `dlclose` wrapper, say) are not the program's.
                Some(m) if self.modules[m as usize].agent => {}
                Some(m) => {
                    let logical = match self.frames_cache.get(&(m, f.offset)) {
                        Some(l) => Arc::clone(l),
                        None => {
                            let r = resolver.resolve(&self.modules[m as usize], f.offset);
                            let l: Arc<[LogicalFrame]> = self.logical(m, f.offset, r).into();
                            self.frames_cache.insert((m, f.offset), Arc::clone(&l));
                            l
                        }
                    };
                    out.extend(logical.iter().cloned());
                }
                None => out.push(LogicalFrame {
                    module: None,
                    function: None,
                    file: None,
                    line: 0,
                    inlined: false,
                    offset: f.offset,
                    function_start: None,
                }),
            }
        }
        Stack { frames: out }
    }

    fn logical(&mut self, module: ModuleIdx, offset: u64, r: Resolution) -> Vec<LogicalFrame> {
        if r.frames.is_empty() {
            return vec![LogicalFrame {
                module: Some(module),
                function: None,
                file: None,
                line: 0,
                inlined: false,
                offset,
                function_start: r.function_start,
            }];
        }
        let n = r.frames.len();
        r.frames
            .iter()
            .enumerate()
            .map(|(i, s)| LogicalFrame {
                module: Some(module),
                function: s.function.as_deref().map(|f| self.intern(f)),
                file: s.file.as_deref().map(|f| self.intern(f)),
                line: s.line,
                inlined: i + 1 < n,
                offset,
                function_start: r.function_start,
            })
            .collect()
    }

    /// A session's stack.
    pub fn stack(&self, session: u32, id: u32) -> Option<&Arc<Stack>> {
        self.stacks.get(&(session, id))
    }
}
