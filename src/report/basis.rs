//! The words of a fix's [`Basis`]: how its verdict was reached, as people read it. The plan
//! gives the basis as data; the cases with something to say (a verdict the run changed, or one
//! reached on top of fixes undone since) are written here, into the report's `message`, for
//! every format alike (see [`super::advice::written_out`]).

use crate::plan::{Basis, FixReport};

/// The sentence `report`'s basis says, when it says one: it takes the place of the judge's
/// `message` (for a fix absent from the trees found, it follows it). Its `{0}`, … are the
/// report's advice, filled in afterwards.
pub fn sentence(report: &FixReport) -> Option<String> {
    Some(match &report.basis {
        Basis::OnChain | Basis::OwnChain | Basis::AsItIs | Basis::UnderSuccessors { .. } => return None,
        Basis::OnUndone { fixes } => format!(
            "applied on top of {}, which {} not applied in the tree (undone since?): `{{0}}` applies {} under it",
            fixes.join(", "),
            are(fixes),
            them(fixes),
        ),
        Basis::RevertedOver { fixes } => format!(
            "applied on top of {}, which {} not applied in the tree: reverted over {} (in memory), which stay{} not applied",
            fixes.join(", "),
            are(fixes),
            them(fixes),
            if fixes.len() == 1 { "s" } else { "" },
        ),
        Basis::NeverApplied => "drifted, but no hunk of it reads applied and no provenance record says gaudi-fixes \
                                applied it: there is nothing of it to revert"
            .to_string(),
        Basis::AbsentFromFoundTrees => format!(
            "{}; nothing of it is applied in the trees found, so there is nothing to revert",
            report.message.as_deref().unwrap_or("a tree it needs was not found")
        ),
        Basis::Conflict { file, with } => {
            let others: Vec<String> = with
                .iter()
                .map(|e| if e.path == *file { format!("`{}`", e.fix) } else { format!("`{}` (as {})", e.fix, e.path) })
                .collect();
            format!(
                "conflict: {file} is also patched by {}, applied before `{}` in after: order, and its hunks do not apply on top of that; select one of them, or make one patch the other's result",
                others.join(" and "),
                report.name
            )
        }
        Basis::PredecessorsNotSelected { fixes } => format!(
            "its patch is made on top of the fixes it comes after ({}), and those not applied yet are not selected: its context is not there; apply them together: {{0}}",
            fixes.join(", "),
        ),
        Basis::UnderUnselected => {
            "applied, but a fix outside this selection was applied on top of it; revert that one with it".to_string()
        }
    })
}

fn are(fixes: &[String]) -> &'static str {
    if fixes.len() == 1 {
        "is"
    } else {
        "are"
    }
}

fn them(fixes: &[String]) -> &'static str {
    if fixes.len() == 1 {
        "it"
    } else {
        "them"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Kind;
    use crate::plan::FixState;

    fn report(basis: Basis, message: Option<&str>) -> FixReport {
        FixReport {
            name: "fix-b".into(),
            kind: Kind::Correctness,
            state: FixState::NotApplied,
            variant: None,
            action: None,
            message: message.map(str::to_string),
            reason: None,
            files: Vec::new(),
            basis,
            advice: Vec::new(),
        }
    }

    /// The judge's sentence stands unless the basis says more; a fix absent from the trees
    /// found keeps it (which tree) and says the rest after it; the others replace it.
    #[test]
    fn a_basis_says_its_sentence_in_place_of_the_judges_or_after_it() {
        assert_eq!(sentence(&report(Basis::OnChain, Some("judged"))), None);
        assert_eq!(sentence(&report(Basis::UnderSuccessors { fixes: vec!["fix-c".into()] }, None)), None);
        assert_eq!(
            sentence(&report(Basis::AbsentFromFoundTrees, Some("needs the vllm tree"))).unwrap(),
            "needs the vllm tree; nothing of it is applied in the trees found, so there is nothing to revert"
        );
        assert_eq!(
            sentence(&report(Basis::UnderUnselected, Some("judged"))).unwrap(),
            "applied, but a fix outside this selection was applied on top of it; revert that one with it"
        );
        let two = vec!["fix-a".to_string(), "fix-z".to_string()];
        assert_eq!(
            sentence(&report(Basis::OnUndone { fixes: two.clone() }, None)).unwrap(),
            "applied on top of fix-a, fix-z, which are not applied in the tree (undone since?): `{0}` applies them under it"
        );
        assert_eq!(
            sentence(&report(Basis::RevertedOver { fixes: two }, None)).unwrap(),
            "applied on top of fix-a, fix-z, which are not applied in the tree: reverted over them (in memory), which stay not applied"
        );
    }
}
