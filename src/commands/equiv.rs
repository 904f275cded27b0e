//! `gaudi-fixes equiv`: the distribution-equivalence suite (feature `reference`). This file
//! checks the flags, runs [`crate::reference::suite`] with a progress line and hands the
//! result to [`crate::report::equiv`].

use anyhow::Result;

use crate::exit_status::ExitStatus;
use crate::settings::{EquivArgs, Settings};

/// Run the suite, or say how to get it when built without the `reference` feature.
pub fn run(global: &Settings, args: &EquivArgs) -> Result<ExitStatus> {
    #[cfg(feature = "reference")]
    {
        suite(global, args)
    }
    #[cfg(not(feature = "reference"))]
    {
        let _ = (global, args);
        Err(crate::commands::reference_missing("equiv"))
    }
}

#[cfg(feature = "reference")]
fn suite(global: &Settings, args: &EquivArgs) -> Result<ExitStatus> {
    use crate::reference::suite::{run_suite, Verdict};
    use crate::report::equiv as report;

    let config = config(args)?;
    let threads = crate::reference::torch_threads(Some(args.threads))?;
    if let Some(dir) = &args.emit_vectors {
        let emitted = crate::reference::vectors::emit(dir, config.release, config.seed)?;
        report::print_emitted(global.into(), &emitted)?;
        return Ok(ExitStatus::Applied);
    }
    let mut progress = report::Progress::new(global);
    let result = run_suite(&config, threads, &mut |step| progress.step(step));
    progress.clear();
    report::print(global.into(), &result)?;
    Ok(match result.verdict {
        Verdict::Equivalent => ExitStatus::Applied,
        Verdict::NotEquivalent | Verdict::SuiteBroken => ExitStatus::NotApplied,
    })
}

/// Check the flags before any work.
#[cfg(feature = "reference")]
fn config(args: &EquivArgs) -> Result<crate::reference::suite::Config> {
    use anyhow::bail;

    use crate::reference::cases::Plan;
    use crate::reference::Release;

    let release = Release::parse(&args.release)?;
    if args.batch < 1 {
        bail!("--batch must be at least 1");
    }
    if args.vocab.is_empty() || args.vocab.iter().any(|&v| v < 2048) {
        bail!("--vocab sizes must be at least 2048 (the largest window, 1024, needs room for ties)");
    }
    if args.draws < 100 {
        bail!("--draws must be at least 100 for a chi-square with bins of 10 expected draws");
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        bail!("--alpha must be in (0, 1)");
    }
    if args.calibration_runs < 100 {
        bail!("--calibration-runs must be at least 100 to measure a false-alarm rate against a 1% limit");
    }
    if args.power_runs < 20 {
        bail!("--power-runs must be at least 20 to measure a power against a 95% requirement");
    }
    Ok(crate::reference::suite::Config {
        release,
        plan: Plan { rows: args.batch, vocabs: args.vocab.clone(), per_config: args.cases, seed: args.seed },
        fixture_vocab: args.vocab[0] as usize,
        draws: args.draws,
        alpha: args.alpha,
        calibration_runs: args.calibration_runs,
        power_runs: args.power_runs,
        ulp_bound: args.ulp_bound,
        seed: args.seed,
    })
}
