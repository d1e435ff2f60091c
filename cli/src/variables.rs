//! The one rule for the command line's `LEASEHOLD_*` variables: every option that says
//! where Redis is, which lease and how it is held, or what leasehold prints has a variable,
//! `LEASEHOLD_` and the option's long name in capitals, `-` as `_` (`--lock-delay`:
//! `LEASEHOLD_LOCK_DELAY`) — but `--redis`, whose variable is the library's
//! `LEASEHOLD_REDIS_URL`. A flag overrides its variable, and a variable takes what its
//! flag takes. Options about what one invocation does — the command's processes and
//! signals, `inspect --watch`, a listing's bounds, `--no-wait` (`LEASEHOLD_WAIT=0s` says
//! it) — have none; `--pid-namespace`, which says what the host allows, has one.
//!
//! [`VARIABLES`] is the table; the parser takes the variables from it
//! ([`with_variables`]), but for the options whose precedence is leasehold's own (the URL
//! and the resource, each from a flag, a file or a variable; the settings the library
//! reads), which [`crate::config`] reads by hand. A test holds the table to the rule, to
//! every option of every subcommand (those without a variable are listed there), and to
//! `--help` and the CLI guide (docs/cli.md).

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Command};

/// An option with a variable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OptionVariable {
    /// The long flag, without `--`.
    pub(crate) long: &'static str,
    /// Its short flag, if it has one.
    pub(crate) short: Option<char>,
    pub(crate) variable: &'static str,
    /// Read by [`crate::config`] (or the keeper's start), not by the parser: a flag, a file
    /// and a variable in an order of leasehold's own.
    pub(crate) by_hand: bool,
}

const fn parsed(long: &'static str, short: Option<char>, variable: &'static str) -> OptionVariable {
    OptionVariable {
        long,
        short,
        variable,
        by_hand: false,
    }
}

const fn by_hand(long: &'static str, variable: &'static str) -> OptionVariable {
    OptionVariable {
        long,
        short: None,
        variable,
        by_hand: true,
    }
}

// Each variable's name is written once in the binary, here; the library's own
// (`LEASEHOLD_REDIS_URL`: `leasehold::REDIS_URL_ENV`) is not written at all. A test holds
// them to the library's list, `leasehold::ENV_VARS`.

/// `--log-format`'s variable, read before the parser for an error it raises.
pub(crate) const LOG_FORMAT: &str = "LEASEHOLD_LOG_FORMAT";
/// The raw resource id's variable, so the id need not show in `ps`.
pub(crate) const RESOURCE: &str = "LEASEHOLD_RESOURCE";
/// `--resource-file`'s variable.
pub(crate) const RESOURCE_FILE: &str = "LEASEHOLD_RESOURCE_FILE";
/// `--redis-file`'s variable.
pub(crate) const REDIS_FILE: &str = "LEASEHOLD_REDIS_FILE";
/// `--namespace`'s variable, which the library reads too.
pub(crate) const NAMESPACE: &str = "LEASEHOLD_NAMESPACE";
/// `--renew-every`'s variable, which the library reads too.
pub(crate) const RENEW_EVERY: &str = "LEASEHOLD_RENEW_EVERY";
/// `--pid-namespace`'s variable.
pub(crate) const PID_NAMESPACE: &str = "LEASEHOLD_PID_NAMESPACE";

/// Settings only the library reads ([`leasehold::LeaseSettings::from_lookup`]), named in
/// messages about what lowers the shortest TTL.
pub(crate) const COMMAND_TIMEOUT: &str = "LEASEHOLD_COMMAND_TIMEOUT";
/// As [`COMMAND_TIMEOUT`].
pub(crate) const DRIFT_BUDGET: &str = "LEASEHOLD_DRIFT_BUDGET";
/// As [`COMMAND_TIMEOUT`].
pub(crate) const SAFETY_MARGIN: &str = "LEASEHOLD_SAFETY_MARGIN";

/// The command's fencing token, in its environment.
pub(crate) const FENCING_TOKEN: &str = "LEASEHOLD_FENCING_TOKEN";
/// The command's counted-lease slot, in its environment.
pub(crate) const SLOT: &str = "LEASEHOLD_SLOT";

