//! The plain outgoing HTTP client of the model and embedding providers
//! (endpoints the operator configures), and the TLS set-up every client
//! needs. Calls a tenant's work can steer use [`super::outbound`] instead,
//! which builds on this module's TLS provider.
//!
//! TLS is rustls with the *ring* crypto provider. reqwest is built with
//! `rustls-no-provider` (its default provider, aws-lc-rs, needs a long C
//! build), so the provider must be installed in the process before the first
//! client is built; [`install_tls_provider`] does that and is safe to call
//! any number of times. [`client`] calls it, so code that builds clients
//! through this module never meets an uninstalled provider.

use std::time::Duration;

/// Install ring as the process's rustls provider (a no-op when one is
/// already installed).
pub fn install_tls_provider() {
    // `install_default` fails only when a provider is already installed,
    // which is exactly the state wanted.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client that verifies TLS certificates against the system's roots and
/// gives up connecting after `connect_timeout`.
pub fn client(connect_timeout: Duration) -> reqwest::Client {
    install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .build()
        .unwrap_or_else(|err| {
            // Building fails only on an unusable TLS setup; keep running
            // with a default client, whose calls will then fail clearly.
            tracing::error!(%err, "cannot build the HTTP client");
            reqwest::Client::new()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_can_be_built_any_number_of_times() {
        install_tls_provider();
        let _a = client(Duration::from_secs(1));
        let _b = client(Duration::from_secs(1));
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
