//! Messages on the control sockets.
//!
//! The collector passes one end of a `SOCK_SEQPACKET` socket pair to the target through
//! the `TANSA_FD` environment variable; every process of the tree inherits it. An agent
//! announces its session with a [`Hello`] of kind [`HELLO_SESSION`] carrying two file
//! descriptors (`SCM_RIGHTS`): the memfd of segment 0 and one end of a private socket pair
//! whose other end the agent keeps (close-on-exec). The collector learns that the process
//! image is gone when that private socket reports end-of-file. Later segments are
//! announced on the private socket with a [`Hello`] of kind [`HELLO_SEGMENT`] carrying the
//! segment's memfd. A child the process started with `posix_spawn` or `vfork` (which run no
//! `pthread_atfork` handler, so the child's agent, if any, is the only other word of it) is
//! named on the private socket with a [`HELLO_SPAWNED`].
//!
//! A program may close the inherited descriptor and reuse its number (or a launcher may
//! close every descriptor before `exec`), so an agent never trusts the number alone: it
//! compares the descriptor's device and inode with [`ENV_FD_ID`] before sending anything.
//! When the check fails it announces its session on another control socket of the
//! collector: the private socket it inherited from its parent (a forked child), or a
//! connection to the collector's listening socket in the abstract Unix namespace, named by
//! [`ENV_ENDPOINT`] (whose peer it checks to be the collector's process). The collector
//! accepts a [`HELLO_SESSION`] on any of its control sockets.

/// Magic number of a [`Hello`] (`"TNSA"`).
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"TNSA");
/// A new session: segment 0 memfd + private socket.
pub const HELLO_SESSION: u32 = 1;
/// A further segment of an existing session: its memfd.
pub const HELLO_SEGMENT: u32 = 2;
/// A child the session's process started with `posix_spawn` or `vfork` (on the private
/// socket): the collector hears of the child although it may never run the agent.
/// `segment_index` holds the child's pid, `reserved` how it was started ([`Spawn`]); the
/// program (at most [`SPAWNED_PATH_MAX`] bytes) follows the message.
pub const HELLO_SPAWNED: u32 = 3;

/// How a [`HELLO_SPAWNED`] child was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Spawn {
    /// `posix_spawn` or `posix_spawnp`.
    PosixSpawn = 0,
    /// `vfork`.
    Vfork = 1,
    /// `vfork`, and the child ended (`_exit`) without executing a program: it ran nothing
    /// that could have been recorded, and it is no one's unrecorded process.
    VforkNoExec = 2,
}

impl Spawn {
    /// The function's name.
    pub fn name(self) -> &'static str {
        match self {
            Spawn::PosixSpawn => "posix_spawn",
            Spawn::Vfork | Spawn::VforkNoExec => "vfork",
        }
    }

    /// From a message's field (unknown values read as `posix_spawn`).
    pub fn from_u32(v: u32) -> Spawn {
        match v {
            1 => Spawn::Vfork,
            2 => Spawn::VforkNoExec,
            _ => Spawn::PosixSpawn,
        }
    }
}

/// Longest program path a [`HELLO_SPAWNED`] message carries (longer ones are cut).
pub const SPAWNED_PATH_MAX: usize = 256;

/// Name of the environment variable holding the control socket's descriptor number.
pub const ENV_FD: &str = "TANSA_FD";
/// Name of the environment variable selecting online mode (`1`).
pub const ENV_ONLINE: &str = "TANSA_ONLINE";
/// Name of the environment variable enabling free-site stacks (`1`, the default) or not (`0`).
pub const ENV_FREE_STACKS: &str = "TANSA_FREE_STACKS";
/// Name of the environment variable choosing the clock (`tsc` or `monotonic`).
pub const ENV_CLOCK: &str = "TANSA_CLOCK";
/// Name of the environment variable giving the ring size in KiB (a power of two).
pub const ENV_RING_KB: &str = "TANSA_RING_KB";
/// Name of the environment variable giving the maximum number of frames per stack.
pub const ENV_MAX_FRAMES: &str = "TANSA_MAX_FRAMES";
/// Name of the environment variable that turns on CPU sampling at this many samples per
/// second of each thread's CPU time (the agent then records samples instead of heap events).
pub const ENV_SAMPLE_HZ: &str = "TANSA_SAMPLE_HZ";
/// Sampled heap mode: record allocations sampled every this many bytes on average (a
/// Poisson process over allocated bytes), and the releases of sampled blocks only.
pub const ENV_SAMPLE_RATE: &str = "TANSA_SAMPLE_RATE";
/// Name of the environment variable holding the collector's process id.
pub const ENV_COLLECTOR_PID: &str = "TANSA_COLLECTOR_PID";
/// Name of the environment variable selecting the leak check at exit (`1`).
pub const ENV_LEAK_CHECK: &str = "TANSA_LEAK_CHECK";
/// Name of the environment variable selecting leak-cause mode (`1`).
pub const ENV_LEAK_CAUSE: &str = "TANSA_LEAK_CAUSE";
/// Name of the environment variable holding the identity of the [`ENV_FD`] socket,
/// `DEV:INODE` in decimal.
pub const ENV_FD_ID: &str = "TANSA_FD_ID";
/// Name of the environment variable holding the name of the collector's listening socket in
/// the abstract Unix namespace (without the leading NUL).
pub const ENV_ENDPOINT: &str = "TANSA_ENDPOINT";

