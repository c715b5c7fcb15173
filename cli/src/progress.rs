//! A spinner per step on a terminal, one plain line per step when piped.

use std::time::Duration;

use console::style;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Clone, Copy)]
pub struct Progress {
    tty: bool,
}

pub struct Step {
    bar: Option<ProgressBar>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Done,
    Skipped,
    Failed,
}

impl Progress {
    /// Spinners only when stdout is a terminal: piped output stays one line per step.
    pub fn stdout() -> Self {
        Progress {
            tty: console::Term::stdout().is_term(),
        }
    }

    pub fn step(&self, message: impl Into<String>) -> Step {
        if !self.tty {
            return Step { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        bar.set_style(
            ProgressStyle::with_template("{spinner:.cyan} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(80));
        Step { bar: Some(bar) }
    }
}

impl Step {
    /// Replaces the spinner with a mark and `message` (or prints the line when piped).
    pub fn finish(self, mark: Mark, message: impl AsRef<str>) {
        let message = message.as_ref();
        match self.bar {
            Some(bar) => {
                let symbol = match mark {
                    Mark::Done => style("✔").green(),
                    Mark::Skipped => style("•").dim(),
                    Mark::Failed => style("✘").red(),
                };
                bar.set_style(
                    ProgressStyle::with_template("{msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.finish_with_message(format!("{symbol} {message}"));
            }
            None => println!("{message}"),
        }
    }
}
