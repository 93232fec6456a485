//! End-to-end tests: the real server on a random port, real HTTP and
//! WebSocket clients, a throwaway database. Tests marked with
//! [`on_both_backends!`] run once on SQLite and once on PostgreSQL.

// Test code may panic on the unexpected: that is how it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helpers;

mod admin;
mod agent;
mod api_keys;
mod architecture;
mod auth;
mod bitemporal;
mod bulk_retry;
mod capabilities;
mod compression;
mod connections;
mod console;
mod console_runs;
mod console_types;
mod contention;
mod conversations;
mod dataloader;
mod double_texting;
mod durability;
mod edges;
mod executor;
mod exposure;
mod failed_auth;
mod fair_queue;
mod fanout;
mod fork;
#[cfg(feature = "local-models")]
mod fusion;
mod fuzz;
mod graph;
mod graphiql;
mod graphql_http_audit;
mod guardrails;
mod hook_security;
mod hooks;
mod hostile;
mod housekeeping;
mod http;
mod layers;
mod leased_write;
mod leases;
mod list_filters;
mod lists;
mod live_streams;
mod llm;
mod llm_partial;
#[cfg(feature = "local-models")]
mod local_agent;
#[cfg(feature = "local-models")]
mod local_models;
mod mcp;
mod mcp_connections;
mod mcp_inspector;
mod mcp_oauth;
mod mcp_remote_tools;
mod mcp_resources;
mod memory;
mod memory_import;
mod memory_import_job;
mod memory_tools;
mod metrics;
mod modes;
mod outbound;
mod partner_tools;
mod persisted_queries;
mod ranking;
mod rate_limit;
mod replicas;
mod retries;
mod revocation;
mod row_security;
mod runaway;
mod schedules;
mod schema;
mod scoping;
mod security_limits;
mod statements;
mod streams;
mod summaries;
mod tenant_keys;
mod tenants;
mod tools;
mod traces;
mod webhook_errors;
mod webhooks;
mod websocket;
mod ws_protocol;
