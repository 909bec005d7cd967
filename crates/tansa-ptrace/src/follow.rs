//! Following one thread of a live process, instruction by instruction, and turning its
//! control flow into function entries, function exits and conditional branches: the
//! function and branch traces of the leak-cause analysis (seed 001).
//!
//! The follower attaches to one thread with `PTRACE_SEIZE` (the other threads run on
//! untouched), single-steps it, and classifies the instruction each step executed (decoded
//! with iced-x86 from the thread's own memory):
//!
//! * a `call` is an entry of the function it lands in (through a PLT stub: the function the
//!   stub jumps to), a `ret` the exit of the innermost open function;
//! * an unconditional `jmp` to the entry of another function is a tail call: an entry whose
//!   exit comes with its caller's;
//! * a conditional branch yields a [`PathEvent::Branch`] at the address of the branch
//!   instruction, taken or not: the same symbol on both paths, the direction on the side.
//!   (x86 block-stepping traps only on taken branches, so a not-taken branch would leave no
//!   trace; single-stepping sees every instruction. On this kind of VM `PTRACE_SINGLEBLOCK`
//!   single-steps anyway.)
//!
//! Functions the caller does not want stepped (the C library, the agent) are entered and
//! left at full speed: a hardware breakpoint, private to the thread, on the return address.
//! Signals delivered meanwhile run their handlers at full speed the same way.
//!
//! The follower stops when the caller's predicate says so (the traced block was freed),
//! when the function `range_depth` frames above the starting one returns (the trace range
//! end), when the thread lands on the return address of the range end's frame while code
//! runs at full speed (an exception or a `longjmp` left the range: see
//! [`AttachedThread::set_escape`]), when the thread exits, or after a step budget.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use iced_x86::{Decoder, DecoderOptions, FlowControl};

use crate::sys::{self, FullRegs};

/// What the follower needs to know about a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its entry address.
    pub entry: u64,
    /// Whether to step through its body (false: record its entry and exit only).
    pub step: bool,
}

/// What the follower needs to know about the code it walks through.
pub trait CodeMap {
    /// The function containing `addr`, if any is known (a PLT stub is none).
    fn function(&mut self, addr: u64) -> Option<FunctionInfo>;
}

/// One step of the followed path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathEvent {
    /// A function was entered (called or tail-called).
    Enter {
        /// The function's entry address.
        entry: u64,
    },
    /// A function returned.
    Exit {
        /// The function's entry address.
        entry: u64,
    },
    /// A conditional branch was executed in a stepped function.
    Branch {
        /// The address of the branch instruction.
        at: u64,
        /// Whether it jumped.
        taken: bool,
    },
}

/// Why following ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEnd {
    /// The caller's predicate said stop (the traced block was freed).
    Stopped,
    /// The function `range_depth` frames above the starting one returned.
    RangeEnd,
    /// The thread exited.
    ThreadExited,
    /// Following gave up; the reason.
    Abandoned(String),
}

/// Errors of the follower.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// A ptrace request failed.
    #[error("{op} of thread {tid} failed: {error}")]
    Ptrace {
        /// The request.
        op: &'static str,
        /// The thread.
        tid: i32,
        /// The cause.
        error: std::io::Error,
    },
    /// The thread's memory cannot be read.
    #[error("cannot read the memory of thread {tid}: {error}")]
    Memory {
        /// The thread.
        tid: i32,
        /// The cause.
        error: std::io::Error,
    },
}

/// What one resumption of the thread ended with.
enum Resumed {
    /// A trap (a step or a breakpoint) at these registers.
    Trap(FullRegs),
    /// A signal to be delivered; the registers where it stopped.
    Signal(FullRegs),
    /// The thread is gone.
    Exited,
}

/// A decoded instruction: its length and kind.
#[derive(Debug, Clone, Copy)]
struct Insn {
    len: u64,
    flow: FlowControl,
}

/// A function open on the followed path.
#[derive(Debug, Clone)]
struct Frame {
    /// Its entry, 0 while unknown (a call into a PLT stub, until the stub jumps).
    entry: u64,
    /// Where its `ret` lands, and the stack pointer then.
    ret: u64,
    ret_sp: u64,
    /// Functions it tail-called (each replacing the previous): their exits come first when
    /// the frame returns.
    tails: Vec<u64>,
}

