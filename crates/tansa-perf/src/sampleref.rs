//! Decoding `PERF_RECORD_SAMPLE` bodies in place, without allocating: for readers that
//! keep up with thousands of samples a second and need call chains, user registers and
//! user stack copies.

use crate::PerfError;
use crate::attr::SampleFormat;

/// What decoding a sample needs to know about its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleLayout {
    /// The event's sample format.
    pub format: SampleFormat,
    /// The event's `sample_regs_user` mask (for [`SampleFormat::REGS_USER`]).
    pub regs_user: u64,
}

/// A sample borrowed from its record; fields absent from the format are 0 or empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleRef<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp (perf clock, nanoseconds).
    pub time: u64,
    /// CPU.
    pub cpu: u32,
    /// Period of this sample (nanoseconds for the clock events).
    pub period: u64,
    callchain: &'a [u8],
    regs_abi: u64,
    regs: &'a [u8],
    stack: &'a [u8],
}

struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], PerfError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.body.len())
            .ok_or(PerfError::Truncated(self.body.len()))?;
        let b = &self.body[self.at..end];
        self.at = end;
        Ok(b)
    }

    fn u64(&mut self) -> Result<u64, PerfError> {
        Ok(word(self.bytes(8)?, 0))
    }
}

fn word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
    u64::from_ne_bytes(w)
}

impl<'a> SampleRef<'a> {
    /// Decodes `body` (a `PERF_RECORD_SAMPLE` without its header) written for `layout`.
    pub fn parse(body: &'a [u8], layout: &SampleLayout) -> Result<SampleRef<'a>, PerfError> {
        let format = layout.format;
        if format.0 & !SampleFormat::DECODED.0 != 0 {
            return Err(PerfError::UnsupportedFormat(format.0));
        }
        let has = |f: SampleFormat| format.contains(f);
        let mut c = Cursor { body, at: 0 };
        let mut s = SampleRef::default();
        if has(SampleFormat::IDENTIFIER) {
            c.u64()?;
        }
        if has(SampleFormat::IP) {
            s.ip = c.u64()?;
        }
        if has(SampleFormat::TID) {
            let b = c.bytes(8)?;
            s.pid = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            s.tid = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
        }
        if has(SampleFormat::TIME) {
            s.time = c.u64()?;
        }
        for f in [
            SampleFormat::ADDR,
            SampleFormat::ID,
            SampleFormat::STREAM_ID,
        ] {
            if has(f) {
                c.u64()?;
            }
        }
        if has(SampleFormat::CPU) {
            let b = c.bytes(8)?;
            s.cpu = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        }
        if has(SampleFormat::PERIOD) {
            s.period = c.u64()?;
        }
        if has(SampleFormat::CALLCHAIN) {
            let n = c.u64()?;
            let n = usize::try_from(n)
                .ok()
                .and_then(|n| n.checked_mul(8))
                .ok_or(PerfError::Truncated(body.len()))?;
            s.callchain = c.bytes(n)?;
        }
        if has(SampleFormat::REGS_USER) {
            s.regs_abi = c.u64()?;
            if s.regs_abi != 0 {
                s.regs = c.bytes(layout.regs_user.count_ones() as usize * 8)?;
            }
        }
        if has(SampleFormat::STACK_USER) {
            let size = c.u64()?;
            if size != 0 {
                let size = usize::try_from(size).map_err(|_| PerfError::Truncated(body.len()))?;
                let data = c.bytes(size)?;
                let dyn_size = usize::try_from(c.u64()?).unwrap_or(usize::MAX);
                s.stack = &data[..dyn_size.min(size)];
            }
        }
        Ok(s)
    }

    /// The call chain, innermost first, with the kernel's context markers
    /// (`PERF_CONTEXT_KERNEL`, `PERF_CONTEXT_USER`, ...: values ≥ `PERF_CONTEXT_MAX`).
    pub fn callchain(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        (0..self.callchain.len() / 8).map(|i| word(self.callchain, i))
    }

    /// Whether user registers were captured (not for kernel threads).
    pub fn has_user_regs(&self) -> bool {
        self.regs_abi != 0 && !self.regs.is_empty()
    }

    /// The user register with `PERF_REG_*` number `reg`, if it was captured (registers
    /// are stored in the order of the bits of the mask).
    pub fn user_reg(&self, mask: u64, reg: u32) -> Option<u64> {
        if !self.has_user_regs() || reg >= 64 || mask & (1 << reg) == 0 {
            return None;
        }
        let index = (mask & ((1u64 << reg) - 1)).count_ones() as usize;
        (index * 8 + 8 <= self.regs.len()).then(|| word(self.regs, index))
    }

    /// The copy of the user stack, starting at the user stack pointer (only the part the
    /// kernel could read).
    pub fn user_stack(&self) -> &'a [u8] {
        self.stack
    }
}

