//! What leasehold generates from its own definitions — the shell completion scripts
//! (`leasehold completions`) and the manual pages (`leasehold man`) — covers what `--help`
//! shows: every subcommand, and every option of each, so a page or a script cannot silently
//! lose one.

mod common;

use std::collections::BTreeSet;

use common::cli::*;

/// `leasehold ARGS…`, which must exit 0; its stdout.
fn output(args: &[&str]) -> String {
    let dir = TempDir::new("generated");
    let mut cmd = bare();
    cmd.args(args);
    let label = args.join(" ");
    let done = finish(cmd, &dir, "generated");
    done.assert_code(0, &label);
    assert!(done.stderr.is_empty(), "{label}: stderr {}", done.stderr);
    done.stdout
}

/// The subcommands `leasehold --help` lists (but clap's `help`).
fn subcommands() -> Vec<String> {
    let help = output(&["--help"]);
    let list = help
        .split_once("Commands:\n")
        .map(|(_, rest)| rest)
        .expect("--help lists the commands");
    let names: Vec<String> = list
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 6, "--help lists {names:?}");
    names
}

/// The long options `leasehold [SUB] --help` lists in its "Options:" section: the lines
/// that name an option (`  -w, --wait <DURATION>`, `      --ttl <DURATION>`), not their
/// descriptions (indented further) nor the prose after the section.
fn options(args: &[&str]) -> BTreeSet<String> {
    let help = output(&[args, &["--help"]].concat());
    let section = help
        .split_once("Options:\n")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("{args:?} --help has no options:\n{help}"));
    let options: BTreeSet<String> = section
        .lines()
        .take_while(|line| line.is_empty() || line.starts_with(' '))
        .filter(|line| {
            let indent = line.len() - line.trim_start().len();
            indent < 8 && line.trim_start().starts_with('-')
        })
        .filter_map(|line| {
            line.split([' ', ','])
                .find(|word| word.starts_with("--"))
                .map(str::to_owned)
        })
        .collect();
    assert!(options.contains("--help"), "{args:?} --help: {options:?}");
    options
}

/// An option as roff writes it in bold (`\fB\-\-ttl\fR`).
fn in_roff(option: &str) -> String {
    format!(r"\fB{}\fR", option.replace('-', r"\-"))
}

#[test]
fn completions_cover_every_subcommand_and_run_option_in_each_shell() {
    let subcommands = subcommands();
    let run_options = options(&["run"]);
    assert!(run_options.len() >= 25, "run --help: {run_options:?}");
    for (shell, marker) in [
        ("bash", "complete -F _leasehold"),
        ("zsh", "#compdef leasehold"),
        ("fish", "complete -c leasehold"),
    ] {
        let script = output(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no {marker:?}:\n{script}");
        for sub in &subcommands {
            assert!(
                script.contains(sub.as_str()),
                "{shell}: no subcommand {sub}"
            );
        }
        // fish names a long option without its dashes (`-l ttl`).
        for option in &run_options {
            let named = match shell {
                "fish" => format!("-l {}", &option[2..]),
                _ => option.clone(),
            };
            assert!(script.contains(&named), "{shell}: no {named:?}");
        }
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let dir = TempDir::new("generated");
    let mut cmd = bare();
    cmd.args(["completions", "tcsh"]);
    let done = finish(cmd, &dir, "tcsh");
    done.assert_code(125, "completions tcsh");
    assert!(done.stdout.is_empty(), "stdout: {}", done.stdout);
    let lines = done.stderr_lines();
    assert_eq!(lines.len(), 1, "one line: {}", done.stderr);
    assert!(
        lines[0].contains("'tcsh'") && lines[0].contains("bash, zsh, fish"),
        "{}",
        lines[0]
    );
}

#[test]
fn each_manual_page_names_every_option_its_help_lists() {
    let subcommands = subcommands();
    for sub in &subcommands {
        let page = output(&["man", sub]);
        let title = format!(".TH LEASEHOLD-{} 1 ", sub.to_uppercase());
        assert!(page.contains(&title), "man {sub}: no {title:?}:\n{page}");
        let listed = options(&[sub.as_str()]);
        let missing: Vec<&String> = listed
            .iter()
            .filter(|option| !page.contains(&in_roff(option)))
            .collect();
        assert!(missing.is_empty(), "man {sub} lacks {missing:?}:\n{page}");
    }
    // leasehold's own page: its options, and a reference to every subcommand's page.
    let page = output(&["man"]);
    assert!(page.contains(".TH LEASEHOLD 1 "), "{page}");
    let top_options = options(&[]);
    assert!(top_options.len() >= 4, "--help: {top_options:?}");
    for option in &top_options {
        assert!(
            page.contains(&in_roff(option)),
            "man lacks {option}:\n{page}"
        );
    }
    for sub in &subcommands {
        let reference = format!(r"leasehold\-{}(1)", sub.replace('-', r"\-"));
        assert!(page.contains(&reference), "man: no {reference}:\n{page}");
    }
}

/// The statuses `leasehold run --help` lists under "Exit status:": its entries are indented
/// two spaces, their continuation lines more; the status comes before two spaces in a row.
fn help_statuses() -> BTreeSet<String> {
    let help = output(&["run", "--help"]);
    let (_, block) = help
        .split_once("Exit status:\n")
        .expect("run --help lists exit statuses");
    block
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.trim().split("  ").next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_run_page_lists_the_exit_statuses_run_help_lists() {
    let page = output(&["man", "run"]);
    let (_, section) = page
        .split_once(".SH \"EXIT STATUS\"\n")
        .expect("the run page has an EXIT STATUS section");
    let lines: Vec<&str> = section
        .lines()
        .take_while(|line| !line.starts_with(".SH"))
        .collect();
    // Each entry: `.TP`, then the status in bold.
    let tagged: BTreeSet<String> = lines
        .windows(2)
        .filter(|pair| pair[0] == ".TP")
        .map(|pair| {
            pair[1]
                .trim_start_matches(r"\fB")
                .trim_end_matches(r"\fR")
                .replace(r"\*(Aq", "'")
                .replace(r"\-", "-")
        })
        .collect();
    let listed = help_statuses();
    assert!(listed.len() >= 7, "run --help: {listed:?}");
    assert_eq!(tagged, listed);
}

#[test]
fn out_dir_writes_one_page_per_command() {
    let dir = TempDir::new("man-pages");
    let pages = dir.path("man1");
    let listed = output(&["man", "--out-dir", &pages.to_string_lossy()]);
    let mut expected = vec![pages.join("leasehold.1")];
    expected.extend(
        subcommands()
            .iter()
            .map(|sub| pages.join(format!("leasehold-{sub}.1"))),
    );
    let listed: Vec<_> = listed.lines().map(std::path::PathBuf::from).collect();
    assert_eq!(listed, expected);
    for page in &expected {
        let text = std::fs::read_to_string(page).unwrap_or_default();
        assert!(text.contains(".TH LEASEHOLD"), "{}", page.display());
        assert!(text.is_ascii(), "{}: not ASCII", page.display());
    }
}

#[test]
fn an_unknown_page_is_refused_in_one_line() {
    let dir = TempDir::new("generated");
    let mut cmd = bare();
    cmd.args(["man", "nope"]);
    let done = finish(cmd, &dir, "man nope");
    done.assert_code(125, "man nope");
    assert!(done.stdout.is_empty(), "stdout: {}", done.stdout);
    assert!(
        done.stderr
            .starts_with("leasehold: no manual page for \"nope\"")
            && done.stderr.contains("run, inspect"),
        "{}",
        done.stderr
    );
}
