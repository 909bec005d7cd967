//! Work done ahead, while the target runs: reading the kernel's symbols, and resolving the
//! addresses that samples used so far in the modules' symbols and debugging information,
//! so that finishing the recording after the target ends is quick.
//!
//! The kernel's symbols are read early (50 ms into the run), on a thread of their own, when
//! kernel code is sampled: nearly every run hits the kernel, if only as the target exits,
//! and a read begun then added all of its time to the run's end. Of the modules, only what
//! the samples need is read: a module's files once an address in it was, on one thread at
//! the recorder's own priority. Not lower: work that the recording needs is done either
//! while the target runs or after it ends, and a thread at nice 19 gets next to nothing on
//! a busy machine, which moved all of it after the end, where it adds to the run's wall
//! time in full (on this 2-CPU machine with other builds running, 130-170 ms for the kernel's
//! symbols alone, against a few milliseconds taken from the target while it runs).
//!
//! Each round of the recording loop sends the thread the module addresses that appeared
//! since the last ([`crate::CpuRecordingBuilder::take_new_locations`]); it resolves those it
//! has not resolved yet ([`ModuleWork`]). The first addresses of a module read its files,
//! which is the slow part; the lookups were, too, when left to the end: a C library's
//! separate debug file takes milliseconds for a dozen addresses. When the target has
//! ended, the thread finishes the job at hand (it does needed work at normal priority:
//! redoing it would take longer) and skips the others; the modules it began are then
//! finished on it (the resolver that holds their files cannot leave its thread), in
//! parallel with [`crate::CpuRecordingBuilder::finish`]'s workers, which take the others.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tansa_format::cpu::{Module, ModuleKind};
use tansa_symbols::{ElfFile, Resolver};

use crate::builder::CpuRecordingBuilder;
use crate::kernel::KernelSymbols;
use crate::resolve::ModuleWork;

/// How long after the command's start the kernel's symbols are read.
const KERNEL_READ_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// Work run on the thread with its resolver and the modules it began to resolve.
pub(crate) type Task = Box<dyn FnOnce(&Resolver, &mut HashMap<u32, ModuleWork>) + Send>;

enum Job {
    /// Resolve new addresses of a module: offsets to look up, and exact (interrupted)
    /// ones, whose functions' code is kept.
    Resolve {
        module: Module,
        elf: Option<Arc<ElfFile>>,
        lookups: Vec<u64>,
        exact: Vec<u64>,
    },
    /// Send back the modules begun.
    Report(mpsc::Sender<BTreeSet<u32>>),
    Run(Task),
}

/// The background thread and what was asked of it.
pub(crate) struct Warmer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// The kernel's symbols, read early on a thread of their own (kernel code is sampled):
    /// almost every run hits the kernel, often only as the target exits, and reading them
    /// then added their whole time (about 60 ms here) to the run's end. `None` from the
    /// thread: stopped before it began.
    kernel_reader: Option<(
        std::thread::Thread,
        mpsc::Receiver<Option<Option<KernelSymbols>>>,
    )>,
    stop: Arc<AtomicBool>,
    modules: BTreeSet<u32>,
    finished: bool,
}

impl std::fmt::Debug for Warmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warmer")
            .field("modules", &self.modules)
            .finish_non_exhaustive()
    }
}

fn work(rx: mpsc::Receiver<Job>, stop: &AtomicBool) {
    let resolver = Resolver::new();
    let mut modules: HashMap<u32, ModuleWork> = HashMap::new();
    for job in rx {
        match job {
            Job::Resolve { .. } if stop.load(Ordering::Acquire) => {}
            Job::Resolve {
                module,
                elf,
                lookups,
                exact,
            } => modules
                .entry(module.id)
                .or_insert_with(|| ModuleWork::new(&module, elf))
                .add(&resolver, lookups, exact),
            Job::Report(reply) => {
                let _ = reply.send(modules.keys().copied().collect());
            }
            Job::Run(task) => task(&resolver, &mut modules),
        }
    }
}

