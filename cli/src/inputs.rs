//! What leasehold takes from outside besides its parsed options — the raw argument vector,
//! `LEASEHOLD_*` variables, the resource and Redis files, the environment the command inherits —
//! checked so that a value leasehold cannot read as meant is refused, never taken for
//! another (an unreadable namespace read as unset would be another lease).

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The largest `--resource-file` read: a resource id is a name, not a document, and a file
/// that is not one (`/dev/zero`, a log) must be refused rather than read to the end.
pub(crate) const RESOURCE_FILE_MAX: u64 = 4096;

/// The largest `--redis-file` read: a URL, not a document.
pub(crate) const REDIS_FILE_MAX: u64 = 4096;

/// The first argument before `--` (the command's own may be any bytes) that is not UTF-8,
/// as one line naming the option it was given to.
///
/// # Errors
/// That line.
pub(crate) fn check_arguments(args: &[OsString]) -> Result<(), String> {
    let mut previous: Option<&OsStr> = None;
    for arg in args.iter().skip(1) {
        if arg == "--" {
            return Ok(());
        }
        if arg.to_str().is_none() {
            let lossy = arg.to_string_lossy();
            // `--opt=value`: the option is the ASCII before `=`.
            let option = match lossy.split_once('=') {
                Some((name, _)) if name.starts_with("--") => name.to_owned(),
                _ => previous
                    .and_then(OsStr::to_str)
                    .filter(|p| p.starts_with('-'))
                    .map_or_else(|| "an argument".to_owned(), str::to_owned),
            };
            let hint = match option.as_str() {
                "--resource" => "; give an id in another encoding with --resource-file",
                "--holder" => " (a label is printable ASCII)",
                _ => "",
            };
            return Err(format!("{option}: the value is not UTF-8 text{hint}"));
        }
        previous = Some(arg);
    }
    Ok(())
}

/// The argument vector with each negative duration joined to its option (`--ttl -1s` as
/// `--ttl=-1s`), so that it is refused as the option's value rather than as a stray option
/// `-1` (clap's `allow_negative_numbers` would take `-1` but not `-1s`). The options are
/// those whose value is a `DURATION`; nothing after `--` (the command's) is touched.
pub(crate) fn negative_durations_attached(
    command: &clap::Command,
    args: &[OsString],
) -> Vec<OsString> {
    let takes_duration = |arg: &OsStr| -> Option<String> {
        let arg = arg.to_str()?;
        command
            .get_subcommands()
            .flat_map(clap::Command::get_arguments)
            .filter(|a| a.get_value_names().is_some_and(|n| n == ["DURATION"]))
            .find(|a| {
                a.get_long()
                    .is_some_and(|l| arg.strip_prefix("--") == Some(l))
                    || a.get_short().is_some_and(|c| arg == format!("-{c}"))
            })
            .and_then(|a| a.get_long().map(str::to_owned))
    };
    let negative = |arg: &OsStr| {
        let mut chars = arg.to_str().unwrap_or_default().chars();
        chars.next() == Some('-') && chars.next().is_some_and(|c| c.is_ascii_digit() || c == '.')
    };
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let long = (i + 1 < end).then(|| takes_duration(&args[i])).flatten();
        match long {
            Some(long) if negative(&args[i + 1]) => {
                let mut joined = OsString::from(format!("--{long}="));
                joined.push(&args[i + 1]);
                out.push(joined);
                i += 2;
            }
            _ => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// `var`'s value; `None` when unset.
///
/// # Errors
/// One line naming the variable when its value is not UTF-8 (it is not shown: it may hold
/// a password).
pub(crate) fn variable(var: &str) -> Result<Option<String>, String> {
    match std::env::var(var) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{var}: the value is not UTF-8 text; leasehold will not guess what it means"
        )),
    }
}

