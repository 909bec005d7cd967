//! Reading a retrace recording, and its frames into the model of this crate.
//!
//! [`RetraceRecording::read`] reads the frames of a recording made by `tansa retrace
//! record`; a truncated or damaged file is read up to the damage, with a warning.

use std::io::Read;

use tansa_format::meta::RecordingMeta;
use tansa_format::retrace::{
    self as frames, Addr, Execution, ExecutionChunk, GroundTruth, PhaseChunk, RegionCode,
    RetraceInfo, RetraceSummary,
};
use tansa_format::{FormatError, FrameType, Kind, Reader};

use crate::annotate::Program;
use crate::model::{CodeAddr, FunctionCode};

/// A recorded address as a [`CodeAddr`].
pub fn code_addr(a: Addr) -> CodeAddr {
    CodeAddr {
        module: a.0,
        addr: a.1,
    }
}

/// The annotated program of a recording's code.
pub fn program(code: &RegionCode) -> Program {
    let functions: Vec<FunctionCode> = code
        .functions
        .iter()
        .map(|f| FunctionCode {
            module: f.module,
            name: f.name.clone(),
            start: f.start,
            bytes: f.bytes.clone(),
        })
        .collect();
    Program::new(&functions)
}

/// The partial sequences of recorded executions.
pub fn partials(executions: &[Execution]) -> Vec<Vec<CodeAddr>> {
    executions
        .iter()
        .map(|e| e.samples.iter().copied().map(code_addr).collect())
        .collect()
}

/// Errors reading a retrace recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetraceRecordingError {
    /// The container could not be read at all.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The file is a recording of another kind.
    #[error("this is a {found}, not an instruction-trace recording")]
    WrongKind {
        /// What it is.
        found: &'static str,
    },
    /// The file holds no region description or no code (damaged near its start).
    #[error("the recording holds no description of its region or no code{}", damage_note(.damage))]
    NoRegion {
        /// The damage that stopped reading, if any.
        damage: Option<String>,
    },
}

fn damage_note(damage: &Option<String>) -> String {
    damage
        .as_ref()
        .map(|d| format!(" before the damage: {d}"))
        .unwrap_or_default()
}

/// The frames of a retrace recording.
#[derive(Debug, Clone)]
pub struct RetraceRecording {
    /// Who recorded what.
    pub meta: Option<RecordingMeta>,
    /// What was recorded and how.
    pub info: RetraceInfo,
    /// The region's code.
    pub code: RegionCode,
    /// The sampled executions, in order.
    pub executions: Vec<Execution>,
    /// The phase of each execution, when the ptrace sampler drew them at random
    /// (`PhaseRule::Shuffled`); `None` when they follow from the counts (or are unknown).
    pub phases: Option<Vec<u64>>,
    /// The true traces, if captured.
    pub ground_truth: Option<GroundTruth>,
    /// How the recording ended (absent if the file is cut short).
    pub summary: Option<RetraceSummary>,
    /// Problems found while reading.
    pub warnings: Vec<String>,
    /// Whether the file is truncated or damaged (the report covers what precedes the
    /// damage).
    pub damaged: bool,
}

impl RetraceRecording {
    /// Reads a whole recording. A truncated or damaged file is read up to the damage,
    /// with a warning.
    pub fn read(input: impl Read) -> Result<RetraceRecording, RetraceRecordingError> {
        let mut reader = Reader::new(input)?;
        if reader.kind() != Kind::Retrace {
            return Err(RetraceRecordingError::WrongKind {
                found: reader.kind().describe(),
            });
        }
        let (mut meta, mut info, mut code) = (None, None, None);
        let mut executions = Vec::new();
        let mut phases: Option<Vec<u64>> = None;
        let (mut ground_truth, mut summary) = (None, None);
        let mut damage: Option<String> = None;
        loop {
            let frame = match reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) if e.is_damage() => {
                    damage = Some(e.to_string());
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let decoded: Result<(), FormatError> = (|| {
                match frame.ty {
                    FrameType::META => meta = Some(frame.decode()?),
                    frames::INFO => info = Some(frame.decode()?),
                    frames::CODE => code = Some(frame.decode()?),
                    frames::EXECUTIONS => {
                        let chunk: ExecutionChunk = frame.decode()?;
                        executions.extend(chunk.executions);
                    }
                    frames::PHASES => {
                        let chunk: PhaseChunk = frame.decode()?;
                        phases.get_or_insert_with(Vec::new).extend(chunk.phases);
                    }
                    frames::GROUND_TRUTH => ground_truth = Some(frame.decode()?),
                    frames::SUMMARY => summary = Some(frame.decode()?),
                    _ => {}
                }
                Ok(())
            })();
            if let Err(e) = decoded {
                damage = Some(e.to_string());
                break;
            }
        }
        let mut warnings = Vec::new();
        let damaged = match &damage {
            Some(d) => {
                warnings.push(format!(
                    "{d}; the report covers what was recorded before it"
                ));
                true
            }
            None if !reader.is_complete() => {
                warnings.push(format!(
                    "the file ends without its end marker at byte {} (tansa retrace record did \
                     not finish writing it); the report covers what was recorded before it",
                    reader.offset()
                ));
                true
            }
            None => false,
        };
        let (Some(info), Some(code)) = (info, code) else {
            return Err(RetraceRecordingError::NoRegion { damage });
        };
        if let Some(p) = &phases
            && p.len() < executions.len()
        {
            // Phases are written before their executions: fewer means a damaged file.
            warnings.push(format!(
                "{} of {} executions have no recorded phase; the report covers the first {}",
                executions.len() - p.len(),
                executions.len(),
                p.len()
            ));
            executions.truncate(p.len());
        }
        Ok(RetraceRecording {
            meta,
            info,
            code,
            executions,
            phases,
            ground_truth,
            summary,
            warnings,
            damaged,
        })
    }
}
