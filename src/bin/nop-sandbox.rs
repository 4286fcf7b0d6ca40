//! `nop-sandbox`: the shell sandbox's helper alone, a small binary that starts faster than all of
//! nop (it is exec'd once per shell call). nop runs it when it is installed beside it, and runs
//! itself as `nop __sandbox` otherwise; both take the same arguments.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let rest = match args.get(1) {
        Some(a) if a == "__sandbox" => &args[2..],
        _ => &args[1..],
    };
    std::process::exit(nop::sandbox::sandbox_main(rest));
}
