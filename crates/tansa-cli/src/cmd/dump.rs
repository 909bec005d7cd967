//! `tansa dump`: print a recording's raw records, for debugging and for scripts that want
//! events rather than reports.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use tansa_format::container::{FrameType, Reader};
use tansa_format::cpu;
use tansa_format::memory::{self, split_meta_chunk, split_thread_chunk};
use tansa_wire::event::{DecodeError, Decoder, ImproperOp, LeakClass, Record, StreamState};

use crate::exit;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Every frame, and the records of its streams, to read.
    Text,
    /// One JSON object per stream record (docs/json/dump-events.v1.md), for scripts.
    Jsonl,
}

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

    /// Output format: `jsonl` prints only the records of the streams (modules, stacks,
    /// thread starts, and with --events every event), one JSON object per line.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

/// What is left of a stream after its last chunk so far: a record that continues in the
/// next chunk, the decoder's state, and the thread writing the stream.
#[derive(Default)]
struct Carry {
    bytes: Vec<u8>,
    state: StreamState,
    tid: Option<u32>,
}

/// Which stream a chunk belongs to, for the JSON form of its records.
#[derive(Debug, Clone, Copy)]
struct StreamId {
    session: u32,
    /// The thread stream's number; `None` for the session's meta stream.
    stream: Option<u32>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The JSON object of one record (`tansa.dump-events.v1`). `tid` is the thread of the
/// stream, known from its `thread_start`.
fn record_json(id: StreamId, tid: Option<u32>, rec: &Record<'_>) -> Value {
    let mut v = match *rec {
        Record::ThreadStart { pid, ts, name, .. } => json!({
            "kind": "thread_start",
            "pid": pid,
            "ticks": ts,
            "name": String::from_utf8_lossy(name),
        }),
        Record::ThreadName { name } => json!({
            "kind": "thread_name",
            "name": String::from_utf8_lossy(name),
        }),
        Record::ThreadEnd { ts } => json!({ "kind": "thread_end", "ticks": ts }),
        Record::Alloc(a) => json!({
            "kind": "alloc",
            "op": a.op.name(),
            "ptr": a.ptr,
            "size": a.size,
            "align": a.align,
            "stack": a.stack,
            "ticks": a.ts,
        }),
        Record::Realloc(r) => json!({
            "kind": "realloc",
            "op": if r.array { "reallocarray" } else { "realloc" },
            "old_ptr": r.old_ptr,
            "new_ptr": r.new_ptr,
            "size": r.size,
            "stack": r.stack,
            "ticks": r.ts_begin,
            "end_ticks": r.ts_end,
        }),
        Record::Free(f) => json!({
            "kind": "free",
            "ptr": f.ptr,
            "stack": f.stack,
            "ticks": f.ts,
        }),
        Record::Improper(i) => json!({
            "kind": "improper",
            "op": match i.op {
                ImproperOp::Free => "free",
                ImproperOp::Realloc => "realloc",
            },
            "ptr": i.ptr,
            "size": i.size,
            "stack": i.stack,
            "ticks": i.ts,
        }),
        Record::Lost { count } => json!({ "kind": "lost", "count": count }),
        Record::Unreached { ptr, class } => json!({
            "kind": "unreached",
            "ptr": ptr,
            "class": match class {
                LeakClass::Definite => "definite",
                LeakClass::Indirect => "indirect",
                LeakClass::Released => "released",
            },
        }),
        Record::LeakScan(s) => json!({
            "kind": "leak_scan",
            "blocks": s.blocks,
            "reachable": s.reachable,
            "root_bytes": s.root_bytes,
            "status": s.status,
            "ticks": s.ts,
        }),
        Record::Sample { ts, stack, weight } => json!({
            "kind": "sample",
            "stack": stack,
            "weight": weight,
            "ticks": ts,
        }),
        Record::StackDef { id, frames } => json!({
            "kind": "stack",
            "id": id,
            "frames": frames
                .map(|f| json!({ "module": f.module, "offset": f.offset }))
                .collect::<Vec<Value>>(),
        }),
        Record::ModuleLoad(m) => json!({
            "kind": "module_load",
            "id": m.id,
            "path": String::from_utf8_lossy(m.path),
            "build_id": hex(m.build_id),
            "bias": m.bias,
            "flags": m.flags,
            "ticks": m.ts,
        }),
        Record::ModuleUnload { id, ts } => json!({
            "kind": "module_unload",
            "id": id,
            "ticks": ts,
        }),
    };
    v["session"] = json!(id.session);
    v["stream"] = json!(id.stream);
    if id.stream.is_some() {
        v["tid"] = json!(tid);
    }
    v
}

/// Whether a record is shown without `--events`.
fn always_shown(rec: &Record<'_>) -> bool {
    matches!(
        rec,
        Record::StackDef { .. }
            | Record::ModuleLoad(_)
            | Record::ModuleUnload { .. }
            | Record::ThreadStart { .. }
    )
}

/// Shows the records of one chunk of a stream; a record cut at the chunk's end is kept in
/// `carry` for the next chunk of the same stream.
///
/// With `json`, each record shown is one JSON line instead; returns why the rest of the
/// chunk cannot be shown, if it cannot.
fn dump_stream(
    chunk: &[u8],
    carry: &mut Carry,
    events: bool,
    json: Option<StreamId>,
    out: &mut dyn Write,
) -> anyhow::Result<Option<String>> {
    let mut bytes = std::mem::take(&mut carry.bytes);
    bytes.extend_from_slice(chunk);
    let mut d = Decoder::with_state(&bytes, carry.state);
    let mut used = 0;
    while let Some(r) = d.next() {
        if let Ok(Record::ThreadStart { tid, .. }) = r {
            carry.tid = Some(tid);
        }
        match r {
            Ok(rec) if json.is_some() => {
                if let Some(id) = json
                    && (events || always_shown(&rec))
                {
                    // `Value`'s `Display` is compact JSON; writing it with `writeln!` keeps an
                    // `io::Error` (a broken pipe is success) in the error chain.
                    writeln!(out, "{}", record_json(id, carry.tid, &rec))?;
                }
            }
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
    let file = tansa_format::input::open(path).map_err(|e| exit::cannot_open(path, e))?;
    let mut reader = Reader::new(BufReader::new(file)).map_err(|e| exit::unreadable(path, &e))?;
    let jsonl = args.format == Format::Jsonl;
    // The JSON lines are a heap recording's stream records; other kinds have none.
    if jsonl && reader.kind() != tansa_format::container::Kind::Memory {
        return Err(exit::usage(format!(
            "{}: --format jsonl prints the event streams of a heap recording (`tansa \
             record`), and this is a {}: leave --format out to print its frames",
            path.display(),
            reader.kind().describe()
        )));
    }
    let mut out = crate::output::open(None, &[])?;
    if !jsonl {
        writeln!(
            out,
            "{} (format {})",
            reader.kind().describe(),
            tansa_format::container::FORMAT_VERSION
        )?;
    }
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
        if jsonl {
            let shown = match frame.ty {
                memory::META_CHUNK => match split_meta_chunk(&frame.payload) {
                    Some((s, bytes)) => {
                        let id = StreamId {
                            session: s,
                            stream: None,
                        };
                        let carry = metas.entry(s).or_default();
                        dump_stream(bytes, carry, true, Some(id), &mut out)?
                    }
                    None => Some("a chunk too short to name its process".into()),
                },
                memory::THREAD_CHUNK => match split_thread_chunk(&frame.payload) {
                    Some((s, st, bytes)) => {
                        let id = StreamId {
                            session: s,
                            stream: Some(st),
                        };
                        let carry = threads.entry((s, st)).or_default();
                        dump_stream(bytes, carry, args.events, Some(id), &mut out)?
                    }
                    None => Some("a chunk too short to name its thread".into()),
                },
                _ => None,
            };
            if let Some(p) = shown {
                let at = frame.place();
                warnings.push(format!(
                    "{p} in the frame at {at}; the rest of it is not shown"
                ));
                damaged = true;
            }
            continue;
        }
        write!(
            out,
            "@{} frame {:#06x} ({} bytes{})",
            frame.offset,
            frame.ty.0,
            frame.payload.len(),
            if frame.compressed {
                format!(", compressed to {}", frame.stored_len)
            } else {
                String::new()
            }
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
                memory::SESSION_PLACE => writeln!(
                    out,
                    " place {:?}",
                    frame.decode::<tansa_format::memory::SessionPlace>()?
                )?,
                memory::VOLATILE_SEGMENT => writeln!(
                    out,
                    " in memory {:?}",
                    frame.decode::<tansa_format::memory::VolatileSegment>()?
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
                cpu::INFO => writeln!(out, " info {:?}", frame.decode::<cpu::CpuInfo>()?)?,
                cpu::PROCESSES => {
                    let processes: Vec<cpu::Process> = frame.decode()?;
                    writeln!(out, " processes: {}", processes.len())?;
                    for p in &processes {
                        writeln!(
                            out,
                            "    process {}: pid {} ({}) {:?}, {} thread(s), exit {:?}",
                            p.id,
                            p.pid,
                            p.comm,
                            p.cmdline,
                            p.threads.len(),
                            p.exit
                        )?;
                    }
                }
                cpu::MODULES => {
                    let modules: Vec<cpu::Module> = frame.decode()?;
                    writeln!(out, " modules: {}", modules.len())?;
                    for m in &modules {
                        writeln!(
                            out,
                            "    module {}: {} {:?} build-id {}",
                            m.id,
                            m.path,
                            m.kind,
                            hex(&m.build_id)
                        )?;
                    }
                }
                cpu::ADDRESSES => {
                    let counts: Vec<cpu::AddressCount> = frame.decode()?;
                    let samples: u64 = counts.iter().map(|c| c.count).sum();
                    writeln!(
                        out,
                        " addresses: {} counts, {samples} samples",
                        counts.len()
                    )?;
                }
                cpu::STACKS => {
                    writeln!(out, " stacks: {}", frame.decode::<Vec<cpu::Stack>>()?.len())?
                }
                cpu::STACK_COUNTS => {
                    let counts: Vec<cpu::StackCount> = frame.decode()?;
                    let samples: u64 = counts.iter().map(|c| c.count).sum();
                    writeln!(
                        out,
                        " stack counts: {} counts, {samples} samples",
                        counts.len()
                    )?;
                }
                cpu::TIMELINE => writeln!(
                    out,
                    " timeline: {} samples",
                    frame.decode::<Vec<cpu::TimelineEntry>>()?.len()
                )?,
                cpu::SOURCES => writeln!(
                    out,
                    " sources: {} files",
                    frame.decode::<Vec<cpu::SourceFile>>()?.len()
                )?,
                cpu::WITHHELD_SOURCES => writeln!(
                    out,
                    " withheld sources: {} files",
                    frame.decode::<Vec<cpu::WithheldSource>>()?.len()
                )?,
                cpu::NEWER_SOURCES => writeln!(
                    out,
                    " sources newer than their modules: {} files",
                    frame.decode::<Vec<cpu::NewerSource>>()?.len()
                )?,
                cpu::SUMMARY => writeln!(out, " summary {:?}", frame.decode::<cpu::CpuSummary>()?)?,
                cpu::UNSAMPLED => {
                    writeln!(out, " unsampled {:?}", frame.decode::<cpu::Unsampled>()?)?
                }
                cpu::CHECKPOINT => {
                    writeln!(out, " checkpoint {:?}", frame.decode::<cpu::Checkpoint>()?)?
                }
                cpu::COMPLETED => {
                    writeln!(out, " completed {:?}", frame.decode::<cpu::Completed>()?)?
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
                    return dump_stream(bytes, metas.entry(s).or_default(), true, None, &mut out);
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
                        None,
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
