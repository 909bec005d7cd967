//! Annotation (seed S101/S401): every instruction of the region's functions gets its
//! function, its instruction index within the function and its basic block, by decoding
//! the stored code with `iced-x86`.
//!
//! Basic blocks come from each function's control-flow graph. Leaders are the function's
//! first instruction, every target of a direct branch that lands inside the function, and
//! every instruction that follows a branch (`jcc`, `jmp`, indirect `jmp`, `ret`, and
//! traps such as `ud2`/`int3`/`syscall`-less exceptions). Calls do **not** end a block: a
//! call returns to the next instruction, as in compiler CFGs. Blocks are numbered from 1 in
//! address order (the seed's "order of appearance"); offsets within a block count
//! instructions from 0. Targets of indirect jumps (switch tables) are not discovered, so
//! such blocks may be coarser than the compiler's.

use std::collections::{BTreeSet, HashMap};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Formatter, Instruction, IntelFormatter};

use crate::model::{CodeAddr, FunctionCode, Loc};

/// Index of an instruction in a [`Program`].
pub type InsnId = u32;

/// One decoded instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insn {
    /// Where it is.
    pub at: CodeAddr,
    /// Its length in bytes.
    pub len: u8,
    /// Its instruction info.
    pub loc: Loc,
    /// Intel-syntax disassembly.
    pub text: String,
    /// How control leaves it.
    pub flow: Flow,
    /// The target of a direct branch or call (file address in the same module).
    pub target: Option<u64>,
}

/// How control leaves an instruction, for following the control-flow graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// To the next instruction.
    Next,
    /// A direct conditional branch: to `target` or the next instruction.
    Branch,
    /// A direct jump to `target`.
    Jump,
    /// A direct call of `target`, returning to the next instruction.
    Call,
    /// A return to the caller.
    Return,
    /// Anywhere (indirect jump or call, trap, interrupt): not followed.
    Unknown,
}

fn flow_of(ins: &Instruction) -> Flow {
    match ins.flow_control() {
        FlowControl::Next => Flow::Next,
        FlowControl::ConditionalBranch if ins.is_jcc_short_or_near() => Flow::Branch,
        FlowControl::UnconditionalBranch if ins.is_jmp_short_or_near() => Flow::Jump,
        FlowControl::Call if ins.is_call_near() => Flow::Call,
        FlowControl::Return => Flow::Return,
        _ => Flow::Unknown,
    }
}

/// One annotated function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Module index.
    pub module: u32,
    /// Name.
    pub name: String,
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Its instructions are `first .. first + count` in [`Program::insns`].
    pub first: InsnId,
    /// Number of instructions.
    pub count: u32,
    /// Number of basic blocks.
    pub blocks: u32,
}

/// The annotated code of a region: every instruction of every function it touched.
#[derive(Debug, Clone, Default)]
pub struct Program {
    functions: Vec<Function>,
    insns: Vec<Insn>,
    by_addr: HashMap<CodeAddr, InsnId>,
}

fn ends_block(flow: FlowControl) -> bool {
    matches!(
        flow,
        FlowControl::ConditionalBranch
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Return
            | FlowControl::Exception
            | FlowControl::Interrupt
            | FlowControl::XbeginXabortXend
    )
}

impl Program {
    /// Decodes and annotates `functions`. Functions are numbered in the order given (a
    /// second function with the same module and start is ignored).
    pub fn new(functions: &[FunctionCode]) -> Program {
        let mut program = Program::default();
        let mut seen = BTreeSet::new();
        let mut formatter = IntelFormatter::new();
        for f in functions {
            if !seen.insert((f.module, f.start)) {
                continue;
            }
            program.add(f, &mut formatter);
        }
        program
    }

