//! Modules and resolved stacks.

use std::sync::Arc;

use super::ids::{ModuleId, SessionId, StackId};
use super::merge::Event;
use rustc_hash::FxHashMap;
use tansa_wire::event::{
    MODULE_AGENT, MODULE_MAIN, MODULE_VDSO, ModuleLoad, SIGNAL_FRAME, StackFrame,
};

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

/// The name of the frame that stands for a signal delivery: the frames outside it are the
/// code the signal interrupted, those inside it the handler's (the agent's
/// `tansa_wire::event::SIGNAL_FRAME`, the kernel's signal frame and the C library's
/// signal-return trampoline). It has no module and is never a unit.
pub const SIGNAL_HANDLER_FRAME: &str = "[signal handler]";

impl LogicalFrame {
    /// Whether this frame stands for a signal delivery ([`SIGNAL_HANDLER_FRAME`]).
    pub fn is_signal_boundary(&self) -> bool {
        self.module.is_none() && self.offset == SIGNAL_FRAME
    }
}

/// Most source-level frames kept for one return address (the innermost inlined
/// functions first, and always the function that physically contains the address): deeper
/// inlining than this is not met in practice, and a recording cannot make one address cost
/// more.
pub const MAX_INLINED: usize = 64;

/// A call stack, innermost frame (the allocator's caller) first.
///
/// Each return address contributes its source-level frames (inlined functions first); those
/// are shared between every stack through the same address, so a stack costs memory in
/// proportion to its return addresses, not to its source-level frames.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stack {
    /// Per return address, its frames.
    segments: Vec<Arc<[LogicalFrame]>>,
    /// Number of frames up to and including each segment.
    ends: Vec<usize>,
}

impl Stack {
    /// A stack of these frames.
    pub fn from_frames(frames: Vec<LogicalFrame>) -> Stack {
        let mut s = Stack::default();
        for f in frames {
            s.push(Arc::from([f]));
        }
        s
    }

    fn push(&mut self, segment: Arc<[LogicalFrame]>) {
        if segment.is_empty() {
            return;
        }
        let end = self.len() + segment.len();
        self.segments.push(segment);
        self.ends.push(end);
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Whether it has no frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// StackFrame `i`, counting from the innermost.
    pub fn get(&self, i: usize) -> Option<&LogicalFrame> {
        let seg = self.ends.partition_point(|&e| e <= i);
        let start = if seg == 0 { 0 } else { self.ends[seg - 1] };
        self.segments.get(seg)?.get(i - start)
    }

    /// The frames, innermost first.
    pub fn frames(&self) -> StackFrames<'_> {
        self.range(0, self.len())
    }

    /// The source-level frames of each return address, innermost address first; within
    /// one, the innermost inlined function first and the function that physically contains
    /// the address last.
    pub fn segments(&self) -> impl Iterator<Item = &[LogicalFrame]> {
        self.segments.iter().map(|s| &s[..])
    }

    /// Frames `start..end`, innermost first.
    pub fn range(&self, start: usize, end: usize) -> StackFrames<'_> {
        let end = end.min(self.len());
        StackFrames {
            stack: self,
            front: start.min(end),
            back: end,
        }
    }
}

/// The frames of a [`Stack`] (or of part of it), innermost first.
#[derive(Debug, Clone)]
pub struct StackFrames<'a> {
    stack: &'a Stack,
    front: usize,
    back: usize,
}

impl<'a> Iterator for StackFrames<'a> {
    type Item = &'a LogicalFrame;

    fn next(&mut self) -> Option<&'a LogicalFrame> {
        if self.front >= self.back {
            return None;
        }
        let f = self.stack.get(self.front);
        self.front += 1;
        f
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for StackFrames<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        self.stack.get(self.back)
    }
}

impl ExactSizeIterator for StackFrames<'_> {}

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

/// A stack's frames as (module, offset), the module numbered for the whole registry (`None`:
/// outside any module).
type StackContent = Box<[(Option<ModuleIdx>, u64)]>;

/// The stack ids a process image defined more than once for the same frames, each with the
/// first id it gave them. The agent's table of stacks takes no lock: two threads that meet
/// the same new stack at the same moment each define it, under ids of their own. Without
/// this, everything counted per stack (a leak site, a pprof sample, a refused call) would
/// be split in two for no reason a user could see.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StackAliases(FxHashMap<(SessionId, StackId), StackId>);

impl StackAliases {
    /// The id `session` first gave the frames it defined as `id`.
    #[inline]
    pub fn canonical(&self, session: SessionId, id: StackId) -> StackId {
        self.0.get(&(session, id)).copied().unwrap_or(id)
    }

    /// Gives `e` the first id of its stack.
    #[inline]
    pub fn apply(&self, e: &mut Event) {
        if !self.0.is_empty() {
            let session = e.session;
            e.kind.map_stack(|id| self.canonical(session, id));
        }
    }

