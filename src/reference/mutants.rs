//! Deliberately broken subset samplers. Each is a plausible mistake in writing the fix; the
//! suite runs every one through the same checks as the fix and must reject each, or the suite
//! itself is too weak to trust its verdict on the fix.

use serde::Serialize;

use crate::reference::filtered::Route;

/// One mistake, applied by [`crate::reference::subset::filter`] in place of the right step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flaw {
    /// Each row keeps k + 1 tokens' worth of values.
    KOffByOne,
    /// K is one bucket too small (half), so rows with k > K lose tokens.
    WindowTooSmall,
    /// top_p is applied to the whole window before top_k.
    TopPBeforeTopK,
    /// The cumsum runs from the largest token down, with stock's `<= 1 - p` rule.
    DescendingCumsum,
    /// `cumsum < 1 - p` instead of `<=`.
    StrictTopP,
    /// The largest token is not protected from the top-p mask.
    NoKeepOne,
    /// Row i uses row i−1's top_k (k rolled by one).
    RolledK,
    /// top_k keeps the first k columns of the window instead of every value ≥ the k-th.
    MaskByPosition,
    /// v1: no tie completion — a tie group at the k-th value past the window's edge is lost.
    NoTieCompletion,
    /// The tie class is completed, but a winning class always yields its first member.
    TieFirstMember,
    /// Pivot path: the pivot one bin step up in each radix pass (`prefix + place + 1`).
    PivotOffByOne,
    /// Pivot path: the mass e computed on `logit − max` scaled by 0.6 (as if before, or with
    /// another, temperature).
    MassBeforeTemperature,
    /// Pivot path: the pivot's tie class dropped (only e > pivot kept).
    PivotTiesDropped,
    /// Pivot path, mixed batch: the row's mass Z taken over its topk(window) only.
    WindowMassForRow,
}

impl Flaw {
    /// Every mutant the suite must reject.
    pub const ALL: [Flaw; 14] = [
        Flaw::KOffByOne,
        Flaw::WindowTooSmall,
        Flaw::TopPBeforeTopK,
        Flaw::DescendingCumsum,
        Flaw::StrictTopP,
        Flaw::NoKeepOne,
        Flaw::RolledK,
        Flaw::MaskByPosition,
        Flaw::NoTieCompletion,
        Flaw::TieFirstMember,
        Flaw::PivotOffByOne,
        Flaw::MassBeforeTemperature,
        Flaw::PivotTiesDropped,
        Flaw::WindowMassForRow,
    ];

    /// A mistake in the pivot path (issue 47) rather than the window path.
    pub fn in_pivot_path(self) -> bool {
        matches!(
            self,
            Flaw::PivotOffByOne | Flaw::MassBeforeTemperature | Flaw::PivotTiesDropped | Flaw::WindowMassForRow
        )
    }

    /// Whether the mistake can change anything for a batch the fix routes to `route`: the
    /// window path's on the window path and on the top_k rows of a mixed pivot batch, the pivot
    /// path's on the pivot path (the window's mass only with top_k rows beside), none on a
    /// fallback to stock.
    pub fn reaches(self, route: Route) -> bool {
        match route {
            Route::Subset { .. } => !self.in_pivot_path(),
            Route::Pivot { window } => window > 0 || (self.in_pivot_path() && self != Flaw::WindowMassForRow),
            Route::Stock | Route::Fallback { .. } => false,
        }
    }

    /// Short name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Flaw::KOffByOne => "k-off-by-one",
            Flaw::WindowTooSmall => "window-too-small",
            Flaw::TopPBeforeTopK => "top-p-before-top-k",
            Flaw::DescendingCumsum => "descending-cumsum",
            Flaw::StrictTopP => "strict-top-p",
            Flaw::NoKeepOne => "no-keep-one",
            Flaw::RolledK => "rolled-k",
            Flaw::MaskByPosition => "mask-by-position",
            Flaw::NoTieCompletion => "no-tie-completion",
            Flaw::TieFirstMember => "tie-first-member",
            Flaw::PivotOffByOne => "pivot-off-by-one",
            Flaw::MassBeforeTemperature => "mass-before-temperature",
            Flaw::PivotTiesDropped => "pivot-ties-dropped",
            Flaw::WindowMassForRow => "window-mass-for-row",
        }
    }

    /// What the mutant gets wrong, in words.
    pub fn description(self) -> &'static str {
        match self {
            Flaw::KOffByOne => "keeps top_k + 1 (off-by-one k)",
            Flaw::WindowTooSmall => "K one bucket too small (K/2)",
            Flaw::TopPBeforeTopK => "applies top_p before top_k",
            Flaw::DescendingCumsum => "cumsum from the largest token down",
            Flaw::StrictTopP => "`cumsum < 1 - p` for `<=`",
            Flaw::NoKeepOne => "drops the keep-at-least-one rule",
            Flaw::RolledK => "uses the previous row's top_k",
            Flaw::MaskByPosition => "top_k by position, not by value (bf16 ties)",
            Flaw::NoTieCompletion => "v1: k-th tie group cut at the window edge",
            Flaw::TieFirstMember => "tie class wins yield its first member",
            Flaw::PivotOffByOne => "top-p pivot one bin step off (prefix + place + 1)",
            Flaw::MassBeforeTemperature => "top-p mass on logits scaled by 0.6 (temperature)",
            Flaw::PivotTiesDropped => "top-p pivot's tie class dropped",
            Flaw::WindowMassForRow => "mixed batch: the topk window's mass taken for Z",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mutant_has_a_distinct_name() {
        let mut names: Vec<&str> = Flaw::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Flaw::ALL.len());
    }

    #[test]
    fn mutants_run_only_where_their_path_runs() {
        let window = Route::Subset { window: 64 };
        assert!(Flaw::KOffByOne.reaches(window) && !Flaw::PivotOffByOne.reaches(window));
        assert!(Flaw::PivotOffByOne.reaches(Route::Pivot { window: 0 }));
        assert!(!Flaw::KOffByOne.reaches(Route::Pivot { window: 0 }));
        assert!(!Flaw::WindowMassForRow.reaches(Route::Pivot { window: 0 }));
        assert!(Flaw::WindowMassForRow.reaches(Route::Pivot { window: 128 }));
        assert!(Flaw::KOffByOne.reaches(Route::Pivot { window: 128 }));
        let fallback = Route::Fallback { reason: crate::reference::filtered::Fallback::RowWithoutTopK };
        assert!(Flaw::ALL.iter().all(|f| !f.reaches(fallback)));
    }
}
