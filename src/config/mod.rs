//! Configuration (stub replaced below).
