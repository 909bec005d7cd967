//! The terminal: taking it (raw mode, alternate screen on standard error) and giving it
//! back on every way out (return, error, panic), and the loop that reads keys and draws.
//!
//! Raw mode keeps `ISIG`, so Ctrl-C still makes the terminal send SIGINT to the foreground
//! process group, the recorded program included, exactly as without the view (the
//! recorder counts it as it always does). Ctrl-\ and Ctrl-Z are turned off while the view
//! is shown: a SIGQUIT would end the recorder with the terminal left raw, a SIGTSTP would
//! stop it with the terminal taken.

use std::io::{self, BufWriter, IsTerminal, Stderr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tansa_analysis::memory::live::LiveSlot;

use crate::draw::draw;
use crate::state::{Action, SortKey, View};

/// Whether the view holds the terminal (read by the panic hook).
static TAKEN: AtomicBool = AtomicBool::new(false);

/// How the view ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The user closed it (`q`); the recording goes on.
    Closed,
    /// The recorder said the recording is over.
    Done,
}

/// Gives the terminal back: leaves raw mode (restoring the settings it found) and the
/// alternate screen, shows the cursor. Harmless when the terminal was not taken.
fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = crossterm::execute!(io::stderr(), LeaveAlternateScreen, crossterm::cursor::Show);
    }
}

/// The terminal while the view holds it; dropping it gives the terminal back.
#[derive(Debug)]
struct Taken;

impl Taken {
    fn take() -> io::Result<Taken> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        terminal::enable_raw_mode()?;
        TAKEN.store(true, Ordering::SeqCst);
        let taken = Taken;
        keep_interrupt()?;
        crossterm::execute!(io::stderr(), EnterAlternateScreen, crossterm::cursor::Hide)?;
        Ok(taken)
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        restore();
    }
}

/// The terminal crossterm reads keys from (standard input if it is one, else `/dev/tty`).
fn tty() -> io::Result<Option<OwnedFd>> {
    if io::stdin().is_terminal() {
        Ok(None)
    } else {
        Ok(Some(std::fs::File::open("/dev/tty")?.into()))
    }
}

/// In raw mode: signals from the keyboard again, but only Ctrl-C's (see the module's
/// documentation).
fn keep_interrupt() -> io::Result<()> {
    use rustix::termios::{LocalModes, OptionalActions, SpecialCodeIndex, tcgetattr, tcsetattr};
    let own = tty()?;
    let stdin = io::stdin();
    let fd = match &own {
        Some(fd) => fd.as_fd(),
        None => stdin.as_fd(),
    };
    let mut t = tcgetattr(fd)?;
    t.local_modes.insert(LocalModes::ISIG);
    // 0 is `_POSIX_VDISABLE` on Linux: no key sends these signals.
    t.special_codes[SpecialCodeIndex::VQUIT] = 0;
    t.special_codes[SpecialCodeIndex::VSUSP] = 0;
    tcsetattr(fd, OptionalActions::Now, &t)?;
    Ok(())
}

/// Clears the screen and has the next drawing paint every cell. (`Terminal::clear` would
/// ask the terminal where its cursor is and fail on one that does not answer; a
/// full-screen view has no cursor position to keep.)
fn repaint<B: ratatui::backend::Backend>(term: &mut Terminal<B>) -> Result<(), B::Error> {
    let size = term.size()?;
    term.resize(ratatui::layout::Rect::new(0, 0, size.width, size.height))
}

/// Shows the live view of the recording of `command` on standard error until `done` is set
/// (the recording is over) or the user closes it, sorted by `sort` until a key changes it;
/// takes snapshots and notes from `slot`.
/// The terminal is given back on every way out.
///
/// # Errors
///
/// The terminal's: it could not be put in raw mode, drawn on or read.
pub fn run(
    command: String,
    sort: SortKey,
    slot: &LiveSlot,
    done: &AtomicBool,
) -> io::Result<Ended> {
    let _taken = Taken::take()?;
    let backend = CrosstermBackend::new(BufWriter::new(io::stderr()));
    let mut term: Terminal<CrosstermBackend<BufWriter<Stderr>>> = Terminal::new(backend)?;
    repaint(&mut term)?;
    let mut view = View::new(command);
    view.set_sort(sort);
    let mut dirty = true;
    loop {
        if done.load(Ordering::SeqCst) {
            return Ok(Ended::Done);
        }
        if let Some(s) = slot.take() {
            view.update(s);
            dirty = true;
        }
        for n in slot.take_notes() {
            view.note(n);
            dirty = true;
        }
        if dirty {
            term.draw(|f| draw(f, &view))?;
            dirty = false;
            // Test only: a view that fails, to check that the terminal is given back and
            // the recording goes on.
            if std::env::var_os("TANSA_TEST_LIVE_PANIC").is_some() && view.snapshot().is_some() {
                panic!("TANSA_TEST_LIVE_PANIC is set: the live view panics");
            }
        }
        if !event::poll(Duration::from_millis(100))? {
            continue;
        }
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let action = match k.code {
                    KeyCode::Esc => Action::Quit,
                    // Ctrl-C reaches here only if the terminal did not send SIGINT.
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                        let _ = rustix::process::kill_current_process_group(
                            rustix::process::Signal::INT,
                        );
                        Action::None
                    }
                    KeyCode::Char(_) if k.modifiers.contains(KeyModifiers::CONTROL) => Action::None,
                    KeyCode::Char(c) => view.key(c),
                    _ => Action::None,
                };
                match action {
                    Action::None => {}
                    Action::Draw => dirty = true,
                    Action::Redraw => {
                        repaint(&mut term)?;
                        dirty = true;
                    }
                    Action::Quit => return Ok(Ended::Closed),
                }
            }
            Event::Resize(..) => {
                term.autoresize()?;
                dirty = true;
            }
            _ => {}
        }
    }
}
