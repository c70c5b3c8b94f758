//! Issue 10, isolated tenant networks / security: each module proves one part against
//! real processes (real nats-server, real gateway, real agents).

mod tenants;
