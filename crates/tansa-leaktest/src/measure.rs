//! Measurements: several readings of every watched process, combined into one value per
//! resource with the outlier dropped (the seed's idle-test measurement, used everywhere).

use serde::Serialize;

/// A resource a process takes from the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// Resident set size, bytes.
    Rss,
    /// Proportional set size, bytes.
    Pss,
    /// Open file descriptors.
    Fds,
}

impl Resource {
    /// All resources, in report order.
    pub const ALL: [Resource; 3] = [Resource::Rss, Resource::Pss, Resource::Fds];

    /// The resource called `name` in a plan (`rss`, `pss`, `fds`).
    pub fn from_name(name: &str) -> Option<Resource> {
        match name {
            "rss" => Some(Resource::Rss),
            "pss" => Some(Resource::Pss),
            "fds" => Some(Resource::Fds),
            _ => None,
        }
    }

    /// Its name in plans and reports.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Rss => "rss",
            Resource::Pss => "pss",
            Resource::Fds => "fds",
        }
    }

    /// Whether its values are bytes.
    pub fn is_bytes(self) -> bool {
        !matches!(self, Resource::Fds)
    }

    /// Its value in a reading.
    pub fn of(self, r: &Reading) -> u64 {
        match self {
            Resource::Rss => r.rss_bytes,
            Resource::Pss => r.pss_bytes,
            Resource::Fds => r.fds,
        }
    }

    /// Formats an amount of this resource for people: `512.0 KiB`, `3 fds`.
    pub fn format(self, v: i64) -> String {
        let sign = if v < 0 { "-" } else { "" };
        if self.is_bytes() {
            format!(
                "{sign}{}",
                bytesize::ByteSize::b(v.unsigned_abs()).display().iec()
            )
        } else {
            let n = v.unsigned_abs();
            format!("{sign}{n} fd{}", if n == 1 { "" } else { "s" })
        }
    }
}

/// Who a watched process is: the name the plan gives it and its identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ProcId {
    /// Name in the plan (with `[pid]` appended when a `match` found several processes).
    pub process: String,
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot; with the pid, the identity of the process.
    pub start_ticks: u64,
}

/// One reading of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Reading {
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// Proportional set size, bytes.
    pub pss_bytes: u64,
    /// Open file descriptors.
    pub fds: u64,
}

/// A measurement of one process: the combined value and the readings it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Who.
    #[serde(flatten)]
    pub id: ProcId,
    /// Combined value (outlier dropped, rest averaged).
    #[serde(flatten)]
    pub value: Reading,
    /// Largest minus smallest reading, per resource: how noisy this measurement was.
    pub spread: Reading,
    /// The readings.
    pub readings: Vec<Reading>,
}

impl Sample {
    /// The combined value of `resource`.
    pub fn get(&self, resource: Resource) -> u64 {
        resource.of(&self.value)
    }
}

/// A measurement of every watched process at one time.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Snapshot {
    /// When it was taken (end of the last reading), ms after the session started.
    pub t_ms: u64,
    /// The processes that were there in every reading.
    pub processes: Vec<Sample>,
}

impl Snapshot {
    /// The sample of process `id`.
    pub fn get(&self, id: &ProcId) -> Option<&Sample> {
        self.processes.iter().find(|s| &s.id == id)
    }

