//! Waiting for what a running `leasehold` writes: a line on its stdout or stderr.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::Instant;

use super::cli::{POLL, READY_TIMEOUT, Running};

impl Running {
    /// Polls leasehold's stderr until a complete line contains `text`, and returns that
    /// line; panics if leasehold exits first or nothing comes within `READY_TIMEOUT`.
    #[track_caller]
    pub fn wait_for_stderr(&mut self, text: &str) -> String {
        let file = self.stderr.clone();
        self.wait_for_output(&file, 0, text)
    }

    /// As [`wait_for_stderr`](Self::wait_for_stderr), on stdout.
    #[track_caller]
    pub fn wait_for_stdout(&mut self, text: &str) -> String {
        self.wait_for_stdout_after(0, text)
    }

    /// As [`wait_for_stdout`](Self::wait_for_stdout), among the lines after the first
    /// `skip` (what was there before the change the test waits for).
    #[track_caller]
    pub fn wait_for_stdout_after(&mut self, skip: usize, text: &str) -> String {
        let file = self.stdout.clone();
        self.wait_for_output(&file, skip, text)
    }

    /// The complete lines on stdout so far.
    pub fn stdout_lines(&self) -> usize {
        complete_lines(&fs::read_to_string(&self.stdout).unwrap_or_default()).count()
    }

    #[track_caller]
    fn wait_for_output(&mut self, file: &Path, skip: usize, text: &str) -> String {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let output = fs::read_to_string(file).unwrap_or_default();
            if let Some(line) = complete_lines(&output)
                .skip(skip)
                .find(|l| l.contains(text))
            {
                return line.to_owned();
            }
            if let Some(done) = self.try_finish() {
                panic!("leasehold exited before it wrote {text:?} to {file:?}: {done:?}");
            }
            assert!(
                Instant::now() < deadline,
                "leasehold wrote no line with {text:?} to {file:?} within {READY_TIMEOUT:?}\n{}",
                self.output_so_far()
            );
            thread::sleep(POLL);
        }
    }
}

/// The lines of `output` that are complete: the last one may still be being written.
fn complete_lines(output: &str) -> std::str::Lines<'_> {
    output
        .rsplit_once('\n')
        .map_or("", |(lines, _)| lines)
        .lines()
}
