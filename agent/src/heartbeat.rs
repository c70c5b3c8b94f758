//! Presence heartbeats on `flue.<tenant>.hb.<server>` (work in progress).
