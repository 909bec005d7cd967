//! The agent's side of a leak-cause trace request, with the collector run in this test
//! process and a sink of the test's own (no tracer).
//!
//! Its own test binary: a collector in the test process becomes its subreaper and reaps
//! every child that exits, so the children of tests running beside it in one binary were
//! reaped under them (their `wait` failed with `ECHILD`, as two `leak_cause` tests did).

mod common;

use common::*;

/// The test's own sink for [`a_request_the_collector_no_longer_wants_is_withdrawn_at_once`]:
/// no tracer. It asks the agent to trace the site of the first 12,345-byte block, once; when
/// the agent's request is in the slot, it stops tracing the site, as the leak-cause sink
/// does when it has seen enough of a site (nothing takes the request then); and it notes
/// the site's `remaining` when the slot is idle again.
///
/// With `under_another_id`, it lists the site as the leak-cause sink lists a stack that two
/// threads defined each under an id of its own: the entry's `stack` is another id, and the
/// one the agent uses is among the entry's `trace_aliases`.
#[derive(Default)]
struct StopsOnRequest {
    under_another_id: bool,
    /// The stack the agent's request was made for.
    requested: Option<u32>,
    header: Option<tansa_collect::SharedHeader>,
    decoders: std::collections::HashMap<u32, tansa_analysis::memory::merge::StreamDecoder>,
    asked: bool,
    stopped: bool,
    remaining_after: Option<u32>,
}

impl StopsOnRequest {
    fn poll(&mut self) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        use tansa_wire::layout::{TRACE_IDLE, TRACE_REQUESTED};
        let Some(header) = &self.header else { return };
        let h = header.get();
        let state = h.trace.state.load(Acquire);
        if self.asked && !self.stopped && state == TRACE_REQUESTED {
            self.requested = Some(h.trace_stack.load(Acquire));
            let site = &h.trace_sites[0];
            site.remaining.store(0, Release);
            site.stack.store(0, Release);
            h.tracing.fetch_sub(1, AcqRel);
            self.stopped = true;
        } else if self.stopped && self.remaining_after.is_none() && state == TRACE_IDLE {
            self.remaining_after = Some(h.trace_sites[0].remaining.load(Acquire));
        }
    }
}

impl tansa_collect::Sink for StopsOnRequest {
    fn session_started(
        &mut self,
        _: &tansa_format::memory::SessionInfo,
    ) -> Result<(), tansa_collect::CollectError> {
        Ok(())
    }
    fn meta(&mut self, _: u32, _: &[u8]) -> Result<(), tansa_collect::CollectError> {
        Ok(())
    }
    fn thread(
        &mut self,
        session: u32,
        stream: u32,
        bytes: &[u8],
    ) -> Result<(), tansa_collect::CollectError> {
        use std::sync::atomic::Ordering::{AcqRel, Release};
        use tansa_analysis::memory::merge::{EventKind, StreamDecoder};
        let mut site = None;
        self.decoders
            .entry(stream)
            .or_insert_with(|| StreamDecoder::new(tansa_analysis::memory::SessionId(session)))
            .push(bytes, &mut |e| {
                if let EventKind::Alloc {
                    size: 12345, stack, ..
                } = e.kind
                {
                    site.get_or_insert(stack.0);
                }
            });
        if let (Some(stack), false, Some(header)) = (site, self.asked, &self.header) {
            let h = header.get();
            let entry = &h.trace_sites[0];
            entry.range_depth.store(0, Release);
            entry.remaining.store(1, Release);
            if self.under_another_id {
                h.trace_aliases[0][1].store(stack, Release);
                entry.stack.store(stack + 1_000_000, Release);
            } else {
                entry.stack.store(stack, Release);
            }
            h.tracing.fetch_add(1, AcqRel);
            self.asked = true;
        }
        self.poll();
        Ok(())
    }
    fn stream_closed(&mut self, _: u32, _: u32) -> Result<(), tansa_collect::CollectError> {
        Ok(())
    }
    fn session_ended(
        &mut self,
        _: &tansa_format::memory::SessionEnd,
    ) -> Result<(), tansa_collect::CollectError> {
        self.poll();
        Ok(())
    }
    fn session_losses(
        &mut self,
        _: &tansa_format::memory::SessionLosses,
    ) -> Result<(), tansa_collect::CollectError> {
        Ok(())
    }
    fn unrecorded(
        &mut self,
        _: &tansa_format::memory::Unrecorded,
    ) -> Result<(), tansa_collect::CollectError> {
        Ok(())
    }
    fn watermark(&mut self, _: u64) -> Result<(), tansa_collect::CollectError> {
        self.poll();
        Ok(())
    }
    fn tick(
        &mut self,
        _: tansa_format::meta::CalibrationPoint,
    ) -> Result<(), tansa_collect::CollectError> {
        self.poll();
        Ok(())
    }
    fn session_header(&mut self, _: u32, _: u32, header: tansa_collect::SharedHeader) {
        self.header = Some(header);
    }
}

/// The collector stops tracing a site once it has seen enough of it, and its tracer then
/// takes no more requests; an allocation that asked to be traced just before waited for
/// one anyway, half a second by its count, which counted 20 µs sleeps that each took
/// several times that: the program stood still for 2.5 s in 2 runs of 14 of the worked
/// example. The agent now withdraws such a request at once and, the site no longer being
/// traced, does not give the trace back to it (a request withdrawn after the wait does).
///
/// Then again with the site listed under another id of its stack (the sink's
/// `trace_aliases`): it is the site of an allocation under this one, so the agent asks for
/// it, and withdraws it as above. (One test: two collectors in one test process would
/// reap each other's children.)
#[test]
fn a_request_the_collector_no_longer_wants_is_withdrawn_at_once() {
    request_withdrawn(false);
    request_withdrawn(true);
}

fn request_withdrawn(under_another_id: bool) {
    ensure_agent();
    let exe = program("requester", "requester.c", &["-g", "-O1"]);
    let config = tansa_collect::Config {
        leak_cause: true,
        leak_check: false,
        ..collect_config(vec![exe.into_os_string()])
    };
    let mut sink = StopsOnRequest {
        under_another_id,
        ..StopsOnRequest::default()
    };
    let outcome = tansa_collect::record(&config, &mut sink).expect("recorded");
    assert_eq!(
        outcome.exit,
        tansa_format::meta::ExitStatus::Exited { code: 0 },
        "{outcome:?}"
    );
    assert!(sink.asked && sink.stopped, "the agent asked to be traced");
    let requested = sink.requested.expect("a request");
    assert!(requested != 0 && requested < 1_000_000, "{requested}");
    assert_eq!(
        sink.remaining_after,
        Some(0),
        "withdrawn as not wanted, not after the wait"
    );
}
