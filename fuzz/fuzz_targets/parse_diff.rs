//! `patch::parse::parse` on arbitrary UTF-8: an error or a patch, never a panic; and a parsed
//! patch printed back parses to the same patch.

#![no_main]

use std::path::Path;

use gaudi_fixes::patch::parse::{parse, print, without_positions};
use gaudi_fixes::patch::HunkLine;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(patch) = parse(text, Path::new("fuzz.patch")) else { return };
    // A line whose text itself ends in `\r` cannot survive a CRLF-tolerant line format (the
    // printed `\r\n` loses it); every other patch must round-trip.
    let trailing_cr =
        patch.files.iter().flat_map(|f| &f.hunks).flat_map(|h| &h.lines).any(|l| HunkLine::text(l).ends_with('\r'));
    if trailing_cr {
        return;
    }
    let printed = print(&patch);
    let again = parse(&printed, Path::new("printed.patch"))
        .unwrap_or_else(|e| panic!("printed patch does not parse: {e:#}\n{printed}"));
    assert_eq!(without_positions(again), without_positions(patch), "round trip changed the patch:\n{printed}");
});
