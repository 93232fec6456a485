//! Building and running the application.

use std::{future::Future, net::SocketAddr};

use anyhow::Context;
use brainstem_api::{ApiConfig, AuthConfig};
use brainstem_domain::{
    Domain,
    db::{self, Backend},
    settings,
};
use secrecy::SecretString;
use tokio::net::TcpListener;

use crate::config::Config;

/// Open the store named by the configuration and bring its schema up to date.
pub async fn open_domain(config: &Config) -> anyhow::Result<Domain> {
    let conn = db::connect(&config.database_url, config.database_max_connections).await?;
    db::migrate(&conn).await?;
    let domain = Domain::with_memory(conn, config.memory_config()?)?;
    domain.prepare().await?;
    Ok(domain)
}

/// How tokens are verified. An embedded install without a configured key
/// uses (and on first use generates) a secret kept in its own database.
pub async fn auth_config(config: &Config, domain: &Domain) -> anyhow::Result<AuthConfig> {
    let rs256_public_key_pem = config.jwt_public_key_pem()?;
    let hs256_secret = match (&config.jwt_secret, &rs256_public_key_pem) {
        (Some(secret), _) => Some(secret.clone()),
        (None, Some(_)) => None,
        (None, None) => match Backend::of(&domain.db) {
            Backend::Sqlite => Some(SecretString::from(
                settings::dev_jwt_secret(&domain.db).await?,
            )),
            Backend::Postgres => anyhow::bail!(
                "set BRAINSTEM_JWT_SECRET or BRAINSTEM_JWT_PUBLIC_KEY: a PostgreSQL deployment \
                 needs a configured token key"
            ),
        },
    };
    Ok(AuthConfig {
        issuer: config.jwt_issuer.clone(),
        audience: config.jwt_audience.clone(),
        hs256_secret,
        rs256_public_key_pem,
        leeway_secs: config.jwt_leeway_secs,
    })
}

/// The server, built and bound but not yet serving.
pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    domain: Domain,
    addr: SocketAddr,
}

impl Application {
    pub async fn build(config: &Config) -> anyhow::Result<Self> {
        let domain = open_domain(config).await?;
        if Backend::of(&domain.db) == Backend::Sqlite
            && let Some(demo) = domain.tenants.ensure_demo().await?
        {
            tracing::info!(
                tenant = %demo.slug,
                "created the `{}` tenant; get a token with: cargo run --release -- token --tenant {} --role TENANT_ADMIN",
                demo.slug,
                demo.slug
            );
        }
        let api = ApiConfig {
            auth: auth_config(config, &domain).await?,
            limits: config.graphql_limits(),
        };
        let router = brainstem_api::router(domain.clone(), api)?;
        if config.memory_maintenance_interval_secs > 0 {
            domain
                .memory
                .spawn_maintenance(std::time::Duration::from_secs(
                    config.memory_maintenance_interval_secs,
                ));
        }
        let listener = TcpListener::bind(&config.bind)
            .await
            .with_context(|| format!("cannot listen on {}", config.bind))?;
        let addr = listener.local_addr()?;
        Ok(Self {
            listener,
            router,
            domain,
            addr,
        })
    }

    /// The bound address (port 0 in the config picks a free port).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Serve until `shutdown` resolves, then finish in-flight requests.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(
            "Brainstem listening on http://{addr} (GraphiQL at http://{addr}/graphql)",
            addr = self.addr
        );
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await
            .context("server error")
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