impl Frame {
    /// The innermost function running in this frame.
    fn innermost(&self) -> u64 {
        self.tails.last().copied().unwrap_or(self.entry)
    }

    /// The exits when the frame returns: tail-called functions first, innermost first.
    fn exits(&self) -> impl Iterator<Item = PathEvent> + '_ {
        self.tails
            .iter()
            .rev()
            .chain(std::iter::once(&self.entry))
            .filter(|&&e| e != 0)
            .map(|&entry| PathEvent::Exit { entry })
    }
}

/// One thread of a process, attached and stopped.
#[derive(Debug)]
pub struct AttachedThread {
    tid: i32,
    mem: File,
    insns: HashMap<u64, Insn>,
    /// A signal that stopped the thread and must be delivered when it goes on.
    pending_signal: i32,
    steps: u64,
    /// See [`AttachedThread::set_escape`].
    escape: Option<u64>,
    /// Whether the thread reached the escape address.
    escaped: bool,
}

/// Limits of one [`AttachedThread::follow`].
#[derive(Debug, Clone, Copy)]
pub struct FollowLimits {
    /// Most single steps before giving up.
    pub max_steps: u64,
}

impl Default for FollowLimits {
    fn default() -> Self {
        FollowLimits {
            max_steps: 2_000_000,
        }
    }
}

fn ptrace(op: &'static str, tid: i32) -> impl FnOnce(std::io::Error) -> FollowError {
    move |error| FollowError::Ptrace { op, tid, error }
}

/// DR7 bits enabling debug register 0 as an execution breakpoint (local enable, RW=00,
/// LEN=00).
const DR7_EXEC_DR0: u64 = 1;
/// The same for debug register 1.
const DR7_EXEC_DR1: u64 = 1 << 2;

