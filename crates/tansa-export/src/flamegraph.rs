//! Flame graphs: interactive SVGs (search, click to zoom) drawn by inferno from collapsed
//! stacks, each frame coloured by its library, the seed-000 unit: one hue per library,
//! shades within it per function.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Write;

use inferno::flamegraph::color::{Color, PaletteMap};
use inferno::flamegraph::{Direction, Options as InfernoOptions};
use tansa_analysis::profile::Profile;

use crate::{ExportError, collapsed, weight_unit};

/// Options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Value index (see [`crate::weight_index`]).
    pub value: usize,
    /// Title.
    pub title: String,
    /// Subtitle (what the widths are).
    pub subtitle: Option<String>,
    /// Icicle: roots at the top, stacks growing down.
    pub icicle: bool,
    /// Reversed (callers) view: innermost frames at the root, their callers above.
    pub reverse: bool,
    /// Start each stack with its process.
    pub by_process: bool,
    /// Start each stack with its MPI rank.
    pub by_rank: bool,
    /// The recording's warnings (lost events, processes not recorded, estimates, ...):
    /// the first is shown under the subtitle, with how many more there are, so that a
    /// flame graph passed on does not hide that its figures are incomplete.
    pub warnings: Vec<String>,
}

/// Longest warning text shown in a flame graph (the line is as wide as the graph).
const WARNING_CHARS: usize = 100;

/// The subtitle, with the first warning, if any.
fn subtitle(options: &Options) -> Option<String> {
    let Some(first) = options.warnings.first() else {
        return options.subtitle.clone();
    };
    let mut shown: String = first.chars().take(WARNING_CHARS).collect();
    if shown.len() < first.len() {
        shown.push('…');
    }
    let more = match options.warnings.len() - 1 {
        0 => String::new(),
        n => format!(" (and {n} more warning(s): see `tansa report`)"),
    };
    Some(match &options.subtitle {
        Some(s) => format!("{s}. Warning: {shown}{more}"),
        None => format!("Warning: {shown}{more}"),
    })
}

/// Hues that stay apart from each other, for libraries (degrees).
const HUES: [f64; 12] = [
    28.0, 205.0, 120.0, 280.0, 0.0, 170.0, 50.0, 235.0, 330.0, 90.0, 260.0, 190.0,
];

fn hash_of(s: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    s.hash(&mut h);
    h.finish()
}

/// The colour of a frame: its library's hue, a shade of it per function.
fn colour(frame: &str, hue_of: &mut BTreeMap<String, f64>) -> Color {
    let module = Profile::module_of(frame);
    let n = hue_of.len();
    let hue = *hue_of
        .entry(module.to_string())
        .or_insert_with(|| HUES[n % HUES.len()] + 7.0 * (n / HUES.len()) as f64);
    let shade = (hash_of(frame) % 1000) as f64 / 1000.0;
    hsl(hue, 0.55 + 0.2 * shade, 0.62 + 0.12 * shade)
}

fn hsl(h: f64, s: f64, l: f64) -> Color {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = (h.rem_euclid(360.0)) / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    Color {
        r: byte(r),
        g: byte(g),
        b: byte(b),
    }
}

fn inferno_options<'a>(options: &Options, count_name: &str) -> InfernoOptions<'a> {
    let mut o = InfernoOptions::default();
    o.title = options.title.clone();
    o.subtitle = subtitle(options);
    o.count_name = count_name.to_string();
    o.name_type = "Function:".to_string();
    o.deterministic = true;
    o.direction = if options.icicle {
        Direction::Inverted
    } else {
        Direction::Straight
    };
    o.reverse_stack_order = options.reverse;
    o
}

fn count_name(profile: &Profile, value: usize) -> &'static str {
    match weight_unit(profile, value) {
        "bytes" => "bytes",
        "nanoseconds" => "ns",
        _ => match profile.value_types.get(value).map(|v| v.name) {
            Some("samples") => "samples",
            _ => "allocations",
        },
    }
}

/// Largest sum of the values drawn: inferno adds them up in a `usize`. Larger values (only a
/// damaged or crafted recording has them) are scaled down in proportion.
const MAX_TOTAL: u128 = 1 << 52;

/// The factor (numerator, denominator) that brings `totals` under [`MAX_TOTAL`].
fn scale_for(totals: &[u128]) -> (u128, u128) {
    let largest = totals.iter().copied().max().unwrap_or(0);
    if largest > MAX_TOTAL {
        (MAX_TOTAL, largest)
    } else {
        (1, 1)
    }
}

fn scaled(v: i64, (num, den): (u128, u128)) -> u128 {
    u128::try_from(v).unwrap_or(0) * num / den
}

/// The stacks of `profile` with a positive value.
fn positive_stacks(profile: &Profile, options: &Options) -> Vec<(String, i64)> {
    let mut stacks = collapsed::stacks(
        profile,
        collapsed::Options {
            value: options.value,
            by_process: options.by_process,
            by_rank: options.by_rank,
        },
    );
    stacks.retain(|(_, v)| *v > 0);
    stacks
}

