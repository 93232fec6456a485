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
mod capabilities;
mod connections;
mod console;
mod conversations;
mod dataloader;
mod durability;
mod executor;
mod fair_queue;
mod fanout;
mod fuzz;
mod graph;
mod graphql_http_audit;
mod guardrails;
mod hooks;
mod hostile;
mod http;
mod layers;
mod llm;
#[cfg(feature = "local-models")]
mod local_models;
mod memory;
mod memory_tools;
mod metrics;
mod modes;
mod partner_tools;
mod persisted_queries;
mod ranking;
mod rate_limit;
mod retries;
mod row_security;
mod runaway;
mod schedules;
mod schema;
mod scoping;
mod statements;
mod streams;
mod tenants;
mod tools;
mod traces;
mod webhooks;
mod websocket;
mod ws_protocol;
