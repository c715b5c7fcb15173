//! The secure port's API: the server, its auth, and what it serves (explanations, what-ifs,
//! published state).

pub mod server;
