//! Issue 10, tenant isolation and security: each topic in its own module, against real processes.

mod netns;
