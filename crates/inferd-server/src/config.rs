//! Server settings that are not the engine's: auth, limits, names.

use std::net::{IpAddr, SocketAddr};

/// Default largest request body: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// When set, every `/v1` route needs `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Upper bound on `max_tokens` a request may ask for (larger values are clamped).
    pub max_tokens_cap: Option<usize>,
    /// `max_tokens` when a request gives none; `None` = the context left after the prompt.
    pub default_max_tokens: Option<usize>,
    /// Other names clients may use in `model` for the served model.
    pub aliases: Vec<String>,
    /// The address the server listens on (reported by `/health`).
    pub address: Option<SocketAddr>,
    /// The model's tool-call syntax; `None`: detected from the chat template.
    pub tool_syntax: Option<inferd_tools::ToolSyntax>,
    /// Connection limit, header and body timeouts.
    pub conn: crate::listen::ConnLimits,
    /// Stored responses (Responses API): directory and byte budget.
    pub responses: crate::responses::store::ResponsesConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_key: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_tokens_cap: None,
            default_max_tokens: None,
            aliases: Vec::new(),
            address: None,
            tool_syntax: None,
            conn: Default::default(),
            responses: Default::default(),
        }
    }
}

/// Refuses to listen beyond this machine without an API key: anyone who can reach the
/// port could otherwise use the model.
pub fn check_bind(ip: IpAddr, api_key: Option<&str>) -> Result<(), String> {
    let has_key = api_key.is_some_and(|k| !k.trim().is_empty());
    if ip.is_loopback() || has_key {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {ip} without an API key: that address is reachable from other \
         machines. Set --api-key (or INFERD_API_KEY), or listen on 127.0.0.1"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_loopback_needs_a_key() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let lo6: IpAddr = "::1".parse().unwrap();
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        let lan: IpAddr = "192.168.1.5".parse().unwrap();
        assert!(check_bind(lo, None).is_ok());
        assert!(check_bind(lo6, None).is_ok());
        assert!(check_bind(any, None).unwrap_err().contains("--api-key"));
        assert!(check_bind(lan, Some("")).is_err());
        assert!(check_bind(any, Some(" ")).is_err());
        assert!(check_bind(any, Some("\t\n")).is_err());
        assert!(check_bind(any, Some("secret")).is_ok());
        assert!(check_bind(lan, Some("secret")).is_ok());
    }
}
