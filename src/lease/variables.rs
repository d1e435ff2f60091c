//! Every `LEASEHOLD_*` variable, each name written here and nowhere else in the library:
//! the ones the library reads (the Redis URL, the settings), the `leasehold` binary's and
//! the ones it sets in its command's environment. [`LeaseClient::from_env`] names any other
//! that is set, a misspelling most likely, when it finds no Redis URL.
//!
//! [`LeaseClient::from_env`]: crate::LeaseClient::from_env

/// The environment variable [`LeaseClient::from_env`](crate::LeaseClient::from_env) reads
/// for a Redis URL.
pub const REDIS_URL_ENV: &str = "LEASEHOLD_REDIS_URL";

/// [`LeaseSettings::namespace`](crate::LeaseSettings::namespace)'s variable.
pub(crate) const NAMESPACE: &str = "LEASEHOLD_NAMESPACE";
/// [`LeaseSettings::command_timeout`](crate::LeaseSettings::command_timeout)'s variable.
pub(crate) const COMMAND_TIMEOUT: &str = "LEASEHOLD_COMMAND_TIMEOUT";
/// [`LeaseSettings::connect_timeout`](crate::LeaseSettings::connect_timeout)'s variable.
pub(crate) const CONNECT_TIMEOUT: &str = "LEASEHOLD_CONNECT_TIMEOUT";
/// [`LeaseSettings::drift_budget`](crate::LeaseSettings::drift_budget)'s variable.
pub(crate) const DRIFT_BUDGET: &str = "LEASEHOLD_DRIFT_BUDGET";
/// [`LeaseSettings::retry_after_fallback`](crate::LeaseSettings::retry_after_fallback)'s
/// variable.
pub(crate) const RETRY_AFTER_FALLBACK: &str = "LEASEHOLD_RETRY_AFTER_FALLBACK";
/// [`LeaseSettings::renew_every`](crate::LeaseSettings::renew_every)'s variable.
pub(crate) const RENEW_EVERY: &str = "LEASEHOLD_RENEW_EVERY";
/// [`LeaseSettings::safety_margin`](crate::LeaseSettings::safety_margin)'s variable.
pub(crate) const SAFETY_MARGIN: &str = "LEASEHOLD_SAFETY_MARGIN";

/// Every `LEASEHOLD_*` variable leasehold gives a meaning to: [`REDIS_URL_ENV`], the ones
/// [`LeaseSettings::from_env`](crate::LeaseSettings::from_env) reads (each setting's is
/// `LEASEHOLD_` and its name in capitals: `LEASEHOLD_COMMAND_TIMEOUT`), the `leasehold`
/// binary's options, and what the binary sets in its command's environment
/// (`LEASEHOLD_FENCING_TOKEN`, `LEASEHOLD_SLOT`).
/// [`LeaseClient::from_env`](crate::LeaseClient::from_env) names any other that is set.
pub const ENV_VARS: &[&str] = &[
    REDIS_URL_ENV,
    NAMESPACE,
    COMMAND_TIMEOUT,
    CONNECT_TIMEOUT,
    DRIFT_BUDGET,
    RETRY_AFTER_FALLBACK,
    RENEW_EVERY,
    SAFETY_MARGIN,
    // Set in the command's environment by the binary.
    "LEASEHOLD_FENCING_TOKEN",
    "LEASEHOLD_SLOT",
    // The binary's options (cli/src/variables.rs).
    "LEASEHOLD_REDIS_FILE",
    "LEASEHOLD_PURPOSE",
    "LEASEHOLD_RESOURCE",
    "LEASEHOLD_RESOURCE_FILE",
    "LEASEHOLD_TTL",
    "LEASEHOLD_WAIT",
    "LEASEHOLD_PERMITS",
    "LEASEHOLD_LOCK_DELAY",
    "LEASEHOLD_REPLICAS",
    "LEASEHOLD_REPLICA_WAIT",
    "LEASEHOLD_REQUIRE_REPLICAS",
    "LEASEHOLD_HOLDER",
    "LEASEHOLD_OPERATION_ID",
    "LEASEHOLD_LOG_FORMAT",
    "LEASEHOLD_LOG_LEVEL",
    "LEASEHOLD_JSON",
    "LEASEHOLD_QUIET",
    "LEASEHOLD_CONFLICT_EXIT_CODE",
    "LEASEHOLD_METRICS_ADDR",
    "LEASEHOLD_PID_NAMESPACE",
    // The unit test of `from_env` that runs in a child process of its own.
    #[cfg(test)]
    "LEASEHOLD_TEST_CHILD",
];

