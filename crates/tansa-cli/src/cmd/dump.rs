//! `tansa dump`: print a recording's raw records, for debugging and for scripts that want
//! events rather than reports.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tansa_format::container::{FrameType, Reader};
use tansa_format::memory::{self, split_meta_chunk, split_thread_chunk};
use tansa_wire::event::{Decoder, Record};

/// Options of `tansa dump`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recording.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Also print every event (by default only frames, sessions, modules and stacks).
    #[arg(long)]
    events: bool,
}

fn dump_stream(bytes: &[u8], events: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    for r in Decoder::new(bytes) {
        match r {
            Ok(Record::StackDef { id, frames }) => {
                let f: Vec<String> = frames
                    .map(|f| format!("{}+{:#x}", f.module, f.offset))
                    .collect();
                writeln!(out, "    stack {id}: {}", f.join(" "))?;
            }
            Ok(Record::ModuleLoad(m)) => writeln!(
                out,
                "    module {}: {} bias {:#x} flags {} build-id {}",
                m.id,
                String::from_utf8_lossy(m.path),
                m.bias,
                m.flags,
                m.build_id
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )?,
            Ok(rec) if events => writeln!(out, "    {rec:?}")?,
            Ok(Record::ThreadStart { pid, tid, name, .. }) => writeln!(
                out,
                "    thread {tid} of {pid} ({})",
                String::from_utf8_lossy(name)
            )?,
            Ok(_) => {}
            Err(e) => {
                writeln!(out, "    (stream ends: {e:?})")?;
                break;
            }
        }
    }
    Ok(())
}

/// Runs `tansa dump`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let file =
        File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
    let mut reader = Reader::new(BufReader::new(file))
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut out = crate::output::open(None)?;
    writeln!(
        out,
        "{} (format {})",
        reader.kind().describe(),
        tansa_format::container::FORMAT_VERSION
    )?;
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                writeln!(out, "error: {e}")?;
                break;
            }
        };
        write!(
            out,
            "@{} frame {:#06x} ({} bytes)",
            frame.offset,
            frame.ty.0,
            frame.payload.len()
        )?;
        match frame.ty {
            FrameType::META => writeln!(
                out,
                " meta {:?}",
                frame.decode::<tansa_format::meta::RecordingMeta>()?
            )?,
            FrameType::CALIBRATION => writeln!(
                out,
                " calibration {:?}",
                frame.decode::<tansa_format::meta::Calibration>()?
            )?,
            FrameType::SYMBOLS => {
                let t: tansa_format::symtab::SymbolTable = frame.decode()?;
                writeln!(
                    out,
                    " symbols: {} modules, {} strings",
                    t.modules.len(),
                    t.strings.len()
                )?;
                for m in &t.modules {
                    writeln!(
                        out,
                        "    {} {:?}: {} addresses",
                        m.path,
                        m.status,
                        m.addrs.len()
                    )?;
                }
            }
            memory::SESSION => writeln!(
                out,
                " session {:?}",
                frame.decode::<tansa_format::memory::SessionInfo>()?
            )?,
            memory::SESSION_END => writeln!(
                out,
                " end {:?}",
                frame.decode::<tansa_format::memory::SessionEnd>()?
            )?,
            memory::SESSION_LOSSES => writeln!(
                out,
                " losses {:?}",
                frame.decode::<tansa_format::memory::SessionLosses>()?
            )?,
            memory::UNRECORDED => writeln!(
                out,
                " unrecorded {:?}",
                frame.decode::<tansa_format::memory::Unrecorded>()?
            )?,
            memory::META_CHUNK => {
                let (s, bytes) = split_meta_chunk(&frame.payload).context("short meta chunk")?;
                writeln!(out, " meta stream of session {s}")?;
                dump_stream(bytes, true, &mut out)?;
            }
            memory::THREAD_CHUNK => {
                let (s, st, bytes) =
                    split_thread_chunk(&frame.payload).context("short thread chunk")?;
                writeln!(out, " thread stream {st} of session {s}")?;
                dump_stream(bytes, args.events, &mut out)?;
            }
            _ => writeln!(out)?,
        }
    }
    if !reader.is_complete() {
        writeln!(out, "(incomplete recording: no end frame)")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
