//! Unit tests' way to build one command's arguments: parsed from words, as the command line
//! would parse them, so that defaults and bounds are the real ones.

/// `extra` parsed as the arguments of `command`.
pub(crate) fn parse<A: clap::Args>(
    command: &'static str,
    extra: &[&str],
) -> Result<A, clap::Error> {
    let matches = A::augment_args(clap::Command::new(command))
        .try_get_matches_from(std::iter::once(command).chain(extra.iter().copied()))?;
    A::from_arg_matches(&matches)
}
