//! Real side-band records: an event on this thread reports an executable mapping and a
//! rename made by the test, decoded in place from the ring.

use tansa_perf::{
    Event, EventAttr, EventKind, RecordKind, Ring, SampleFormat, SideBand, SoftwareEvent,
};

#[test]
fn mmap2_and_comm_records_of_this_thread() {
    let format = SampleFormat::IP | SampleFormat::TID | SampleFormat::TIME;
    let attr = EventAttr::new(EventKind::Software(SoftwareEvent::TaskClock))
        .sample_period(1_000_000_000)
        .sample_format(format)
        .mmap2(true)
        .comm(true)
        .task(true)
        .sample_id_all(true)
        .disabled(true);
    let event = Event::open_on(&attr, 0, -1).expect("software events on our own thread");
    let mut ring = Ring::new(&event, 16).unwrap();
    event.enable().unwrap();

    // An executable mapping of our own binary, and a new thread name.
    let exe = std::env::current_exe().unwrap();
    let file = std::fs::File::open(&exe).unwrap();
    // SAFETY: mapping 4096 bytes of an open file read-only and executable; nothing
    // reads through the mapping, which is unmapped below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"tansa-sb-test".as_ptr()) };
    event.disable().unwrap();

    let head = ring.head();
    let mut mmaps = Vec::new();
    let mut comms = Vec::new();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    ring.visit(head, |r| {
        if r.kind() == RecordKind::Sample {
            return;
        }
        if let Some((sb, id)) = SideBand::parse(&r, format, true) {
            assert_eq!(id.tid, tid, "the trailer names this thread");
            match sb {
                SideBand::Mmap(m) => mmaps.push((
                    m.addr,
                    m.len,
                    String::from_utf8_lossy(m.filename).into_owned(),
                    m.is_exec(),
                )),
                SideBand::Comm { name, exec, .. } => {
                    comms.push((String::from_utf8_lossy(name).into_owned(), exec))
                }
                _ => {}
            }
        }
    });
    ring.advance(head);
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(addr, 4096) };
    assert!(
        mmaps
            .iter()
            .any(|m| m.0 == addr as u64 && m.1 == 4096 && m.2 == exe.display().to_string() && m.3),
        "{mmaps:?}"
    );
    assert!(
        comms.contains(&("tansa-sb-test".to_string(), false)),
        "{comms:?}"
    );
    // Advanced: a second visit sees nothing.
    let mut again = 0;
    ring.visit(ring.head(), |_| again += 1);
    assert_eq!(again, 0);
}
