//! Decoding `PERF_RECORD_SAMPLE` bodies.

use crate::PerfError;
use crate::attr::SampleFormat;

/// The fields of one sample; `None` for fields not in the format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    /// `PERF_SAMPLE_IDENTIFIER` or `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    /// Instruction pointer.
    pub ip: Option<u64>,
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// Timestamp (perf clock, nanoseconds).
    pub time: Option<u64>,
    /// Address.
    pub addr: Option<u64>,
    /// Stream id.
    pub stream_id: Option<u64>,
    /// CPU.
    pub cpu: Option<u32>,
    /// Period.
    pub period: Option<u64>,
    /// Call chain, innermost first, with the kernel's context markers.
    pub callchain: Option<Vec<u64>>,
}

struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn u64(&mut self) -> Result<u64, PerfError> {
        let bytes = self
            .body
            .get(self.at..self.at + 8)
            .ok_or(PerfError::Truncated(self.body.len()))?;
        self.at += 8;
        Ok(u64::from_ne_bytes(
            bytes
                .try_into()
                .map_err(|_| PerfError::Truncated(self.body.len()))?,
        ))
    }

    fn pair(&mut self) -> Result<(u32, u32), PerfError> {
        let v = self.u64()?.to_ne_bytes();
        Ok((
            u32::from_ne_bytes([v[0], v[1], v[2], v[3]]),
            u32::from_ne_bytes([v[4], v[5], v[6], v[7]]),
        ))
    }
}

impl Sample {
    /// Decodes the body of a `PERF_RECORD_SAMPLE` written for `format`, in the field order
    /// of `perf_event_open(2)`.
    pub fn parse(body: &[u8], format: SampleFormat) -> Result<Sample, PerfError> {
        // User registers and stack copies are decoded by `SampleRef` only.
        let owned = SampleFormat(
            SampleFormat::DECODED.0 & !(SampleFormat::REGS_USER.0 | SampleFormat::STACK_USER.0),
        );
        if format.0 & !owned.0 != 0 {
            return Err(PerfError::UnsupportedFormat(format.0));
        }
        let mut c = Cursor { body, at: 0 };
        let mut s = Sample::default();
        let has = |f: SampleFormat| format.contains(f);
        if has(SampleFormat::IDENTIFIER) {
            s.id = Some(c.u64()?);
        }
        if has(SampleFormat::IP) {
            s.ip = Some(c.u64()?);
        }
        if has(SampleFormat::TID) {
            let (pid, tid) = c.pair()?;
            s.pid = Some(pid);
            s.tid = Some(tid);
        }
        if has(SampleFormat::TIME) {
            s.time = Some(c.u64()?);
        }
        if has(SampleFormat::ADDR) {
            s.addr = Some(c.u64()?);
        }
        if has(SampleFormat::ID) {
            s.id = Some(c.u64()?);
        }
        if has(SampleFormat::STREAM_ID) {
            s.stream_id = Some(c.u64()?);
        }
        if has(SampleFormat::CPU) {
            s.cpu = Some(c.pair()?.0);
        }
        if has(SampleFormat::PERIOD) {
            s.period = Some(c.u64()?);
        }
        if has(SampleFormat::CALLCHAIN) {
            let n = c.u64()?;
            if n > (body.len() / 8) as u64 {
                return Err(PerfError::Truncated(body.len()));
            }
            s.callchain = Some((0..n).map(|_| c.u64()).collect::<Result<_, _>>()?);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn fields_in_kernel_order() {
        let f = SampleFormat::IP | SampleFormat::TID | SampleFormat::TIME | SampleFormat::CALLCHAIN;
        let pid_tid = u64::from_ne_bytes([7, 0, 0, 0, 9, 0, 0, 0]);
        let body = words(&[0x1234, pid_tid, 99, 2, 0xa, 0xb]);
        let s = Sample::parse(&body, f).unwrap();
        assert_eq!(s.ip, Some(0x1234));
        assert_eq!((s.pid, s.tid), (Some(7), Some(9)));
        assert_eq!(s.time, Some(99));
        assert_eq!(s.callchain, Some(vec![0xa, 0xb]));
        assert!(matches!(
            Sample::parse(&body[..20], f),
            Err(PerfError::Truncated(20))
        ));
        assert!(matches!(
            Sample::parse(&body, SampleFormat(1 << 10)),
            Err(PerfError::UnsupportedFormat(_))
        ));
    }
}
