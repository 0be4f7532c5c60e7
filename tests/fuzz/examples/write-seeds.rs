//! Writes the built-in seeds of one target into a libFuzzer corpus directory.
//!   cargo run -p cutover-fuzz --example write-seeds -- <target> <dir>

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(target), Some(dir)) = (args.next(), args.next()) else {
        eprintln!("usage: write-seeds <target> <dir>");
        std::process::exit(2);
    };
    for (i, seed) in cutover_fuzz::seeds::seeds(&target).iter().enumerate() {
        std::fs::write(std::path::Path::new(&dir).join(format!("seed-{i}")), seed)?;
    }
    Ok(())
}
