//! The live view of `tansa record --online` on a terminal: while the program runs, the
//! per-unit table (sorted by net, max, allocated or calls; by library, function or thread)
//! and the live heap over time, redrawn from the snapshots the online sink leaves in a
//! [`LiveSlot`](tansa_analysis::memory::live::LiveSlot).
//!
//! * [`state`]: the view's state and what each key does (pure, tested without a terminal);
//! * [`draw`]: rendering it into a ratatui frame (tested on ratatui's `TestBackend`);
//! * [`term`]: taking the terminal, the key and drawing loop, giving the terminal back.
//!
//! Closing the view (`q`) closes only the view: the recording goes on, and the recorder
//! prints its report when the program ends, as without a view.

pub mod draw;
pub mod state;
pub mod term;

pub use state::{Action, SortKey, View};
pub use term::{Ended, run};

#[cfg(test)]
mod tests;