fn total(stacks: &[(String, i64)]) -> u128 {
    stacks
        .iter()
        .map(|(_, v)| u128::try_from(*v).unwrap_or(0))
        .sum()
}

/// Draws the flame graph of `profile`.
pub fn write(profile: &Profile, options: &Options, out: &mut dyn Write) -> Result<(), ExportError> {
    let stacks = positive_stacks(profile, options);
    let factor = scale_for(&[total(&stacks)]);
    let mut palette = PaletteMap::default();
    let mut hues = BTreeMap::new();
    for (stack, _) in &stacks {
        for frame in stack.split(';') {
            if palette.get(frame).is_none() {
                palette.insert(frame, colour(frame, &mut hues));
            }
        }
    }
    let lines: Vec<String> = stacks
        .iter()
        .map(|(s, v)| format!("{s} {}", scaled(*v, factor)))
        .collect();
    if lines.is_empty() {
        return write_empty(options, out);
    }
    let mut o = inferno_options(options, count_name(profile, options.value));
    o.palette_map = Some(&mut palette);
    inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), out)?;
    Ok(())
}

/// What is drawn when no stack has a value of the weight (a program that freed everything,
/// drawn by live bytes; a recording without allocations): the title and that there is
/// nothing to draw. inferno refuses an empty input.
fn write_empty(options: &Options, out: &mut dyn Write) -> Result<(), ExportError> {
    let text = |s: &str| quick_xml::escape::escape(s).into_owned();
    let subtitle = subtitle(options).as_deref().map(text).unwrap_or_default();
    write!(
        out,
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"110\" viewBox=\"0 0 1200 110\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n\
         <rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#eeeeee\"/>\n\
         <text x=\"600\" y=\"28\" font-family=\"Verdana\" font-size=\"17\" \
         text-anchor=\"middle\">{}</text>\n\
         <text x=\"600\" y=\"54\" font-family=\"Verdana\" font-size=\"12\" \
         text-anchor=\"middle\" fill=\"#a0a0a0\">{subtitle}</text>\n\
         <text x=\"600\" y=\"86\" font-family=\"Verdana\" font-size=\"14\" \
         text-anchor=\"middle\">{EMPTY}</text>\n</svg>\n",
        text(&options.title),
    )?;
    Ok(())
}

/// The note of a flame graph with nothing to draw.
pub const EMPTY: &str = "nothing to draw: no stack has a value of this weight";

/// Draws a differential flame graph: the shape (widths) of `after`, each frame red where
/// it grew from `before` and blue where it shrank, deeper for larger changes. Both use
/// the same value index.
pub fn write_diff(
    before: &Profile,
    after: &Profile,
    options: &Options,
    out: &mut dyn Write,
) -> Result<(), ExportError> {
    if before.kind != after.kind {
        return Err(ExportError::KindMismatch);
    }
    let a = positive_stacks(before, options);
    let b = positive_stacks(after, options);
    let factor = scale_for(&[total(&a), total(&b)]);
    let a: BTreeMap<String, i64> = a.into_iter().collect();
    let b: BTreeMap<String, i64> = b.into_iter().collect();
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let lines: Vec<String> = keys
        .into_iter()
        .map(|k| {
            format!(
                "{k} {} {}",
                scaled(a.get(k).copied().unwrap_or(0), factor),
                scaled(b.get(k).copied().unwrap_or(0), factor)
            )
        })
        .collect();
    if lines.is_empty() {
        return write_empty(options, out);
    }
    let mut o = inferno_options(options, count_name(after, options.value));
    inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_of_one_library_share_a_hue_and_libraries_differ() {
        let mut hues = BTreeMap::new();
        let a1 = colour("liba.so!f", &mut hues);
        let a2 = colour("liba.so!g", &mut hues);
        let b = colour("libb.so!f", &mut hues);
        assert_eq!(hues.len(), 2);
        assert_ne!(hues["liba.so"], hues["libb.so"]);
        // Shades of one hue: the dominant channel is the same.
        let dominant = |c: Color| {
            let m = c.r.max(c.g).max(c.b);
            if m == c.r {
                0
            } else if m == c.g {
                1
            } else {
                2
            }
        };
        assert_eq!(dominant(a1), dominant(a2));
        assert_ne!((a1.r, a1.g, a1.b), (b.r, b.g, b.b));
    }

    #[test]
    fn huge_values_are_scaled_under_what_inferno_can_add() {
        let totals = [u128::from(u64::MAX) * 3];
        let f = scale_for(&totals);
        assert!(scaled(i64::MAX, f) <= MAX_TOTAL);
        assert_eq!(scale_for(&[1000]), (1, 1));
        assert_eq!(scaled(-5, (1, 1)), 0);
    }

    #[test]
    fn hsl_primaries() {
        let red = hsl(0.0, 1.0, 0.5);
        assert_eq!((red.r, red.g, red.b), (255, 0, 0));
        let blue = hsl(240.0, 1.0, 0.5);
        assert_eq!((blue.r, blue.g, blue.b), (0, 0, 255));
    }
}
