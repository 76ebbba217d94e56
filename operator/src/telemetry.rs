//! Logging: `tracing` with an `RUST_LOG` env filter, as text or JSON lines (`--log-format`).
//!
//! Logs never carry credentials: the controllers log sanitized error messages and object keys only,
//! and the default filter keeps the kube client's request tracing (which could show request URLs)
//! at `warn`.

use tracing_subscriber::{fmt, EnvFilter};

/// Default filter when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info,kube=warn,tower=warn,hyper=warn";

/// Output format of the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Installs the global subscriber. Calling it twice is harmless (the second call is ignored).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
        LogFormat::Text => builder.with_ansi(false).try_init(),
    };
}
