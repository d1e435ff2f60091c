//! The committed seed corpus of every fuzz target, run through the target's own body on the
//! stable toolchain: proves the seeds pass (no panic, every asserted rule holds) and keeps
//! the corpus and the list of targets from drifting apart. Fuzzing itself needs nightly:
//! see CONTRIBUTING.md.

use std::path::{Path, PathBuf};

#[path = "../fuzz/src/lib.rs"]
mod bodies;

/// A fuzz target's body: raw bytes in, a panic for a broken rule.
type Body = fn(&[u8]);

/// Every target in `fuzz/fuzz_targets/`, with its body.
const TARGETS: &[(&str, Body)] = &[
    ("durations", bodies::durations),
    ("names", bodies::names),
    ("settings", bodies::settings),
    ("redis_config", bodies::redis_config),
    ("script_reply", bodies::script_reply),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (every fuzz target needs a seed corpus)",
            dir.display()
        )
    });
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_fuzz_target_is_listed_here() {
    let mut on_disk: Vec<String> = files(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|(name, _)| (*name).to_owned()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "fuzz/fuzz_targets/ and TARGETS differ");
}

#[test]
fn every_seed_passes_its_target() {
    let mut failures = Vec::new();
    for (target, body) in TARGETS {
        let seeds = files(&fuzz_dir().join("corpus").join(target));
        assert!(!seeds.is_empty(), "fuzz/corpus/{target}/ has no seeds");
        for seed in seeds {
            let data = std::fs::read(&seed).expect("readable seed");
            if std::panic::catch_unwind(|| body(&data)).is_err() {
                failures.push(seed.display().to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "seeds that fail their target: {failures:#?}"
    );
}