impl Warmer {
    /// Starts the thread, and the kernel symbols' reader if kernel code is sampled.
    pub fn start(kernel: bool) -> Warmer {
        let (tx, rx) = mpsc::channel::<Job>();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("tansa-warm".into())
                .spawn(move || work(rx, &stop))
                .ok()
        };
        let kernel_reader = if kernel {
            let stop = stop.clone();
            // A rendezvous: symbols nobody takes are freed on the reader's thread (120,000
            // of them take some 13 ms to free), not on the recorder's.
            let (tx, rx) = mpsc::sync_channel(0);
            std::thread::Builder::new()
                .name("tansa-kallsyms".into())
                .spawn(move || {
                    // A run shorter than this rarely samples the kernel: it is spared the
                    // read (tens of milliseconds of CPU time) unless it did.
                    std::thread::park_timeout(KERNEL_READ_DELAY);
                    let _ = tx.send((!stop.load(Ordering::Acquire)).then(KernelSymbols::read));
                })
                .ok()
                .map(|t| (t.thread().clone(), rx))
        } else {
            None
        };
        Warmer {
            jobs: thread.is_some().then_some(tx),
            thread,
            kernel_reader,
            stop,
            modules: BTreeSet::new(),
            finished: false,
        }
    }

    /// Asks for the module addresses that samples used since the last call to be
    /// resolved.
    pub fn feed(&mut self, builder: &mut CpuRecordingBuilder) {
        // Taken even without a thread, so that they do not pile up.
        let locations = builder.take_new_locations();
        let Some(jobs) = &self.jobs else {
            return;
        };
        let mut by_module: BTreeMap<u32, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
        for (loc, exact) in locations {
            let (lookups, exacts) = by_module.entry(loc.module).or_default();
            lookups.push(loc.offset);
            if exact {
                exacts.push(loc.offset);
            }
        }
        for (id, (lookups, exact)) in by_module {
            let Some(module) = builder.module_of(id).filter(|m| m.kind == ModuleKind::Elf) else {
                continue;
            };
            let _ = jobs.send(Job::Resolve {
                module: module.clone(),
                elf: builder.elf_cache.get(&id).cloned(),
                lookups,
                exact,
            });
        }
    }

    /// Stops the work ahead after the job at hand. Returns the modules begun; the kernel's
    /// symbols come from [`Warmer::take_kernel`].
    pub fn finish(&mut self) -> BTreeSet<u32> {
        if !self.finished {
            self.finished = true;
            self.stop.store(true, Ordering::Release);
            let (tx, rx) = mpsc::channel();
            if let Some(jobs) = &self.jobs
                && jobs.send(Job::Report(tx)).is_ok()
                && let Ok(modules) = rx.recv()
            {
                self.modules = modules;
            }
        }
        self.modules.clone()
    }

    /// The kernel's symbols: `None` if they were not read ahead, `Some(None)` if they are
    /// hidden. With `needed` (kernel code was sampled) a read still under way is waited
    /// for; without, it is left to end on its own.
    pub fn take_kernel(&mut self, needed: bool) -> Option<Option<KernelSymbols>> {
        self.finish();
        let (reader, symbols) = self.kernel_reader.take()?;
        // Stopped by `finish` if it has not begun; a read under way is waited for only when
        // needed. A reader that stopped or panicked lost only work ahead: the caller reads.
        reader.unpark();
        if !needed {
            return None;
        }
        symbols.recv().ok().flatten()
    }

    /// Runs `task` on the thread, with the resolver holding the files it read and the
    /// modules it began; if the thread is gone, `task` is dropped unrun.
    pub fn run(&self, task: Task) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job::Run(task));
        }
    }

    /// Lets the thread end on its own: it frees what it read (the debugging information of
    /// every module it loaded, a millisecond or more) while the recording is written and
    /// the process exits, not before.
    pub fn detach(mut self) {
        self.stop.store(true, Ordering::Release);
        self.jobs = None;
        drop(self.thread.take());
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            // A panic on the thread lost only work ahead.
            let _ = t.join();
        }
    }
}