    /// How many ids are second definitions.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no stack was defined twice.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Modules and stacks of every session, resolved.
#[derive(Debug, Default)]
pub struct Registry {
    modules: Vec<ModuleInfo>,
    by_file: FxHashMap<(String, Vec<u8>), ModuleIdx>,
    session_modules: FxHashMap<(SessionId, ModuleId), ModuleIdx>,
    stacks: FxHashMap<(SessionId, StackId), Arc<Stack>>,
    /// Every distinct stack once, by its frames (global module, offset): the processes of a
    /// job, or the children of a fork, define the same stacks under their own ids, and a
    /// stack of 100 frames takes some 5 KB resolved.
    by_content: FxHashMap<StackContent, Arc<Stack>>,
    /// Number of stacks defined by each session.
    session_stacks: FxHashMap<SessionId, u32>,
    /// The first id each session gave each resolved stack (keyed by the address of the
    /// shared [`Stack`], which `by_content` keeps alive), to find the ids it gave it again.
    first_ids: FxHashMap<(SessionId, usize), StackId>,
    /// Those other ids.
    aliases: Arc<StackAliases>,
    names: FxHashMap<String, Arc<str>>,
    frames_cache: FxHashMap<(Option<ModuleIdx>, u64), Arc<[LogicalFrame]>>,
    unresolved_stacks: Vec<(SessionId, StackId, Vec<StackFrame>)>,
    /// Functions the user named allocation functions (`--alloc-fn`), as asked.
    allocation_functions: Vec<String>,
}

impl Registry {
    /// Takes the functions `names` for allocation functions, as the built-in wrappers are
    /// (`--alloc-fn`; a name as `tansa annotate` takes it: `my_alloc`, `Pool::get`). Call
    /// it before reporting.
    pub fn add_allocation_functions(&mut self, names: impl IntoIterator<Item = String>) {
        self.allocation_functions.extend(names);
    }

    /// The functions added by [`Registry::add_allocation_functions`].
    pub fn allocation_functions(&self) -> &[String] {
        &self.allocation_functions
    }

    /// All modules.
    pub fn modules(&self) -> &[ModuleInfo] {
        &self.modules
    }

    /// A module.
    pub fn module(&self, idx: ModuleIdx) -> &ModuleInfo {
        &self.modules[idx as usize]
    }

    /// Number of stacks `session` defined (stack ids are numbered from 1 as they are
    /// defined, so a larger id is a sparse one).
    pub fn stack_count(&self, session: SessionId) -> u32 {
        self.session_stacks.get(&session).copied().unwrap_or(0)
    }

    fn insert_stack(&mut self, session: SessionId, id: StackId, stack: Arc<Stack>) {
        let content = (session, Arc::as_ptr(&stack) as usize);
        if self.stacks.insert((session, id), stack).is_none() {
            *self.session_stacks.entry(session).or_default() += 1;
            let first = *self.first_ids.entry(content).or_insert(id);
            if first != id {
                Arc::make_mut(&mut self.aliases)
                    .0
                    .insert((session, id), first);
            }
        }
    }

    /// The stack ids defined again for frames already defined, with the first id of each
    /// (`None` if there is none): for decoders on other threads, which give every event
    /// the first id of its stack.
    pub fn stack_aliases(&self) -> Option<Arc<StackAliases>> {
        (!self.aliases.is_empty()).then(|| Arc::clone(&self.aliases))
    }

    /// The first id `session` gave the frames it defined as `id` (see [`StackAliases`]).
    pub fn canonical_stack(&self, session: SessionId, id: StackId) -> StackId {
        self.aliases.canonical(session, id)
    }