    fn add(&mut self, f: &FunctionCode, formatter: &mut IntelFormatter) {
        // Code that would run past the end of the address space is damage: left out.
        let Some(end) = f.start.checked_add(f.bytes.len() as u64) else {
            return;
        };
        let id = self.functions.len() as u32;
        let mut decoder = Decoder::with_ip(64, &f.bytes, f.start, DecoderOptions::NONE);
        let mut decoded: Vec<Instruction> = Vec::new();
        while decoder.can_decode() {
            decoded.push(decoder.decode());
        }
        let mut leaders = BTreeSet::new();
        leaders.insert(f.start);
        for ins in &decoded {
            let flow = ins.flow_control();
            if matches!(
                flow,
                FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
            ) {
                let target = ins.near_branch_target();
                if (f.start..end).contains(&target) {
                    leaders.insert(target);
                }
            }
            if ends_block(flow) && ins.next_ip() < end {
                leaders.insert(ins.next_ip());
            }
        }
        let first = self.insns.len() as InsnId;
        let (mut block, mut block_offset) = (0u32, 0u32);
        for (index, ins) in decoded.iter().enumerate() {
            if leaders.contains(&ins.ip()) {
                block += 1;
                block_offset = 0;
            }
            let mut text = String::new();
            formatter.format(ins, &mut text);
            let at = CodeAddr {
                module: f.module,
                addr: ins.ip(),
            };
            self.by_addr.insert(at, self.insns.len() as InsnId);
            self.insns.push(Insn {
                at,
                len: ins.len() as u8,
                loc: Loc::in_block(id, index as u32, block.max(1), block_offset),
                text,
                flow: flow_of(ins),
                target: matches!(flow_of(ins), Flow::Branch | Flow::Jump | Flow::Call)
                    .then(|| ins.near_branch_target()),
            });
            block_offset += 1;
        }
        self.functions.push(Function {
            module: f.module,
            name: f.name.clone(),
            start: f.start,
            end,
            first,
            count: decoded.len() as u32,
            blocks: block,
        });
    }

    /// All instructions, function by function, in address order within each function.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The instruction `id`.
    pub fn insn(&self, id: InsnId) -> &Insn {
        &self.insns[id as usize]
    }

    /// All functions, by id.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The function with id `id`, if known.
    pub fn function(&self, id: u32) -> Option<&Function> {
        self.functions.get(id as usize)
    }

    /// The instruction starting at `at`, if it is one of the decoded instructions.
    pub fn lookup(&self, at: CodeAddr) -> Option<InsnId> {
        self.by_addr.get(&at).copied()
    }

    /// The instruction info of `at` ([`Loc::UNKNOWN`] for code outside the known functions).
    pub fn loc(&self, at: CodeAddr) -> Loc {
        self.lookup(at)
            .map_or(Loc::UNKNOWN, |id| self.insns[id as usize].loc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f(x) { if (x) x++; return x; }` by hand:
    /// 0: test edi,edi ; 2: je 6 ; 4: inc edi ; 6: mov eax,edi ; 8: call 8+5 ; 13: ret
    const CODE: [u8; 14] = [
        0x85, 0xff, 0x74, 0x02, 0xff, 0xc7, 0x89, 0xf8, 0xe8, 0x00, 0x00, 0x00, 0x00, 0xc3,
    ];

    #[test]
    fn blocks_and_indexes() {
        let p = Program::new(&[FunctionCode {
            module: 3,
            name: "f".into(),
            start: 0x1000,
            bytes: CODE.to_vec(),
        }]);
        let locs: Vec<(u32, u32, u32)> = p
            .insns()
            .iter()
            .map(|i| (i.loc.index, i.loc.block, i.loc.block_offset))
            .collect();
        // Leaders: 0x1000 (entry), 0x1004 (after je), 0x1006 (je target). The call does
        // not end a block.
        assert_eq!(
            locs,
            vec![
                (0, 1, 0),
                (1, 1, 1),
                (2, 2, 0),
                (3, 3, 0),
                (4, 3, 1),
                (5, 3, 2)
            ]
        );
        assert_eq!(p.functions()[0].blocks, 3);
        assert_eq!(p.insn(1).text, "je short 0000000000001006h");
        let at = CodeAddr {
            module: 3,
            addr: 0x1006,
        };
        assert_eq!(p.loc(at), Loc::in_block(0, 3, 3, 0));
        assert_eq!(
            p.loc(CodeAddr {
                module: 3,
                addr: 0x1007
            }),
            Loc::UNKNOWN
        );
        assert_eq!(
            p.loc(CodeAddr {
                module: 2,
                addr: 0x1006
            }),
            Loc::UNKNOWN
        );
    }
}
