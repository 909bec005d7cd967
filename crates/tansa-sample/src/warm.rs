//! Work done ahead, while the target runs: reading the kernel's symbols and the symbols and
//! debugging information of the modules hit so far, so that finishing the recording after
//! the target ends is quick.
//!
//! The work runs on one thread at the lowest priority (nice 19), so that it takes what the
//! target leaves of the CPUs and little more (a CPU-bound target on every CPU leaves it
//! about 1.5 % of one). Only what the samples need is done: the kernel's symbols once a
//! kernel address was sampled, and a module's files once an address in it was. When the
//! target has ended, the thread gets the recorder's priority back (where the recorder may
//! raise it), finishes the job at hand and skips the others; the modules it read are then
//! resolved on it (the resolver that holds them cannot leave its thread), the others by
//! [`crate::CpuRecordingBuilder::finish`]'s workers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tansa_format::cpu::ModuleKind;
use tansa_symbols::Resolver;

use crate::builder::CpuRecordingBuilder;
use crate::kernel::KernelSymbols;

/// Work run on the thread with its resolver.
pub(crate) type Task = Box<dyn FnOnce(&Resolver) + Send>;

enum Job {
    Kernel,
    Module(u32, String),
    /// Send back the kernel's symbols (if read) and the modules read.
    Report(mpsc::Sender<(Option<Option<KernelSymbols>>, BTreeSet<u32>)>),
    Run(Task),
}

/// The background thread and what was asked of it.
pub(crate) struct Warmer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    tid: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    nice: Option<i32>,
    kernel: Option<Option<KernelSymbols>>,
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

fn work(rx: mpsc::Receiver<Job>, tid: &AtomicU32, stop: &AtomicBool) {
    // Failing to lower the priority only makes the work compete more.
    let _ = tansa_proc::os::set_thread_nice(None, 19);
    tid.store(tansa_proc::os::thread_id().unwrap_or(0), Ordering::Release);
    let resolver = Resolver::new();
    let mut kernel = None;
    let mut modules = BTreeSet::new();
    for job in rx {
        match job {
            Job::Kernel | Job::Module(..) if stop.load(Ordering::Acquire) => {}
            Job::Kernel => kernel = Some(KernelSymbols::read()),
            Job::Module(id, path) => {
                resolver.preload(&path);
                modules.insert(id);
            }
            Job::Report(reply) => {
                let _ = reply.send((kernel.take(), std::mem::take(&mut modules)));
            }
            Job::Run(task) => task(&resolver),
        }
    }
}

impl Warmer {
    /// Starts the thread.
    pub fn start() -> Warmer {
        let (tx, rx) = mpsc::channel::<Job>();
        let tid = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let nice = tansa_proc::os::thread_nice().ok();
        let thread = {
            let (tid, stop) = (tid.clone(), stop.clone());
            std::thread::Builder::new()
                .name("tansa-warm".into())
                .spawn(move || work(rx, &tid, &stop))
                .ok()
        };
        Warmer {
            jobs: thread.is_some().then_some(tx),
            thread,
            tid,
            stop,
            nice,
            kernel: None,
            modules: BTreeSet::new(),
            finished: false,
        }
    }

    /// Asks for the kernel's symbols and the files of the modules that samples hit since
    /// the last call.
    pub fn feed(&mut self, builder: &mut CpuRecordingBuilder) {
        let Some(jobs) = &self.jobs else {
            return;
        };
        for id in builder.take_newly_hit() {
            let job = match builder.module_of(id) {
                Some((_, ModuleKind::Kernel)) => Job::Kernel,
                Some((path, ModuleKind::Elf)) => Job::Module(id, path.to_string()),
                _ => continue,
            };
            let _ = jobs.send(job);
        }
    }

    /// Stops the work ahead after the job at hand (at the recorder's priority where it may
    /// be restored). Returns the modules read; [`Warmer::take_kernel`] then gives the
    /// kernel's symbols if they were read.
    pub fn finish(&mut self) -> BTreeSet<u32> {
        if !self.finished {
            self.finished = true;
            self.stop.store(true, Ordering::Release);
            let tid = self.tid.load(Ordering::Acquire);
            if let (Some(nice), true) = (self.nice, tid != 0) {
                // Without the right to raise it back, the job at hand goes on at nice 19.
                let _ = tansa_proc::os::set_thread_nice(Some(tid), nice);
            }
            let (tx, rx) = mpsc::channel();
            if let Some(jobs) = &self.jobs
                && jobs.send(Job::Report(tx)).is_ok()
                && let Ok((kernel, modules)) = rx.recv()
            {
                self.kernel = kernel;
                self.modules = modules;
            }
        }
        self.modules.clone()
    }

    /// The kernel's symbols: `None` if they were not read ahead, `Some(None)` if they are
    /// hidden.
    pub fn take_kernel(&mut self) -> Option<Option<KernelSymbols>> {
        self.finish();
        self.kernel.take()
    }

    /// Runs `task` on the thread, with the resolver holding the modules it read; `false`
    /// if the thread is gone.
    pub fn run(&self, task: Task) -> bool {
        self.jobs
            .as_ref()
            .is_some_and(|j| j.send(Job::Run(task)).is_ok())
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