    /// Gives `e` the first id its session gave its stack's frames (see [`StackAliases`]).
    #[inline]
    pub fn canonicalize(&self, e: &mut Event) {
        self.aliases.apply(e);
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
    pub fn add_module(&mut self, session: SessionId, m: &ModuleLoad<'_>) {
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
        self.session_modules.insert((session, ModuleId(m.id)), idx);
    }

    /// The module a session calls `id`.
    pub fn session_module(&self, session: SessionId, id: ModuleId) -> Option<ModuleIdx> {
        self.session_modules.get(&(session, id)).copied()
    }

    /// Registers a stack definition, resolving its frames now if every module is known,
    /// or later (see [`Registry::resolve_pending`]).
    pub fn add_stack(
        &mut self,
        session: SessionId,
        id: StackId,
        frames: impl Iterator<Item = StackFrame>,
        resolver: &mut dyn AddressResolver,
    ) {
        let frames: Vec<StackFrame> = frames.collect();
        if frames
            .iter()
            .any(|f| f.module != 0 && self.session_module(session, ModuleId(f.module)).is_none())
        {
            self.unresolved_stacks.push((session, id, frames));
            return;
        }
        let stack = self.build_stack(session, &frames, resolver);
        self.insert_stack(session, id, stack);
    }

    /// Resolves stacks whose modules were announced after them. Returns how many stay
    /// unresolved (their unknown modules are treated as absent).
    pub fn resolve_pending(&mut self, resolver: &mut dyn AddressResolver, force: bool) -> usize {
        let pending = std::mem::take(&mut self.unresolved_stacks);
        for (session, id, frames) in pending {
            let ready = frames.iter().all(|f| {
                f.module == 0 || self.session_module(session, ModuleId(f.module)).is_some()
            });
            if ready || force {
                let stack = self.build_stack(session, &frames, resolver);
                self.insert_stack(session, id, stack);
            } else {
                self.unresolved_stacks.push((session, id, frames));
            }
        }
        self.unresolved_stacks.len()
    }

    /// The resolved stack of `frames` (as `session` numbers its modules): the one already
    /// built for the same frames by any session, else a new one.
    fn build_stack(
        &mut self,
        session: SessionId,
        frames: &[StackFrame],
        resolver: &mut dyn AddressResolver,
    ) -> Arc<Stack> {
        let key: StackContent = frames
            .iter()
            .map(|f| {
                let module = (f.module != 0)
                    .then(|| self.session_module(session, ModuleId(f.module)))
                    .flatten();
                (module, f.offset)
            })
            .collect();
        if let Some(s) = self.by_content.get(&key) {
            return Arc::clone(s);
        }
        let stack = Arc::new(self.resolve_stack(&key, resolver));
        self.by_content.insert(key, Arc::clone(&stack));
        stack
    }

    /// Resolves the frames of a stack (its [`StackContent`]).
    fn resolve_stack(
        &mut self,
        frames: &[(Option<ModuleIdx>, u64)],
        resolver: &mut dyn AddressResolver,
    ) -> Stack {
        let mut out = Stack::default();
        for &(module, offset) in frames {
            // The agent's own frames (its `dlclose` wrapper, say) are not the program's.
            if module.is_some_and(|m| self.modules[m as usize].agent) {
                continue;
            }
            let segment = match self.frames_cache.get(&(module, offset)) {
                Some(l) => Arc::clone(l),
                None => {
                    let l: Arc<[LogicalFrame]> = match module {
                        Some(m) => {
                            let r = resolver.resolve(&self.modules[m as usize], offset);
                            self.logical(m, offset, r).into()
                        }
                        None => Arc::from([LogicalFrame {
                            module: None,
                            function: (offset == SIGNAL_FRAME)
                                .then(|| self.intern(SIGNAL_HANDLER_FRAME)),
                            file: None,
                            line: 0,
                            inlined: false,
                            offset,
                            function_start: None,
                        }]),
                    };
                    self.frames_cache.insert((module, offset), Arc::clone(&l));
                    l
                }
            };
            out.push(segment);
        }
        out.segments.shrink_to_fit();
        out.ends.shrink_to_fit();
        out
    }

    fn logical(&mut self, module: ModuleIdx, offset: u64, mut r: Resolution) -> Vec<LogicalFrame> {
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
        if r.frames.len() > MAX_INLINED {
            // Keep the innermost inlined functions and the physical function.
            let outer = r.frames.pop();
            r.frames.truncate(MAX_INLINED - 1);
            r.frames.extend(outer);
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
    pub fn stack(&self, session: SessionId, id: StackId) -> Option<&Arc<Stack>> {
        self.stacks.get(&(session, id))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::memory::ids::{SessionId, StackId};
    use crate::memory::testkit::{APP, Kit, LIBA, LIBC};

    /// Processes that define the same stacks (the ranks of a job, the children of a fork)
    /// share one resolved copy of each, whatever their own ids; different stacks stay apart.
    #[test]
    fn identical_stacks_of_different_sessions_are_shared() {
        let mut kit = Kit::new();
        let a = kit.stack(&[(LIBC, "malloc"), (LIBA, "grow"), (APP, "main")]);
        let b = kit.stack(&[(LIBC, "malloc"), (APP, "main")]);
        let reg = kit.registry(&[1, 2, 3]);
        let get = |session: u32, id: u32| {
            Arc::clone(reg.stack(SessionId(session), StackId(id)).expect("defined"))
        };
        assert!(Arc::ptr_eq(&get(1, a), &get(2, a)));
        assert!(Arc::ptr_eq(&get(1, a), &get(3, a)));
        assert!(!Arc::ptr_eq(&get(1, a), &get(1, b)));
        assert_eq!(get(1, a).len(), 3);
        assert_eq!(get(3, b).len(), 2);
        assert_eq!(reg.stack_count(SessionId(2)), 2);
    }
}