/// `PERF_CONTEXT_MAX` as a `u64`: call-chain entries at or above it are context markers.
pub const CONTEXT_MAX: u64 = -4095i64 as u64;
/// `PERF_CONTEXT_KERNEL`: the following entries are kernel addresses.
pub const CONTEXT_KERNEL: u64 = -128i64 as u64;
/// `PERF_CONTEXT_USER`: the following entries are user addresses.
pub const CONTEXT_USER: u64 = -512i64 as u64;

/// x86-64 `PERF_REG_X86_BP`.
pub const X86_REG_BP: u32 = 6;
/// x86-64 `PERF_REG_X86_SP`.
pub const X86_REG_SP: u32 = 7;
/// x86-64 `PERF_REG_X86_IP`.
pub const X86_REG_IP: u32 = 8;
/// The user registers a DWARF unwinder needs on x86-64: `bp`, `sp` and `ip`.
pub const X86_UNWIND_REGS: u64 = (1 << X86_REG_BP) | (1 << X86_REG_SP) | (1 << X86_REG_IP);

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn decodes_callchain_regs_and_stack_in_place() {
        let layout = SampleLayout {
            format: SampleFormat::IP
                | SampleFormat::TID
                | SampleFormat::TIME
                | SampleFormat::CPU
                | SampleFormat::PERIOD
                | SampleFormat::CALLCHAIN
                | SampleFormat::REGS_USER
                | SampleFormat::STACK_USER,
            regs_user: X86_UNWIND_REGS,
        };
        let pid_tid = u64::from_ne_bytes([7, 0, 0, 0, 9, 0, 0, 0]);
        let cpu = u64::from_ne_bytes([1, 0, 0, 0, 0, 0, 0, 0]);
        let mut body = words(&[
            0x1234,
            pid_tid,
            99,
            cpu,
            1_000_000,
            3,
            CONTEXT_USER,
            0x1234,
            0x5678,
            2, // regs abi
            0xb0,
            0x5000,
            0x1234,
            16, // stack size
            0xaaaa,
            0xbbbb,
            8, // dyn size
        ]);
        let s = SampleRef::parse(&body, &layout).unwrap();
        assert_eq!((s.ip, s.pid, s.tid, s.time, s.cpu), (0x1234, 7, 9, 99, 1));
        assert_eq!(s.period, 1_000_000);
        assert_eq!(
            s.callchain().collect::<Vec<_>>(),
            vec![CONTEXT_USER, 0x1234, 0x5678]
        );
        assert_eq!(s.user_reg(X86_UNWIND_REGS, X86_REG_BP), Some(0xb0));
        assert_eq!(s.user_reg(X86_UNWIND_REGS, X86_REG_SP), Some(0x5000));
        assert_eq!(s.user_reg(X86_UNWIND_REGS, X86_REG_IP), Some(0x1234));
        assert_eq!(s.user_reg(X86_UNWIND_REGS, 0), None);
        assert_eq!(s.user_stack(), &0xaaaau64.to_ne_bytes()[..]);
        body.truncate(body.len() - 8);
        assert!(matches!(
            SampleRef::parse(&body, &layout),
            Err(PerfError::Truncated(_))
        ));
    }

    #[test]
    fn kernel_threads_have_no_user_registers() {
        let layout = SampleLayout {
            format: SampleFormat::IP | SampleFormat::REGS_USER | SampleFormat::STACK_USER,
            regs_user: X86_UNWIND_REGS,
        };
        let body = words(&[0xffff_ffff_8100_0000, 0, 0]);
        let s = SampleRef::parse(&body, &layout).unwrap();
        assert!(!s.has_user_regs());
        assert!(s.user_stack().is_empty());
        assert_eq!(s.user_reg(X86_UNWIND_REGS, X86_REG_IP), None);
    }
}
