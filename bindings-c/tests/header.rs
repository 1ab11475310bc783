//! The committed header is exactly what the pinned cbindgen makes of the
//! sources: a change to the C API that forgot the header fails here.

use std::path::Path;

#[test]
fn committed_header_matches_the_sources() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");

    let path = crate_dir.join("include/llmgov.h");
    if std::env::var_os("LLMGOV_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("include/llmgov.h is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed.lines().zip(generated.lines()).position(|(a, b)| a != b);
        let line = first.unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "bindings-c/include/llmgov.h is out of date with bindings-c/src (first difference at line {}):\n\
             committed: {:?}\ngenerated: {:?}\n\
             Regenerate it with:\n    LLMGOV_UPDATE_HEADER=1 cargo test -p llmgov-c --test header\n\
             and commit the result.",
            line + 1,
            committed.lines().nth(line).unwrap_or("<end of file>"),
            generated.lines().nth(line).unwrap_or("<end of file>"),
        );
    }
}