/// Every option with a variable, for every subcommand that has the option.
pub(crate) const VARIABLES: &[OptionVariable] = &[
    // Where Redis is.
    by_hand("redis", leasehold::REDIS_URL_ENV),
    by_hand("redis-file", REDIS_FILE),
    by_hand("namespace", NAMESPACE),
    // Which lease, and how it is held.
    parsed("purpose", None, "LEASEHOLD_PURPOSE"),
    by_hand("resource", RESOURCE),
    by_hand("resource-file", RESOURCE_FILE),
    parsed("ttl", None, "LEASEHOLD_TTL"),
    parsed("wait", Some('w'), "LEASEHOLD_WAIT"),
    by_hand("renew-every", RENEW_EVERY),
    parsed("permits", None, "LEASEHOLD_PERMITS"),
    parsed("lock-delay", None, "LEASEHOLD_LOCK_DELAY"),
    parsed("replicas", None, "LEASEHOLD_REPLICAS"),
    parsed("replica-wait", None, "LEASEHOLD_REPLICA_WAIT"),
    parsed("require-replicas", None, "LEASEHOLD_REQUIRE_REPLICAS"),
    parsed("holder", None, "LEASEHOLD_HOLDER"),
    parsed("operation-id", None, "LEASEHOLD_OPERATION_ID"),
    // What leasehold prints.
    parsed("log-format", None, LOG_FORMAT),
    parsed("log-level", None, "LEASEHOLD_LOG_LEVEL"),
    parsed("json", None, "LEASEHOLD_JSON"),
    parsed("quiet", None, "LEASEHOLD_QUIET"),
    parsed(
        "conflict-exit-code",
        Some('E'),
        "LEASEHOLD_CONFLICT_EXIT_CODE",
    ),
    parsed("metrics-addr", None, "LEASEHOLD_METRICS_ADDR"),
    // What the host allows.
    by_hand("pid-namespace", PID_NAMESPACE),
];

/// Removes an inherited [`SLOT`] from leasehold's environment, which the command inherits:
/// only a run that holds a slot (`--permits`) gives it one, so a command never sees a slot
/// of another run's lease.
///
/// # Safety
/// The process must have one thread (call it before anything starts another).
pub(crate) unsafe fn forget_inherited_slot() {
    if std::env::var_os(SLOT).is_some() {
        // SAFETY: the caller's promise: no other thread reads or writes the environment.
        unsafe { std::env::remove_var(SLOT) };
    }
}

/// Every variable the parser reads is text, or the run is refused in one line naming it
/// (clap would refuse it without a name).
///
/// # Errors
/// The first variable set to a value that is not UTF-8.
pub(crate) fn check_text() -> Result<(), String> {
    for option in VARIABLES.iter().filter(|o| !o.by_hand) {
        crate::inputs::variable(option.variable)?;
    }
    Ok(())
}

/// The option `long` (without `--`), if it has a variable.
pub(crate) fn option(long: &str) -> Option<&'static OptionVariable> {
    VARIABLES.iter().find(|o| o.long == long)
}

/// `command` with the parser's variables on every option of every subcommand that has
/// one: clap reads them, a flag first, and `--help` names them.
pub(crate) fn with_variables(command: Command) -> Command {
    let command = apply(command);
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    names
        .iter()
        .fold(command, |command, name| command.mut_subcommand(name, apply))
}

/// The parser's variables on `command`'s own options.
fn apply(command: Command) -> Command {
    let ids: Vec<(String, &'static str)> = command
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let option = option(long).filter(|o| !o.by_hand)?;
            Some((arg.get_id().to_string(), option.variable))
        })
        .collect();
    ids.into_iter().fold(command, |command, (id, variable)| {
        command.mut_arg(id, |arg| {
            let arg = arg.env(variable).hide_env_values(true);
            // A switch's variable reads as shells and units write them: 1, yes, on, true
            // (and 0, no, off, false), not only clap's true and false.
            match arg.get_action() {
                ArgAction::SetTrue => arg.value_parser(BoolishValueParser::new()),
                _ => arg,
            }
        })
    })
}

/// What options given together on the command line must agree on. Set by their variables
/// they ask nothing of each other: a host's `LEASEHOLD_REPLICA_WAIT` says how the runs that
/// ask for replicas wait, and `-n` overrides `LEASEHOLD_WAIT` as any flag does.
pub(crate) fn command_line_relations(run: &clap::ArgMatches) -> Result<(), clap::Error> {
    use clap::error::ErrorKind;
    let given = |id: &str| run.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    if given("no_wait") && given("wait") {
        return Err(clap::Error::raw(
            ErrorKind::ArgumentConflict,
            "--no-wait and --wait cannot be used together\n",
        ));
    }
    let needs = ["replica_wait", "require_replicas"]
        .into_iter()
        .find(|id| given(id));
    match needs {
        Some(flag) if run.value_source("replicas").is_none() => Err(clap::Error::raw(
            ErrorKind::MissingRequiredArgument,
            format!("--{} needs --replicas N\n", flag.replace('_', "-")),
        )),
        _ => Ok(()),
    }
}

