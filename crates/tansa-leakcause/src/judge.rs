//! Leak judgement of an allocation site (spec §10, Fig. 5).
//!
//! The seed's minimal criterion is "the site was freed at least once"; alone it would judge
//! every site that ever frees leaking, so, as its implementation advice says, an index is
//! added: the site's outstanding blocks must keep growing. The rule, with its constants:
//!
//! * `no-free-site`: the site was never freed (seed claims 2 and 10: never judged leaking);
//! * `freed`: nothing of it is outstanding;
//! * `leaking`: freed at least once, at least [`MIN_OUTSTANDING`] blocks outstanding, and
//!   over the last [`GROWING_SCANS`] scans the outstanding count never fell and rose in all
//!   (a scan with no allocation at all, as when the program was descheduled, is a pause,
//!   not a cap; a cache that fills up and stays full is `not-growing`);
//! * `not-growing`: otherwise (blocks are held, but not in a growing number).

/// Consecutive rises of the outstanding count that make a site leaking.
pub const GROWING_SCANS: usize = 3;
/// Fewest outstanding blocks of a leaking site.
pub const MIN_OUTSTANDING: u64 = 2;

/// A site's judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Judgement {
    /// Freed at least once, and its outstanding blocks keep growing.
    Leaking,
    /// Nothing outstanding.
    Freed,
    /// Never freed.
    NoFreeSite,
    /// Blocks outstanding, but not a growing number of them.
    NotGrowing,
}

impl Judgement {
    /// The name in reports and JSON (`leaking`, `freed`, `no-free-site`, `not-growing`).
    pub fn name(self) -> &'static str {
        match self {
            Judgement::Leaking => "leaking",
            Judgement::Freed => "freed",
            Judgement::NoFreeSite => "no-free-site",
            Judgement::NotGrowing => "not-growing",
        }
    }
}

/// Judges from the outstanding counts at successive scans (oldest first), the site's
/// frees so far and its outstanding blocks now.
pub fn judge(history: &[u64], frees: u64) -> Judgement {
    let now = history.last().copied().unwrap_or(0);
    if frees == 0 {
        return Judgement::NoFreeSite;
    }
    if now == 0 {
        return Judgement::Freed;
    }
    let n = history.len();
    let recent = &history[n.saturating_sub(GROWING_SCANS + 1)..];
    if now >= MIN_OUTSTANDING
        && n > GROWING_SCANS
        && recent.windows(2).all(|w| w[1] >= w[0])
        && recent.last() > recent.first()
    {
        Judgement::Leaking
    } else {
        Judgement::NotGrowing
    }
}

/// The judgement of a site, scan after scan.
#[derive(Debug, Default, Clone)]
pub struct Judge {
    history: Vec<u64>,
}

impl Judge {
    /// Records one scan (the site's frees so far and outstanding blocks now) and judges.
    pub fn scan(&mut self, frees: u64, outstanding: u64) -> Judgement {
        if self.history.len() > GROWING_SCANS {
            self.history.remove(0);
        }
        self.history.push(outstanding);
        judge(&self.history, frees)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_judgements() {
        assert_eq!(judge(&[1, 2, 3, 4], 0), Judgement::NoFreeSite);
        assert_eq!(judge(&[1, 2, 3, 0], 5), Judgement::Freed);
        assert_eq!(judge(&[1, 2, 3, 4], 5), Judgement::Leaking);
        assert_eq!(judge(&[1, 2, 2, 4], 5), Judgement::Leaking, "a pause");
        assert_eq!(
            judge(&[4, 4, 4, 4], 5),
            Judgement::NotGrowing,
            "a full cache"
        );
        assert_eq!(judge(&[1, 3, 2, 4], 5), Judgement::NotGrowing, "it fell");
        assert_eq!(judge(&[2, 3, 4], 5), Judgement::NotGrowing, "too few scans");
        let mut j = Judge::default();
        let got: Vec<_> = [1, 2, 3, 4, 5, 5, 5, 5]
            .iter()
            .map(|&o| j.scan(1, o))
            .collect();
        assert_eq!(got[3], Judgement::Leaking);
        assert_eq!(
            got[5],
            Judgement::Leaking,
            "one scan without growth is a pause"
        );
        assert_eq!(got[7], Judgement::NotGrowing, "three are a plateau");
    }
}
