//! Drawing the view into a ratatui frame: header, per-unit table, heap sparkline, the newest
//! note, help line.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table};
use tansa_analysis::memory::live::LiveSnapshot;
use tansa_analysis::memory::report::MemoryReport;

use crate::state::{SortKey, View};

/// The help line.
/// (Each sort key is its column's initial: net, max, allocated, calls, temporary.)
pub const HELP: &str =
    "q close view (the program goes on)  n/m/a/c/t sort by column  u unit  r redraw  ^C interrupt";

fn bytes(b: i64) -> String {
    tansa_render::bytes(b)
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// Draws `view` over the whole frame.
pub fn draw(frame: &mut Frame<'_>, view: &View) {
    let note = view.last_note().is_some();
    // The sparkline gets a quarter of a tall screen.
    let heap_rows = (frame.area().height / 4).clamp(6, 14);
    let [header, table, heap, notes, help] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(4),
        Constraint::Length(heap_rows),
        Constraint::Length(u16::from(note)),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(header_lines(view)), header);
    match (view.snapshot(), view.report()) {
        (Some(s), Some(r)) => {
            draw_table(frame, table, view, r);
            draw_heap(frame, heap, s);
        }
        _ => frame.render_widget(
            Paragraph::new("waiting for the first events...")
                .block(Block::default().borders(Borders::ALL)),
            table,
        ),
    }
    if let Some(n) = view.last_note() {
        frame.render_widget(Paragraph::new(format!("tansa: {n}")).yellow(), notes);
    }
    frame.render_widget(Paragraph::new(HELP).dim(), help);
}

/// The two header lines: what is recorded, then the counts (lost events in red, never
/// hidden).
fn header_lines(view: &View) -> Vec<Line<'static>> {
    let title = Line::from(vec![
        Span::styled("tansa record --online", Style::new().bold()),
        Span::raw(format!("  {}", view.command())),
    ]);
    let (Some(s), Some(r)) = (view.snapshot(), view.report()) else {
        return vec![title, Line::raw("starting")];
    };
    let mut spans = vec![Span::raw(format!(
        "{}  elapsed {}  events {}  ",
        pids(r),
        seconds(s.elapsed_ms),
        r.events
    ))];
    let lost = r
        .processes
        .iter()
        .fold(0u64, |n, p| n.saturating_add(p.lost_events));
    if lost > 0 {
        spans.push(Span::styled(
            format!("lost {lost} events: the figures are incomplete"),
            Style::new().red().add_modifier(Modifier::BOLD),
        ));
    } else {
        spans.push(Span::raw("lost 0"));
    }
    let improper: u64 = r.improper.iter().map(|i| i.count).sum();
    if improper > 0 {
        spans.push(Span::styled(
            format!("  improper frees/reallocs {improper}"),
            Style::new().yellow(),
        ));
    }
    vec![title, Line::from(spans)]
}

/// `pid 1234`, or `pids 1234, 1240 (+3)` for a tree of processes.
fn pids(r: &MemoryReport) -> String {
    let mut pids: Vec<u32> = Vec::new();
    for p in &r.processes {
        if !pids.contains(&p.pid) {
            pids.push(p.pid);
        }
    }
    match pids.as_slice() {
        [] => format!("pid {}", r.process.pid),
        [one] => format!("pid {one}"),
        many => {
            let shown: Vec<String> = many.iter().take(3).map(u32::to_string).collect();
            let more = many.len().saturating_sub(3);
            let more = if more > 0 {
                format!(" (+{more})")
            } else {
                String::new()
            };
            format!("pids {}{more}", shown.join(", "))
        }
    }
}

fn draw_table(frame: &mut Frame<'_>, area: Rect, view: &View, r: &MemoryReport) {
    let rows = view.rows();
    let sort = view.sort();
    let head = |name: &'static str, key: SortKey| {
        let text = if sort == key {
            format!("{name} v")
        } else {
            name.to_string()
        };
        let cell = Cell::from(Line::from(text).right_aligned());
        if sort == key {
            cell.bold().underlined()
        } else {
            cell.bold()
        }
    };
    let header = Row::new(vec![
        Cell::from(r.by).bold(),
        head("net", SortKey::Net),
        head("max", SortKey::Max),
        head("allocated", SortKey::Allocated),
        head("calls", SortKey::Calls),
        head("temporary", SortKey::Temporary),
    ]);
    let shown = usize::from(area.height.saturating_sub(3));
    let title = if rows.len() > shown {
        format!(
            " by {}: {} units ({} shown), sorted by {} ",
            r.by,
            rows.len(),
            shown,
            sort.name()
        )
    } else {
        format!(
            " by {}: {} units, sorted by {} ",
            r.by,
            rows.len(),
            sort.name()
        )
    };
    let body = rows.iter().take(shown).map(|row| {
        let s = &row.stats;
        Row::new(vec![
            Cell::from(row.unit.clone()),
            Cell::from(Line::from(bytes(s.net_bytes)).right_aligned()),
            Cell::from(Line::from(bytes(s.max_bytes)).right_aligned()),
            Cell::from(
                Line::from(bytes(i64::try_from(s.allocated_bytes).unwrap_or(i64::MAX)))
                    .right_aligned(),
            ),
            Cell::from(Line::from(s.calls.total().to_string()).right_aligned()),
            Cell::from(Line::from(s.temporary_allocations.to_string()).right_aligned()),
        ])
    });
    let table = Table::new(
        body,
        [
            Constraint::Min(20),
            Constraint::Length(11),
            Constraint::Length(11),
            Constraint::Length(11),
            Constraint::Length(10),
            Constraint::Length(11),
        ],
    )
    .header(header)
    .block(Block::default().borders(Borders::ALL).title(title));
    frame.render_widget(table, area);
}

fn draw_heap(frame: &mut Frame<'_>, area: Rect, s: &LiveSnapshot) {
    let points = s.heap.points();
    let now = points.last().map_or(0, |p| p.bytes);
    let peak = points.iter().map(|p| p.bytes).max().unwrap_or(0);
    let span = points.last().map_or(0, |p| p.ms);
    let title = format!(
        " heap over time: {} now, peak {}, over {} ",
        bytes(now),
        bytes(peak),
        seconds(span)
    );
    let block = Block::default().borders(Borders::ALL).title(title);
    let width = usize::from(block.inner(area).width);
    let data = s.heap.columns(width);
    frame.render_widget(Sparkline::default().block(block).data(&data).cyan(), area);
}
