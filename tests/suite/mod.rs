mod cli;
mod concurrency;
mod crash;
