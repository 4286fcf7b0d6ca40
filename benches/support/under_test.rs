//! The nop a benchmark measures: `-- --nop PATH` (another build, to compare), or this one.

pub fn nop() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--nop")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_nop").to_string())
}