/// The variable that gave the value clap refused (`e`), when none of the option's flags is
/// on the command line `args` and the variable is set.
pub(crate) fn refused_variable(
    e: &clap::Error,
    args: &[std::ffi::OsString],
) -> Option<&'static str> {
    let clap::error::ContextValue::String(shown) = e.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    // "--ttl <DURATION>" or "-w, --wait <DURATION>": the long flag.
    let long = shown
        .split([' ', ','])
        .find_map(|word| word.strip_prefix("--"))?;
    let arg = option(long)?;
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let on_line = args[1..end].iter().filter_map(|a| a.to_str()).any(|a| {
        let flag = a.split('=').next().unwrap_or(a);
        flag == format!("--{long}") || arg.short.is_some_and(|c| flag == format!("-{c}"))
    });
    (!on_line && std::env::var_os(arg.variable).is_some()).then_some(arg.variable)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use super::*;

    /// The options without a variable: what one invocation does.
    const WITHOUT: &[&str] = &[
        // The command's processes and signals.
        "grace",
        "kill-after",
        "timeout",
        "signal",
        "wait-for-descendants",
        "allow-new-privileges",
        // Modes and bounds of one invocation.
        "no-wait",
        "watch",
        "limit",
        "budget",
        // Where `man --out-dir` writes its pages.
        "out-dir",
        // clap's own.
        "help",
        "version",
    ];

    /// The rule: `LEASEHOLD_` and the long name in capitals, `-` as `_`; `--redis`'s is the
    /// library's URL variable.
    fn by_the_rule(long: &str) -> String {
        match long {
            "redis" => leasehold::REDIS_URL_ENV.to_owned(),
            _ => format!("LEASEHOLD_{}", long.to_ascii_uppercase().replace('-', "_")),
        }
    }

    /// Every `"LEASEHOLD_…"` string literal in the code of `cli/src/` (test modules and the
    /// binary's test files left out), with the files that write it.
    fn written() -> BTreeMap<String, Vec<String>> {
        let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("cli/src") {
                let path = entry.expect("an entry").path();
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if !file.ends_with(".rs") || file.ends_with("tests.rs") {
                    continue;
                }
                let source = std::fs::read_to_string(&path).expect("a source file");
                let code = source.split("#[cfg(test)]\nmod tests {").next().unwrap();
                for piece in code.split('"').skip(1).step_by(2) {
                    let is_name = piece.strip_prefix("LEASEHOLD_").is_some_and(|rest| {
                        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                    });
                    if is_name {
                        names
                            .entry(piece.to_owned())
                            .or_default()
                            .push(file.clone());
                    }
                }
            }
        }
        names
    }

    /// Each variable's name is written once in the binary, in this file; every one is in
    /// the library's list (so `LeaseClient::from_env` never calls it unread), and the list
    /// holds no other but the ones the library reads itself.
    #[test]
    fn every_variable_is_written_once_here_and_the_library_lists_it() {
        let written = written();
        for (name, files) in &written {
            assert_eq!(files, &["variables.rs"], "{name} is written in {files:?}");
        }
        let listed: BTreeSet<&str> = leasehold::ENV_VARS.iter().copied().collect();
        for name in written.keys() {
            assert!(
                listed.contains(name.as_str()),
                "{name} is not in leasehold::ENV_VARS"
            );
        }
        let read = std::cell::RefCell::new(vec![leasehold::REDIS_URL_ENV.to_owned()]);
        let _ = leasehold::LeaseSettings::from_lookup(|var| {
            read.borrow_mut().push(var.to_owned());
            None
        });
        let known: BTreeSet<String> = written.into_keys().chain(read.into_inner()).collect();
        let listed: BTreeSet<String> = listed.into_iter().map(str::to_owned).collect();
        assert_eq!(
            listed, known,
            "leasehold::ENV_VARS (left); the binary's and the library's own (right)"
        );
    }

    /// Every option of every subcommand: a variable by the rule, read by the parser (its
    /// `[env: …]` shown by clap) or by hand (named in its help), and named in the
    /// subcommand's `--help` — or none, and then listed in `WITHOUT`; every variable of
    /// the table belongs to some option, and the CLI guide names each.
    #[test]
    fn every_option_has_its_variable_by_the_rule_or_is_listed_without_one() {
        let mut command = crate::command();
        command.build();
        let guide = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"),
        )
        .expect("docs/cli.md");
        let mut used = std::collections::BTreeSet::new();
        for sub in command.get_subcommands_mut() {
            let name = sub.get_name().to_owned();
            let help = sub.render_long_help().to_string();
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else {
                    continue;
                };
                let env = arg.get_env().and_then(|e| e.to_str());
                if WITHOUT.contains(&long) {
                    assert_eq!(env, None, "{name} --{long} is listed without a variable");
                    assert!(option(long).is_none(), "{name} --{long}: in both lists");
                    continue;
                }
                let Some(option) = option(long) else {
                    panic!("{name} --{long}: no variable, and not listed without one");
                };
                assert_eq!(option.variable, by_the_rule(long), "{name} --{long}");
                let expected = (!option.by_hand).then_some(option.variable);
                assert_eq!(
                    env, expected,
                    "{name} --{long}: read by the parser or by hand"
                );
                assert!(
                    help.contains(option.variable),
                    "{name} --help does not name {}",
                    option.variable
                );
                assert_eq!(
                    arg.get_short(),
                    option.short,
                    "{name} --{long}'s short flag"
                );
                used.insert(option.variable);
            }
        }
        for option in VARIABLES {
            assert!(
                used.contains(option.variable),
                "{} belongs to no option",
                option.variable
            );
            assert!(
                guide.contains(option.variable),
                "docs/cli.md does not name {}",
                option.variable
            );
        }
    }
}
