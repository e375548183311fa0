//! Every fuzz target over its committed corpus and its regressions
//! (`fuzz/corpus/TARGET/`, `fuzz/regressions/TARGET/`): what `make fuzz`
//! found stays found. Also a few thousand generated inputs per target, so
//! that a target is exercised even before it has a corpus.

use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(dir) = std::fs::read_dir(root.join(kind).join(target)) else { continue };
        for e in dir.flatten() {
            out.push((
                format!("{kind}/{target}/{}", e.file_name().to_string_lossy()),
                std::fs::read(e.path()).unwrap(),
            ));
        }
    }
    out
}

#[test]
fn every_target_passes_its_corpus_and_regressions() {
    let mut total = 0;
    for (name, f) in tickwire_fuzz::TARGETS {
        let inputs = inputs(name);
        for (file, data) in &inputs {
            if std::panic::catch_unwind(|| f(data)).is_err() {
                panic!("fuzz target {name} fails on {file}");
            }
        }
        eprintln!("{name}: {} corpus inputs", inputs.len());
        total += inputs.len();
    }
    assert!(total > 0, "no corpus found under fuzz/");
}

#[test]
fn every_target_survives_generated_inputs() {
    let mut rng = tickwire_impair::Rng::new(16);
    for (name, f) in tickwire_fuzz::TARGETS {
        for i in 0..2_000 {
            let len = (rng.next_u64() % 600) as usize;
            let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if std::panic::catch_unwind(|| f(&data)).is_err() {
                panic!("fuzz target {name} fails on generated input {i}: {data:?}");
            }
        }
    }
}
