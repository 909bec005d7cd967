//! The data the reconstruction works on.
//!
//! * A [`CodeAddr`] names an instruction independent of where the process loaded it: a
//!   module (an index the recording defines) and the address in that module's file.
//! * A [`FunctionCode`] is the code of one function, as stored in a recording, from which
//!   [`crate::annotate`] derives each instruction's [`Loc`].
//! * A [`Loc`] is the seed's *instruction info* (命令情報): function, instruction index in
//!   the function, basic-block number and offset within the block. The scores read only it.
//! * A *partial sequence* (部分命令列) is the list of samples taken during one execution of
//!   the region, in time order: `Vec<CodeAddr>` as recorded, `Vec<Loc>` once annotated.

use serde::{Deserialize, Serialize};

/// An instruction address relative to its module's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CodeAddr {
    /// Module index (defined by the recording).
    pub module: u32,
    /// Address in the module's file (ELF virtual address, before load bias).
    pub addr: u64,
}

/// The code of one function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCode {
    /// Module index.
    pub module: u32,
    /// Function name (demangled where possible).
    pub name: String,
    /// Address of its first byte in the module's file.
    pub start: u64,
    /// Its machine code (x86-64).
    pub bytes: Vec<u8>,
}

/// Function id of an instruction outside every known function.
pub const UNKNOWN_FUNCTION: u32 = u32::MAX;

/// Instruction info: where an instruction sits, in the terms the scores use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Loc {
    /// Function id ([`UNKNOWN_FUNCTION`] for unknown code).
    pub function: u32,
    /// Instruction index within the function, from 0 (the seed's in-function offset).
    pub index: u32,
    /// Basic-block number within the function, from 1 (0 when not annotated).
    pub block: u32,
    /// Instruction index within the basic block, from 0.
    pub block_offset: u32,
}

impl Loc {
    /// Unknown code: scores as a name mismatch against everything, itself included.
    pub const UNKNOWN: Loc = Loc {
        function: UNKNOWN_FUNCTION,
        index: 0,
        block: 0,
        block_offset: 0,
    };

    /// Instruction `index` of `function`, without block information.
    pub const fn in_function(function: u32, index: u32) -> Loc {
        Loc {
            function,
            index,
            block: 0,
            block_offset: 0,
        }
    }

    /// Instruction `index` of `function`, at `block_offset` in block `block`.
    pub const fn in_block(function: u32, index: u32, block: u32, block_offset: u32) -> Loc {
        Loc {
            function,
            index,
            block,
            block_offset,
        }
    }

    /// Whether both are in the same known function.
    #[inline]
    pub fn same_function(&self, other: &Loc) -> bool {
        self.function == other.function && self.function != UNKNOWN_FUNCTION
    }
}
