//! Progress on stderr for long runs (`conform`, `matrix`, `equiv`, `bench`). On a terminal (human
//! format, not quiet) an `indicatif` bar or spinner; with [`Progress::or_lines`], elsewhere
//! (a CI log) plain lines: one per new step, and a timed line whenever none was printed for
//! [`LINE_EVERY`], so a log is never silent for longer — what is done of the total, the
//! command's own count (differences so far), the time taken and about how long is left.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The longest a log goes without a progress line (off a terminal, [`Progress::or_lines`]).
pub const LINE_EVERY: Duration = Duration::from_secs(8);

/// The indicator; each command adds its own "what now" methods on top of [`Progress::draw`].
pub struct Progress {
    bar: Option<ProgressBar>,
    lines: Option<Lines>,
}

impl Progress {
    /// Progress for this run's output settings: drawn on a terminal, nothing elsewhere.
    pub fn new(output: impl Into<super::Output>) -> Progress {
        let bar = super::progress_allowed(output.into()).then(|| spinner("{spinner} {msg} ({elapsed})"));
        Progress { bar, lines: None }
    }

    /// Like [`Progress::new`], but off a terminal (human format, not quiet) progress is printed
    /// on stderr as lines, at least every [`LINE_EVERY`], so a CI log of a long run is never
    /// silent. `what` starts every line (`conform`, `matrix`).
    pub fn or_lines(output: impl Into<super::Output>, what: &str) -> Progress {
        let output = output.into();
        if super::progress_allowed(output) {
            let bar = spinner("{spinner} {prefix}: {msg} ({elapsed})");
            bar.set_prefix(what.to_string());
            return Progress { bar: Some(bar), lines: None };
        }
        let lines = (output.format == super::Format::Human && !output.quiet).then(|| Lines::start(what));
        Progress { bar: None, lines }
    }

