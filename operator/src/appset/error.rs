//! The one error type of ApplicationSet generation.
//!
//! Generation is all or nothing: any error fails the whole set, and the controller turns it into
//! an `ErrorOccurred` condition whose reason is [`AppSetError::category`]. Messages carry the
//! generator or template position and the offending text (truncated), never file contents.

use crate::text::truncate;

/// Why generating the Applications of a set failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppSetError {
    /// The spec cannot work as written (no generator kind, three matrix children, unknown
    /// `goTemplateOptions`, `templatePatch` without `goTemplate`, ...).
    #[error("invalid ApplicationSet spec: {0}")]
    InvalidSpec(String),
    /// A generator failed to produce its parameters (bad `elementsYaml`, non-unique merge keys,
    /// an unparsable file from Git, ...).
    #[error("generator {generator} failed: {message}")]
    Generator {
        /// Which generator, e.g. `generators[1].matrix.generators[0].git`.
        generator: String,
        /// What went wrong.
        message: String,
    },
    /// A label selector (post-filter or cluster selector) is invalid.
    #[error("invalid selector: {0}")]
    InvalidSelector(String),
    /// Reading the Git tree failed (unknown repository or revision, file too large, I/O).
    #[error("git generator: {0}")]
    Git(String),
    /// Parsing or executing a template failed (`missingkey=error` on a missing key included).
    #[error("failed to render template: {0}")]
    Template(String),
    /// `templatePatch` did not render to a valid patch, or the patched Application is invalid.
    #[error("failed to apply templatePatch: {0}")]
    TemplatePatch(String),
    /// A rendered Application is invalid (empty or malformed name, wrong field types).
    #[error("invalid generated Application: {0}")]
    InvalidApplication(String),
    /// Two parameter sets rendered the same Application name.
    #[error("duplicate generated Application name {0:?}: each parameter set must render a unique name")]
    DuplicateName(String),
    /// A bound was exceeded (applications, parameter sets, file size, template steps).
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
}

impl AppSetError {
    /// Stable reason string for conditions, events and metric labels. Where Argo CD has a reason
    /// for the same failure (`RenderTemplateParamsError`, `ApplicationValidationError`), it is
    /// Argo CD's.
    pub fn category(&self) -> &'static str {
        match self {
            AppSetError::InvalidSpec(_) => "InvalidSpec",
            AppSetError::Generator { .. } => "GeneratorError",
            AppSetError::InvalidSelector(_) => "InvalidSelector",
            AppSetError::Git(_) => "GitError",
            AppSetError::Template(_) | AppSetError::TemplatePatch(_) => "RenderTemplateParamsError",
            AppSetError::InvalidApplication(_) | AppSetError::DuplicateName(_) => "ApplicationValidationError",
            AppSetError::LimitExceeded(_) => "LimitExceeded",
        }
    }

    /// Whether retrying later without a spec change can help (a Git tree that could not be read).
    pub fn is_transient(&self) -> bool {
        matches!(self, AppSetError::Git(_))
    }

    /// A generator error at `path`.
    pub(crate) fn generator(path: &str, message: impl Into<String>) -> Self {
        AppSetError::Generator {
            generator: path.to_owned(),
            message: truncate(&message.into(), MAX_MESSAGE),
        }
    }
}

/// Longest message kept from user-controlled text (templates, file errors), so conditions stay small.
pub(crate) const MAX_MESSAGE: usize = 512;