    /// The samples of the processes called `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.processes.iter().filter(move |s| s.id.process == name)
    }

    /// Combines readings into a snapshot. `rounds[k]` holds the k-th reading of every
    /// process that could be read then; a process missing from any round (it ended, or
    /// restarted with a new identity) is left out.
    pub fn combine(t_ms: u64, rounds: &[Vec<(ProcId, Reading)>]) -> Snapshot {
        let Some(first) = rounds.first() else {
            return Snapshot {
                t_ms,
                processes: Vec::new(),
            };
        };
        let mut processes = Vec::new();
        for (id, _) in first {
            let readings: Option<Vec<Reading>> = rounds
                .iter()
                .map(|round| round.iter().find(|(i, _)| i == id).map(|(_, r)| *r))
                .collect();
            let Some(readings) = readings else { continue };
            let pick = |res: Resource| -> (u64, u64) {
                let values: Vec<u64> = readings.iter().map(|r| res.of(r)).collect();
                (combine_readings(&values), spread(&values))
            };
            let (rss, rss_s) = pick(Resource::Rss);
            let (pss, pss_s) = pick(Resource::Pss);
            let (fds, fds_s) = pick(Resource::Fds);
            processes.push(Sample {
                id: id.clone(),
                value: Reading {
                    rss_bytes: rss,
                    pss_bytes: pss,
                    fds,
                },
                spread: Reading {
                    rss_bytes: rss_s,
                    pss_bytes: pss_s,
                    fds: fds_s,
                },
                readings,
            });
        }
        processes.sort_by(|a, b| a.id.cmp(&b.id));
        Snapshot { t_ms, processes }
    }
}

/// Combines the readings of one measurement (seed Fig. 21, S227–S228): with three or more,
/// drop the one farthest from the mean (the first of equals), then average the rest,
/// rounded to the nearest whole number.
pub fn combine_readings(values: &[u64]) -> u64 {
    match values.len() {
        0 => 0,
        1 | 2 => mean(values),
        n => {
            let m = values.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
            let mut worst = 0;
            for (i, &v) in values.iter().enumerate() {
                if (v as f64 - m).abs() > (values[worst] as f64 - m).abs() {
                    worst = i;
                }
            }
            let rest: Vec<u64> = values
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != worst)
                .map(|(_, &v)| v)
                .collect();
            mean(&rest)
        }
    }
}

fn mean(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
    let n = values.len() as u128;
    u64::try_from((sum + n / 2) / n).unwrap_or(u64::MAX)
}

fn spread(values: &[u64]) -> u64 {
    let max = values.iter().copied().max().unwrap_or(0);
    let min = values.iter().copied().min().unwrap_or(0);
    max - min
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, pid: u32) -> ProcId {
        ProcId {
            process: name.into(),
            pid,
            start_ticks: 7,
        }
    }

    fn r(pss: u64) -> Reading {
        Reading {
            rss_bytes: pss,
            pss_bytes: pss,
            fds: 4,
        }
    }

    #[test]
    fn drops_the_reading_farthest_from_the_mean() {
        // Mean 400: 1000 is farthest; the others average to 100.
        assert_eq!(combine_readings(&[100, 1000, 100]), 100);
        assert_eq!(combine_readings(&[10, 20, 30, 1000]), 20);
        // Fewer than three: plain average.
        assert_eq!(combine_readings(&[10, 21]), 16);
        assert_eq!(combine_readings(&[5]), 5);
        assert_eq!(combine_readings(&[]), 0);
    }

    #[test]
    fn a_spike_in_one_reading_does_not_move_the_measurement() {
        let rounds = vec![
            vec![(id("a", 1), r(1000))],
            vec![(id("a", 1), r(9000))],
            vec![(id("a", 1), r(1002))],
        ];
        let s = Snapshot::combine(5, &rounds);
        let a = s.get(&id("a", 1)).unwrap();
        assert_eq!(a.get(Resource::Pss), 1001);
        assert_eq!(a.spread.pss_bytes, 8000);
        assert_eq!(a.readings.len(), 3);
    }

    #[test]
    fn a_process_missing_from_a_reading_is_left_out() {
        let rounds = vec![
            vec![(id("a", 1), r(1)), (id("b", 2), r(2))],
            vec![(id("a", 1), r(1))],
            vec![(id("a", 1), r(1)), (id("b", 2), r(2))],
        ];
        let s = Snapshot::combine(0, &rounds);
        assert!(s.get(&id("a", 1)).is_some());
        assert!(s.get(&id("b", 2)).is_none());
    }

    #[test]
    fn formats_amounts() {
        assert_eq!(Resource::Pss.format(512 * 1024), "512.0 KiB");
        assert_eq!(Resource::Rss.format(-4096), "-4.0 KiB");
        assert_eq!(Resource::Fds.format(3), "3 fds");
        assert_eq!(Resource::Fds.format(1), "1 fd");
    }
}
