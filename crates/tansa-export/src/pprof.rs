//! pprof's `profile.proto` (github.com/google/pprof, proto/profile.proto), gzipped.
//!
//! The messages are declared here with prost's derive, field numbers as in
//! `profile.proto`; prost does the encoding.
//!
//! Addresses: tansa's locations are module-relative, so each mapping is given its own
//! made-up range (`(index + 1) << 40`, 1 TiB each) with file offset 0, so that a location's
//! address minus its mapping's start is its address in the module. Kernel mappings keep
//! kernel addresses as they are. Every location carries its functions and lines
//! (`has_functions`, `has_inline_frames`), so pprof never tries to symbolize them again.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use rustc_hash::FxHashMap;
use tansa_analysis::profile::{Profile, ProfileKind};

use crate::ExportError;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct PbProfile {
    /// Sample types.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<PbValueType>,
    /// Samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PbSample>,
    /// Mappings.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<PbMapping>,
    /// Locations.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<PbLocation>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<PbFunction>,
    /// Strings; the first is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Time of collection (UTC), nanoseconds since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Duration of the profile.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What a sampling event stands for.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<PbValueType>,
    /// The period.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Comments (string indexes).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct PbValueType {
    /// Type (string index).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Unit (string index).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct PbSample {
    /// Locations, innermost first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// Values, one per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<PbLabel>,
}

/// `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct PbLabel {
    /// Key (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String value (string index).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Number value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// Unit of the number (string index).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct PbMapping {
    /// Id (from 1).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// End address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of the start.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Path (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Build id (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations carry functions.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Locations carry file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Locations carry lines.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Locations carry inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct PbLocation {
    /// Id (from 1).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Mapping id, 0 if none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Lines, innermost inlined first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<PbLine>,
}

/// `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct PbLine {
    /// Function id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct PbFunction {
    /// Id (from 1).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Name as in the symbol table (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// Where the made-up ranges of user-space mappings start and how long each is.
const MAPPING_SPAN: u64 = 1 << 40;
/// Start of the kernel's range.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: FxHashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The profile as a `profile.proto` message. `time_nanos` is when the recording was made
/// (0 if unknown).
pub fn message(profile: &Profile, time_nanos: i64) -> PbProfile {
    let mut st = Strings::new();
    let value_type = |st: &mut Strings, v: &tansa_analysis::profile::ValueType| PbValueType {
        r#type: st.get(v.name),
        unit: st.get(v.unit),
    };
    let sample_type = profile
        .value_types
        .iter()
        .map(|v| value_type(&mut st, v))
        .collect();
    let mapping: Vec<PbMapping> = profile
        .mappings
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (memory_start, memory_limit, file_offset) = if m.kernel {
                (KERNEL_START, u64::MAX, KERNEL_START)
            } else {
                let start = (i as u64 + 1).saturating_mul(MAPPING_SPAN);
                (start, start.saturating_add(MAPPING_SPAN), 0)
            };
            PbMapping {
                id: i as u64 + 1,
                memory_start,
                memory_limit,
                file_offset,
                filename: st.get(&m.path),
                build_id: st.get(&m.build_id),
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            }
        })
        .collect();
    let function = profile
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| PbFunction {
            id: i as u64 + 1,
            name: st.get(&f.name),
            system_name: st.get(&f.name),
            filename: st.get(f.file.as_deref().unwrap_or("")),
        })
        .collect();
    let location = profile
        .locations
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mapped = l.mapping.and_then(|m| mapping.get(m as usize));
            let address = match mapped {
                Some(m) if m.file_offset == 0 => m.memory_start.saturating_add(l.address),
                _ => l.address,
            };
            PbLocation {
                id: i as u64 + 1,
                mapping_id: mapped.map_or(0, |m| m.id),
                address,
                line: l
                    .lines
                    .iter()
                    .map(|line| PbLine {
                        function_id: u64::from(line.function) + 1,
                        line: i64::from(line.line),
                    })
                    .collect(),
            }
        })
        .collect();
    let pid_key = st.get("pid");
    let tid_key = st.get("tid");
    let process_key = st.get("process");
    let rank_key = st.get("rank");
    let host_key = st.get("host");
    let sample = profile
        .samples
        .iter()
        .map(|s| {
            let mut label = Vec::new();
            if let Some(p) = profile.processes.get(s.process as usize) {
                label.push(PbLabel {
                    key: pid_key,
                    num: i64::from(p.pid),
                    ..PbLabel::default()
                });
                if !p.name.is_empty() {
                    label.push(PbLabel {
                        key: process_key,
                        str: st.get(&p.name),
                        ..PbLabel::default()
                    });
                }
                // A string: a numeric label of 0 would be the protobuf default, which
                // pprof cannot tell from no value at all (rank 0 would vanish).
                if let Some(rank) = p.rank {
                    label.push(PbLabel {
                        key: rank_key,
                        str: st.get(&rank.to_string()),
                        ..PbLabel::default()
                    });
                }
                if let Some(host) = p.host.as_deref().filter(|h| !h.is_empty()) {
                    label.push(PbLabel {
                        key: host_key,
                        str: st.get(host),
                        ..PbLabel::default()
                    });
                }
            }
            if let Some(tid) = s.tid {
                label.push(PbLabel {
                    key: tid_key,
                    num: i64::from(tid),
                    ..PbLabel::default()
                });
            }
            PbSample {
                location_id: s.locations.iter().map(|&l| u64::from(l) + 1).collect(),
                value: s.values.clone(),
                label,
            }
        })
        .collect();
    let (period_type, period) = match (&profile.period, profile.kind) {
        (Some((v, p)), _) => (Some(value_type(&mut st, v)), *p),
        // Every allocation is recorded: one event stands for itself.
        (None, ProfileKind::Heap) => (
            Some(PbValueType {
                r#type: st.get("space"),
                unit: st.get("bytes"),
            }),
            1,
        ),
        (None, ProfileKind::Cpu) => (None, 0),
    };
    let mut mapping = mapping;
    // pprof takes the first mapping for the main binary ("File:" in its reports): that of
    // the executable of the process with most weight, not of whatever module came first
    // (the shell or `env` of a wrapper script). Mapping ids stay as the locations use them.
    if let Some(main) = main_mapping(profile) {
        mapping[..=main].rotate_right(1);
    }
    let comment = profile.comments.iter().map(|c| st.get(c)).collect();
    let default_sample_type = profile
        .value_types
        .get(profile.default_value)
        .map_or(0, |v| st.get(v.name));
    PbProfile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: std::mem::take(&mut st.table),
        time_nanos,
        duration_nanos: i64::try_from(profile.duration_ns).unwrap_or(i64::MAX),
        period_type,
        period,
        comment,
        default_sample_type,
    }
}

