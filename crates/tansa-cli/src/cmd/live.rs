//! `record --online`'s live view, wired: the view (`tansa-live`) runs on its own thread,
//! the collector on this one feeds it snapshots through a slot, and the recorder's notes go
//! to the view while it holds the terminal.

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tansa_analysis::memory::live::LiveSlot;
use tansa_analysis::memory::{By, Config as MemoryConfig, MemoryReport};
use tansa_collect::online::{LiveFeed, record_online};
use tansa_collect::{Config as CollectConfig, EventHandler, Outcome};

/// How often the view gets a snapshot.
const EVERY: Duration = Duration::from_millis(250);

/// [`record_online`] with the live view on standard error until the recording is over (or
/// the user closes it); the terminal is given back before this returns.
pub fn record_online_live(
    config: &CollectConfig,
    analysis: MemoryConfig,
    allocation_functions: &[String],
    command: &[OsString],
    sort: tansa_live::SortKey,
) -> anyhow::Result<(Outcome, MemoryReport)> {
    let slot = Arc::new(LiveSlot::default());
    let done = Arc::new(AtomicBool::new(false));
    let viewing = Arc::new(AtomicBool::new(true));
    let mut config = config.clone();
    config.events = Some(EventHandler(Arc::new({
        let (slot, viewing) = (Arc::clone(&slot), Arc::clone(&viewing));
        move |e| {
            if viewing.load(Ordering::SeqCst) {
                slot.note(e.to_string());
            } else {
                eprintln!("tansa: {e}");
            }
        }
    })));
    let shown: Vec<String> = command
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let view = std::thread::Builder::new()
        .name("live view".into())
        .spawn({
            let (slot, done, viewing) =
                (Arc::clone(&slot), Arc::clone(&done), Arc::clone(&viewing));
            move || {
                let ended = tansa_live::run(shown.join(" "), sort, &slot, &done);
                viewing.store(false, Ordering::SeqCst);
                match &ended {
                    Ok(tansa_live::Ended::Closed) => eprintln!(
                        "tansa: live view closed; recording until the command ends, then the \
                         report"
                    ),
                    Ok(tansa_live::Ended::Done) => {}
                    Err(e) => eprintln!("tansa: the live view stopped: {e}"),
                }
                for n in slot.take_notes() {
                    eprintln!("tansa: {n}");
                }
            }
        })
        .context("cannot start the live view")?;
    let feed = LiveFeed {
        units: vec![By::Library, By::Function, By::Thread],
        every: EVERY,
        slot: Arc::clone(&slot),
    };
    let recorded = record_online(&config, analysis, allocation_functions, Some(feed));
    done.store(true, Ordering::SeqCst);
    // A panic of the view was reported by the panic hook, which gave the terminal back.
    let _ = view.join();
    for n in slot.take_notes() {
        eprintln!("tansa: {n}");
    }
    Ok(recorded?)
}