/// The `LEASEHOLD_*` names among `names` that leasehold does not read, sorted.
pub(crate) fn unread(names: impl Iterator<Item = std::ffi::OsString>) -> Vec<String> {
    let mut unread: Vec<String> = names
        .filter_map(|name| name.into_string().ok())
        .filter(|name| name.starts_with("LEASEHOLD_") && !ENV_VARS.contains(&name.as_str()))
        .collect();
    unread.sort();
    unread
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LeaseError;

    /// Every `"LEASEHOLD_…"` string literal in the code of `src/`, test modules left out,
    /// each with the number of times it is written.
    fn named_variables() -> std::collections::BTreeMap<String, usize> {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut dirs = vec![root.join("src")];
        let mut names = std::collections::BTreeMap::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if file != "tests" {
                        dirs.push(path);
                    }
                    continue;
                }
                if !file.ends_with(".rs") || file == "tests.rs" {
                    continue;
                }
                let source = std::fs::read_to_string(&path).unwrap();
                let code = source.split("#[cfg(test)]\nmod tests {").next().unwrap();
                for piece in code.split('"').skip(1).step_by(2) {
                    let is_name = piece.strip_prefix("LEASEHOLD_").is_some_and(|rest| {
                        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                    });
                    if is_name {
                        *names.entry(piece.to_string()).or_default() += 1;
                    }
                }
            }
        }
        names
    }

    /// One place: every name the library's code writes is written once, and is listed.
    #[test]
    fn every_variable_is_written_once_and_listed() {
        let named = named_variables();
        let twice: Vec<_> = named.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "written more than once: {twice:?}");
        let listed: std::collections::BTreeSet<String> =
            ENV_VARS.iter().map(|var| (*var).to_string()).collect();
        let named: std::collections::BTreeSet<String> = named.into_keys().collect();
        assert_eq!(listed, named, "listed (left) and written (right)");
    }

    /// The settings' variables follow their rule: `LEASEHOLD_` and the setting's name.
    #[test]
    fn a_setting_s_variable_is_its_name_in_capitals() {
        let read = std::cell::RefCell::new(Vec::new());
        let _ = crate::LeaseSettings::from_lookup(|var| {
            read.borrow_mut().push(var.to_owned());
            None
        });
        let by_the_rule: Vec<String> = [
            "namespace",
            "command_timeout",
            "connect_timeout",
            "drift_budget",
            "retry_after_fallback",
            "renew_every",
            "safety_margin",
        ]
        .iter()
        .map(|name| format!("LEASEHOLD_{}", name.to_ascii_uppercase()))
        .collect();
        assert_eq!(read.into_inner(), by_the_rule);
    }

    #[test]
    fn a_misspelled_variable_is_named_and_the_ones_leasehold_reads_are_not() {
        let names = [
            "LEASEHOLD_REDIS_ULR",
            "LEASEHOLD_NAMESPACE",
            "LEASEHOLD_FENCING_TOKEN",
            "PATH",
            "LEASEHOLD_NAMESPCE",
        ]
        .map(std::ffi::OsString::from);
        let unread = unread(names.into_iter());
        assert_eq!(unread, ["LEASEHOLD_NAMESPCE", "LEASEHOLD_REDIS_ULR"]);
        let error = LeaseError::NoBackendConfigured { unread };
        assert_eq!(
            error.to_string(),
            "no lease backend configured: LEASEHOLD_REDIS_URL is unset or empty \
             (set, but not read by leasehold: LEASEHOLD_NAMESPCE, LEASEHOLD_REDIS_ULR)"
        );
        let plain = LeaseError::NoBackendConfigured { unread: Vec::new() };
        assert_eq!(
            plain.to_string(),
            "no lease backend configured: LEASEHOLD_REDIS_URL is unset or empty"
        );
    }
}