/// The index of the mapping of the main binary: the executable of the process whose
/// samples weigh most (in the default value, then in all values), when a mapping is that
/// file.
fn main_mapping(profile: &Profile) -> Option<usize> {
    let mut weight: Vec<(u128, u128)> = vec![(0, 0); profile.processes.len()];
    for s in &profile.samples {
        let Some(w) = weight.get_mut(s.process as usize) else {
            continue;
        };
        let default = s.values.get(profile.default_value).copied().unwrap_or(0);
        w.0 = w.0.saturating_add(u128::from(default.unsigned_abs()));
        for v in &s.values {
            w.1 = w.1.saturating_add(u128::from(v.unsigned_abs()));
        }
    }
    let heaviest = (0..profile.processes.len())
        .filter(|&i| !profile.processes[i].exe.is_empty())
        .max_by_key(|&i| (weight[i], std::cmp::Reverse(i)))?;
    let exe = &profile.processes[heaviest].exe;
    profile
        .mappings
        .iter()
        .position(|m| !m.kernel && &m.path == exe)
}

/// Writes the profile, gzipped, as `go tool pprof` reads it.
pub fn write(profile: &Profile, time_nanos: i64, out: &mut dyn Write) -> Result<(), ExportError> {
    let bytes = message(profile, time_nanos).encode_to_vec();
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tansa_analysis::profile::heap;

    #[test]
    fn strings_are_interned_from_an_empty_first_entry() {
        let mut s = Strings::new();
        assert_eq!(s.get("a"), 1);
        assert_eq!(s.get(""), 0);
        assert_eq!(s.get("a"), 1);
        assert_eq!(s.table, vec!["".to_string(), "a".to_string()]);
    }

    #[test]
    fn an_empty_heap_profile_round_trips_through_prost() {
        let profile = tansa_analysis::profile::Profile {
            kind: ProfileKind::Heap,
            value_types: heap::VALUE_TYPES.to_vec(),
            default_value: heap::INUSE_SPACE,
            period: None,
            mappings: Vec::new(),
            functions: Vec::new(),
            locations: Vec::new(),
            samples: Vec::new(),
            processes: Vec::new(),
            duration_ns: 5,
            peak_ns: None,
            comments: vec!["note".into()],
        };
        let m = message(&profile, 7);
        let back = PbProfile::decode(m.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.string_table[back.default_sample_type as usize],
            "inuse_space"
        );
        assert_eq!(back.string_table[back.comment[0] as usize], "note");
        assert_eq!(back.sample_type.len(), 7);
    }
}
