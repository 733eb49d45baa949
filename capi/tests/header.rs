//! The committed headers must be exactly what cbindgen generates: `include/kreplay.h` from this crate (the
//! simulated device left out) and `include/kreplay_sim.h` from `src/sim.rs` alone.
//! Regenerate both with `KREPLAY_BLESS=1 cargo test -p kreplay-capi --test header`.

use std::path::{Path, PathBuf};

fn check(config: &str, header: &str, build: impl FnOnce(cbindgen::Builder) -> cbindgen::Builder) {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join(config)).expect("cbindgen config");
    let mut generated = Vec::new();
    build(cbindgen::Builder::new().with_config(config))
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);
    let path = crate_dir.join("../include").join(header);
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/{header} is out of date: run `KREPLAY_BLESS=1 cargo test -p kreplay-capi --test header`"
    );
}

#[test]
fn the_committed_header_matches_the_generated_one() {
    check("cbindgen.toml", "kreplay.h", |builder| builder.with_crate(env!("CARGO_MANIFEST_DIR")));
}

#[test]
fn the_committed_sim_header_matches_the_generated_one() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sim.rs");
    check("cbindgen-sim.toml", "kreplay_sim.h", |builder| builder.with_src(source));
}

#[test]
fn the_shipping_header_declares_nothing_of_the_simulated_device() {
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        return;
    }
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/kreplay.h"))
        .expect("read include/kreplay.h");
    assert!(!header.contains("kreplay_sim"), "kreplay.h declares part of the simulated device");
    assert!(!header.contains("KREPLAY_SIM"), "kreplay.h mentions KREPLAY_SIM");
}
