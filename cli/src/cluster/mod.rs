//! `join cluster`, `unjoin cluster` and `get clusters`: a leaf cluster becomes (or stops
//! being) a virtual node of the host.

pub mod get;
pub mod join;
pub mod leaf_access;
pub mod names;
pub mod unjoin;

use console::style;

/// One line of progress, as each step completes.
pub fn step(done: &str) {
    eprintln!("{} {done}", style("✓").green());
}

pub fn warn(msg: &str) {
    eprintln!("{} {msg}", style("!").yellow());
}

/// The HTTP status of an API error, if it is one.
pub fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
