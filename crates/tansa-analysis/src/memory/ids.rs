//! Typed ids of what a heap recording numbers: passing a stack id where a session id is due
//! no longer compiles (heaptrack keeps the same discipline in its `util/indices.h`). Each is
//! the `u32` the recording stores, read as is from the file: an id is only a key, never an
//! index into a slice sized by the file's claims.

use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);

        impl From<u32> for $name {
            fn from(v: u32) -> Self {
                $name(v)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id!(
    /// A process image of a recording: the collector numbers sessions from 0 as images
    /// announce themselves (a fork or an exec starts a new one).
    SessionId
);
id!(
    /// A thread stream of one session (one ring; a ring reused by a later thread keeps its
    /// stream number, and the stream's `ThreadStart` records tell the threads apart).
    StreamId
);
id!(
    /// A call stack of one session, numbered from 1 as the agent defines them; 0 means no
    /// stack was recorded.
    StackId
);
id!(
    /// A module as one session numbers it in its `ModuleLoad` records (the registry maps it
    /// to a recording-wide [`crate::memory::model::ModuleIdx`]).
    ModuleId
);
id!(
    /// A set of units one event is charged to, as the aggregator caches them per stack.
    UnitSetId
);

impl StackId {
    /// No stack recorded.
    pub const NONE: StackId = StackId(0);

    /// Whether a stack was recorded.
    pub fn is_some(self) -> bool {
        self.0 != 0
    }

    /// Whether no stack was recorded.
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}
