//! `gaudi-fixes bench`: stock vs subset vs a one-pass floor, timed in one run (feature
//! `reference`). This file checks the flags, runs [`crate::reference::bench`] with a progress
//! line and hands the result to [`crate::report::bench`].

use anyhow::Result;

use crate::exit_status::ExitStatus;
use crate::settings::{BenchArgs, Settings};

/// Run the benchmark, or say how to get it when built without the `reference` feature.
pub fn run(global: &Settings, args: &BenchArgs) -> Result<ExitStatus> {
    #[cfg(feature = "reference")]
    {
        bench(global, args)
    }
    #[cfg(not(feature = "reference"))]
    {
        let _ = (global, args);
        Err(crate::commands::reference_missing("bench"))
    }
}

#[cfg(feature = "reference")]
fn bench(global: &Settings, args: &BenchArgs) -> Result<ExitStatus> {
    use anyhow::bail;

    use crate::reference::bench::{run_bench, Settings};
    use crate::reference::{subset, Release};
    use crate::report::bench as report;

    let release = Release::parse(&args.release)?;
    if args.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    if args.batch.iter().any(|&b| b < 1) || args.vocab.iter().any(|&v| v < 2048) {
        bail!("--batch must be ≥ 1 and --vocab ≥ 2048");
    }
    let Some(window) = subset::window_for(args.top_k).filter(|_| args.top_k >= 1) else {
        bail!("--top-k must be in 1..=1024 (above that the fix keeps the stock path: nothing to compare)");
    };
    if !(args.top_p > 0.0 && args.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1]");
    }
    let torch_threads = crate::reference::torch_threads(args.threads)?;
    let settings = Settings { release, repeats: args.repeats, top_k: args.top_k, top_p: args.top_p, window };
    // Every batch size at the first vocabulary, then the next vocabulary.
    let shapes: Vec<(i64, i64)> =
        args.vocab.iter().flat_map(|&vocab| args.batch.iter().map(move |&batch| (batch, vocab))).collect();
    let mut progress = report::Progress::new(global);
    let result = run_bench(&settings, &shapes, torch_threads, &mut |batch, vocab| progress.shape(batch, vocab));
    progress.clear();
    report::print(global.into(), &result)?;
    Ok(ExitStatus::Applied)
}
