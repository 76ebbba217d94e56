//! Accept-header negotiation: media ranges are tried in client order and the
//! first one this endpoint can produce wins; protobuf is never produced, so a protobuf-first list falls through
//! to JSON. Nothing acceptable gives 406.

use crate::error::{ApiError, ApiResult};

/// What the response body should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Table,
    /// PartialObjectMetadata (single objects, watch events) or PartialObjectMetadataList (lists).
    Metadata,
    /// Aggregated discovery; the payload is the `apidiscovery.k8s.io` version (`v2` or `v2beta1`).
    Discovery(&'static str),
}

/// Which non-JSON outputs an endpoint supports.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supports {
    pub table: bool,
    pub metadata: bool,
    pub discovery: bool,
}

#[derive(Debug)]
struct Range {
    mime: String,
    params: Vec<(String, String)>,
}

impl Range {
    fn param(&self, k: &str) -> Option<&str> {
        self.params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
}

fn parse_ranges(accept: &str) -> Vec<Range> {
    accept
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let mime = it.next()?.trim().to_ascii_lowercase();
            if mime.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
                })
                .collect();
            Some(Range { mime, params })
        })
        .collect()
}

fn choose(r: &Range, s: Supports) -> Option<Output> {
    let json_like = matches!(r.mime.as_str(), "application/json" | "*/*" | "application/*");
    if !json_like {
        return None;
    }
    let Some(as_) = r.param("as") else {
        return Some(Output::Json);
    };
    let g = r.param("g").unwrap_or_default();
    let v = r.param("v").unwrap_or_default();
    match as_ {
        "Table" if s.table && g == "meta.k8s.io" && (v == "v1" || v == "v1beta1") => Some(Output::Table),
        "PartialObjectMetadata" | "PartialObjectMetadataList"
            if s.metadata && g == "meta.k8s.io" && (v == "v1" || v == "v1beta1") =>
        {
            Some(Output::Metadata)
        }
        "APIGroupDiscoveryList" if s.discovery && g == "apidiscovery.k8s.io" => match v {
            "v2" => Some(Output::Discovery("v2")),
            "v2beta1" => Some(Output::Discovery("v2beta1")),
            _ => None,
        },
        _ => None,
    }
}

/// Pick the response form for `accept` (absent/empty means JSON).
pub fn negotiate(accept: &str, supports: Supports) -> ApiResult<Output> {
    if accept.trim().is_empty() {
        return Ok(Output::Json);
    }
    let ranges = parse_ranges(accept);
    ranges.iter().find_map(|r| choose(r, supports)).ok_or_else(|| {
        ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json (requested: {accept})"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Supports = Supports {
        table: true,
        metadata: true,
        discovery: true,
    };

    #[test]
    fn defaults_to_json() {
        assert_eq!(negotiate("", ALL).unwrap(), Output::Json);
        assert_eq!(negotiate("*/*", ALL).unwrap(), Output::Json);
        assert_eq!(negotiate("application/json, */*", ALL).unwrap(), Output::Json);
        assert_eq!(
            negotiate("application/vnd.kubernetes.protobuf,application/json", ALL).unwrap(),
            Output::Json
        );
    }

    #[test]
    fn discovery_in_client_order() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(v2, ALL).unwrap(), Output::Discovery("v2"));
        let b1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(b1, ALL).unwrap(), Output::Discovery("v2beta1"));
        assert_eq!(negotiate(v2, Supports::default()).unwrap(), Output::Json);
    }

    #[test]
    fn table_and_metadata() {
        let t = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(t, ALL).unwrap(), Output::Table);
        let m = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(negotiate(m, ALL).unwrap(), Output::Metadata);
        assert!(negotiate(m, Supports::default()).is_err());
        assert!(negotiate("application/vnd.kubernetes.protobuf", ALL).is_err());
        assert!(negotiate("text/html", ALL).is_err());
    }
}