/// The resource id in `path`: a regular file of at most [`RESOURCE_FILE_MAX`] bytes, one
/// trailing newline dropped. A FIFO or a device is refused without being read (opened
/// non-blocking, so a FIFO without a writer does not hang the run).
///
/// # Errors
/// One line naming the file: unreadable, not a regular file, or too long.
/// `source` names the file's flag or variable and the file, as errors show it
/// ([`FileSource`]).
pub(crate) fn resource_file(source: &FileSource<'_>) -> Result<Vec<u8>, String> {
    small_file(source, "resource id", RESOURCE_FILE_MAX).map(|(bytes, _)| bytes)
}

/// A file named by a flag (`--redis-file PATH`) or a variable (`LEASEHOLD_REDIS_FILE=PATH`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum FileSource<'a> {
    Flag(&'static str, &'a Path),
    Variable(&'static str, &'a Path),
}

impl FileSource<'_> {
    fn path(&self) -> &Path {
        match self {
            Self::Flag(_, path) | Self::Variable(_, path) => path,
        }
    }
}

impl std::fmt::Display for FileSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Flag(flag, path) => write!(f, "{flag} {}", path.display()),
            Self::Variable(var, path) => write!(f, "{var}={}", path.display()),
        }
    }
}

/// The Redis URL in `path`, read as [`resource_file`] reads its file (at most
/// [`REDIS_FILE_MAX`] bytes), UTF-8 and not empty; and, when others than its owner may read
/// the file, the warning to give (the URL may hold a password).
///
/// # Errors
/// One line naming the file: unreadable, not a regular file, too long, not UTF-8, or empty.
pub(crate) fn redis_file(source: &FileSource<'_>) -> Result<(String, Option<String>), String> {
    let (bytes, mode) = small_file(source, "Redis URL", REDIS_FILE_MAX)?;
    let name = source.to_string();
    let url = String::from_utf8(bytes)
        .map_err(|_| format!("{name}: not UTF-8 text; a Redis URL is read from it"))?;
    if url.is_empty() {
        return Err(format!("{name}: empty; it should hold the Redis URL"));
    }
    let warning = (mode & 0o044 != 0).then(|| {
        format!(
            "{name}: readable by others than its owner (mode {:o}); it holds the Redis URL, \
             which may carry a password (chmod 600 it)",
            mode & 0o777
        )
    });
    Ok((url, warning))
}

/// The bytes of `source`'s file and its permission bits: a regular file of at most `max`
/// bytes, one trailing newline dropped. A FIFO or a device is refused without being read
/// (opened non-blocking, so a FIFO without a writer does not hang the run).
fn small_file(source: &FileSource<'_>, what: &str, max: u64) -> Result<(Vec<u8>, u32), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let name = source.to_string();
    let path = source.path();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{name}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "{name}: not a regular file; the {what} is read from a file of at most {max} bytes"
        ));
    }
    let too_long =
        || format!("{name}: longer than {max} bytes; a {what} is read from a file of at most that");
    if meta.len() > max {
        return Err(too_long());
    }
    // Bounded again while reading: the file may grow after the check.
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{name}: {e}"))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max {
        return Err(too_long());
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    Ok((bytes, meta.permissions().mode()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt as _;

    use super::*;

    fn args(list: &[&[u8]]) -> Vec<OsString> {
        list.iter()
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect()
    }

    #[test]
    fn a_non_utf8_value_is_named_by_its_option_and_the_command_may_be_any_bytes() {
        let cases: [(&[&[u8]], Option<&str>); 5] = [
            (
                &[b"leasehold", b"run", b"--resource", b"\xff"],
                Some("--resource"),
            ),
            (&[b"leasehold", b"run", b"--holder=\xffx"], Some("--holder")),
            (&[b"leasehold", b"run", b"-w", b"\xff"], Some("-w")),
            (&[b"leasehold", b"run", b"\xff"], Some("an argument")),
            (
                &[b"leasehold", b"run", b"--resource", b"x", b"--", b"\xff"],
                None,
            ),
        ];
        for (list, named) in cases {
            let result = check_arguments(&args(list));
            match named {
                Some(option) => {
                    let line = result.expect_err("refused");
                    assert!(line.starts_with(option), "{line}");
                    assert!(line.contains("UTF-8"), "{line}");
                }
                None => assert!(result.is_ok(), "{result:?}"),
            }
        }
    }
}
