//! The runtime: durable task execution. The task record and its event log
//! ([`tasks`]), the event bus and resumable streams ([`events`]), intent
//! detection ([`intent`]), the [`executor`] and the upkeep beside it
//! ([`housekeeping`]: webhook deliveries, the lease reaper, trial expiry,
//! schedules), the fair [`queue`] seen from outside (settings,
//! statistics), [`conversations`] (threads of tasks), the runtime's side
//! of the tools' ports ([`tool_ports`]), and [`domain::Domain`], which
//! bundles every service.
//!
//! Invariants:
//! - Every change of a task is written together with its events in one
//!   transaction (see [`executor`]).
//! - The runtime runs tools only through the `Tool` trait: it never imports
//!   a tool implementation.

pub mod conversations;
pub mod domain;
pub mod events;
pub mod executor;
pub mod hooks;
pub mod housekeeping;
pub mod intent;
pub mod queue;
pub mod schedules;
pub mod tasks;
pub mod tool_ports;
pub mod usage;
pub mod webhooks;
