//! A duration in words, as progress lines and the pytest heartbeat say it: vocabulary, so the
//! domain (`upkeep/pytest.rs`) and `report/progress.rs` share it without an arrow up.

/// `75 s`, `3 min 5 s`.
pub fn words(seconds: f64) -> String {
    let s = seconds.round() as u64;
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {} s", s / 60, s % 60)
    }
}
