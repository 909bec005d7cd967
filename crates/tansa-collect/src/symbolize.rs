//! Resolving, at the end of a recording, every address it uses.
//!
//! Reading a file's debugging information is the slow part (a C library's separate debug
//! file is tens of megabytes of compressed DWARF), then the lookups in it (milliseconds for
//! a few dozen addresses in that file): [`BackgroundResolver`] resolves the addresses of
//! each stack of the recording as it is defined, on its own thread and only while the CPUs
//! have time to spare ([`crate::contention`]), reading each file with its first addresses
//! (`tansa_symbols::ModuleResolution`), so that the end of the recording only looks up the
//! addresses that came last. Each file is opened as soon as a stack names it, whatever the
//! CPUs' load, so that a file rebuilt or deleted later is still the one resolved. Each
//! address resolves on its own, so the table is the one resolving everything at the end
//! gives. The thread keeps the normal priority: work at idle priority would hold up the
//! final lookups for as long as the program keeps the CPUs busy (work under way, or queued,
//! runs before them), and a process without `CAP_SYS_NICE` cannot raise a lowered priority
//! again.
//!
//! The meta streams name the modules of each session (`ModuleLoad`) and the frames of each
//! stack (`StackDef`, as module id and offset). Addresses are grouped by file (path and
//! build id), so a library shared by many processes is read once, and each file is resolved
//! by `tansa-symbols`. Return addresses are looked up one byte back, inside the call
//! instruction.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};
use tansa_format::symtab::{SymbolTable, SymbolTableBuilder};
use tansa_symbols::{ModuleResolution, Resolver};
use tansa_wire::event::{Decoder, Record};

use crate::contention::{CpuContention, WINDOW};

/// A module as announced by the agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleFile {
    /// Path as the loader knows it.
    pub path: String,
    /// GNU build id.
    pub build_id: Vec<u8>,
}

/// Files numbered in the order they are first named. A recording names the same few files
/// in every one of its stacks' frames: each frame then costs the lookup of two integers,
/// not the hashing, comparing and copying of a path (which took a third of the collector's
/// time while it recorded a build of 60 files, whose compilers define a stack in nearly
/// every call).
#[derive(Debug, Default)]
pub struct FileIds {
    ids: FxHashMap<ModuleFile, u32>,
    files: Vec<ModuleFile>,
}

impl FileIds {
    /// The number of `file`, given it if it is new.
    pub fn intern(&mut self, file: ModuleFile) -> u32 {
        if let Some(&id) = self.ids.get(&file) {
            return id;
        }
        let id = self.files.len() as u32;
        self.files.push(file.clone());
        self.ids.insert(file, id);
        id
    }

    /// The file numbered `id`.
    pub fn get(&self, id: u32) -> &ModuleFile {
        &self.files[id as usize]
    }
}

/// The module file a `ModuleLoad` record names.
pub fn module_file(m: &tansa_wire::event::ModuleLoad<'_>) -> ModuleFile {
    ModuleFile {
        path: String::from_utf8_lossy(m.path).into_owned(),
        build_id: m.build_id.to_vec(),
    }
}

/// The addresses a recording uses, by file.
#[derive(Debug, Default)]
pub struct AddressSet {
    files: FileIds,
    /// The file of each module, by session and module id.
    modules: FxHashMap<(u32, u32), u32>,
    /// The offsets used in each file, by file number.
    used: Vec<FxHashSet<u64>>,
    pending: Vec<(u32, u64)>,
}

