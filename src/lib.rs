//! Causeway: a black-box performance debugger for distributed systems, as a streaming
//! timely/differential dataflow.
//!
//! This crate is the command line and the wiring: it assembles the dataflow from the stage
//! crates (`causeway-sources`, `causeway-operators`, `causeway-sinks`) and hosts the trace
//! generator. See ARCHITECTURE.md for the picture.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod analyze;
pub mod bootstrap;
pub mod capture;
pub mod cli;
pub mod demo;
pub mod engine;
pub mod entry;
pub mod generate;
pub mod governor;
pub mod progress;
pub mod score;
pub mod settings;
pub mod tcp;

pub use causeway_sinks as sinks;
pub use entry::{SinkFactory, main_with};
