//! The outbound client's resolver: the system's lookup, with every address
//! that is not allowed (see [`Policy::address_allowed`]) dropped. The
//! connector connects only to the addresses returned here, so what is
//! checked is what is connected.

use std::{net::SocketAddr, sync::Arc};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::{Policy, Refusal};

pub(super) struct Guarded {
    policy: Arc<Policy>,
}

impl Guarded {
    pub(super) fn new(policy: Arc<Policy>) -> Self {
        Self { policy }
    }
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|addr| policy.address_allowed(addr.ip()))
                .collect();
            if allowed.is_empty() {
                let shown: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(Box::new(Refusal::new(format!(
                    "`{host}` resolves to no public address ({}); list its range in \
                     http_allowed_private to allow it",
                    shown.join(", ")
                ))) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}
