//! Inputs for the unit tests of the classifier and the aggregator, built with the crate's
//! own types: a meta stream (module loads and stack definitions, encoded as the agent
//! encodes them) decoded into a [`Registry`] the way `tansa record` and online mode do, and
//! a resolver that names each return address after the function the test gave it.

use rustc_hash::FxHashMap;
use tansa_format::memory::SessionInfo;
use tansa_wire::event::{
    ByteSink, Decoder, MODULE_MAIN, MODULE_VDSO, Record, StackFrame, encode_module_load,
    encode_stack_def,
};

use super::ids::{SessionId, StackId};
use super::model::{AddressResolver, ModuleInfo, Registry, Resolution, SourceFrame};

/// Module id of the main executable, `app`.
pub const APP: u32 = 1;
/// Module id of the C library, `libc.so.6`.
pub const LIBC: u32 = 2;
/// Module id of `liba.so`.
pub const LIBA: u32 = 3;
/// Module id of `libb.so`.
pub const LIBB: u32 = 4;
/// Module id of the C++ library, `libstdc++.so.6`.
pub const LIBSTDCXX: u32 = 5;
/// Module id of the vDSO.
pub const VDSO: u32 = 6;

const MODULES: &[(u32, &str, u32)] = &[
    (APP, "/usr/bin/app", MODULE_MAIN),
    (LIBC, "/usr/lib/libc.so.6", 0),
    (LIBA, "/usr/lib/liba.so", 0),
    (LIBB, "/usr/lib/libb.so", 0),
    (LIBSTDCXX, "/usr/lib/libstdc++.so.6", 0),
    (VDSO, "[vdso]", MODULE_VDSO),
];

struct Bytes(Vec<u8>);

impl ByteSink for Bytes {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// Names return addresses after the functions the test gave them (an address the test did
/// not name resolves to nothing, as an address outside every symbol does).
#[derive(Debug, Default)]
pub struct Names(FxHashMap<(String, u64), String>);

impl AddressResolver for Names {
    fn resolve(&mut self, module: &ModuleInfo, offset: u64) -> Resolution {
        match self.0.get(&(module.path.clone(), offset)) {
            Some(f) => Resolution {
                frames: vec![SourceFrame {
                    function: Some(f.clone()),
                    file: None,
                    line: 0,
                }],
                function_start: Some(offset - 1),
            },
            None => Resolution::default(),
        }
    }
}

/// A process's meta stream under construction: every module of [`MODULES`], then the
/// stacks the test defines.
pub struct Kit {
    meta: Bytes,
    names: Names,
    offsets: FxHashMap<(u32, &'static str), u64>,
    stacks: u32,
}

impl Kit {
    /// A meta stream announcing every module.
    pub fn new() -> Kit {
        let mut meta = Bytes(Vec::new());
        for &(id, path, flags) in MODULES {
            encode_module_load(
                &mut meta,
                id,
                0,
                0x7f00_0000_0000 + u64::from(id) * 0x100_0000,
                flags,
                &[id as u8; 20],
                path.as_bytes(),
                std::iter::empty(),
            );
        }
        Kit {
            meta,
            names: Names::default(),
            offsets: FxHashMap::default(),
            stacks: 0,
        }
    }

    /// Defines a stack of `(module id, function)` frames, innermost first, and returns its
    /// id. A frame named `""` has no symbol; module 0 is no module.
    pub fn stack(&mut self, frames: &[(u32, &'static str)]) -> u32 {
        let mut encoded = Vec::new();
        for &(module, function) in frames {
            let next = 0x1001 + 0x100 * self.offsets.len() as u64;
            let offset = *self.offsets.entry((module, function)).or_insert(next);
            if !function.is_empty()
                && let Some(&(_, path, _)) = MODULES.iter().find(|m| m.0 == module)
            {
                self.names
                    .0
                    .insert((path.to_string(), offset), function.to_string());
            }
            encoded.push(StackFrame { module, offset });
        }
        self.stacks += 1;
        encode_stack_def(&mut self.meta, self.stacks, encoded.into_iter());
        self.stacks
    }

    /// The return address the stack definitions give `function` of `module`.
    pub fn offset(&self, module: u32, function: &'static str) -> u64 {
        self.offsets[&(module, function)]
    }

    /// A registry in which each of `sessions` announced this meta stream, decoded as online
    /// mode decodes it.
    pub fn registry(&mut self, sessions: &[u32]) -> Registry {
        let mut reg = Registry::default();
        for &session in sessions {
            let mut stacks = Vec::new();
            for r in Decoder::new(&self.meta.0) {
                match r.expect("a well-formed meta stream") {
                    Record::ModuleLoad(m) => reg.add_module(SessionId(session), &m),
                    Record::StackDef { id, frames } => stacks.push((id, frames)),
                    other => panic!("not a meta record: {other:?}"),
                }
            }
            for (id, frames) in stacks {
                reg.add_stack(SessionId(session), StackId(id), frames, &mut self.names);
            }
        }
        assert_eq!(reg.resolve_pending(&mut self.names, false), 0);
        reg
    }
}

/// A process image starting at `start_ticks`, running `/usr/bin/app`.
pub fn session(session: u32, pid: u32, ppid: u32, start_ticks: u64) -> SessionInfo {
    SessionInfo {
        session,
        pid,
        ppid,
        exe: "/usr/bin/app".to_string(),
        cmdline: vec!["app".to_string()],
        start_ticks,
        free_stacks: true,
        online: false,
    }
}
