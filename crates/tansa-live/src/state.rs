//! The view's state: the newest snapshot, the unit shown, the sort key, the notes; and what
//! each key does. Pure: the terminal loop (`term`) feeds it keys and snapshots, `draw`
//! renders it.

use tansa_analysis::memory::live::LiveSnapshot;
/// The column the table is sorted by (largest first): keys `n` (net), `m` (max), `a`
/// (allocated), `c` (calls), `t` (temporary allocations).
pub use tansa_analysis::memory::report::SortKey;
use tansa_analysis::memory::report::{MemoryReport, Stats};

/// How many notes are kept (the newest is shown).
const NOTES: usize = 8;

/// What a key asks of the terminal loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// Draw again.
    Draw,
    /// Clear the screen and draw everything again (the program's own output may have
    /// written over the view).
    Redraw,
    /// Close the view (the recording goes on).
    Quit,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The unit, as the report tables name it.
    pub unit: String,
    /// Its figures.
    pub stats: Stats,
}

/// The state of the live view.
#[derive(Debug)]
pub struct View {
    command: String,
    snapshot: Option<LiveSnapshot>,
    /// The unit shown, by name (kept across snapshots).
    unit: Option<&'static str>,
    sort: SortKey,
    notes: Vec<String>,
}

impl View {
    /// A view of the recording of `command` (as people typed it).
    pub fn new(command: String) -> View {
        View {
            command,
            snapshot: None,
            unit: None,
            sort: SortKey::Net,
            notes: Vec::new(),
        }
    }

    /// The command recorded.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Takes a newer snapshot.
    pub fn update(&mut self, snapshot: LiveSnapshot) {
        self.snapshot = Some(snapshot);
    }

    /// The newest snapshot, if one came.
    pub fn snapshot(&self) -> Option<&LiveSnapshot> {
        self.snapshot.as_ref()
    }

    /// Adds a note for people (the newest is shown).
    pub fn note(&mut self, text: String) {
        if self.notes.len() == NOTES {
            self.notes.remove(0);
        }
        self.notes.push(text);
    }

    /// The newest note.
    pub fn last_note(&self) -> Option<&str> {
        self.notes.last().map(String::as_str)
    }

    /// The sort key.
    pub fn sort(&self) -> SortKey {
        self.sort
    }

    /// Sorts by `key` (as its key would).
    pub fn set_sort(&mut self, key: SortKey) {
        self.sort = key;
    }

    /// The report of the unit shown: the one chosen with `u` if the snapshot has it, else
    /// the recording's own unit.
    pub fn report(&self) -> Option<&MemoryReport> {
        let s = self.snapshot.as_ref()?;
        self.unit
            .and_then(|u| s.reports.iter().find(|r| r.by == u))
            .or_else(|| s.reports.first())
    }

    /// Names of the units the view can show, in the order `u` goes through them.
    pub fn units(&self) -> Vec<&'static str> {
        self.snapshot
            .as_ref()
            .map(|s| s.reports.iter().map(|r| r.by).collect())
            .unwrap_or_default()
    }

    /// The table's rows: the shown report's units, largest first by the sort key, then by
    /// name.
    pub fn rows(&self) -> Vec<Row> {
        let Some(r) = self.report() else {
            return Vec::new();
        };
        let mut rows: Vec<Row> = r
            .units
            .iter()
            .map(|u| Row {
                unit: tansa_render::memory::unit_label(u),
                stats: u.stats,
            })
            .collect();
        let key = self.sort;
        rows.sort_by(|a, b| {
            key.figure(&b.stats)
                .cmp(&key.figure(&a.stats))
                .then_with(|| a.unit.cmp(&b.unit))
        });
        rows
    }

    /// What key `c` does: `n`, `m`, `a`, `c`, `t` sort; `u` shows the next unit (`U` the
    /// previous one); `r` redraws; `q` quits the view.
    pub fn key(&mut self, c: char) -> Action {
        let sort = match c {
            'n' => Some(SortKey::Net),
            'm' => Some(SortKey::Max),
            'a' => Some(SortKey::Allocated),
            'c' => Some(SortKey::Calls),
            't' => Some(SortKey::Temporary),
            _ => None,
        };
        if let Some(sort) = sort {
            self.sort = sort;
            return Action::Draw;
        }
        match c {
            'u' | 'U' => {
                let units = self.units();
                if units.len() < 2 {
                    return Action::None;
                }
                let current = self.report().map_or(units[0], |r| r.by);
                let i = units.iter().position(|&u| u == current).unwrap_or(0);
                let next = if c == 'u' {
                    (i + 1) % units.len()
                } else {
                    (i + units.len() - 1) % units.len()
                };
                self.unit = Some(units[next]);
                Action::Draw
            }
            'r' => Action::Redraw,
            'q' => Action::Quit,
            _ => Action::None,
        }
    }
}
