//! The benchmark's data, seeded once for every shape: the tenant `bench`,
//! its finished four-step tasks (the page), and what each other shape
//! reads (its file says what), all started over GraphQL and finished by
//! the executor of a server built in this process (the same code as
//! `brainstem serve`), then analysed (a running database has planner
//! statistics).
//!
//! The page's tasks are started first, so the first `--tasks` tasks in
//! id order are all four-step tasks whatever else is seeded after them.

use anyhow::Context;
use brainstem::config::Config;
use brainstem_bench::{api_config, call, seed_four_step_tasks, serve};
use sea_orm::{ConnectionTrait, Database, Statement};
use secrecy::SecretString;

use super::{
    answers::{global_uuid, text},
    conversations, detail, filtered,
};

/// A task seeded for a shape: its global id (Brainstem) and its UUID
/// (PostGraphile).
#[derive(Clone, Debug)]
pub struct SeededTask {
    pub global_id: String,
    pub uuid: String,
}

/// What the shapes read, as the servers started later must be asked.
pub struct Seeded {
    /// A `bench` admin's token, valid for the servers started later with
    /// the same secret.
    pub admin: String,
    /// The tenant's id.
    pub tenant: String,
    /// The subject the admin's conversations belong to.
    pub subject: String,
    pub detail: SeededTask,
    pub node: SeededTask,
    pub window: filtered::Window,
}

/// Starts one task with `input` (the fields of `StartTaskInput`).
pub async fn start_task(
    http: &reqwest::Client,
    url: &str,
    admin: &str,
    input: &str,
) -> anyhow::Result<SeededTask> {
    let started = call(
        http,
        url,
        admin,
        &format!("mutation {{ startTask(input: {{{input}}}) {{ task {{ id }} }} }}"),
    )
    .await?;
    let global_id = text(&started["data"]["startTask"]["task"]["id"])?;
    let uuid = global_uuid("Task", &global_id)?;
    Ok(SeededTask { global_id, uuid })
}

/// Seeds `tasks` four-step tasks and every shape's data into
/// `database_url`.
pub async fn seed(
    database_url: &str,
    pool: u32,
    tasks: usize,
    jwt_secret: &str,
    encryption_key: &str,
) -> anyhow::Result<Seeded> {
    let config = Config {
        database_max_connections: pool,
        jwt_secret: Some(SecretString::from(jwt_secret.to_owned())),
        connection_encryption_key: Some(SecretString::from(encryption_key.to_owned())),
        ..api_config(database_url)
    };
    let served = serve(&config).await?;
    let (url, platform, admin) = (
        served.url.as_str(),
        served.platform.as_str(),
        served.admin.as_str(),
    );
    let http = reqwest::Client::new();
    seed_four_step_tasks(&http, url, platform, admin, tasks).await?;
    let detail = detail::seed(&http, url, admin).await?;
    let node = start_task(
        &http,
        url,
        admin,
        "planKey: \"four\", input: \"Refund order 1042 and tell the customer\"",
    )
    .await?;
    let window = filtered::seed(&http, url, admin).await?;
    let subject = conversations::seed(&http, url, admin).await?;
    served.executor.run_until_idle().await?;
    let admin = admin.to_owned();
    served.stop().await?;
    // Statistics, as a database that has been running has them: without,
    // the planner guesses at freshly written tables and either server may
    // get a plan no deployment would see.
    let db = Database::connect(database_url).await?;
    db.execute_unprepared("ANALYZE").await?;
    // `tenants` is the platform's table: row-level security does not bind it.
    let tenant: String = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT id::text AS id FROM tenants WHERE slug = 'bench'",
        ))
        .await?
        .context("no tenant `bench` after seeding")?
        .try_get("", "id")?;
    db.close().await?;
    Ok(Seeded {
        admin,
        tenant,
        subject,
        detail,
        node,
        window,
    })
}
