//! The CPU limit of the calling process's control group (a container's CPU quota) and the
//! CPU time that group has used: a group held to its quota has no time to spare even while
//! the machine's CPUs idle.
//!
//! Both cgroup versions are read. Version 2: the group of the `0::PATH` line of
//! `/proc/self/cgroup` under the `cgroup2` mount, `cpu.max` (`QUOTA PERIOD` or `max PERIOD`)
//! and `usage_usec` of `cpu.stat`. Version 1: the group of the `cpu` controller's line,
//! `cpu.cfs_quota_us` (`-1`: none) and `cpu.cfs_period_us`, and `cpuacct.usage`
//! (nanoseconds) of the same group in the `cpuacct` hierarchy. A quota set on an ancestor
//! limits the group too: the tightest one on the way up to the hierarchy's root applies,
//! with the usage of the group it is set on. The parsers are pure functions over the files'
//! text.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A CPU quota: `quota` of CPU time in every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    /// CPU time allowed per period.
    pub quota: Duration,
    /// The period.
    pub period: Duration,
}

impl CpuQuota {
    /// The quota in CPUs (0.5: half of one CPU's time).
    pub fn cpus(&self) -> f64 {
        self.quota.as_secs_f64() / self.period.as_secs_f64().max(1e-9)
    }
}

/// Version 2's `cpu.max`: `Some(None)` for no quota (`max PERIOD`).
pub fn parse_cpu_max(text: &str) -> Option<Option<CpuQuota>> {
    let mut fields = text.split_ascii_whitespace();
    let quota = fields.next()?;
    let period: u64 = fields.next()?.parse().ok()?;
    if period == 0 {
        return None;
    }
    if quota == "max" {
        return Some(None);
    }
    Some(Some(CpuQuota {
        quota: Duration::from_micros(quota.parse().ok()?),
        period: Duration::from_micros(period),
    }))
}

/// Version 1's `cpu.cfs_quota_us` and `cpu.cfs_period_us`: `Some(None)` for no quota
/// (a negative quota).
pub fn parse_cfs(quota_us: &str, period_us: &str) -> Option<Option<CpuQuota>> {
    let quota: i64 = quota_us.trim().parse().ok()?;
    let period: u64 = period_us.trim().parse().ok()?;
    if period == 0 {
        return None;
    }
    if quota < 0 {
        return Some(None);
    }
    Some(Some(CpuQuota {
        quota: Duration::from_micros(quota.unsigned_abs()),
        period: Duration::from_micros(period),
    }))
}

/// The `usage_usec` line of version 2's `cpu.stat`.
pub fn parse_usage_usec(cpu_stat: &str) -> Option<Duration> {
    cpu_stat.lines().find_map(|l| {
        let value = l.strip_prefix("usage_usec ")?;
        value.trim().parse().ok().map(Duration::from_micros)
    })
}

/// The group of each hierarchy in `/proc/self/cgroup`: (controllers, path). Version 2's
/// line has no controllers.
pub fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some((
                controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path.to_string(),
            ))
        })
        .collect()
}

/// A cgroup file system mounted: where, which part of the hierarchy it shows, its type
/// (`cgroup` or `cgroup2`) and its super options (version 1's controllers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// The mount point.
    pub point: PathBuf,
    /// The hierarchy's directory shown there (`/` but in a container).
    pub root: String,
    /// `cgroup` or `cgroup2`.
    pub fstype: String,
    /// Super options: the controllers of a version-1 hierarchy, among others.
    pub options: Vec<String>,
}

