use tracing_subscriber::EnvFilter;

/// Logs go to stderr; RUST_LOG, when set, wins over the `--log` flag. Colours only on a
/// terminal: `kubectl logs` and log files get plain `key=value` text.
pub fn init(default_filter: &str) {
    use std::io::IsTerminal;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
