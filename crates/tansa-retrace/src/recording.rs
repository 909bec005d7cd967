//! Reading the retrace frames of `tansa-format` into the model of this crate.

use tansa_format::retrace::{Addr, Execution, RegionCode};

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