/// The cgroup mounts of `/proc/self/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let _source = right.next()?;
            let options = right.next().unwrap_or("");
            Some(CgroupMount {
                point: PathBuf::from(unescape(left.get(4)?)),
                root: unescape(left.get(3)?),
                fstype: fstype.to_string(),
                options: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = (b[i] == b'\\')
            .then(|| b.get(i + 1..i + 4))
            .flatten()
            .and_then(|o| std::str::from_utf8(o).ok())
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match octal {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of group `path` under `mount` (a path relative to the mount's root).
fn group_dir(mount: &CgroupMount, path: &str) -> PathBuf {
    let relative = match path.strip_prefix(mount.root.as_str()) {
        Some(rest) if mount.root != "/" => rest,
        _ => path,
    };
    mount.point.join(relative.trim_start_matches('/'))
}

/// The directories from `dir` up to `top` (both included), innermost first.
fn up_to(dir: &Path, top: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut d = Some(dir);
    while let Some(x) = d {
        out.push(x.to_path_buf());
        if x == top || !x.starts_with(top) {
            break;
        }
        d = x.parent();
    }
    out
}

/// Where the CPU time a group has used is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Usage {
    /// Version 2's `cpu.stat` (`usage_usec`).
    CpuStat(PathBuf),
    /// Version 1's `cpuacct.usage` (nanoseconds).
    Cpuacct(PathBuf),
}

/// The calling process's group's CPU limit, and where to read its usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCpu {
    quota: CpuQuota,
    usage: Usage,
}

impl GroupCpu {
    /// The tightest CPU quota over the calling process's group and its ancestors, with the
    /// usage counter of the group it is set on. `None` when no quota applies, or where
    /// cgroups cannot be read.
    pub fn of_self() -> Option<GroupCpu> {
        let groups = parse_proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").ok()?);
        let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").ok()?);
        Self::v1(&groups, &mounts).or_else(|| Self::v2(&groups, &mounts))
    }

    fn v2(groups: &[(Vec<String>, String)], mounts: &[CgroupMount]) -> Option<GroupCpu> {
        let (_, path) = groups.iter().find(|(c, _)| c.is_empty())?;
        let mount = mounts.iter().find(|m| m.fstype == "cgroup2")?;
        let dir = group_dir(mount, path);
        up_to(&dir, &mount.point)
            .into_iter()
            .filter_map(|d| {
                let max = std::fs::read_to_string(d.join("cpu.max")).ok()?;
                Some((parse_cpu_max(&max)??, Usage::CpuStat(d.join("cpu.stat"))))
            })
            .min_by(|a, b| a.0.cpus().total_cmp(&b.0.cpus()))
            .map(|(quota, usage)| GroupCpu { quota, usage })
    }

    fn v1(groups: &[(Vec<String>, String)], mounts: &[CgroupMount]) -> Option<GroupCpu> {
        let find = |controller: &str| {
            let (_, path) = groups
                .iter()
                .find(|(c, _)| c.iter().any(|x| x == controller))?;
            let mount = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == controller))?;
            Some((mount, group_dir(mount, path)))
        };
        let (cpu_mount, cpu_dir) = find("cpu")?;
        let (acct_mount, acct_dir) = find("cpuacct")?;
        let (quota, level) = up_to(&cpu_dir, &cpu_mount.point)
            .into_iter()
            .filter_map(|d| {
                let quota = std::fs::read_to_string(d.join("cpu.cfs_quota_us")).ok()?;
                let period = std::fs::read_to_string(d.join("cpu.cfs_period_us")).ok()?;
                let relative = d.strip_prefix(&cpu_mount.point).ok()?.to_path_buf();
                Some((parse_cfs(&quota, &period)??, relative))
            })
            .min_by(|a, b| a.0.cpus().total_cmp(&b.0.cpus()))?;
        // The usage of the group the quota is set on, in the cpuacct hierarchy (the same
        // directory where both controllers share one).
        let acct = acct_mount.point.join(&level);
        let acct = if acct.starts_with(&acct_mount.point) && acct.join("cpuacct.usage").exists() {
            acct
        } else {
            acct_dir
        };
        Some(GroupCpu {
            quota,
            usage: Usage::Cpuacct(acct.join("cpuacct.usage")),
        })
    }

    /// The quota, in CPUs.
    pub fn cpus(&self) -> f64 {
        self.quota.cpus()
    }

    /// The CPU time the group has used so far.
    pub fn usage(&self) -> Option<Duration> {
        match &self.usage {
            Usage::CpuStat(p) => parse_usage_usec(&std::fs::read_to_string(p).ok()?),
            Usage::Cpuacct(p) => std::fs::read_to_string(p)
                .ok()?
                .trim()
                .parse()
                .ok()
                .map(Duration::from_nanos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_of_both_versions() {
        let half = CpuQuota {
            quota: Duration::from_millis(50),
            period: Duration::from_millis(100),
        };
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(Some(half)));
        assert_eq!(parse_cpu_max("max 100000\n"), Some(None));
        assert_eq!(parse_cpu_max("50000 0\n"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cfs("50000\n", "100000\n"), Some(Some(half)));
        assert_eq!(parse_cfs("-1\n", "100000\n"), Some(None));
        assert_eq!(parse_cfs("x", "100000"), None);
        assert!((half.cpus() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn usage_of_cpu_stat() {
        let text = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n";
        assert_eq!(
            parse_usage_usec(text),
            Some(Duration::from_micros(1_234_567))
        );
        assert_eq!(parse_usage_usec("user_usec 1\n"), None);
    }

    #[test]
    fn groups_and_mounts() {
        let groups = parse_proc_cgroup("4:cpu,cpuacct:/docker/abc\n2:memory:/x\n0::/user.slice\n");
        assert_eq!(
            groups,
            [
                (vec!["cpu".into(), "cpuacct".into()], "/docker/abc".into()),
                (vec!["memory".into()], "/x".into()),
                (vec![], "/user.slice".into()),
            ]
        );
        let mounts = parse_mountinfo(
            "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
             40 31 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
             23 1 8:1 / / rw - ext4 /dev/vda rw\n\
             41 31 0:38 / /mnt/with\\040space rw - cgroup cgroup rw,pids\n",
        );
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[0].root, "/docker/abc");
        assert_eq!(mounts[0].options, ["rw", "cpu", "cpuacct"]);
        assert_eq!(mounts[1].fstype, "cgroup2");
        assert_eq!(mounts[2].point, PathBuf::from("/mnt/with space"));
        // In a container, the group's path starts with the mount's root.
        assert_eq!(
            group_dir(&mounts[0], "/docker/abc"),
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert_eq!(
            group_dir(&mounts[1], "/user.slice"),
            PathBuf::from("/sys/fs/cgroup/unified/user.slice")
        );
        assert_eq!(
            up_to(Path::new("/c/a/b"), Path::new("/c")),
            [
                PathBuf::from("/c/a/b"),
                PathBuf::from("/c/a"),
                PathBuf::from("/c")
            ]
        );
    }
}
