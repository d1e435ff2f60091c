//! Commands as the tests write them (`&["GET", "k"]`), and the server's own count of the
//! commands it ran (`INFO commandstats`): shared by plain servers, sentinels and cluster
//! nodes, so every harness builds and counts commands alike.

/// Commands the harness itself sends; `command_calls` leaves them out.
pub const HARNESS_COMMANDS: &[&str] = &["info", "config", "ping", "hello", "client", "select"];

/// `args[0]` with the rest of `args` as its arguments; panics on an empty slice (a test
/// bug, not a server's answer).
pub fn command(args: &[&str]) -> redis::Cmd {
    let (name, rest) = args.split_first().expect("a command name");
    let mut cmd = redis::cmd(name);
    for arg in rest {
        cmd.arg(*arg);
    }
    cmd
}

/// The sum of `calls` and `rejected_calls` over the commands of `INFO commandstats`, but
/// for those in `skip` (lower case, without subcommand).
pub fn parse_command_calls(info: &str, skip: &[&str]) -> u64 {
    let mut total = 0;
    for line in info.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, stats)) = rest.split_once(':') else {
            continue;
        };
        // Subcommands appear as `config|resetstat`, `client|setinfo`, ...
        let base = name.split('|').next().unwrap_or(name).to_ascii_lowercase();
        if skip.contains(&base.as_str()) {
            continue;
        }
        for field in stats.split(',') {
            if let Some((key, value)) = field.split_once('=')
                && (key == "calls" || key == "rejected_calls")
            {
                total += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}
