//! In-process stack unwinding with framehop over the module map's DWARF CFI.
//!
//! Unwinding starts at the hook's caller (its return address, stack pointer and frame
//! pointer, captured by the entry stubs in `hooks`), so no agent frame is ever part of a
//! stack. Stack memory is only read inside the calling thread's known stack bounds, so a
//! corrupt frame ends the stack instead of faulting.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind};

use crate::modules::AgentUnwinder;

/// The per-thread unwinder cache type.
pub type UnwindCache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// Hard limit on frames per stack.
pub const MAX_FRAMES: usize = 256;

/// The registers of the hook's caller at the call.
#[derive(Debug, Clone, Copy)]
pub struct CallerRegs {
    /// Return address into the caller.
    pub ra: u64,
    /// The caller's stack pointer after the call returns.
    pub sp: u64,
    /// The caller's frame pointer register.
    pub bp: u64,
}

/// Unwinds from `regs` and writes return addresses, innermost first, into `out`. Reads the
/// stack only within `[regs.sp, stack_hi)`. Returns the number of frames.
pub fn unwind(
    unwinder: &AgentUnwinder,
    cache: &mut UnwindCache,
    regs: CallerRegs,
    stack_hi: u64,
    out: &mut [u64],
) -> usize {
    if out.is_empty() || regs.ra == 0 {
        return 0;
    }
    let lo = regs.sp;
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        if addr >= lo && addr.checked_add(8).is_some_and(|end| end <= stack_hi) {
            // SAFETY: the address lies inside the calling thread's live stack, between its
            // current stack pointer and the top of the stack.
            Ok(unsafe { (addr as *const u64).read_unaligned() })
        } else {
            Err(())
        }
    };
    out[0] = regs.ra;
    let mut n = 1;
    let mut state = UnwindRegsX86_64::new(regs.ra, regs.sp, regs.bp);
    let Some(mut address) = FrameAddress::from_return_address(regs.ra) else {
        return n;
    };
    while n < out.len() {
        let sp_before = state.sp();
        match framehop::Unwinder::unwind_frame(
            unwinder,
            address,
            &mut state,
            cache,
            &mut read_stack,
        ) {
            Ok(Some(ra)) if ra != 0 && state.sp() > sp_before => {
                out[n] = ra;
                n += 1;
                match FrameAddress::from_return_address(ra) {
                    Some(a) => address = a,
                    None => break,
                }
            }
            other => {
                if std::env::var_os("TANSA_DEBUG_UNWIND").is_some() {
                    let msg = format!(
                        "unwind stop at {:#x} sp {:#x} hi {:#x}: {:?}\n",
                        address.address(),
                        state.sp(),
                        stack_hi,
                        other
                    );
                    crate::sys::write_stderr(msg.as_bytes());
                }
                break;
            }
        }
    }
    n
}
