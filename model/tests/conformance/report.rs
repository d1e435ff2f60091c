//! What the replay explored, printed past the test harness's capture so that CI's log
//! shows it: traces and steps per configuration, replies per kind.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Instant;

use crate::replay::Explored;

/// The totals of one backend's run.
pub struct Report {
    backend: String,
    seed: u64,
    started: Instant,
    /// Per configuration: traces, steps, steps that reached the server, spoiled traces.
    configs: Vec<(&'static str, [usize; 4])>,
    /// Per configuration, how long its traces took (wall clock), once they all ran.
    took: BTreeMap<&'static str, std::time::Duration>,
    replies: BTreeMap<String, usize>,
    actions: BTreeMap<&'static str, usize>,
}

impl Report {
    pub fn new(backend: &str, seed: u64) -> Report {
        Report {
            backend: backend.to_owned(),
            seed,
            started: Instant::now(),
            configs: Vec::new(),
            took: BTreeMap::new(),
            replies: BTreeMap::new(),
            actions: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, config: &'static str, explored: Explored) {
        if self.configs.last().is_none_or(|(name, _)| *name != config) {
            self.configs.push((config, [0; 4]));
        }
        let Some((_, counts)) = self.configs.last_mut() else {
            return;
        };
        let server: usize = explored.replies.values().sum();
        counts[0] += 1;
        counts[1] += explored.steps;
        counts[2] += server;
        counts[3] += usize::from(explored.spoiled);
        for (kind, n) in explored.replies {
            *self.replies.entry(kind).or_default() += n;
        }
        for (action, n) in explored.actions {
            *self.actions.entry(action).or_default() += n;
        }
    }

    /// Configuration `config`'s traces all ran, `took` long.
    pub fn took(&mut self, config: &'static str, took: std::time::Duration) {
        self.took.insert(config, took);
    }

    fn total(&self, i: usize) -> usize {
        self.configs.iter().map(|(_, c)| c[i]).sum()
    }

    pub fn print(&self) {
        let mut text = format!(
            "conformance on {} (seed {:#x}): {} traces, {} steps, {} replies equal to the \
             model's, {} traces spoiled by timing, in {:.1?}\n",
            self.backend,
            self.seed,
            self.total(0),
            self.total(1),
            self.total(2),
            self.total(3),
            self.started.elapsed()
        );
        for (name, [traces, steps, server, spoiled]) in &self.configs {
            let took = self.took.get(name).copied().unwrap_or_default();
            text += &format!(
                "  {name}: {traces} traces, {steps} steps, {server} replies, {spoiled} spoiled, \
                 in {took:.1?}\n"
            );
        }
        let list = |map: Vec<(String, usize)>| {
            map.into_iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let replies = self.replies.iter().map(|(k, n)| (k.clone(), *n)).collect();
        let actions = self
            .actions
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect();
        text += &format!(
            "  replies: {}\n  actions: {}\n",
            list(replies),
            list(actions)
        );
        let _ = std::io::stderr().write_all(text.as_bytes());
    }

    /// Spoiled traces are the machine's, not the code's; but a run where many are spoiled
    /// compared too little to pass.
    pub fn assert_few_spoiled(&self) {
        let (traces, spoiled) = (self.total(0), self.total(3));
        assert!(
            spoiled * 10 <= traces,
            "{spoiled} of {traces} traces spoiled by timing: too loaded a machine to compare"
        );
    }
}
