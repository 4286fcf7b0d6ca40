mod cli;
mod concurrency;
mod crash;
mod mock_server;
mod permissions_paths;
mod permissions_run;
mod run;
mod sandbox;
