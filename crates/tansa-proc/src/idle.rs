//! The time the machine's CPUs spent idle (`/proc/stat`), to tell whether they have time to
//! spare.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// The idle time of every CPU together, in clock ticks, from the text of `/proc/stat`: the
/// `idle` and `iowait` fields of its first line (`cpu  user nice system idle iowait ...`).
/// A CPU waiting for I/O runs nothing: it could run something.
pub fn parse_idle_ticks(text: &str) -> Option<u64> {
    let line = text.lines().next()?;
    let mut fields = line.split_ascii_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let mut values = fields.map(str::parse::<u64>);
    let idle = values.nth(3)?.ok()?;
    let iowait = values.next()?.ok()?;
    idle.checked_add(iowait)
}

/// `/proc/stat`, kept open to read the idle time again and again.
#[derive(Debug)]
pub struct IdleClock {
    file: File,
    tick: Duration,
}

impl IdleClock {
    /// Opens `/proc/stat`.
    pub fn open() -> std::io::Result<Self> {
        let ticks = crate::clock_ticks_per_second().max(1);
        Ok(IdleClock {
            file: File::open("/proc/stat")?,
            tick: Duration::from_nanos(1_000_000_000 / ticks),
        })
    }

    /// The idle time of every CPU together since boot (a resolution of one clock tick,
    /// usually 10 ms).
    pub fn idle(&self) -> Option<Duration> {
        // The first line is all that is needed; it is short.
        let mut buf = [0u8; 256];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let ticks = parse_idle_ticks(text)?;
        self.tick.checked_mul(u32::try_from(ticks).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_iowait_of_the_first_line() {
        let text = "cpu  1179319 879 198008 742453 11149 0 10777 1060 0 0\n\
                    cpu0 571986 387 97770 392501 4256 0 4106 528 0 0\n";
        assert_eq!(parse_idle_ticks(text), Some(742_453 + 11_149));
        assert_eq!(parse_idle_ticks("cpu0 1 2 3 4 5\n"), None);
        assert_eq!(parse_idle_ticks("cpu  1 2 3\n"), None);
        assert_eq!(parse_idle_ticks("cpu  1 2 3 x 5\n"), None);
        assert_eq!(parse_idle_ticks(""), None);
    }

    #[test]
    fn the_machine_idles_while_this_thread_sleeps() {
        let clock = IdleClock::open().expect("/proc/stat");
        let before = clock.idle().expect("an idle time");
        std::thread::sleep(Duration::from_millis(30));
        let after = clock.idle().expect("an idle time");
        assert!(after >= before, "{before:?} then {after:?}");
    }
}
