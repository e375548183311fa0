//! `tickwire lab ...`: clap parses the command line straight into the lab's
//! [`Request`]; the lab checks, measures and prints it.

use crate::config::Settings;
use tickwire_lab::request::{self, Request};

/// Runs `tickwire lab ...`; shared files go in the configured directory.
///
/// # Errors
/// The lab's error, as the message to print.
pub fn run(s: &Settings, cmd: Request) -> Result<(), String> {
    request::run(cmd.with_dir(s.dir.clone())).map_err(|e| e.to_string())
}
