//! A progress line on stderr while sizes run (`[size 12/24] 16777216 B`), for a person
//! watching a terminal. Nothing is written when stderr is not a terminal, so logs and
//! pipes see only the table.
//!
//! The process that prints the table owns the line: every piece of the table goes
//! through [`Progress::print`], which clears the line first and redraws it after, so
//! the two never mix on the screen.

use std::io::{IsTerminal as _, Write as _};

use crate::output;

/// Clears the current terminal line.
const CLEAR: &str = "\r\x1b[K";

/// The progress of one sweep.
pub struct Progress {
    sizes: Vec<usize>,
    /// Rows printed so far.
    done: usize,
    /// Whether the line is on the screen.
    shown: bool,
}

impl Progress {
    /// A progress line over `sizes`, or `None` when stderr is not a terminal.
    pub fn on_terminal(sizes: &[usize]) -> Option<Progress> {
        std::io::stderr().is_terminal().then(|| Progress {
            sizes: sizes.to_vec(),
            done: 0,
            shown: false,
        })
    }

    /// Prints table text to stdout: the header, a row or the footer. Each row (a line
    /// that is not a `#` comment) moves the line on to the next size.
    pub fn print(&mut self, text: &str) {
        self.clear();
        output::print(text);
        self.done += text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .count();
        if let Some(size) = self.sizes.get(self.done) {
            let line = format!("\r[size {}/{}] {size} B", self.done + 1, self.sizes.len());
            write_stderr(&line);
            self.shown = true;
        }
    }

    fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            write_stderr(CLEAR);
        }
    }
}

impl Drop for Progress {
    /// Leaves the terminal clean however the run ends.
    fn drop(&mut self) {
        self.clear();
    }
}

fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}
