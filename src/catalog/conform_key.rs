//! A fix's `conform:` key: the conformance suite's features (its report's rows, e.g. `min_p`)
//! that the fix's bug shows in. `conform`'s table names the fixes beside each feature from it,
//! and `lint` holds every fix of the `default` profile to naming at least one, so that a
//! correctness fix is always tied to the suite's evidence for it.

use super::catalog::Catalog;
use super::finding::{Finding, LintReport};

/// The fixes whose `conform:` names `feature`, in catalogue order.
pub fn fixes_for<'c>(catalog: &'c Catalog, feature: &str) -> Vec<&'c str> {
    catalog
        .fixes
        .iter()
        .filter(|f| f.manifest.conform.iter().any(|c| c == feature))
        .map(|f| f.manifest.name.as_str())
        .collect()
}

/// `lint`'s check: every fix of the `default` profile (with what it includes) names a feature,
/// where the catalogue has a conformance suite (`fixes/_support/conform.py`) to name one of; no
/// fix names an empty one or one twice.
pub fn lint(catalog: &Catalog, report: &mut LintReport) {
    let suite = std::path::Path::new(super::SUPPORT_DIR).join("conform.py");
    let default = if catalog.files.files.contains_key(&suite) {
        catalog.profile_fixes("default").unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut clean = true;
    for fix in &catalog.fixes {
        let manifest = fix.dir.join("fix.yaml");
        let text = catalog.files.text(&manifest).unwrap_or_default();
        let file =
            |needle: &str| format!("{}:{}", catalog.files.display(&manifest), super::manifest::line_of(text, needle));
        let names = &fix.manifest.conform;
        let mut problems = Vec::new();
        if names.is_empty() && default.contains(&fix.manifest.name) {
            problems.push((
                file("name:"),
                format!(
                    "{} is in the default profile but names no conformance feature: add `conform: [FEATURE]` \
                     (the rows of the conformance suite, `conform`, its bug shows in; fixes/README.md)",
                    fix.manifest.name
                ),
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if name.trim().is_empty() {
                problems.push((file("conform:"), format!("{}: conform: has an empty feature name", fix.manifest.name)));
            } else if names[..i].contains(name) {
                problems.push((file("conform:"), format!("{}: conform: names `{name}` twice", fix.manifest.name)));
            }
        }
        clean &= problems.is_empty();
        report.findings.extend(problems.into_iter().map(|(file, message)| Finding {
            file,
            code: super::finding::Code::ConformKey,
            message,
        }));
    }
    if clean && !default.is_empty() {
        let named = default.len();
        report
            .checked
            .push(format!("conform: every fix of the default profile ({named}) names its conformance feature"));
    }
}