/// Name of the environment variable holding the directory in which an agent creates its
/// shared segments as files (durable recordings: what it wrote survives a killed collector).
/// Without it, or when a file cannot be created there, segments are memfds.
pub const ENV_SEGMENT_DIR: &str = "TANSA_SEGMENT_DIR";

/// The fixed-size announcement message.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// [`HELLO_MAGIC`].
    pub magic: u32,
    /// [`crate::PROTOCOL_VERSION`].
    pub version: u32,
    /// [`HELLO_SESSION`], [`HELLO_SEGMENT`] or [`HELLO_SPAWNED`].
    pub kind: u32,
    /// Process id of the sender.
    pub pid: u32,
    /// Index of the segment being announced ([`HELLO_SPAWNED`]: the child's pid).
    pub segment_index: u32,
    /// Rings in the segment.
    pub ring_count: u32,
    /// Ring data size of the segment.
    pub ring_data_size: u32,
    /// Reserved, zero ([`HELLO_SPAWNED`]: how the child was started, [`Spawn`]).
    pub reserved: u32,
}

impl Hello {
    /// Size of the message on the wire.
    pub const SIZE: usize = core::mem::size_of::<Hello>();

    /// The message as bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        let fields = [
            self.magic,
            self.version,
            self.kind,
            self.pid,
            self.segment_index,
            self.ring_count,
            self.ring_data_size,
            self.reserved,
        ];
        for (chunk, v) in out.chunks_exact_mut(4).zip(fields) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// A [`HELLO_SPAWNED`] message from `sender` about its child `child`.
    pub fn spawned(sender: u32, child: u32, how: Spawn) -> Hello {
        Hello {
            magic: HELLO_MAGIC,
            version: crate::PROTOCOL_VERSION,
            kind: HELLO_SPAWNED,
            pid: sender,
            segment_index: child,
            ring_count: 0,
            ring_data_size: 0,
            reserved: how as u32,
        }
    }

    /// Parses a message; `None` if it is too short or its magic is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Option<Hello> {
        if bytes.len() < Self::SIZE {
            return None;
        }
        let f = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let h = Hello {
            magic: f(0),
            version: f(4),
            kind: f(8),
            pid: f(12),
            segment_index: f(16),
            ring_count: f(20),
            ring_data_size: f(24),
            reserved: f(28),
        };
        (h.magic == HELLO_MAGIC).then_some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            magic: HELLO_MAGIC,
            version: crate::PROTOCOL_VERSION,
            kind: HELLO_SEGMENT,
            pid: 1234,
            segment_index: 2,
            ring_count: 8,
            ring_data_size: 1 << 20,
            reserved: 0,
        };
        assert_eq!(Hello::from_bytes(&h.to_bytes()), Some(h));
        assert_eq!(Hello::from_bytes(&h.to_bytes()[..10]), None);
        let mut bad = h.to_bytes();
        bad[0] ^= 1;
        assert_eq!(Hello::from_bytes(&bad), None);
        // A spawned child's message, followed by its program: the fixed part parses alone.
        for how in [Spawn::PosixSpawn, Spawn::Vfork, Spawn::VforkNoExec] {
            let s = Hello::spawned(10, 11, how);
            let mut bytes = s.to_bytes().to_vec();
            bytes.extend_from_slice(b"/bin/true");
            let back = Hello::from_bytes(&bytes).unwrap();
            assert_eq!(
                (back.kind, back.pid, back.segment_index),
                (HELLO_SPAWNED, 10, 11)
            );
            assert_eq!(Spawn::from_u32(back.reserved), how);
        }
    }
}
