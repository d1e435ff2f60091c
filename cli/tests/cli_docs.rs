//! The README, the CLI guide (docs/cli.md) and `--help` say the same thing about the CLI,
//! and what they show works as shown.

mod common;

use std::collections::BTreeSet;

use common::cli::*;

const README: &str = include_str!("../../README.md");
const CLI_GUIDE: &str = include_str!("../../docs/cli.md");

/// The statuses a table or list names: numbers, `128+N`, and the command's own.
fn statuses<'a>(cells: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    cells
        .flat_map(|cell| cell.split('/'))
        .map(str::trim)
        .map(|cell| {
            if cell.starts_with("the command") {
                "the command's own".to_owned()
            } else {
                cell.to_owned()
            }
        })
        .collect()
}

/// The first cells of the README's exit status table for `run`.
fn readme_statuses() -> BTreeSet<String> {
    let table = README
        .split_once("| exit status | meaning |")
        .map(|(_, rest)| rest)
        .expect("README has an exit status table");
    statuses(
        table
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .filter_map(|line| line.split('|').nth(1)),
    )
}

/// The statuses `leasehold <sub> --help` lists under "Exit status:".
fn help_statuses(sub: &str) -> BTreeSet<String> {
    let help = help(sub);
    let block = help
        .split_once("Exit status:")
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or_else(|| panic!("{sub} --help has no exit status list:\n{help}"));
    // Entries are indented two spaces; their continuation lines more.
    statuses(
        block
            .lines()
            // The rest of the "Exit status:" line.
            .skip(1)
            .take_while(|line| !line.trim().is_empty())
            .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
            .map(|line| {
                let entry = line.trim();
                // The status is what comes before two spaces in a row.
                entry.split("  ").next().unwrap_or(entry)
            }),
    )
}

#[test]
fn the_readme_and_run_help_list_the_same_exit_statuses() {
    let readme = readme_statuses();
    let help = help_statuses("run");
    assert_eq!(readme, help, "README vs run --help");
    for status in [
        "the command's own",
        "75",
        "124",
        "125",
        "126",
        "127",
        "128+N",
    ] {
        assert!(readme.contains(status), "{status} missing from {readme:?}");
    }
}

#[test]
fn inspect_list_and_doctor_help_list_their_own_statuses() {
    let expected = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(help_statuses("inspect"), expected(&["0", "1", "125"]));
    assert_eq!(help_statuses("list"), expected(&["0", "125"]));
    assert_eq!(help_statuses("doctor"), expected(&["0", "125"]));
}

/// `leasehold <sub> --help`.
fn help(sub: &str) -> String {
    let dir = TempDir::new("help-options");
    let mut cmd = bare();
    cmd.args([sub, "--help"]);
    let help = finish(cmd, &dir, sub);
    help.assert_code(0, "--help");
    help.stdout
}

#[test]
fn the_cli_guides_short_options_are_the_ones_run_help_lists() {
    let help = help("run");
    let table = CLI_GUIDE
        .split_once("| short | long | as in |")
        .map(|(_, rest)| rest)
        .expect("the CLI guide has a short options table");
    let mut rows = 0;
    for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let word = |cell: &str| {
            cell.trim_matches('`')
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        let (short, long) = (word(cells[1]), word(cells[2]));
        let shown = if short.starts_with('-') {
            format!("{short}, {long}")
        } else {
            long.clone()
        };
        assert!(
            help.contains(&shown),
            "run --help has no {shown:?}:\n{help}"
        );
        rows += 1;
    }
    assert!(rows >= 6, "the short options table has {rows} rows");
}

/// The CLI guide's options table, from its header to its last row.
fn options_table() -> &'static str {
    let (_, rest) = CLI_GUIDE
        .split_once("| option | default | what it does |")
        .expect("the CLI guide has an options table");
    let end = rest.find("\n\n").unwrap_or(rest.len());
    &rest[..end]
}

/// The long options `--help` lists, each at the start of an indented line (`--ttl <D>`,
/// `-w, --wait <D>`).
fn long_options(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter(|line| line.starts_with("  ") && line.trim_start().starts_with('-'))
        .filter_map(|line| {
            line.split_whitespace()
                .take(2)
                .find(|word| word.starts_with("--"))
                .map(|word| word.trim_end_matches(',').to_owned())
        })
        .collect()
}

#[test]
fn every_option_the_cli_guide_lists_is_one_the_cli_takes() {
    let helps = [help("run"), help("inspect"), help("list"), help("doctor")].join("\n");
    let mut named = 0;
    for word in options_table().split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        // `--wait`, not the table's `|---|` rule.
        if word
            .strip_prefix("--")
            .is_some_and(|name| name.starts_with(char::is_alphabetic))
        {
            assert!(
                helps.contains(&format!("{word} ")) || helps.contains(&format!("{word}\n")),
                "the CLI guide names {word}, which no subcommand's --help lists"
            );
            named += 1;
        }
    }
    assert!(named >= 20, "the options table names {named} options");
}

/// The table is the whole of the command line: every option of `run`, `inspect`, `list`
/// and `doctor` has its row.
#[test]
fn the_cli_guides_options_table_has_every_option() {
    let rows: BTreeSet<String> = options_table()
        .lines()
        .skip(2)
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|cell| cell.split(['`', ',', ' ']))
        .filter(|word| word.starts_with("--"))
        .map(str::to_owned)
        .collect();
    for sub in ["run", "inspect", "list", "doctor"] {
        let options = long_options(&help(sub));
        assert!(
            options.contains("--redis") && options.contains("--help"),
            "{sub} --help: {options:?}"
        );
        for option in options {
            assert!(
                option == "--help" || rows.contains(&option),
                "{sub} {option} has no row in the CLI guide's options table"
            );
        }
    }
}

#[test]
fn the_readme_crontab_entry_is_one_line_cron_accepts() {
    let entry = README
        .lines()
        .find(|line| line.starts_with("0 2 * * * "))
        .expect("the README has a crontab entry");
    assert!(
        !entry.ends_with('\\'),
        "cron does not continue lines: {entry}"
    );
    assert!(!entry.contains('%'), "cron turns % into a newline: {entry}");
    assert!(entry.contains("leasehold run "), "{entry}");
}

/// cron's own PATH is `/usr/bin:/bin`: a `leasehold` that `cargo install` put in
/// `~/.cargo/bin` is "not found" there (exit 127). The entry's block sets a PATH, with
/// absolute directories only (cron expands neither `~` nor `$HOME` in it), that holds the
/// directory the README's install line puts the binary in.
#[test]
fn the_readme_crontab_entry_finds_leasehold_under_crons_path() {
    let (before, _) = README
        .split_once("\n0 2 * * * ")
        .expect("the README has a crontab entry");
    let block = before.rsplit_once("```").map_or(before, |(_, block)| block);
    let path = block
        .lines()
        .find_map(|line| line.strip_prefix("PATH="))
        .expect("the crontab block sets PATH before the entry");
    assert!(
        path.split(':').all(|dir| dir.starts_with('/')),
        "cron does not expand ~ or variables in PATH: {path}"
    );
    assert!(
        path.split(':').any(|dir| dir == "/usr/local/bin"),
        "PATH={path} lacks /usr/local/bin"
    );
    assert!(
        block.contains("--root /usr/local"),
        "the block says how leasehold gets into /usr/local/bin"
    );
}
