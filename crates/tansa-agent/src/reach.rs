//! Reaching the collector without trusting a descriptor number.
//!
//! The collector hands the target one end of a socket pair through `TANSA_FD`, with the
//! socket's identity (device and inode) in `TANSA_FD_ID`. A program may close that
//! descriptor and reuse its number for a socket of its own, and some launchers close every
//! inherited descriptor before `exec`: sending the agent's announcement to whatever the
//! number now names would put tansa's messages (and descriptors) into the program's socket.
//! So before each announcement the agent checks the identity of the socket it is about to
//! use, and falls back, in order, to:
//!
//! 1. the private socket of the session it inherited (a forked child's parent session: the
//!    collector accepts announcements on any of its sockets), checked the same way;
//! 2. its own earlier connection to the collector's endpoint;
//! 3. a new connection to the endpoint named by `TANSA_ENDPOINT` in the abstract Unix
//!    namespace, whose listening peer must be the collector's process (`SO_PEERCRED`).
//!
//! Nothing here allocates; descriptors are only ever closed when the agent created them.

use core::ffi::c_int;
use core::sync::atomic::{AtomicI32, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sys;

const NAME_CAPACITY: usize = 107;

/// A socket's identity, `(0, 0)` when unknown.
#[derive(Debug)]
struct Identity {
    dev: AtomicU64,
    ino: AtomicU64,
}

impl Identity {
    const fn new() -> Identity {
        Identity {
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
        }
    }

    fn set(&self, id: Option<(u64, u64)>) {
        let (dev, ino) = id.unwrap_or((0, 0));
        self.dev.store(dev, Ordering::Relaxed);
        self.ino.store(ino, Ordering::Release);
    }

    /// Whether `fd` is the socket with this identity.
    fn matches(&self, fd: c_int) -> bool {
        let ino = self.ino.load(Ordering::Acquire);
        ino != 0 && sys::socket_identity(fd) == Some((self.dev.load(Ordering::Relaxed), ino))
    }
}

/// How the agent reaches its collector.
#[derive(Debug)]
pub struct Contact {
    inherited: AtomicI32,
    inherited_id: Identity,
    private_id: Identity,
    conn: AtomicI32,
    conn_id: Identity,
    collector_pid: AtomicU32,
    endpoint: [AtomicU8; NAME_CAPACITY],
    endpoint_len: AtomicUsize,
}

/// The process's contact details.
pub static CONTACT: Contact = Contact {
    inherited: AtomicI32::new(-1),
    inherited_id: Identity::new(),
    private_id: Identity::new(),
    conn: AtomicI32::new(-1),
    conn_id: Identity::new(),
    collector_pid: AtomicU32::new(0),
    endpoint: [const { AtomicU8::new(0) }; NAME_CAPACITY],
    endpoint_len: AtomicUsize::new(0),
};

/// Why no socket to the collector could be found.
#[derive(Debug, Clone, Copy)]
pub enum Unreachable {
    /// The inherited descriptor is not the collector's and there is no endpoint.
    NoEndpoint,
    /// The endpoint refused the connection (another network namespace, or the collector is
    /// gone).
    EndpointRefused,
    /// The endpoint's listener is not the collector's process.
    WrongPeer,
}

impl Unreachable {
    /// A sentence for stderr.
    pub fn text(self) -> &'static [u8] {
        match self {
            Unreachable::NoEndpoint => {
                b"its inherited descriptor was closed or reused and no endpoint is known"
            }
            Unreachable::EndpointRefused => {
                b"its inherited descriptor was closed or reused and the recorder's endpoint \
                  refused the connection (another network namespace, or the recorder is gone)"
            }
            Unreachable::WrongPeer => {
                b"its inherited descriptor was closed or reused and the endpoint is not the \
                  recorder's"
            }
        }
    }
}

fn parse_identity(text: &[u8]) -> Option<(u64, u64)> {
    let colon = text.iter().position(|&b| b == b':')?;
    Some((
        sys::parse_u64(&text[..colon])?,
        sys::parse_u64(&text[colon + 1..])?,
    ))
}

impl Contact {
    /// Reads the contact details from the environment (at initialization).
    pub fn configure(&self, fd: c_int) {
        self.inherited.store(fd, Ordering::Relaxed);
        self.inherited_id
            .set(sys::getenv(c"TANSA_FD_ID").and_then(parse_identity));
        let pid = sys::getenv(c"TANSA_COLLECTOR_PID")
            .and_then(sys::parse_u64)
            .unwrap_or(0);
        self.collector_pid.store(pid as u32, Ordering::Relaxed);
        let name = sys::getenv(c"TANSA_ENDPOINT").unwrap_or(b"");
        let n = if name.len() <= NAME_CAPACITY {
            name.len()
        } else {
            0
        };
        for (slot, &b) in self.endpoint.iter().zip(&name[..n]) {
            slot.store(b, Ordering::Relaxed);
        }
        self.endpoint_len.store(n, Ordering::Release);
    }

    /// Remembers the identity of the current session's private socket, so that a forked
    /// child can recognise it.
    pub fn set_private(&self, fd: c_int) {
        self.private_id.set(sys::socket_identity(fd));
    }

    /// A socket on which to announce a session. `parent_private` is the private socket of
    /// the session a forked child inherited (or -1).
    pub fn socket(&self, parent_private: c_int) -> Result<c_int, Unreachable> {
        let inherited = self.inherited.load(Ordering::Relaxed);
        if self.inherited_id.matches(inherited) {
            return Ok(inherited);
        }
        if parent_private >= 0 && self.private_id.matches(parent_private) {
            return Ok(parent_private);
        }
        let conn = self.conn.load(Ordering::Relaxed);
        if self.conn_id.matches(conn) {
            return Ok(conn);
        }
        self.connect()
    }

    fn connect(&self) -> Result<c_int, Unreachable> {
        let n = self.endpoint_len.load(Ordering::Acquire);
        if n == 0 {
            return Err(Unreachable::NoEndpoint);
        }
        let mut name = [0u8; NAME_CAPACITY];
        for (b, slot) in name.iter_mut().zip(&self.endpoint[..n]) {
            *b = slot.load(Ordering::Relaxed);
        }
        let fd = sys::connect_abstract(&name[..n]).ok_or(Unreachable::EndpointRefused)?;
        let collector = self.collector_pid.load(Ordering::Relaxed);
        if collector == 0 || sys::peer_pid(fd) != Some(collector) {
            sys::close(fd);
            return Err(Unreachable::WrongPeer);
        }
        self.conn.store(fd, Ordering::Relaxed);
        self.conn_id.set(sys::socket_identity(fd));
        Ok(fd)
    }
}
