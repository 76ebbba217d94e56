//! The Cluster controller's probe: `GET /version` under a deadline.

use std::time::Duration;

use kube::Client;

use super::{with_deadline, ClusterError};

/// Deadline of one probe; a healthy API server answers `/version` in milliseconds.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `/version` says, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    /// `gitVersion`, e.g. `v1.33.1` (the Cluster's `status.serverVersion`).
    pub git_version: String,
    pub major: u32,
    /// Minor version; provider suffixes (`"32+"`) are dropped.
    pub minor: u32,
    /// `platform`, e.g. `linux/amd64`.
    pub platform: String,
}

/// Probes the API server with `client` (reachability and credentials: `/version` needs authentication
/// on most clusters).
pub async fn probe(client: &Client) -> Result<ServerVersion, ClusterError> {
    let info = with_deadline(PROBE_TIMEOUT, "GET /version", async {
        client
            .apiserver_version()
            .await
            .map_err(|e| ClusterError::from_kube(e, "GET /version", false))
    })
    .await?;
    Ok(ServerVersion {
        major: leading_number(&info.major),
        minor: leading_number(&info.minor),
        git_version: info.git_version,
        platform: info.platform,
    })
}

/// `"32+"` → 32; anything unparsable → 0.
fn leading_number(s: &str) -> u32 {
    let digits: String = s.trim().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

#[cfg(test)]
mod unit_tests {
    #[test]
    fn versions_with_provider_suffixes_parse() {
        assert_eq!(super::leading_number("32+"), 32);
        assert_eq!(super::leading_number("1"), 1);
        assert_eq!(super::leading_number(""), 0);
    }
}