impl AddressSet {
    /// Adds the records of a session's complete meta stream.
    pub fn add_meta_stream(&mut self, session: u32, bytes: &[u8]) {
        for rec in Decoder::new(bytes) {
            match rec {
                Ok(Record::ModuleLoad(m)) => {
                    let id = self.files.intern(module_file(&m));
                    self.modules.insert((session, m.id), id);
                }
                Ok(Record::StackDef { frames, .. }) => {
                    for f in frames.filter(|f| f.module != 0) {
                        self.pending.push((f.module, f.offset));
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // Frames take the module their id names at the end of the stream.
        for (module, offset) in std::mem::take(&mut self.pending) {
            if let Some(&file) = self.modules.get(&(session, module)) {
                let file = file as usize;
                if self.used.len() <= file {
                    self.used.resize_with(file + 1, FxHashSet::default);
                }
                self.used[file].insert(offset);
            }
        }
    }

    /// The files with addresses to resolve, ordered by path and build id, each with its
    /// offsets in ascending order.
    fn by_file(&self) -> Vec<(&ModuleFile, Vec<u64>)> {
        let mut files: Vec<(&ModuleFile, Vec<u64>)> = self
            .used
            .iter()
            .enumerate()
            .filter(|(_, offsets)| !offsets.is_empty())
            .map(|(id, offsets)| {
                let mut offsets: Vec<u64> = offsets.iter().copied().collect();
                offsets.sort_unstable();
                (self.files.get(id as u32), offsets)
            })
            .collect();
        files.sort_unstable_by(|a, b| a.0.cmp(b.0));
        files
    }

    /// Number of files and addresses to resolve.
    pub fn size(&self) -> (usize, usize) {
        let files = self.used.iter().filter(|o| !o.is_empty()).count();
        (files, self.used.iter().map(FxHashSet::len).sum())
    }

    /// Resolves everything. `progress` is called before each file with (index, count, path).
    pub fn resolve(&self, progress: &mut dyn FnMut(usize, usize, &str)) -> SymbolTable {
        self.resolve_with(&Resolver::new(), &mut HashMap::new(), progress)
    }

    /// Resolves everything with `resolver`, going on with the files `started` with it.
    fn resolve_with(
        &self,
        resolver: &Resolver,
        started: &mut HashMap<ModuleFile, ModuleResolution>,
        progress: &mut dyn FnMut(usize, usize, &str),
    ) -> SymbolTable {
        let mut builder = SymbolTableBuilder::default();
        let files = self.by_file();
        let total = files.len();
        for (i, (file, offsets)) in files.into_iter().enumerate() {
            progress(i, total, &file.path);
            let lookups: Vec<(u64, u64)> =
                offsets.iter().map(|&o| (o, lookup_address(o))).collect();
            let m = started
                .remove(file)
                .unwrap_or_else(|| ModuleResolution::open(&file.path, &file.build_id))
                .symbols(resolver, &mut builder, i as u64, &lookups);
            builder.add_module(m);
        }
        progress(total, total, "");
        builder.finish()
    }
}

/// The address looked up for a stack frame's offset: one byte back, inside the call
/// instruction of a return address.
fn lookup_address(offset: u64) -> u64 {
    offset.saturating_sub(1)
}

/// What the resolver thread is asked to do.
enum Request {
    /// Resolve offsets of a file ahead of the end.
    Ahead(ModuleFile, Vec<u64>),
    /// Resolve everything, reporting progress, then stop.
    Resolve(Arc<AddressSet>, Sender<Progress>),
}

/// What the resolver thread reports while resolving.
enum Progress {
    File(usize, usize, String),
    /// The table, and how many files had addresses looked up ahead.
    Done(SymbolTable, usize),
}

/// A resolver on its own thread that resolves the addresses of a recording while it runs
/// (when the CPUs have time to spare) and the rest at the end.
#[derive(Debug)]
pub struct BackgroundResolver {
    requests: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    /// The files asked about, numbered in order, and the offsets asked for in each.
    files: FileIds,
    asked: FxHashSet<(u32, u64)>,
    /// Offsets to ask for at the next [`BackgroundResolver::send_ahead`], by file number.
    batch: BTreeMap<u32, Vec<u64>>,
}

impl Default for BackgroundResolver {
    /// A resolver without a thread: resolves nothing ahead, everything on the caller's
    /// thread.
    fn default() -> Self {
        BackgroundResolver {
            requests: None,
            thread: None,
            files: FileIds::default(),
            asked: FxHashSet::default(),
            batch: BTreeMap::new(),
        }
    }
}

impl BackgroundResolver {
    /// Starts the thread.
    pub fn start() -> Self {
        let (tx, rx) = channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("tansa-symbols".into())
            .spawn(move || serve(&rx))
            .ok();
        let mut resolver = BackgroundResolver::default();
        resolver.requests = thread.as_ref().map(|_| tx);
        resolver.thread = thread;
        resolver
    }

    /// The number by which [`BackgroundResolver::ahead_in`] knows `file`.
    pub fn file_id(&mut self, file: ModuleFile) -> u32 {
        self.files.intern(file)
    }

    /// Asks for the stack frame `offset` of `file` to be resolved ahead (once per offset),
    /// at the next [`BackgroundResolver::send_ahead`].
    pub fn ahead(&mut self, file: &ModuleFile, offset: u64) {
        let id = self.file_id(file.clone());
        self.ahead_in(id, offset);
    }

    /// [`BackgroundResolver::ahead`] for the file numbered `id` by
    /// [`BackgroundResolver::file_id`].
    pub fn ahead_in(&mut self, id: u32, offset: u64) {
        if self.requests.is_none() {
            return;
        }
        if self.asked.insert((id, offset)) {
            self.batch.entry(id).or_default().push(offset);
        }
    }

    /// Sends what [`BackgroundResolver::ahead`] asked for since the last call.
    pub fn send_ahead(&mut self) {
        let Some(tx) = &self.requests else {
            return;
        };
        for (id, offsets) in std::mem::take(&mut self.batch) {
            let _ = tx.send(Request::Ahead(self.files.get(id).clone(), offsets));
        }
    }

    /// Resolves every address of `addresses`; `progress` is called before each file with
    /// (index, count, path).
    pub fn resolve(
        self,
        addresses: AddressSet,
        progress: &mut dyn FnMut(usize, usize, &str),
    ) -> SymbolTable {
        self.resolve_counting(addresses, progress).0
    }

    /// [`Self::resolve`], and how many files the thread had looked addresses up in ahead.
    fn resolve_counting(
        mut self,
        addresses: AddressSet,
        progress: &mut dyn FnMut(usize, usize, &str),
    ) -> (SymbolTable, usize) {
        let Some(tx) = self.requests.take() else {
            return (addresses.resolve(progress), 0);
        };
        let (ptx, prx) = channel();
        let addresses = Arc::new(addresses);
        // A thread that is gone, or that ends without its table (it panicked), leaves the
        // work to this one.
        let mut done = None;
        if tx.send(Request::Resolve(addresses.clone(), ptx)).is_ok() {
            for p in prx {
                match p {
                    Progress::File(i, n, path) => progress(i, n, &path),
                    Progress::Done(table, preloaded) => done = Some((table, preloaded)),
                }
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        done.unwrap_or_else(|| (addresses.resolve(progress), 0))
    }
}

impl Drop for BackgroundResolver {
    fn drop(&mut self) {
        // Stop the thread without waiting for a preload in progress.
        self.requests.take();
    }
}

/// The resolver thread: resolves ahead while the CPUs have time to spare, until asked to
/// resolve everything; that request is served at once, whatever work is still waiting.
fn serve(requests: &Receiver<Request>) {
    let resolver = Resolver::new();
    let mut contention = CpuContention::start();
    let mut waiting: VecDeque<(ModuleFile, Vec<u64>)> = VecDeque::new();
    let mut started: HashMap<ModuleFile, ModuleResolution> = HashMap::new();
    // The files whose addresses were looked up ahead (opening one reads little).
    let mut read_ahead: HashSet<ModuleFile> = HashSet::new();
    loop {
        let request = if waiting.is_empty() {
            requests.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            // Preload next if the CPUs are free, else look again in a window.
            let wait = if contention.cpus_busy() {
                WINDOW
            } else {
                Duration::ZERO
            };
            requests.recv_timeout(wait)
        };
        match request {
            Ok(Request::Ahead(file, offsets)) => {
                // The file is opened (mapped, its build id checked) at once, busy CPUs or
                // not: it costs little, and a program rebuilt or deleted while it runs is
                // then still resolved from the file that ran. Its lookups wait for idle time.
                started
                    .entry(file.clone())
                    .or_insert_with_key(|f| ModuleResolution::open(&f.path, &f.build_id));
                waiting.push_back((file, offsets));
            }
            Ok(Request::Resolve(addresses, progress)) => {
                #[cfg(test)]
                tests::panic_if_marked(&addresses);
                let begun = read_ahead.len();
                let table = addresses.resolve_with(&resolver, &mut started, &mut |i, n, path| {
                    let _ = progress.send(Progress::File(i, n, path.to_string()));
                });
                let _ = progress.send(Progress::Done(table, begun));
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                if !contention.cpus_busy()
                    && let Some((file, offsets)) = waiting.pop_front()
                {
                    read_ahead.insert(file.clone());
                    started
                        .entry(file)
                        .or_insert_with_key(|f| ModuleResolution::open(&f.path, &f.build_id))
                        .resolve(&resolver, offsets.into_iter().map(lookup_address));
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tansa_wire::event::{StackFrame, encode_module_load, encode_stack_def};

    struct Bytes(Vec<u8>);
    impl tansa_wire::event::ByteSink for Bytes {
        fn put(&mut self, b: &[u8]) {
            self.0.extend_from_slice(b);
        }
    }

    /// Test builds panic while the resolver thread resolves everything, if a file's path
    /// contains `tansa-test-panics-serving`.
    pub(super) fn panic_if_marked(addresses: &AddressSet) {
        if addresses
            .by_file()
            .iter()
            .any(|(f, _)| f.path.contains("tansa-test-panics-serving"))
        {
            panic!("injected for a test while serving");
        }
    }

    /// A meta stream naming this test executable and a stack through its entry point; its
    /// path, and the file and offset of that frame.
    fn meta() -> (Vec<u8>, String, ModuleFile, u64) {
        meta_at(&std::env::current_exe().unwrap())
    }

    /// [`meta`], for a copy of this test executable at `exe`.
    fn meta_at(exe: &std::path::Path) -> (Vec<u8>, String, ModuleFile, u64) {
        let file = std::fs::read(exe).unwrap();
        let entry = u64::from_le_bytes(file[24..32].try_into().unwrap());
        let path = exe.to_string_lossy().into_owned();
        let mut out = Bytes(Vec::new());
        encode_module_load(
            &mut out,
            1,
            0,
            0,
            0,
            b"",
            path.as_bytes(),
            std::iter::empty(),
        );
        let frames = [StackFrame {
            module: 1,
            offset: entry + 1,
        }];
        encode_stack_def(&mut out, 1, frames.into_iter());
        let file = ModuleFile {
            path: path.clone(),
            build_id: Vec::new(),
        };
        (out.0, path, file, entry + 1)
    }

    /// Addresses are grouped by file across sessions (a library two processes load is one
    /// file), each offset once; files come in order of path and build id, offsets in
    /// ascending order; frames of a module never loaded are left out, and a frame takes the
    /// module its id names at the end of its stream.
    #[test]
    fn addresses_are_grouped_by_file_in_order() {
        let stream = |modules: &[(u32, &str)], frames: &[(u32, u64)]| {
            let mut out = Bytes(Vec::new());
            for &(id, path) in modules {
                encode_module_load(
                    &mut out,
                    id,
                    0,
                    0,
                    0,
                    b"",
                    path.as_bytes(),
                    std::iter::empty(),
                );
            }
            for (i, &(module, offset)) in frames.iter().enumerate() {
                encode_stack_def(
                    &mut out,
                    i as u32 + 1,
                    [StackFrame { module, offset }].into_iter(),
                );
            }
            out.0
        };
        let mut set = AddressSet::default();
        // Session 0 names the frames of module 2 before loading it.
        set.add_meta_stream(0, &{
            let mut b = stream(&[(1, "/z/libz.so")], &[(1, 30), (2, 7), (1, 10), (9, 5)]);
            b.extend(stream(&[(2, "/a/liba.so")], &[(1, 20), (1, 10)]));
            b
        });
        // Session 1 loads the same library under another id, and one more.
        set.add_meta_stream(
            1,
            &stream(&[(4, "/z/libz.so"), (5, "/m/libm.so")], &[(4, 25), (5, 1)]),
        );
        let files: Vec<(&str, Vec<u64>)> = set
            .by_file()
            .into_iter()
            .map(|(f, o)| (f.path.as_str(), o))
            .collect();
        assert_eq!(
            files,
            vec![
                ("/a/liba.so", vec![7]),
                ("/m/libm.so", vec![1]),
                ("/z/libz.so", vec![10, 20, 25, 30]),
            ]
        );
        assert_eq!(set.size(), (3, 6));
    }

    #[test]
    fn the_background_resolver_resolves_like_the_plain_one() {
        let (bytes, path, file, offset) = meta();
        let mut plain = AddressSet::default();
        plain.add_meta_stream(0, &bytes);
        assert_eq!(plain.size(), (1, 1));
        let expected = plain.resolve(&mut |_, _, _| {});
        let mut background = BackgroundResolver::start();
        background.ahead(&file, offset);
        background.ahead(&file, offset);
        background.send_ahead();
        let mut files = Vec::new();
        let mut set = AddressSet::default();
        set.add_meta_stream(0, &bytes);
        let table = background.resolve(set, &mut |i, n, p| files.push((i, n, p.to_string())));
        assert_eq!(table, expected);
        assert_eq!(files, vec![(0, 1, path.clone()), (1, 1, String::new())]);
        // The entry point is `_start`.
        let m = &table.modules[0];
        let f = m.addrs[0].frames.last().expect("resolved");
        assert_eq!(table.strings[f.function as usize], "_start");
        // Without a thread, the same.
        let mut set = AddressSet::default();
        set.add_meta_stream(0, &bytes);
        assert_eq!(
            BackgroundResolver::default().resolve(set, &mut |_, _, _| {}),
            expected
        );
    }

    /// A resolver thread that ends without its table leaves the work to the caller, which
    /// resolves everything itself: the recording never ends without names it could have.
    #[test]
    fn a_resolver_thread_that_panics_leaves_the_work_to_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("tansa-test-panics-serving");
        std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
        let (bytes, _, file, offset) = meta_at(&copy);
        let mut plain = AddressSet::default();
        plain.add_meta_stream(0, &bytes);
        let expected = plain.resolve(&mut |_, _, _| {});
        let f = expected.modules[0].addrs[0]
            .frames
            .last()
            .expect("resolved");
        assert_eq!(expected.strings[f.function as usize], "_start");
        let mut background = BackgroundResolver::start();
        background.ahead(&file, offset);
        background.send_ahead();
        let mut set = AddressSet::default();
        set.add_meta_stream(0, &bytes);
        let (table, _) = background.resolve_counting(set, &mut |_, _, _| {});
        assert_eq!(table, expected);
    }

    /// On CPUs that are all busy nothing is read ahead, and the final lookups do not wait
    /// for what was asked ahead: they read the file themselves.
    #[test]
    fn nothing_is_read_ahead_while_the_cpus_are_busy() {
        let (bytes, _, file, offset) = meta();
        let mut plain = AddressSet::default();
        plain.add_meta_stream(0, &bytes);
        let expected = plain.resolve(&mut |_, _, _| {});
        let spinning = tansa_testkit::BusyCpus::start();
        let mut background = BackgroundResolver::start();
        background.ahead(&file, offset);
        background.send_ahead();
        std::thread::sleep(2 * WINDOW);
        let mut set = AddressSet::default();
        set.add_meta_stream(0, &bytes);
        let (table, preloaded) = background.resolve_counting(set, &mut |_, _, _| {});
        drop(spinning);
        assert_eq!(preloaded, 0, "read ahead on busy CPUs");
        assert_eq!(table, expected);
    }
}
