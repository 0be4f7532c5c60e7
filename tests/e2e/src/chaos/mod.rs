//! The chaos soak (issue 18 item 7).
pub mod schedule;
