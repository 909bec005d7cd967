//! `tansa dump`: print a recording's raw records, for debugging and for scripts that want
//! events rather than reports.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use tansa_format::container::{FrameType, Reader};
use tansa_format::memory::{self, split_meta_chunk, split_thread_chunk};
use tansa_wire::event::{DecodeError, Decoder, Record, StreamState};

use crate::exit;

/// Options of `tansa dump`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status: 0 on success; 1 when the file cannot be read; 2 for a wrong command line; 3 when
it is truncated or damaged (the frames before the damage are printed, and the warnings on
standard error say where the damage is).")]
pub struct Args {
    /// The recording.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Also print every event (by default only frames, sessions, modules and stacks).
    #[arg(long)]
    events: bool,
}

/// Prints the records of a stream chunk; returns why the rest of the chunk cannot be
/// shown, if it cannot (a record cut short at the end of a chunk continues in the next
/// chunk of its stream and is no damage).
/// What is left of a stream after its last chunk so far: a record that continues in the
/// next chunk, and the decoder's state.
#[derive(Default)]
struct Carry {
    bytes: Vec<u8>,
    state: StreamState,
}

/// Shows the records of one chunk of a stream; a record cut at the chunk's end is kept in
/// `carry` for the next chunk of the same stream.
fn dump_stream(
    chunk: &[u8],
    carry: &mut Carry,
    events: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Option<String>> {
    let mut bytes = std::mem::take(&mut carry.bytes);
    bytes.extend_from_slice(chunk);
    let mut d = Decoder::with_state(&bytes, carry.state);
    let mut used = 0;
    while let Some(r) = d.next() {
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
            Err(DecodeError::Truncated { .. }) => break,
            Err(DecodeError::Corrupt { offset }) => {
                return Ok(Some(format!(
                    "an unreadable record at byte {offset} of the stream's records in this chunk"
                )));
            }
        }
        used = d.position();
        carry.state = d.state();
    }
    carry.bytes = bytes[used..].to_vec();
    Ok(None)
}

/// Runs `tansa dump`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = &args.file;
    let file = File::open(path).map_err(|e| exit::cannot_open(path, e))?;
    let mut reader = Reader::new(BufReader::new(file)).map_err(|e| exit::unreadable(path, &e))?;
    let mut out = crate::output::open(None)?;
    writeln!(
        out,
        "{} (format {})",
        reader.kind().describe(),
        tansa_format::container::FORMAT_VERSION
    )?;
    let mut warnings = Vec::new();
    let mut damaged = false;
    let mut metas: HashMap<u32, Carry> = HashMap::new();
    let mut threads: HashMap<(u32, u32), Carry> = HashMap::new();
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if e.is_damage() => {
                warnings.push(format!("{e}; the frames before it are shown"));
                damaged = true;
                break;
            }
            Err(e) => return Err(exit::unreadable(path, &e)),
        };
        write!(
            out,
            "@{} frame {:#06x} ({} bytes)",
            frame.offset,
            frame.ty.0,
            frame.payload.len()
        )?;
        let shown: Result<Option<String>, anyhow::Error> = (|| {
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
                memory::LEAK_CAUSE => {
                    let lc: tansa_format::memory::LeakCause = frame.decode()?;
                    writeln!(
                        out,
                        " leak cause: {} site(s), {} function(s), {} branch(es)",
                        lc.sites.len(),
                        lc.functions.len(),
                        lc.branches.len()
                    )?;
                    for site in &lc.sites {
                        writeln!(
                            out,
                            "    session {} stack {}: {} trace(s), {} path(s), range end {:?} \
                             (moved {}), {}",
                            site.session,
                            site.stack,
                            site.traces,
                            site.paths.len(),
                            site.range_end,
                            site.range_moves,
                            site.status
                        )?;
                        if args.events {
                            for p in &site.paths {
                                writeln!(
                                    out,
                                    "      x{} {} {:?}",
                                    p.count,
                                    if p.freed { "F" } else { "E" },
                                    p.steps
                                )?;
                            }
                        }
                    }
                    for f in &lc.failures {
                        writeln!(out, "    failure: {f}")?;
                    }
                }
                memory::UNRECORDED => writeln!(
                    out,
                    " unrecorded {:?}",
                    frame.decode::<tansa_format::memory::Unrecorded>()?
                )?,
                memory::META_CHUNK => {
                    let Some((s, bytes)) = split_meta_chunk(&frame.payload) else {
                        writeln!(out)?;
                        return Ok(Some("a chunk too short to name its process".into()));
                    };
                    writeln!(out, " meta stream of session {s}")?;
                    return dump_stream(bytes, metas.entry(s).or_default(), true, &mut out);
                }
                memory::THREAD_CHUNK => {
                    let Some((s, st, bytes)) = split_thread_chunk(&frame.payload) else {
                        writeln!(out)?;
                        return Ok(Some("a chunk too short to name its thread".into()));
                    };
                    writeln!(out, " thread stream {st} of session {s}")?;
                    return dump_stream(
                        bytes,
                        threads.entry((s, st)).or_default(),
                        args.events,
                        &mut out,
                    );
                }
                _ => writeln!(out)?,
            }
            Ok(None)
        })();
        match shown {
            Ok(None) => {}
            Ok(Some(p)) => {
                let at = frame.place();
                warnings.push(format!(
                    "{p} in the frame at {at}; the rest of it is not shown"
                ));
                damaged = true;
            }
            Err(e) if e.downcast_ref::<tansa_format::FormatError>().is_some() => {
                writeln!(out)?;
                warnings.push(format!("{e}; it is not shown"));
                damaged = true;
            }
            Err(e) => return Err(e),
        }
    }
    if !damaged && !reader.is_complete() {
        warnings.push(format!(
            "the file ends without its end marker at byte {} (its recorder did not finish \
             writing it); the frames before it are shown",
            reader.offset()
        ));
        damaged = true;
    }
    out.flush()?;
    Ok(exit::finish(path, damaged, &warnings))
}
