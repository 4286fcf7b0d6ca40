mod cli;
mod concurrency;
mod crash;
mod mock_server;
mod run;