impl AttachedThread {
    /// Attaches to thread `tid` of process `pid` and stops it.
    pub fn attach(pid: i32, tid: i32) -> Result<AttachedThread, FollowError> {
        let mem = File::open(format!("/proc/{pid}/task/{tid}/mem"))
            .map_err(|error| FollowError::Memory { tid, error })?;
        sys::seize(tid).map_err(ptrace("PTRACE_SEIZE", tid))?;
        let mut t = AttachedThread {
            tid,
            mem,
            insns: HashMap::new(),
            pending_signal: 0,
            steps: 0,
            escape: None,
            escaped: false,
        };
        sys::interrupt(tid).map_err(ptrace("PTRACE_INTERRUPT", tid))?;
        loop {
            let status = sys::wait_raw(tid).map_err(ptrace("waitpid", tid))?;
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Err(FollowError::Ptrace {
                    op: "PTRACE_INTERRUPT",
                    tid,
                    error: std::io::Error::from_raw_os_error(libc::ESRCH),
                });
            }
            let sig = libc::WSTOPSIG(status);
            let event = (status >> 16) & 0xff;
            if event == libc::PTRACE_EVENT_STOP {
                return Ok(t);
            }
            if event == libc::PTRACE_EVENT_EXIT {
                // Exiting: let it go.
                let _ = sys::detach(tid, 0);
                return Err(FollowError::Ptrace {
                    op: "PTRACE_INTERRUPT",
                    tid,
                    error: std::io::Error::from_raw_os_error(libc::ESRCH),
                });
            }
            // A signal arrived first: keep it for later and wait for the interrupt.
            t.pending_signal = sig;
            sys::cont(tid, 0).map_err(ptrace("PTRACE_CONT", tid))?;
        }
    }

    /// The thread id.
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// Single steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Where the followed path lands if it leaves the trace's range other than through the
    /// code followed: the return address of the range end's frame. A function run at full
    /// speed may never return to its caller (a C++ exception caught further up, a
    /// `longjmp`); without this the thread ran on unobserved until the program ended, and
    /// the trace with it. [`AttachedThread::follow`] then ends at the range end.
    pub fn set_escape(&mut self, addr: Option<u64>) {
        self.escape = addr;
    }

    /// Lets the thread run until it reaches `addr`, with the stack pointer at `sp` if given
    /// (a hardware breakpoint private to this thread). Returns false if the thread exited,
    /// or reached the escape address first (then `escaped` is set).
    pub fn run_to(&mut self, addr: u64, sp: Option<u64>) -> Result<bool, FollowError> {
        let tid = self.tid;
        let escape = self.escape.filter(|&e| e != addr);
        sys::set_debug_register(tid, 0, addr).map_err(ptrace("PTRACE_POKEUSER", tid))?;
        let mut dr7 = DR7_EXEC_DR0;
        if let Some(e) = escape {
            sys::set_debug_register(tid, 1, e).map_err(ptrace("PTRACE_POKEUSER", tid))?;
            dr7 |= DR7_EXEC_DR1;
        }
        sys::set_debug_register(tid, 7, dr7).map_err(ptrace("PTRACE_POKEUSER", tid))?;
        let reached = loop {
            match self.resume(false)? {
                Resumed::Exited => break false,
                Resumed::Trap(r) | Resumed::Signal(r)
                    if r.rip == addr && sp.is_none_or(|sp| r.rsp == sp) =>
                {
                    break true;
                }
                Resumed::Trap(r) if Some(r.rip) == escape => {
                    // Left the range without returning through the code followed.
                    self.escaped = true;
                    sys::set_debug_register(tid, 7, 0).map_err(ptrace("PTRACE_POKEUSER", tid))?;
                    break false;
                }
                // The same address deeper in the stack (recursion), or a signal whose
                // handler runs at full speed: go on.
                _ => {}
            }
        };
        if reached {
            sys::set_debug_register(tid, 7, 0).map_err(ptrace("PTRACE_POKEUSER", tid))?;
        }
        Ok(reached)
    }

    /// Resumes the thread, one step or until a trap, delivering a pending signal.
    fn resume(&mut self, step: bool) -> Result<Resumed, FollowError> {
        let tid = self.tid;
        let signal = std::mem::take(&mut self.pending_signal);
        if step {
            self.steps += 1;
            sys::single_step(tid, signal).map_err(ptrace("PTRACE_SINGLESTEP", tid))?;
        } else {
            sys::cont(tid, signal).map_err(ptrace("PTRACE_CONT", tid))?;
        }
        let status = sys::wait_raw(tid).map_err(ptrace("waitpid", tid))?;
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Ok(Resumed::Exited);
        }
        let sig = libc::WSTOPSIG(status);
        let event = (status >> 16) & 0xff;
        if event == libc::PTRACE_EVENT_EXIT {
            return Ok(Resumed::Exited);
        }
        let regs = match sys::full_regs(tid) {
            Ok(r) => r,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(Resumed::Exited),
            Err(e) => return Err(ptrace("PTRACE_GETREGS", tid)(e)),
        };
        if sig == libc::SIGTRAP || event != 0 {
            return Ok(Resumed::Trap(regs));
        }
        self.pending_signal = sig;
        Ok(Resumed::Signal(regs))
    }

    /// The 8 bytes at `addr` of the thread's memory.
    fn read_u64(&mut self, addr: u64) -> Result<u64, FollowError> {
        let mut b = [0u8; 8];
        self.mem
            .read_exact_at(&mut b, addr)
            .map_err(|error| FollowError::Memory {
                tid: self.tid,
                error,
            })?;
        Ok(u64::from_le_bytes(b))
    }

    /// The instruction at `addr` as text (Intel syntax), read from the thread's memory.
    pub fn disassemble(&mut self, addr: u64) -> Option<String> {
        use iced_x86::{Formatter as _, IntelFormatter};
        let mut bytes = [0u8; 16];
        let n = self.mem.read_at(&mut bytes, addr).ok()?;
        let mut decoder = Decoder::with_ip(64, &bytes[..n], addr, DecoderOptions::NONE);
        let i = decoder.decode();
        if i.is_invalid() {
            return None;
        }
        let mut text = String::new();
        IntelFormatter::new().format(&i, &mut text);
        Some(text)
    }

    /// The instruction at `addr`.
    fn insn(&mut self, addr: u64) -> Result<Insn, FollowError> {
        if let Some(i) = self.insns.get(&addr) {
            return Ok(*i);
        }
        let mut bytes = [0u8; 16];
        let mut n = 0;
        while n < bytes.len() {
            match self.mem.read_at(&mut bytes[n..], addr + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                // The end of a mapping: decode what could be read.
                Err(_) if n > 0 => break,
                Err(error) => {
                    return Err(FollowError::Memory {
                        tid: self.tid,
                        error,
                    });
                }
            }
        }
        let mut decoder = Decoder::with_ip(64, &bytes[..n], addr, DecoderOptions::NONE);
        let i = decoder.decode();
        let insn = Insn {
            len: i.len().max(1) as u64,
            flow: if i.is_invalid() {
                FlowControl::Exception
            } else {
                i.flow_control()
            },
        };
        self.insns.insert(addr, insn);
        Ok(insn)
    }

    /// Follows the thread from where it stands, inside the function where the trace
    /// starts (the one that called the allocator), until the function `range_depth` frames
    /// above it returns (0: that function itself), `stop` returns true (checked before each
    /// step and after every full-speed stretch), or the thread exits. Each step's event goes
    /// to `on_event`.
    pub fn follow(
        &mut self,
        code: &mut dyn CodeMap,
        range_depth: u32,
        limits: FollowLimits,
        stop: &mut dyn FnMut() -> bool,
        on_event: &mut dyn FnMut(PathEvent),
    ) -> Result<FollowEnd, FollowError> {
        self.escaped = false;
        // Stepping wakes the tracer and the thread in turn: on one CPU it costs less.
        let _cpu = u32::try_from(self.tid)
            .ok()
            .and_then(tansa_proc::os::SharedCpu::new);
        let end = self.follow_path(code, range_depth, limits, &mut *stop, on_event)?;
        if end == FollowEnd::ThreadExited && self.escaped {
            // The range was left by an exception or a `longjmp`: its end, unless the block
            // was freed on the way.
            return Ok(if stop() {
                FollowEnd::Stopped
            } else {
                FollowEnd::RangeEnd
            });
        }
        Ok(end)
    }

    /// [`AttachedThread::follow`], but for leaving the range by the escape address, which
    /// ends it as if the thread exited.
    fn follow_path(
        &mut self,
        code: &mut dyn CodeMap,
        range_depth: u32,
        limits: FollowLimits,
        stop: &mut dyn FnMut() -> bool,
        on_event: &mut dyn FnMut(PathEvent),
    ) -> Result<FollowEnd, FollowError> {
        let tid = self.tid;
        let mut regs = sys::full_regs(tid).map_err(ptrace("PTRACE_GETREGS", tid))?;
        // Functions called on the path, innermost last.
        let mut frames: Vec<Frame> = Vec::new();
        // The function running at the starting level, and the ones it tail-called.
        let mut base: Vec<u64> = code
            .function(regs.rip)
            .map(|f| f.entry)
            .into_iter()
            .collect();
        // Frames returned from above the starting function.
        let mut unwound = 0u32;
        let budget_end = self.steps + limits.max_steps;
        loop {
            if stop() {
                return Ok(FollowEnd::Stopped);
            }
            if self.steps >= budget_end {
                return Ok(FollowEnd::Abandoned(format!(
                    "more than {} instructions before the block was freed or the range end \
                     returned (`tansa record --trace-steps` follows longer paths)",
                    limits.max_steps
                )));
            }
            let prev = regs.rip;
            let insn = self.insn(prev)?;
            regs = match self.resume(true)? {
                Resumed::Exited => return Ok(FollowEnd::ThreadExited),
                Resumed::Trap(r) => r,
                Resumed::Signal(r) => {
                    // The handler runs at full speed and returns to `r.rip`.
                    if !self.run_to(r.rip, Some(r.rsp))? {
                        return Ok(FollowEnd::ThreadExited);
                    }
                    regs = r;
                    continue;
                }
            };
            let next = regs.rip;
            let fallthrough = prev.wrapping_add(insn.len);
            if next == prev {
                // A repeated string instruction, one iteration at a time.
                continue;
            }
            let innermost = frames
                .last()
                .map(Frame::innermost)
                .or_else(|| base.last().copied())
                .unwrap_or(0);
            match insn.flow {
                FlowControl::Call | FlowControl::IndirectCall => {
                    let frame = Frame {
                        entry: 0,
                        ret: fallthrough,
                        ret_sp: regs.rsp.wrapping_add(8),
                        tails: Vec::new(),
                    };
                    frames.push(frame);
                    if let Some(f) = code.function(next)
                        && !self.enter(f, &mut frames, &mut regs, on_event)?
                    {
                        return Ok(FollowEnd::ThreadExited);
                    }
                }
                FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => {
                    let Some(f) = code.function(next) else {
                        continue;
                    };
                    if frames.last().is_some_and(|t| t.entry == 0) {
                        // The jump of a PLT stub: the call lands here.
                        if !self.enter(f, &mut frames, &mut regs, on_event)? {
                            return Ok(FollowEnd::ThreadExited);
                        }
                    } else if f.entry == next && f.entry != innermost {
                        // A tail call into another function.
                        on_event(PathEvent::Enter { entry: f.entry });
                        match frames.last_mut() {
                            Some(top) => {
                                top.tails.push(f.entry);
                                if !f.step {
                                    let top = top.clone();
                                    if !self.skip_to_return(&top, &mut regs)? {
                                        return Ok(FollowEnd::ThreadExited);
                                    }
                                    frames.pop();
                                    top.exits().for_each(&mut *on_event);
                                }
                            }
                            None => {
                                base.push(f.entry);
                                if !f.step {
                                    // A tail call from the starting level into a function
                                    // that is not stepped: it returns to the starting
                                    // function's caller, whose address is on the stack.
                                    let ret = self.read_u64(regs.rsp)?;
                                    let frame = Frame {
                                        entry: 0,
                                        ret,
                                        ret_sp: regs.rsp.wrapping_add(8),
                                        tails: Vec::new(),
                                    };
                                    if !self.skip_to_return(&frame, &mut regs)? {
                                        return Ok(FollowEnd::ThreadExited);
                                    }
                                    if stop() {
                                        return Ok(FollowEnd::Stopped);
                                    }
                                    if unwound >= range_depth {
                                        return Ok(FollowEnd::RangeEnd);
                                    }
                                    for &entry in base.iter().rev() {
                                        on_event(PathEvent::Exit { entry });
                                    }
                                    unwound += 1;
                                    base = code
                                        .function(regs.rip)
                                        .map(|f| f.entry)
                                        .into_iter()
                                        .collect();
                                }
                            }
                        }
                    }
                }
                FlowControl::Return => match frames.pop() {
                    Some(top) => top.exits().for_each(&mut *on_event),
                    None => {
                        // Returning from the starting level, or from a level above it.
                        if unwound >= range_depth {
                            return Ok(FollowEnd::RangeEnd);
                        }
                        for &entry in base.iter().rev() {
                            on_event(PathEvent::Exit { entry });
                        }
                        unwound += 1;
                        base = code.function(next).map(|f| f.entry).into_iter().collect();
                    }
                },
                FlowControl::ConditionalBranch if innermost != 0 => {
                    on_event(PathEvent::Branch {
                        at: prev,
                        taken: next != fallthrough,
                    });
                }
                _ => {}
            }
        }
    }

    /// The call of the top frame landed in `f`: records its entry and, if it is not
    /// stepped, runs it at full speed to its return. Returns false if the thread exited.
    fn enter(
        &mut self,
        f: FunctionInfo,
        frames: &mut Vec<Frame>,
        regs: &mut FullRegs,
        on_event: &mut dyn FnMut(PathEvent),
    ) -> Result<bool, FollowError> {
        on_event(PathEvent::Enter { entry: f.entry });
        let Some(top) = frames.last_mut() else {
            return Ok(true);
        };
        top.entry = f.entry;
        if f.step {
            return Ok(true);
        }
        let top = top.clone();
        if !self.skip_to_return(&top, regs)? {
            return Ok(false);
        }
        frames.pop();
        top.exits().for_each(&mut *on_event);
        Ok(true)
    }

    /// Runs a call of a function that is not stepped until it returns to `frame.ret`.
    fn skip_to_return(&mut self, frame: &Frame, regs: &mut FullRegs) -> Result<bool, FollowError> {
        if !self.run_to(frame.ret, Some(frame.ret_sp))? {
            return Ok(false);
        }
        *regs = FullRegs {
            rip: frame.ret,
            rsp: frame.ret_sp,
        };
        Ok(true)
    }

    /// Detaches from the thread, which goes on (with any signal it was stopped for).
    pub fn detach(mut self) -> Result<(), FollowError> {
        let tid = self.tid;
        let _ = sys::set_debug_register(tid, 7, 0);
        let signal = std::mem::take(&mut self.pending_signal);
        sys::detach(tid, signal).map_err(ptrace("PTRACE_DETACH", tid))
    }
}