    /// A new step: the bar's message; off a terminal, a line of its own when it differs from the
    /// last step printed.
    pub fn draw(&mut self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(line.to_string());
        }
        if let Some(lines) = &self.lines {
            lines.step(line);
        }
    }

    /// From now on, count `total` `unit`s (`schedules`, `cells`): the bar gets a length, and
    /// the lines say `done/total unit` and about how long is left.
    pub fn set_total(&mut self, total: u64, unit: &'static str) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_style(counted_style(unit));
            bar.reset_eta();
        }
        if let Some(lines) = &self.lines {
            lines.update(|s| {
                s.total = Some((total, unit));
                s.step.clear();
                s.counting_since = None;
                s.announce = true;
            });
        }
    }

    /// `done` of the total are done; `detail` (e.g. `2 differences`) is shown beside the count.
    /// `left`: the time still needed, when the caller knows it better than the rate measured
    /// here (from the first count on). The first count after [`Progress::set_total`] is printed
    /// at once.
    pub fn set_done(&mut self, done: u64, detail: &str, left: Option<Duration>) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(detail.to_string());
        }
        if let Some(lines) = &self.lines {
            lines.update(|s| {
                s.done = done;
                s.detail = detail.to_string();
                s.left = left;
                if s.counting_since.is_none() {
                    s.counting_since = Some((Instant::now(), done));
                }
                if std::mem::take(&mut s.announce) {
                    super::stderr_line(s.line());
                    s.printed = Instant::now();
                }
            });
        }
    }

    /// Erase the bar before the report is printed; stop the timed lines.
    pub fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if let Some(lines) = self.lines.take() {
            lines.stop();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

fn spinner(template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn counted_style(unit: &str) -> ProgressStyle {
    let template =
        format!("{{prefix}}: [{{bar:30}}] {{pos}}/{{len}} {unit}, {{msg}} ({{elapsed}}, about {{eta}} left)");
    ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> ")
}

/// What the timed lines know.
struct State {
    what: String,
    step: String,
    done: u64,
    total: Option<(u64, &'static str)>,
    detail: String,
    /// When counting started, and what was done then (the rate is measured from there).
    counting_since: Option<(Instant, u64)>,
    /// The caller's estimate of the time left, when it has one.
    left: Option<Duration>,
    /// Print the next count at once (the first since counting started).
    announce: bool,
    started: Instant,
    printed: Instant,
    last_step: String,
    stopped: bool,
}

impl State {
    fn line(&self) -> String {
        let elapsed = self.started.elapsed();
        match self.total {
            Some((total, unit)) => {
                let detail = if self.detail.is_empty() { String::new() } else { format!(", {}", self.detail) };
                let left = match (self.left, self.counting_since) {
                    (Some(left), _) => format!(", about {} left", crate::duration::words(left.as_secs_f64())),
                    (None, Some((since, from))) if self.done > from && total >= self.done => {
                        let per = since.elapsed().as_secs_f64() / (self.done - from) as f64;
                        format!(", about {} left", crate::duration::words((total - self.done) as f64 * per))
                    }
                    _ => String::new(),
                };
                let step = if self.step.is_empty() { String::new() } else { format!("; {}", self.step) };
                let elapsed = crate::duration::words(elapsed.as_secs_f64());
                format!("{}: {}/{total} {unit}{detail}{step} ({elapsed}{left})", self.what, self.done)
            }
            None => format!("{}: {} ({})", self.what, self.step, crate::duration::words(elapsed.as_secs_f64())),
        }
    }
}

/// Timed lines: a thread prints the state whenever nothing was printed for [`LINE_EVERY`].
struct Lines {
    shared: Arc<(Mutex<State>, Condvar)>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Lines {
    fn start(what: &str) -> Lines {
        let now = Instant::now();
        let state = State {
            what: what.to_string(),
            step: "starting".into(),
            done: 0,
            total: None,
            detail: String::new(),
            counting_since: None,
            left: None,
            announce: false,
            started: now,
            printed: now,
            last_step: String::new(),
            stopped: false,
        };
        let shared = Arc::new((Mutex::new(state), Condvar::new()));
        let ticking = Arc::clone(&shared);
        let ticker = std::thread::spawn(move || {
            let (lock, wake) = &*ticking;
            let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
            while !state.stopped {
                let due = LINE_EVERY.saturating_sub(state.printed.elapsed());
                if due.is_zero() {
                    super::stderr_line(state.line());
                    state.printed = Instant::now();
                    continue;
                }
                state = wake.wait_timeout(state, due).unwrap_or_else(|e| e.into_inner()).0;
            }
        });
        Lines { shared, ticker: Some(ticker) }
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut state);
    }

    fn step(&self, step: &str) {
        let mut state = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        state.step = step.to_string();
        if state.last_step != step {
            state.last_step = step.to_string();
            super::stderr_line(state.line());
            state.printed = Instant::now();
        }
    }

    fn stop(mut self) {
        self.update(|s| s.stopped = true);
        self.shared.1.notify_all();
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_line_says_done_of_total_the_detail_and_the_time_left() {
        let now = Instant::now();
        let ago = |s| now - Duration::from_secs(s);
        let state = State {
            what: "conform".into(),
            step: String::new(),
            done: 30,
            total: Some((200, "schedules")),
            detail: "2 differences".into(),
            counting_since: Some((ago(20), 10)),
            left: None,
            announce: false,
            started: ago(65),
            printed: now,
            last_step: String::new(),
            stopped: false,
        };
        // 20 schedules in 20 s: 170 left take about 170 s.
        assert_eq!(state.line(), "conform: 30/200 schedules, 2 differences (1 min 5 s, about 2 min 50 s left)");
        let told = State { left: Some(Duration::from_secs(30)), ..state };
        assert_eq!(told.line(), "conform: 30/200 schedules, 2 differences (1 min 5 s, about 30 s left)");
        let before = State { total: None, step: "importing vLLM".into(), ..told };
        assert_eq!(before.line(), "conform: importing vLLM (1 min 5 s)");
    }
}
