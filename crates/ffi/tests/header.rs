//! `include/tickwire.h` is what cbindgen makes of this crate now: a
//! change to the C API without the header fails here.
//! `TICKWIRE_BLESS=1` writes it instead.

use std::path::PathBuf;

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut made);
    let path = crate_dir.join("../../include/tickwire.h");
    if std::env::var_os("TICKWIRE_BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == made,
        "include/tickwire.h is out of date: TICKWIRE_BLESS=1 cargo test -p tickwire-ffi --test header"
    );
}
