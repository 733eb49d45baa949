//! The committed `include/kreplay.h` must be exactly what cbindgen generates from this crate.
//! Regenerate it with `KREPLAY_BLESS=1 cargo test -p kreplay-capi --test header`.

use std::path::PathBuf;

#[test]
fn the_committed_header_matches_the_generated_one() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut generated);
    let header = crate_dir.join("../include/kreplay.h");
    if std::env::var_os("KREPLAY_BLESS").is_some() {
        std::fs::write(&header, &generated).expect("write include/kreplay.h");
        return;
    }
    let committed = std::fs::read(&header).unwrap_or_default();
    assert!(
        committed == generated,
        "include/kreplay.h is out of date: run `KREPLAY_BLESS=1 cargo test -p kreplay-capi --test header`"
    );
}
