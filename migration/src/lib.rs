//! Database migrations, one file per change, named by timestamp. They run on
//! both PostgreSQL and SQLite; PostgreSQL-only statements check the backend.
//! Constraint and index names are explicit so later migrations can refer to
//! them.

pub use sea_orm_migration::prelude::*;

mod m20261121_000001_enable_vector;
mod m20261121_000002_create_tenancy;
mod m20261121_000003_create_tasks;
mod m20261121_140000_create_connections;
mod m20261121_140000_create_memory;
mod m20261121_140100_api_key_rate_limits;
mod m20261122_090000_create_capabilities;
mod m20261122_100000_index_tasks_by_plan;
mod m20261123_090000_index_tasks_by_subject;
mod m20261124_090000_tenant_in_search_tsv;
mod m20261125_090000_task_results;
mod m20261125_100000_task_modes;
mod m20261125_110000_conversations_and_prompts;
mod m20261125_120000_executor_policies;
mod m20261125_130000_task_running_time;
mod m20261126_090000_row_level_security;
mod m20261126_100000_guardrails;
mod m20261126_110000_audit_origin;
mod m20261126_120000_partner_tool_retry;
mod m20261126_130000_schedules;
mod m20261126_140000_plan_archive;
mod m20261126_150000_capability_archive;
mod m20261127_090000_webhooks;
mod m20261127_100000_entity_bin;
mod m20261128_090000_fair_queue;
mod m20261128_110000_task_list_indexes;
mod m20261128_130000_double_texting;
mod m20261128_140000_task_checkpoints;
mod m20261128_141000_retry_jobs;
mod m20261128_143000_bitemporal_facts;
mod m20261128_150000_keyed_in_progress;
mod m20261128_160000_memory_import_keys;
mod m20261129_090000_memory_import_jobs;
mod m20261129_120000_tenant_in_sqlite_fts;
mod m20261129_140000_sqlite_fts_rows_by_key;
mod m20261129_160000_tenant_keys;
mod m20261129_180000_platform_audit_log;
mod m20261202_190000_keyed_runnable;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261121_000001_enable_vector::Migration),
            Box::new(m20261121_000002_create_tenancy::Migration),
            Box::new(m20261121_000003_create_tasks::Migration),
            Box::new(m20261121_140000_create_connections::Migration),
            Box::new(m20261121_140100_api_key_rate_limits::Migration),
            Box::new(m20261121_140000_create_memory::Migration),
            Box::new(m20261122_090000_create_capabilities::Migration),
            Box::new(m20261122_100000_index_tasks_by_plan::Migration),
            Box::new(m20261123_090000_index_tasks_by_subject::Migration),
            Box::new(m20261124_090000_tenant_in_search_tsv::Migration),
            Box::new(m20261125_090000_task_results::Migration),
            Box::new(m20261125_100000_task_modes::Migration),
            Box::new(m20261125_110000_conversations_and_prompts::Migration),
            Box::new(m20261125_120000_executor_policies::Migration),
            Box::new(m20261125_130000_task_running_time::Migration),
            Box::new(m20261126_090000_row_level_security::Migration),
            Box::new(m20261126_100000_guardrails::Migration),
            Box::new(m20261126_110000_audit_origin::Migration),
            Box::new(m20261126_120000_partner_tool_retry::Migration),
            Box::new(m20261126_130000_schedules::Migration),
            Box::new(m20261126_140000_plan_archive::Migration),
            Box::new(m20261126_150000_capability_archive::Migration),
            Box::new(m20261127_090000_webhooks::Migration),
            Box::new(m20261127_100000_entity_bin::Migration),
            Box::new(m20261128_090000_fair_queue::Migration),
            Box::new(m20261128_110000_task_list_indexes::Migration),
            Box::new(m20261128_130000_double_texting::Migration),
            Box::new(m20261128_140000_task_checkpoints::Migration),
            Box::new(m20261128_141000_retry_jobs::Migration),
            Box::new(m20261128_143000_bitemporal_facts::Migration),
            Box::new(m20261128_150000_keyed_in_progress::Migration),
            Box::new(m20261128_160000_memory_import_keys::Migration),
            Box::new(m20261129_090000_memory_import_jobs::Migration),
            Box::new(m20261129_120000_tenant_in_sqlite_fts::Migration),
            Box::new(m20261129_140000_sqlite_fts_rows_by_key::Migration),
            Box::new(m20261129_160000_tenant_keys::Migration),
            Box::new(m20261129_180000_platform_audit_log::Migration),
            Box::new(m20261202_190000_keyed_runnable::Migration),
        ]
    }
}
